"""The optimizer doctor: a torch optimizer vs an optax transformation, same gradients.

``diagnose_optimizer(torch_optimizer, tx, grads)`` steps the torch optimizer (driven
by duck typing: ``param_groups``, ``.grad``, ``step()``; torch is never imported)
and ``tx`` from the same initial parameters with the same gradient sequence, finds
the first step where the parameters leave the tier, and explains the port's
trajectory: each ``OPTIMIZER_CATALOGUE`` entry builds torch's optimizer *with one
convention flipped* (eps inside the square root, coupled decay…) in optax, and the
entries are ranked by how closely their trajectories reproduce the port's. The
un-flipped twin (``twin``) reproduces torch; a port matching a flipped twin to the
tier has exactly that convention wrong.

Optional ``max_norm``: torch clips with ``clip_grad_norm_`` (``coef = max_norm /
(norm + 1e-6)``, clamped at 1) before each step; the port's ``tx`` must clip itself.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxgrad.doctor.calls import numpy_copy
from jaxgrad.doctor.capture import torch_tensor
from jaxgrad.doctor.localise import comparison, error, within_tier


# ------------------------------------------------------------ twin building blocks
def _sgd_momentum(m, d, nesterov, *, dampen_first=False, ema=False):
    def init(params):
        return {"buf": jax.tree.map(jnp.zeros_like, params), "count": jnp.zeros([], jnp.int32)}

    def update(g, state, params=None):
        first = state["count"] == 0

        def one(g, b):
            if ema:
                return m * b + (1 - m) * g
            later = m * b + (1 - d) * g
            start = (1 - d) * g if dampen_first else g
            return jnp.where(first, start, later)

        buf = jax.tree.map(one, g, state["buf"])
        out = jax.tree.map(lambda g, b: g + m * b, g, buf) if nesterov else buf
        return out, {"buf": buf, "count": state["count"] + 1}

    return optax.GradientTransformation(init, update)


def _adam(b1, b2, eps, *, eps_mode="outside", bias_correction=True):
    def init(params):
        z = lambda: jax.tree.map(jnp.zeros_like, params)
        return {"m": z(), "v": z(), "count": jnp.zeros([], jnp.int32)}

    def update(g, state, params=None):
        t = state["count"] + 1
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], g)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], g)
        bc1 = 1 - b1**t if bias_correction else 1.0
        bc2 = 1 - b2**t if bias_correction else 1.0

        def step(m, v):
            if eps_mode == "root":
                return (m / bc1) / jnp.sqrt(v / bc2 + eps)
            if eps_mode == "before_bc":
                return (m / bc1) / ((jnp.sqrt(v) + eps) / jnp.sqrt(bc2))
            return (m / bc1) / (jnp.sqrt(v) / jnp.sqrt(bc2) + eps)

        return jax.tree.map(step, m, v), {"m": m, "v": v, "count": t}

    return optax.GradientTransformation(init, update)


def _rmsprop(alpha, eps, *, eps_in_sqrt=False):
    def init(params):
        return {"v": jax.tree.map(jnp.zeros_like, params)}

    def update(g, state, params=None):
        v = jax.tree.map(lambda v, g: alpha * v + (1 - alpha) * g * g, state["v"], g)
        f = (
            (lambda g, v: g / jnp.sqrt(v + eps))
            if eps_in_sqrt
            else (lambda g, v: g / (jnp.sqrt(v) + eps))
        )
        return jax.tree.map(f, g, v), {"v": v}

    return optax.GradientTransformation(init, update)


def _torch_clip(max_norm):
    def update(g, state, params=None):
        norm = optax.tree.norm(g)
        coef = jnp.minimum(max_norm / (norm + 1e-6), 1.0)
        return jax.tree.map(lambda x: x * coef, g), state

    return optax.GradientTransformation(lambda p: optax.EmptyState(), update)


def twin(name: str, d: dict, max_norm=None, **flip) -> optax.GradientTransformation:
    """torch's optimizer ``name`` with hyperparameters ``d`` (``optimizer.defaults``) in
    optax, with the conventions in ``flip`` changed (the catalogue's keys)."""
    lr, wd = d["lr"], d.get("weight_decay", 0.0)
    parts = []
    if max_norm is not None:
        parts.append(
            optax.clip_by_global_norm(max_norm) if flip.get("optax_clip") else _torch_clip(max_norm)
        )
    decoupled = name == "AdamW"
    if flip.get("swap_decay"):
        decoupled = not decoupled
    if flip.get("drop_decay"):
        wd = 0.0
    if "weight_decay" in flip:
        wd = flip["weight_decay"]
    if wd and not decoupled:
        parts.append(optax.add_decayed_weights(wd))
    if name == "SGD":
        if d.get("momentum", 0.0) or flip.get("ema"):
            parts.append(
                _sgd_momentum(
                    d.get("momentum", 0.0),
                    d.get("dampening", 0.0),
                    d.get("nesterov", False) != bool(flip.get("nesterov")),
                    dampen_first=flip.get("dampen_first", False),
                    ema=flip.get("ema", False),
                )
            )
    elif name in ("Adam", "AdamW"):
        b1, b2 = d["betas"]
        parts.append(
            _adam(
                b1,
                b2,
                d["eps"],
                eps_mode=flip.get("eps_mode", "outside"),
                bias_correction=not flip.get("no_bias_correction"),
            )
        )
    elif name == "RMSprop":
        parts.append(
            _rmsprop(
                flip.get("alpha", d["alpha"]), d["eps"], eps_in_sqrt=flip.get("eps_in_sqrt", False)
            )
        )
    else:
        raise ValueError(
            f"diagnose_optimizer: no optax twin for torch.optim.{name}; "
            "supported: SGD, Adam, AdamW, RMSprop."
        )
    if wd and decoupled:
        parts.append(optax.add_decayed_weights(wd))
    parts.append(optax.scale(-lr))
    return optax.chain(*parts)


@dataclasses.dataclass(frozen=True)
class OptimizerConvention:
    name: str
    description: str
    signature: str
    applies: Callable[[str, dict, object], bool]
    flip: dict


OPTIMIZER_CATALOGUE = (
    OptimizerConvention(
        "adam_eps_inside_sqrt",
        "Adam's eps inside the square root (optax eps_root) instead of added to sqrt(v_hat)",
        "large while v is small (first steps, rare gradients)",
        lambda n, d, c: n in ("Adam", "AdamW") and d["eps"] > 0,
        {"eps_mode": "root"},
    ),
    OptimizerConvention(
        "adam_eps_before_bias_correction",
        "Adam's eps added before dividing by sqrt(bias_correction2)",
        "relative ~eps/sqrt(v) in the first steps, fading as bias_correction2 -> 1",
        lambda n, d, c: n in ("Adam", "AdamW") and d["eps"] > 0,
        {"eps_mode": "before_bc"},
    ),
    OptimizerConvention(
        "adam_no_bias_correction",
        "Adam without bias correction",
        "first steps ~sqrt(1-b2)/(1-b1) = 0.32x torch's for the defaults",
        lambda n, d, c: n in ("Adam", "AdamW"),
        {"no_bias_correction": True},
    ),
    OptimizerConvention(
        "coupled_vs_decoupled_decay",
        "weight decay coupled (L2 added to the gradient, torch "
        "Adam/SGD) vs decoupled (p -= lr*wd*p, torch AdamW, optax.adamw)",
        "grows with weight_decay and |p|, from the first step",
        lambda n, d, c: n in ("Adam", "AdamW") and d.get("weight_decay", 0) > 0,
        {"swap_decay": True},
    ),
    OptimizerConvention(
        "adamw_default_decay",
        "AdamW's default weight_decay: torch 1e-2, optax.adamw 1e-4",
        "a decoupled decay 100x too small: lr*0.0099*|p| per step",
        lambda n, d, c: n == "AdamW" and d.get("weight_decay") != 1e-4,
        {"weight_decay": 1e-4},
    ),
    OptimizerConvention(
        "decay_dropped",
        "weight decay missing (optax.sgd / optax.adam take none)",
        "lr*wd*|p| per step, from the first step",
        lambda n, d, c: d.get("weight_decay", 0) > 0,
        {"drop_decay": True},
    ),
    OptimizerConvention(
        "momentum_as_ema",
        "momentum as an EMA, buf = m*buf + (1-m)*g (flax/optax.ema style); "
        "torch's buf = m*buf + (1-dampening)*g starts at g",
        "the first step is (1-m)x torch's (0.1x for m=0.9)",
        lambda n, d, c: n == "SGD" and d.get("momentum", 0) > 0,
        {"ema": True},
    ),
    OptimizerConvention(
        "dampening_first_step",
        "dampening applied at the first step; torch starts the momentum buffer at g undamped",
        "the first step is (1-dampening)x torch's, later steps differ by the carried buffer",
        lambda n, d, c: n == "SGD" and d.get("momentum", 0) > 0 and d.get("dampening", 0) > 0,
        {"dampen_first": True},
    ),
    OptimizerConvention(
        "nesterov",
        "Nesterov momentum on one side only",
        "from the first step: g + m*buf vs buf",
        lambda n, d, c: n == "SGD" and d.get("momentum", 0) > 0,
        {"nesterov": True},
    ),
    OptimizerConvention(
        "rmsprop_eps_inside_sqrt",
        "RMSprop's eps inside the square root (optax's default "
        "eps_in_sqrt=True); torch adds it outside",
        "large where v is small: sqrt(v+eps) vs sqrt(v)+eps",
        lambda n, d, c: n == "RMSprop",
        {"eps_in_sqrt": True},
    ),
    OptimizerConvention(
        "rmsprop_decay",
        "RMSprop's decay: torch alpha=0.99, optax decay=0.9",
        "v is 10x larger after the first step, so the first step is sqrt(10) = 3.2x smaller",
        lambda n, d, c: n == "RMSprop" and d["alpha"] != 0.9,
        {"alpha": 0.9},
    ),
    OptimizerConvention(
        "clipping_eps",
        "gradient clipping: torch's clip_grad_norm_ divides by norm + 1e-6 and "
        "always scales; optax.clip_by_global_norm only scales when norm > max_norm",
        "relative ~1e-6/norm, only on clipped steps",
        lambda n, d, c: c is not None,
        {"optax_clip": True},
    ),
)
"""Every optimizer convention ``diagnose_optimizer`` tries: Adam's eps placement,
coupled or decoupled decay, momentum initialisation, RMSprop's eps and alpha, the
clipping epsilon…"""


@dataclasses.dataclass
class OptimizerReport:
    """What ``diagnose_optimizer`` found; ``str(report)`` is what ``scripts/doctor.py``
    prints, ``verdict`` the conclusion in words.

    Attributes:
      optimizer: torch's optimizer class name.
      first_step: the first step (1-based) where the port leaves the tier; None when
        it never does (``clean``).
      errors: per step, the largest absolute error of the port's params against torch's.
      causes: ``[(name, description, distance to the port, explains)]``, best first.
      twin_error: the error of the doctor's own un-flipped twin against torch (its
        self-check).
      steps: per step, the ``ParityReport.to_dict()`` of the port's params (leaves
        ``params.0``… in the optimizer's order) against torch's.
    """

    optimizer: str
    first_step: int | None  # first step (1-based) where the port leaves the tier
    errors: list  # per step, max abs error of the port's params vs torch's
    causes: list  # [(name, description, distance to the port, explains)], best first
    twin_error: float  # the un-flipped twin vs torch (the doctor's own check)
    # per step, the ParityReport.to_dict() of the port's params (leaves "params.0", …, in
    # the optimizer's order) against torch's; its worst max_abs_err is ``errors[step]``
    steps: list = dataclasses.field(default_factory=list)

    @property
    def clean(self) -> bool:
        return self.first_step is None

    @property
    def heading(self) -> str:
        return (
            f"torch.optim.{self.optimizer} vs the optax transformation, "
            f"{len(self.errors)} steps on the same gradients"
        )

    @property
    def verdict(self) -> str:
        if self.first_step is None:
            return "clean bill: the trajectories agree within the tier."
        if self.causes and self.causes[0][3]:
            name, desc, dist, _ = self.causes[0]
            return (
                f"the port leaves the tier at step {self.first_step} "
                f"(error {self.errors[self.first_step - 1]:.2g}) and follows torch's "
                f"{self.optimizer} with one convention flipped to {dist:.2g}: {desc} "
                f"[{name}]."
            )
        return (
            f"the port leaves the tier at step {self.first_step}; nothing in the "
            "optimizer catalogue reproduces its trajectory."
        )

    def __str__(self):
        lines = [self.heading, "  step  max abs error of the params"]
        for i, e in enumerate(self.errors, 1):
            mark = "  <- first over the tier" if i == self.first_step else ""
            lines.append(f"  {i:>4}  {e:.2g}{mark}")
        if self.first_step is not None:
            lines.append(
                f"optax twin of torch's {self.optimizer} (the doctor's reference "
                f"recipe) vs torch: {self.twin_error:.2g}"
            )
            lines.append(
                "ranked conventions (distance between the port and torch with that "
                "convention flipped):"
            )
            for i, (name, desc, dist, ok) in enumerate(self.causes, 1):
                lines.append(f"  {i}. {name}: {dist:.2g}{'  (matches)' if ok else ''} - {desc}")
        lines.append("verdict: " + self.verdict)
        return "\n".join(lines)


def _run_optax(tx, params, grads):
    state = tx.init(params)
    out = []
    for g in grads:
        updates, state = tx.update(g, state, params)
        params = optax.apply_updates(params, updates)
        out.append(jax.tree.map(np.asarray, params))
    return out


def diagnose_optimizer(torch_optimizer, tx, grads, *, max_norm=None) -> OptimizerReport:
    """Compare ``torch_optimizer`` with ``tx`` on the gradient sequence ``grads``.

    Args:
      torch_optimizer: a fresh torch optimizer (one param group) over the params.
      tx: the optax transformation under test.
      grads: ``[[g_param0, g_param1, ...], ...]`` per step, in the order of the
        optimizer's params; arrays or tensors.
      max_norm: torch clips with ``clip_grad_norm_(params, max_norm)`` before each step.

    Returns:
      An ``OptimizerReport``: the first step where the port leaves the tier, the
      per-step errors and the conventions ranked by how well each explains them.

    Raises:
      ValueError: more than one param group, gradients that do not match the params'
        shapes, or a torch optimizer with no optax twin.
    """
    groups = torch_optimizer.param_groups
    if len(groups) != 1:
        raise ValueError(f"diagnose_optimizer: expected one param group, got {len(groups)}.")
    tensors = groups[0]["params"]
    name = type(torch_optimizer).__name__
    d = dict(groups[0])
    start = [numpy_copy(p) for p in tensors]
    grads = [[numpy_copy(g) for g in step] for step in grads]
    for i, step in enumerate(grads):
        shapes = [g.shape for g in step]
        if shapes != [s.shape for s in start]:
            raise ValueError(
                f"diagnose_optimizer: `grads[{i}]` shapes {shapes} do not match "
                f"the optimizer's params {[s.shape for s in start]}."
            )
    ref = []
    for step in grads:
        for p, g in zip(tensors, step):
            p.grad = torch_tensor(g).to(p.dtype)
        if max_norm is not None:
            _torch_clip_grad(tensors, max_norm)
        torch_optimizer.step()
        ref.append([numpy_copy(p) for p in tensors])
    with jax.enable_x64(start[0].dtype == np.float64):
        params = [jnp.asarray(s) for s in start]
        port = _run_optax(tx, params, grads)
        errors = [error(r, p) for r, p in zip(ref, port)]
        steps = [comparison(r, p, prefix="params") for r, p in zip(ref, port)]
        first = next((i + 1 for i, step in enumerate(steps) if not step.passed), None)
        twin_run = _run_optax(twin(name, d, max_norm), params, grads)
        twin_error = max(error(r, p) for r, p in zip(ref, twin_run))
        causes = []
        if first is not None:
            for entry in OPTIMIZER_CATALOGUE:
                if not entry.applies(name, d, max_norm):
                    continue
                run = _run_optax(twin(name, d, max_norm, **entry.flip), params, grads)
                dist = max(error(p, r) for p, r in zip(port, run))
                ok = all(within_tier(r, p) for p, r in zip(port, run))
                causes.append((entry.name, entry.description, dist, ok))
            causes.sort(key=lambda c: (not c[3], c[2]))
    return OptimizerReport(
        name, first, errors, causes, twin_error, [step.to_dict() for step in steps]
    )


def _torch_clip_grad(tensors, max_norm):
    norm = math.sqrt(sum(float((p.grad.detach() ** 2).sum()) for p in tensors))
    coef = min(max_norm / (norm + 1e-6), 1.0)
    for p in tensors:
        p.grad.mul_(coef)
