"""PyTorch's own optimizer configurations (``optim_db``) run against ``jaxgrad.optim``.

For every ``optim_inputs_func(device="cpu")`` configuration of a supported optimizer:
two tiny float64 parameters, 30 steps whose gradients are a fixed smooth function of
the current parameters (computed by each framework from its own parameters), and after
every step the parameters and every tensor of torch's ``optimizer.state[p]`` (``step``
included, as a number) compared at the float64 tier. Every
``optim_error_inputs_func`` case torch rejects must be rejected with an error naming
the argument; cases about torch's ``params`` argument itself (a bare tensor, mixed
named and unnamed parameters) have no jaxgrad counterpart — parameters are always a
named pytree given at ``init`` — and are counted as not applicable; cases about the
parameters' values (a 3-d parameter for Muon, complex ones) are given to ``init`` and
the first ``update``.

Muon takes 2-d parameters only (a wide and a tall matrix). LBFGS runs its closure (a
loss with its gradient, below) through ``jaxgrad.optim.lbfgs``'s pure step, and is
judged against torch and torch's twin with the parameters reversed
(``calibrated_verdict``). ``REFUSED`` lists the optimizers jaxgrad refuses, with the
reason, and every configuration of theirs is reported as refused.
"""

from __future__ import annotations

import dataclasses
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

from jaxgrad import optim as joptim
from jaxgrad.parity import CALIBRATION_MULTIPLE, compare

STEPS = 30
SUPPORTED = {
    "SGD": "sgd",
    "Adam": "adam",
    "AdamW": "adamw",
    "RMSprop": "rmsprop",
    "Adagrad": "adagrad",
    "Adamax": "adamax",
    "NAdam": "nadam",
    "RAdam": "radam",
    "ASGD": "asgd",
    "Adadelta": "adadelta",
    "Rprop": "rprop",
    "Adafactor": "adafactor",
    "Muon": "muon",
    "LBFGS": "lbfgs",
}
REFUSED = {
    "SparseAdam": (
        "`SparseAdam` is refused: torch's SparseAdam exists for sparse COO gradients (it "
        "updates the moments and parameters only at the gradient's stored indices, and "
        "refuses dense gradients); a JAX gradient is always a dense array, so no input "
        "carries which entries torch would treat as absent, and Adam on the dense gradient "
        "(jaxgrad.optim.adam) decays every moment where SparseAdam leaves them untouched."
    )
}
_NAMED = re.compile(r"`[A-Za-z_][A-Za-z0-9_\[\]]*`")
_NOT_APPLICABLE = ("should be an iterable of Tensors or dicts", "with/without names")


@dataclasses.dataclass
class Outcome:
    source: str  # "optim_db" / "optim_db errors"
    name: str
    index: int
    status: str  # pass | fail | refused | rejected | not applicable | error
    detail: str = ""


def _start(name: str = ""):
    """Two float64 parameters; Muon takes 2-d ones only (a wide and a tall matrix, both
    sides of its transpose)."""
    rng = np.random.default_rng(0)
    if name == "Muon":
        return {"weight": rng.standard_normal((2, 3)), "proj": rng.standard_normal((3, 2))}
    return {"weight": rng.standard_normal((2, 3)), "bias": rng.standard_normal(3)}


def _grad_torch(p, k):
    return torch.cos(p * 1.3 + 0.1 * k) + 0.1 * p


def _grad_jax(p, k):
    return jnp.cos(p * 1.3 + 0.1 * k) + 0.1 * p


def _convert(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, (list, tuple)):
        return type(value)(_convert(v) for v in value)
    return value


def _torch_state(state: dict) -> dict:
    out = {}
    for field, value in state.items():
        if isinstance(value, torch.Tensor):
            out[field] = (
                np.float64(value.item()) if field == "step" else value.detach().numpy().copy()
            )
    return out


def torch_trajectory(cls, kwargs, steps: int = STEPS) -> dict:
    params = {n: torch.tensor(v, requires_grad=True) for n, v in _start(cls.__name__).items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optimizer = cls(list(params.values()), **kwargs)
    history = []
    for k in range(steps):
        for p in params.values():
            p.grad = _grad_torch(p.detach(), k)
        optimizer.step()
        history.append(
            {
                "params": {n: p.detach().numpy().copy() for n, p in params.items()},
                "state": {n: _torch_state(optimizer.state[p]) for n, p in params.items()},
            }
        )
    return {"history": history}


def jax_trajectory(
    optimizer: optax.GradientTransformation, steps: int = STEPS, name: str = ""
) -> dict:
    params = {n: jnp.asarray(v) for n, v in _start(name).items()}
    order = list(params)
    opt_state = optimizer.init(params)
    history = []
    for k in range(steps):
        grads = {n: _grad_jax(p, k) for n, p in params.items()}
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        state = joptim.torch_style_state(opt_state, order)
        history.append(
            {
                "params": {n: np.asarray(params[n]) for n in order},
                "state": {
                    n: {
                        f: (np.float64(v) if f == "step" else np.asarray(v))
                        for f, v in fields.items()
                    }
                    for n, fields in state.items()
                },
            }
        )
    return {"history": history}


def _failures(report) -> str:
    bad = [leaf for leaf in report.leaves if not leaf.passed]
    return "\n".join(f"{leaf.path}: {leaf.problem}" for leaf in bad[:6])


def _plain_tensors(params) -> bool:
    return (
        isinstance(params, list)
        and bool(params)
        and all(isinstance(p, torch.Tensor) and not p.is_sparse for p in params)
    )


def _supported_infos():
    from torch.testing._internal.common_optimizers import optim_db

    return [info for info in optim_db if info.optim_cls.__name__ in SUPPORTED]


def factory_of(name: str):
    """The jaxgrad factory of torch's optimizer class ``name``."""
    return getattr(joptim, SUPPORTED[name])


# ------------------------------------------------------------------------------ LBFGS
# LBFGS needs a loss with its gradient, evaluated many times per step: a convex function
# of u = p - c_k (an exact difference near the minimum), scaled by 0.01 so that the
# stopping tests end most steps before the gradient reaches its rounding floor:
# 0.01 sum(0.5 w u² + 0.25 u⁴), gradient 0.01 (w u + u³), minimum c_k moving each step.
# One numpy function evaluates it for both frameworks, so every difference comes from
# the optimizers.
#
# Once L-BFGS has converged to the last bits, what it does next is decided by rounding
# noise (which pairs pass yᵀs > 1e-10, the two-loop coefficients of nearly orthogonal
# vectors): torch itself, given the same parameters in another order (which changes
# only the summation order of its dot products), leaves the float64 tier there. So each
# configuration also runs torch's twin with the parameters reversed, and a leaf outside
# the tier against torch passes only where it is within CALIBRATION_MULTIPLE (5, the
# project's calibrated rule) times the twin's distance from torch ("calibrated" in the
# outcome's detail); where torch agrees with itself, the tier holds.


def _lbfgs_closure_numpy(p: np.ndarray, k: int) -> tuple[float, np.ndarray]:
    index = np.arange(p.size, dtype=np.float64).reshape(p.shape)
    centre = 0.5 * np.cos(0.1 * k + index)
    weight = 1.0 + 0.5 * index / p.size
    u = p - centre
    return (float(0.01 * np.sum(0.5 * weight * u * u + 0.25 * u**4)), 0.01 * (weight * u + u**3))


def _lbfgs_record(state: dict) -> dict:
    record = {}
    for field in ("func_evals", "n_iter", "t", "H_diag", "prev_loss"):
        if state.get(field) is not None:
            record[field] = np.float64(float(state[field]))
    for field in ("d", "prev_flat_grad"):  # copies: torch updates them in place
        if state.get(field) is not None:
            record[field] = np.asarray(state[field], np.float64).copy()
    for field in ("old_dirs", "old_stps"):
        record[field] = (
            np.stack([np.asarray(v, np.float64).copy() for v in state[field]])
            if state.get(field)
            else np.zeros((0,))
        )
    record["ro"] = np.asarray([float(v) for v in state.get("ro") or ()], np.float64)
    # torch's `al` is left out: scratch that each two-loop writes before it reads it, a
    # function of the compared pairs and gradient; as dot products of nearly orthogonal
    # vectors (s_i against the converging gradient) its last bits are noise that
    # neither framework can hold to 1e-10, and none of it reaches the next step
    record["al_set"] = np.float64(sum(v is not None for v in state.get("al") or ()))
    return record


def torch_lbfgs_trajectory(kwargs, steps: int = STEPS, *, reverse: bool = False) -> dict:
    """torch's LBFGS for ``steps`` steps; ``reverse`` hands torch the parameters in the
    other order (its flat vectors are put back in the usual order for comparison)."""
    params = {n: torch.tensor(v, requires_grad=True) for n, v in _start().items()}
    order = list(params)[::-1] if reverse else list(params)
    optimizer = torch.optim.LBFGS([params[n] for n in order], **kwargs)
    sizes = [params[n].numel() for n in order]
    history = []
    for k in range(steps):

        def closure(k=k):
            loss = 0.0
            for p in params.values():
                value, grad = _lbfgs_closure_numpy(p.detach().numpy(), k)
                p.grad = torch.from_numpy(grad)
                loss = loss + value
            return torch.tensor(loss, dtype=torch.float64)

        loss = optimizer.step(closure)
        state = _lbfgs_record(
            {
                key: (v.detach().numpy() if isinstance(v, torch.Tensor) else v)
                for key, v in optimizer.state[params[order[0]]].items()
            }
        )
        if reverse:  # flat vectors back in the usual parameter order
            for field in ("d", "prev_flat_grad", "old_dirs", "old_stps"):
                if field in state and state[field].ndim and state[field].shape[-1] == sum(sizes):
                    parts = np.split(state[field], np.cumsum(sizes)[:-1], axis=-1)
                    state[field] = np.concatenate(parts[::-1], axis=-1)
        history.append(
            {
                "loss": np.float64(float(loss)),
                "params": {n: p.detach().numpy().copy() for n, p in params.items()},
                "state": state,
            }
        )
    return {"history": history}


def jax_lbfgs_trajectory(optimizer, steps: int = STEPS) -> dict:
    params = {n: jnp.asarray(v) for n, v in _start().items()}
    opt_state = optimizer.init(params)
    history = []
    for k in range(steps):

        def value_and_grad(p, k=k):
            loss, grads = 0.0, {}
            for n, v in p.items():
                value, grad = _lbfgs_closure_numpy(np.asarray(v), k)
                grads[n] = jnp.asarray(grad)
                loss = loss + value
            return jnp.asarray(loss), grads

        loss, params, opt_state = optimizer.step(value_and_grad, params, opt_state)
        state = joptim.torch_style_state(opt_state, params)["weight"]
        history.append(
            {
                "loss": np.float64(float(loss)),
                "params": {n: np.asarray(v) for n, v in params.items()},
                "state": _lbfgs_record(state),
            }
        )
    return {"history": history}


def config_outcomes(every: int = 1) -> list[Outcome]:
    """Every supported ``optim_db`` configuration, 30 float64 steps each (``every``:
    one configuration in ``every`` of each optimizer, its first included)."""
    outcomes = []
    with jax.enable_x64(True):
        for info in _supported_infos():
            name = info.optim_cls.__name__
            factory = factory_of(name)
            lbfgs = name == "LBFGS"
            for index, config in enumerate(info.optim_inputs_func(device="cpu")):
                if index % every:
                    continue
                label = f"{name}({config.desc})"
                try:
                    optimizer = factory(**_convert(config.kwargs))
                    candidate = (
                        jax_lbfgs_trajectory(optimizer)
                        if lbfgs
                        else jax_trajectory(optimizer, name=name)
                    )
                except (ValueError, TypeError) as error:
                    status = "refused" if _NAMED.search(str(error)) else "error"
                    outcomes.append(Outcome("optim_db", label, index, status, str(error)))
                    continue
                if lbfgs:
                    reference = torch_lbfgs_trajectory(config.kwargs)
                    twin = torch_lbfgs_trajectory(config.kwargs, reverse=True)
                    passed, detail = calibrated_verdict(reference, candidate, twin, label)
                    outcomes.append(
                        Outcome("optim_db", label, index, "pass" if passed else "fail", detail)
                    )
                    continue
                reference = torch_trajectory(info.optim_cls, config.kwargs)
                report = compare(reference, candidate, name=label)
                outcomes.append(
                    Outcome(
                        "optim_db",
                        label,
                        index,
                        "pass" if report.passed else "fail",
                        "" if report.passed else _failures(report),
                    )
                )
    outcomes += refused_outcomes()
    return outcomes


def calibrated_verdict(reference, candidate, twin, label: str = "") -> tuple[bool, str]:
    """Per leaf: within the float64 tier of ``reference``, or within
    ``CALIBRATION_MULTIPLE`` (the project's calibrated rule, as for float32) times
    ``twin``'s distance from it (torch against itself). Returns ``(passed, detail)``."""
    report = compare(reference, candidate, name=label)
    if report.passed:
        return True, ""
    ref_leaves = dict(jax.tree_util.tree_flatten_with_path(reference)[0])
    cand_leaves = dict(jax.tree_util.tree_flatten_with_path(candidate)[0])
    twin_leaves = dict(jax.tree_util.tree_flatten_with_path(twin)[0])
    if set(ref_leaves) != set(cand_leaves):
        return False, _failures(report)
    calibrated, failed = 0, []
    for path, ref in ref_leaves.items():
        ref, cand = np.asarray(ref, np.float64), np.asarray(cand_leaves[path], np.float64)
        other = np.asarray(twin_leaves.get(path, np.full_like(ref, np.nan)), np.float64)
        if compare(ref, cand).passed:
            continue
        if ref.shape != cand.shape:
            if ref.shape != other.shape:  # torch's twin kept another number of pairs too
                calibrated += 1
                continue
            failed.append(f"{jax.tree_util.keystr(path)}: shape {cand.shape}, torch {ref.shape}")
            continue
        # distances in units of the tier (|x - torch| / (atol + rtol |torch|)), the
        # largest over the leaf; NaN (unset two-loop slots) where torch has NaN
        scale = 1e-12 + 1e-10 * np.abs(ref)
        ours = np.nanmax(np.abs(cand - ref) / scale) if ref.size else 0.0
        theirs = (
            np.nanmax(np.abs(other - ref) / scale)
            if ref.shape == other.shape and ref.size
            else np.inf
        )
        if ours <= CALIBRATION_MULTIPLE * theirs:
            calibrated += 1
        else:
            failed.append(
                f"{jax.tree_util.keystr(path)}: {ours:.3g} tiers from torch, "
                f"torch's twin {theirs:.3g}"
            )
    if failed:
        return False, "\n".join(failed[:6])
    return True, (
        f"calibrated: {calibrated} leaves outside the float64 tier, each within "
        f"{CALIBRATION_MULTIPLE:g}x the distance of torch with its parameters "
        "reversed"
    )


def refused_outcomes() -> list[Outcome]:
    """Every ``optim_db`` configuration of an optimizer jaxgrad refuses, with the reason."""
    from torch.testing._internal.common_optimizers import optim_db

    return [
        Outcome(
            "optim_db",
            f"{info.optim_cls.__name__}({config.desc})",
            index,
            "refused",
            REFUSED[info.optim_cls.__name__],
        )
        for info in optim_db
        if info.optim_cls.__name__ in REFUSED
        for index, config in enumerate(info.optim_inputs_func(device="cpu"))
    ]


def error_outcomes() -> list[Outcome]:
    """Every ``optim_error_inputs_func`` case of the supported optimizers."""
    outcomes = []
    with jax.enable_x64(True):
        for info in _supported_infos():
            name = info.optim_cls.__name__
            factory = factory_of(name)
            errors = info.optim_error_inputs_func(device="cpu", dtype=torch.float64)
            for index, case in enumerate(errors):
                regex = str(case.error_regex)
                if any(text in regex for text in _NOT_APPLICABLE) or issubclass(
                    case.error_type, Warning
                ):  # torch only warns (duplicate params)
                    outcomes.append(
                        Outcome("optim_db errors", name, index, "not applicable", regex)
                    )
                    continue
                kwargs = _convert(case.optimizer_error_input.kwargs)
                if "more than one parameter group" in regex:

                    def run(kwargs=kwargs):
                        grouped = joptim.param_groups(
                            factory,  # noqa: B023
                            [{"params": "weight"}, {"params": "weight"}],
                            **kwargs,
                        )
                        grouped.init({"weight": jnp.zeros((1, 1))})
                elif _plain_tensors(case.optimizer_error_input.params):
                    # about the parameters themselves (a 3-d one for Muon, complex ones):
                    # torch raises at construction or at the first step, jaxgrad at
                    # `init` or the first `update`
                    given = {
                        f"p{i}": jnp.asarray(p.detach().numpy())
                        for i, p in enumerate(case.optimizer_error_input.params)
                    }

                    def run(kwargs=kwargs, given=given):
                        optimizer = factory(**kwargs)  # noqa: B023
                        state = optimizer.init(given)
                        optimizer.update(given, state, given)
                else:

                    def run(kwargs=kwargs):
                        factory(**kwargs)  # noqa: B023

                try:
                    run()
                except (ValueError, TypeError) as error:
                    status = "rejected" if _NAMED.search(str(error)) else "error"
                    outcomes.append(Outcome("optim_db errors", name, index, status, str(error)))
                    continue
                outcomes.append(
                    Outcome(
                        "optim_db errors",
                        name,
                        index,
                        "fail",
                        f"accepted what torch rejects: {regex}",
                    )
                )
    return outcomes
