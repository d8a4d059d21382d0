"""Optimizers with torch.optim semantics, parameter groups, schedulers, freezing and
clipping, all as optax parts.

- ``sgd``, ``adam``, ``adamw``, ``rmsprop``, ``adagrad``, ``adamax``, ``nadam``,
  ``radam``, ``asgd``, ``adadelta``, ``rprop``, ``adafactor``, ``muon`` (its
  Newton–Schulz step in bfloat16, as torch): torch's argument names, defaults and
  single-tensor update rules,
  ``maximize``, ``amsgrad``, array or scheduled ``lr`` and momentum (state readable
  with ``torch_style_state`` / ``torch_state_dict``; torch's whole
  ``optimizer.state_dict()`` with ``optimizer_state_dict``, read back with
  ``load_optimizer_state_dict``);
- ``lbfgs``: torch's L-BFGS (fixed step or strong-Wolfe line search) as a pure
  ``step(value_and_grad, params, state)``; torch's ``SparseAdam`` has no counterpart (a
  JAX gradient is dense: nothing says which entries torch would leave untouched);
- ``param_groups``: torch's per-group hyperparameters, groups chosen by name patterns;
- ``schedulers``: torch's 15 learning-rate schedulers as optax schedules
  (``OneCycleLR`` and ``CyclicLR`` with their momentum schedules,
  ``jaxgrad.optim.cycling``; ``ChainedScheduler`` and ``SequentialLR`` composing them
  as torch steps them, ``jaxgrad.optim.chaining``) and ``ReduceLROnPlateau`` as a state
  machine;
- ``freeze(optimizer, frozen)``: ``requires_grad=False`` for the optimizer;
  ``freeze_untrained(optimizer, model)`` freezes what the model's forward leaves
  without a gradient, as torch's optimizers skip it;
- ``clip_grad_norm`` / ``clip_grad_value`` (functions) and ``clip_grad_norm_transform`` /
  ``clip_grad_value_transform`` (optax transforms) with torch's formulas.

Every optimizer factory but ``lbfgs`` returns an ``optax.GradientTransformation``
(``init(params)``, ``update(grads, state, params)``) whose state holds torch's
``optimizer.state`` in a NamedTuple (``SgdMomentumState``, ``AdamState``…) with torch's
field names, each a tree like the params, and ``step``: ``()`` int32, torch's
``state[p]["step"]``. The arguments they share mean the same in each (its own are in
its docstring; the implementation: ``jaxgrad.optim._family``):

- ``lr``: a float, a one-element array (torch's tensor ``lr``) or a schedule
  ``count -> lr`` (``jaxgrad.optim.schedulers``; ``schedule(t)`` is the rate of step
  ``t``, counting from 0);
- ``betas``: ``(beta1, beta2)``, the coefficients of the running averages, Python
  floats in [0, 1); ``beta1``, like SGD's and RMSprop's ``momentum``, may be a schedule,
  and must be ``lr.momentum`` when ``lr`` is a ``OneCycleLR`` / ``CyclicLR`` schedule
  that cycles momentum (``jaxgrad.optim.cycling``);
- ``eps``: added to the denominator for numerical stability, outside the square root
  as torch (Adadelta: inside);
- ``weight_decay``: L2, added to the gradient (``grad += weight_decay·p``); decoupled
  (``p *= 1 − lr·weight_decay``, AdamW's rule) in ``adamw``, ``adafactor``, ``muon`` and
  with ``decoupled_weight_decay=True``;
- ``maximize``: maximise the objective (the gradient negated before anything else);
- torch's implementation flags, where the factory takes them: ``foreach`` and
  ``differentiable`` are accepted and ignored (jaxgrad computes torch's single-tensor
  rule, and every JAX update is differentiable) except where they change torch's
  result, and are refused: ASGD's ``foreach=True``; Adam's, AdamW's and NAdam's
  ``differentiable=True`` (torch's capturable path, float32 bias corrections);
  ``fused`` must be None or False (torch's fused kernel rounds differently) and
  ``capturable`` False (torch refuses it for CPU tensors; a jitted step is always
  capturable).

A factory raises ``ValueError`` for a hyperparameter outside torch's range (naming the
argument, its value and the range), a refused flag or a combination torch refuses, and
``TypeError`` for a hyperparameter or flag of the wrong type.
"""

from jaxgrad.optim import schedulers
from jaxgrad.optim.adaptive import (
    AdagradState,
    AdamaxState,
    AsgdState,
    NadamState,
    RadamState,
    adagrad,
    adamax,
    asgd,
    nadam,
    radam,
)
from jaxgrad.optim.clipping import (
    clip_grad_norm,
    clip_grad_norm_transform,
    clip_grad_value,
    clip_grad_value_transform,
    global_norm,
)
from jaxgrad.optim.elementwise import AdadeltaState, RpropState, adadelta, rprop
from jaxgrad.optim.factored import AdafactorState, adafactor
from jaxgrad.optim.freezing import count_trainable, freeze, freeze_untrained, frozen_mask
from jaxgrad.optim.groups import group_order, param_groups
from jaxgrad.optim.names import dotted_names
from jaxgrad.optim.optimizers import (
    AdamState,
    RmspropState,
    SgdMomentumState,
    adam,
    adamw,
    rmsprop,
    scale_by_torch_adam,
    scale_by_torch_momentum,
    scale_by_torch_rmsprop,
    sgd,
)
from jaxgrad.optim.orthogonal import MuonState, muon, newton_schulz
from jaxgrad.optim.quasi_newton import Lbfgs, LbfgsState, lbfgs
from jaxgrad.optim.state import torch_state_dict, torch_style_state
from jaxgrad.optim.state_dict import load_optimizer_state_dict, optimizer_state_dict
from jaxgrad.optim.trajectory import optimizer_trajectory

OPTIMIZERS = {
    "sgd": sgd,
    "adam": adam,
    "adamw": adamw,
    "rmsprop": rmsprop,
    "adagrad": adagrad,
    "adamax": adamax,
    "nadam": nadam,
    "radam": radam,
    "asgd": asgd,
    "adadelta": adadelta,
    "rprop": rprop,
    "adafactor": adafactor,
}
"""The optimizer factories by lower-case name (``scripts/train.py --optimizer``): every
``optax`` one that takes any parameter (``muon`` takes 2-d ones only; ``lbfgs`` is a
step over a closure)."""

__all__ = [
    "AdadeltaState",
    "AdafactorState",
    "AdagradState",
    "AdamState",
    "AdamaxState",
    "AsgdState",
    "Lbfgs",
    "LbfgsState",
    "MuonState",
    "NadamState",
    "OPTIMIZERS",
    "RadamState",
    "RmspropState",
    "RpropState",
    "SgdMomentumState",
    "adadelta",
    "adafactor",
    "adagrad",
    "adam",
    "adamax",
    "adamw",
    "asgd",
    "clip_grad_norm",
    "clip_grad_norm_transform",
    "clip_grad_value",
    "clip_grad_value_transform",
    "count_trainable",
    "dotted_names",
    "freeze",
    "freeze_untrained",
    "frozen_mask",
    "global_norm",
    "group_order",
    "lbfgs",
    "load_optimizer_state_dict",
    "muon",
    "nadam",
    "newton_schulz",
    "optimizer_state_dict",
    "optimizer_trajectory",
    "param_groups",
    "radam",
    "rmsprop",
    "rprop",
    "scale_by_torch_adam",
    "scale_by_torch_momentum",
    "scale_by_torch_rmsprop",
    "schedulers",
    "sgd",
    "torch_state_dict",
    "torch_style_state",
]
