"""Loss modules mirroring ``torch.nn``: ``CrossEntropyLoss(weight=…, ignore_index=…)``.

Each is a frozen dataclass holding torch's constructor arguments (same names, order
and defaults) whose ``__call__`` takes ``forward``'s inputs and calls the functional
loss. The legacy ``size_average`` / ``reduce`` arguments are accepted only as None
(torch deprecated them in favour of ``reduction``; a value would silently change the
reduction). ``from_torch(module)`` builds the twin of a torch loss module, copying its
``weight`` / ``pos_weight`` buffers.

Each is also a ``jaxgrad.nn`` layer without params whose buffers are torch's
``weight`` / ``pos_weight`` (as in torch's ``state_dict()``), so
``jaxgrad.nn.from_torch`` converts a loss module, alone or inside a traced forward.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad._arrays import canonical_dtype, check_dtype_available
from jaxgrad.losses import _binary, _classification, _ctc, _linear, _margin, _pairwise, _regression
from jaxgrad.losses._checks import REDUCTIONS, check_number, check_reduction
from jaxgrad.nn import init as initializers
from jaxgrad.nn._layer import Layer


class _Loss(Layer):
    """A loss is also a ``jaxgrad.nn`` layer (what ``jaxgrad.nn.from_torch`` returns):
    no params, torch's ``weight`` / ``pos_weight`` buffers (those not None), and
    ``apply(params, *inputs, buffers=...)`` computing the loss with the given buffers.
    ``loss(*inputs)`` computes it with the loss's own ``weight`` / ``pos_weight``."""

    _reductions = REDUCTIONS
    _numbers: tuple = ()  # (field, positive, nonnegative)

    def init_buffers(self):
        return {
            name: jnp.asarray(getattr(self, name))
            for name in _BUFFERS
            if getattr(self, name, None) is not None
        }

    def forward_with_state(self, params, *inputs, buffers, train, key, path, **options):
        del train, key
        loss = dataclasses.replace(self, **buffers) if buffers else self
        try:
            output = loss._compute(params, *inputs, **options)
        except (ValueError, TypeError) as exc:
            if not path:
                raise
            raise type(exc)(f"{type(self).__name__} at {path!r}: {exc}") from exc
        return output, dict(buffers)

    def _compute(self, params, *inputs, **options):
        del params  # a loss has none (LinearCrossEntropyLoss overrides this)
        return self(*inputs, **options)

    def __post_init__(self):
        for legacy in ("size_average", "reduce"):
            if getattr(self, legacy, None) is not None:
                raise ValueError(
                    f"{type(self).__name__}: `{legacy}` (={getattr(self, legacy)!r}) is "
                    "deprecated in torch; pass `reduction` instead."
                )
        check_reduction(self.reduction, self._reductions)
        for name, positive, nonnegative in self._numbers:
            check_number(
                type(self).__name__,
                name,
                getattr(self, name),
                positive=positive,
                nonnegative=nonnegative,
            )


def _frozen(cls):
    return dataclasses.dataclass(frozen=True, eq=False)(cls)


@_frozen
class CrossEntropyLoss(_Loss):
    """``torch.nn.CrossEntropyLoss``; see ``jaxgrad.losses.cross_entropy``."""

    weight: Any = None
    size_average: Any = None
    ignore_index: int = -100
    reduce: Any = None
    reduction: str = "mean"
    label_smoothing: float = 0.0

    def __call__(self, input, target):
        return _classification.cross_entropy(
            input, target, self.weight, self.ignore_index, self.reduction, self.label_smoothing
        )


@_frozen
class NLLLoss(_Loss):
    """``torch.nn.NLLLoss``; see ``jaxgrad.losses.nll_loss``."""

    weight: Any = None
    size_average: Any = None
    ignore_index: int = -100
    reduce: Any = None
    reduction: str = "mean"

    def __call__(self, input, target):
        return _classification.nll_loss(
            input, target, self.weight, self.ignore_index, self.reduction
        )


@_frozen
class MSELoss(_Loss):
    """``torch.nn.MSELoss``."""

    size_average: Any = None
    reduce: Any = None
    reduction: str = "mean"

    def __call__(self, input, target):
        return _regression.mse_loss(input, target, self.reduction)


@_frozen
class L1Loss(_Loss):
    """``torch.nn.L1Loss``."""

    size_average: Any = None
    reduce: Any = None
    reduction: str = "mean"

    def __call__(self, input, target):
        return _regression.l1_loss(input, target, self.reduction)


@_frozen
class BCELoss(_Loss):
    """``torch.nn.BCELoss``; ``input`` are probabilities."""

    weight: Any = None
    size_average: Any = None
    reduce: Any = None
    reduction: str = "mean"

    def __call__(self, input, target):
        return _binary.binary_cross_entropy(input, target, self.weight, self.reduction)


@_frozen
class BCEWithLogitsLoss(_Loss):
    """``torch.nn.BCEWithLogitsLoss``."""

    weight: Any = None
    size_average: Any = None
    reduce: Any = None
    reduction: str = "mean"
    pos_weight: Any = None

    def __call__(self, input, target):
        return _binary.binary_cross_entropy_with_logits(
            input, target, self.weight, self.reduction, self.pos_weight
        )


@_frozen
class SmoothL1Loss(_Loss):
    """``torch.nn.SmoothL1Loss``."""

    size_average: Any = None
    reduce: Any = None
    reduction: str = "mean"
    beta: float = 1.0
    _numbers = (("beta", False, True),)

    def __call__(self, input, target):
        return _regression.smooth_l1_loss(input, target, self.reduction, self.beta)


@_frozen
class HuberLoss(_Loss):
    """``torch.nn.HuberLoss``."""

    reduction: str = "mean"
    delta: float = 1.0
    _numbers = (("delta", True, False),)

    def __call__(self, input, target):
        return _regression.huber_loss(input, target, self.reduction, self.delta)


@_frozen
class KLDivLoss(_Loss):
    """``torch.nn.KLDivLoss``; ``reduction="batchmean"`` is the KL divergence."""

    size_average: Any = None
    reduce: Any = None
    reduction: str = "mean"
    log_target: bool = False
    _reductions = ("mean", "batchmean", "sum", "none")

    def __call__(self, input, target):
        return _pairwise.kl_div(input, target, self.reduction, self.log_target)


@_frozen
class CosineEmbeddingLoss(_Loss):
    """``torch.nn.CosineEmbeddingLoss``."""

    margin: float = 0.0
    size_average: Any = None
    reduce: Any = None
    reduction: str = "mean"
    _numbers = (("margin", False, False),)

    def __call__(self, input1, input2, target):
        return _pairwise.cosine_embedding_loss(input1, input2, target, self.margin, self.reduction)


@_frozen
class MarginRankingLoss(_Loss):
    """``torch.nn.MarginRankingLoss``."""

    margin: float = 0.0
    size_average: Any = None
    reduce: Any = None
    reduction: str = "mean"
    _numbers = (("margin", False, False),)

    def __call__(self, input1, input2, target):
        return _pairwise.margin_ranking_loss(input1, input2, target, self.margin, self.reduction)


@_frozen
class PoissonNLLLoss(_Loss):
    """``torch.nn.PoissonNLLLoss``."""

    log_input: bool = True
    full: bool = False
    size_average: Any = None
    eps: float = 1e-8
    reduce: Any = None
    reduction: str = "mean"
    _numbers = (("eps", False, False),)

    def __call__(self, log_input, target):
        return _regression.poisson_nll_loss(
            log_input, target, self.log_input, self.full, self.eps, self.reduction
        )


@_frozen
class GaussianNLLLoss(_Loss):
    """``torch.nn.GaussianNLLLoss`` (keyword-only arguments, as torch)."""

    full: bool = dataclasses.field(default=False, kw_only=True)
    eps: float = dataclasses.field(default=1e-6, kw_only=True)
    reduction: str = dataclasses.field(default="mean", kw_only=True)
    _numbers = (("eps", False, False),)

    def __call__(self, input, target, var):
        return _regression.gaussian_nll_loss(
            input, target, var, self.full, self.eps, self.reduction
        )


@_frozen
class SoftMarginLoss(_Loss):
    """``torch.nn.SoftMarginLoss``; see ``jaxgrad.losses.soft_margin_loss``."""

    size_average: Any = None
    reduce: Any = None
    reduction: str = "mean"

    def __call__(self, input, target):
        return _margin.soft_margin_loss(input, target, self.reduction)


@_frozen
class MultiLabelSoftMarginLoss(_Loss):
    """``torch.nn.MultiLabelSoftMarginLoss``; see
    ``jaxgrad.losses.multilabel_soft_margin_loss``."""

    weight: Any = None
    size_average: Any = None
    reduce: Any = None
    reduction: str = "mean"

    def __call__(self, input, target):
        return _margin.multilabel_soft_margin_loss(input, target, self.weight, self.reduction)


@_frozen
class HingeEmbeddingLoss(_Loss):
    """``torch.nn.HingeEmbeddingLoss``; see ``jaxgrad.losses.hinge_embedding_loss``."""

    margin: float = 1.0
    size_average: Any = None
    reduce: Any = None
    reduction: str = "mean"
    _numbers = (("margin", False, False),)

    def __call__(self, input, target):
        return _margin.hinge_embedding_loss(input, target, self.margin, self.reduction)


@_frozen
class MultiMarginLoss(_Loss):
    """``torch.nn.MultiMarginLoss``; see ``jaxgrad.losses.multi_margin_loss``."""

    p: int = 1
    margin: float = 1.0
    weight: Any = None
    size_average: Any = None
    reduce: Any = None
    reduction: str = "mean"
    _numbers = (("margin", False, False),)

    def __post_init__(self):
        super().__post_init__()
        if self.p not in (1, 2) or isinstance(self.p, bool):
            raise ValueError(f"MultiMarginLoss: `p` (={self.p!r}) must be 1 or 2.")
        if self.weight is not None and getattr(self.weight, "ndim", None) != 1:
            raise ValueError(
                "MultiMarginLoss: `weight` must be one-dimensional `(C,)`, got "
                f"shape {tuple(getattr(self.weight, 'shape', ()))}."
            )

    def __call__(self, input, target):
        return _margin.multi_margin_loss(
            input, target, self.p, self.margin, self.weight, self.reduction
        )


@_frozen
class MultiLabelMarginLoss(_Loss):
    """``torch.nn.MultiLabelMarginLoss``; see ``jaxgrad.losses.multilabel_margin_loss``."""

    size_average: Any = None
    reduce: Any = None
    reduction: str = "mean"

    def __call__(self, input, target):
        return _margin.multilabel_margin_loss(input, target, self.reduction)


@_frozen
class CTCLoss(_Loss):
    """``torch.nn.CTCLoss``; see ``jaxgrad.losses.ctc_loss``."""

    blank: int = 0
    reduction: str = "mean"
    zero_infinity: bool = False

    def __call__(self, log_probs, targets, input_lengths, target_lengths):
        return _ctc.ctc_loss(
            log_probs,
            targets,
            input_lengths,
            target_lengths,
            self.blank,
            self.reduction,
            self.zero_infinity,
        )


@_frozen
class LinearCrossEntropyLoss(_Loss):
    """``torch.nn.LinearCrossEntropyLoss``: a ``Linear`` layer and ``cross_entropy``.

    Params (torch's names): ``linear.weight`` `(num_classes·prod(out_features),
    in_features)` and, with ``bias=True``, ``linear.bias``; torch's ``Linear`` init.
    Buffer: ``weight`` (class weights), when given. Unlike the other losses it has
    params, so it is called as a layer: ``loss(params, input, target)``; see
    ``jaxgrad.losses.linear_cross_entropy``.
    """

    in_features: int
    num_classes: int
    out_features: tuple = dataclasses.field(default=(), kw_only=True)
    bias: bool = dataclasses.field(default=False, kw_only=True)
    device: Any = dataclasses.field(default=None, kw_only=True)
    dtype: Any = dataclasses.field(default=None, kw_only=True)
    reduction: str = dataclasses.field(default="mean", kw_only=True)
    weight: Any = dataclasses.field(default=None, kw_only=True)
    ignore_index: Any = dataclasses.field(default=None, kw_only=True)
    label_smoothing: float = dataclasses.field(default=0.0, kw_only=True)
    options: Any = dataclasses.field(default=None, kw_only=True)

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        object.__setattr__(self, "out_features", tuple(self.out_features))
        for name in ("in_features", "num_classes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(
                    f"LinearCrossEntropyLoss: `{name}` (={value!r}) must be a non-negative int."
                )
        if self.weight is not None and tuple(self.weight.shape) != (self.num_classes,):
            raise ValueError(
                f"LinearCrossEntropyLoss: `weight` shape "
                f"{tuple(self.weight.shape)} must be ({self.num_classes},)."
            )
        check_number("LinearCrossEntropyLoss", "label_smoothing", self.label_smoothing)
        if not 0.0 <= self.label_smoothing <= 1.0:
            raise ValueError(
                f"LinearCrossEntropyLoss: `label_smoothing` "
                f"(={self.label_smoothing}) must be in [0, 1]."
            )

    def init(self, key):
        dtype = check_dtype_available(self.dtype, what="dtype")
        rows = math.prod(self.out_features, start=self.num_classes)
        weight_key, bias_key = jax.random.split(key)
        params = {
            "linear.weight": initializers.torch_default_weight(
                weight_key, (rows, self.in_features), dtype, fan_in=self.in_features
            )
        }
        if self.bias:
            params["linear.bias"] = initializers.fan_in_uniform(
                bias_key, (rows,), dtype, fan_in=self.in_features
            )
        return params

    def _compute(self, params, *inputs, **options):
        return self(params, *inputs, **options)  # the one loss with params

    def __call__(self, params, input, target):
        shape = (self.num_classes, *self.out_features)
        linear_weight = params["linear.weight"].reshape(*shape, self.in_features)
        linear_bias = params["linear.bias"].reshape(shape) if self.bias else None
        return _linear.linear_cross_entropy(
            input,
            linear_weight,
            target,
            linear_bias=linear_bias,
            weight=self.weight,
            reduction=self.reduction,
            ignore_index=self.ignore_index,
            label_smoothing=self.label_smoothing,
            options=self.options,
        )


LOSS_MODULES = {
    cls.__name__: cls
    for cls in (
        CrossEntropyLoss,
        NLLLoss,
        MSELoss,
        L1Loss,
        BCELoss,
        BCEWithLogitsLoss,
        SmoothL1Loss,
        HuberLoss,
        KLDivLoss,
        CosineEmbeddingLoss,
        MarginRankingLoss,
        PoissonNLLLoss,
        GaussianNLLLoss,
        SoftMarginLoss,
        MultiLabelSoftMarginLoss,
        HingeEmbeddingLoss,
        MultiMarginLoss,
        MultiLabelMarginLoss,
        CTCLoss,
        LinearCrossEntropyLoss,
    )
}
"""The loss modules by torch class name (what ``from_torch`` converts)."""
_BUFFERS = ("weight", "pos_weight")


def from_torch(module):
    """The jaxgrad twin of a torch loss module, read by duck typing (no torch import).

    Hyperparameters are read from the attributes torch stores (``reduction``,
    ``ignore_index``, ``label_smoothing``, ``beta``, ``delta``…); the ``weight`` /
    ``pos_weight`` buffers are copied as numpy arrays.

    Args:
      module: a torch loss module (``nn.CrossEntropyLoss(weight=...)``…).

    Returns:
      The loss module of the same name (``jaxgrad.losses.CrossEntropyLoss``…).

    Raises:
      ValueError: for a class that is not a supported loss, naming the supported set.
    """
    name = type(module).__name__
    if name not in LOSS_MODULES:
        raise ValueError(
            f"from_torch: unsupported loss module {name}; supported losses are "
            f"{', '.join(sorted(LOSS_MODULES))}."
        )
    cls = LOSS_MODULES[name]
    kwargs = {}
    if cls is LinearCrossEntropyLoss:
        # torch keeps in_features and the bias flag on its inner Linear
        kwargs.update(
            in_features=module.linear.in_features,
            bias=module.linear.bias is not None,
            dtype=canonical_dtype(module.linear.weight.dtype),
            device=None,
        )
    for field in dataclasses.fields(cls):
        if field.name in ("size_average", "reduce") or field.name in kwargs:
            continue
        value = getattr(module, field.name, None)
        if field.name in _BUFFERS:
            # a copy: torch's buffer shares its memory with .numpy(), and an in-place
            # change to the torch module (load_state_dict) must not change the twin
            value = None if value is None else np.array(value.detach().cpu().numpy())
        kwargs[field.name] = value
    return cls(**kwargs)
