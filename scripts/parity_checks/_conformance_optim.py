"""PyTorch's own optimizer configurations (``optim_db``) run against ``jaxgrad.optim``.

For every ``optim_inputs_func(device="cpu")`` configuration of a supported optimizer:
two tiny float64 parameters, 30 steps whose gradients are a fixed smooth function of
the current parameters (computed by each framework from its own parameters), and after
every step the parameters and every tensor of torch's ``optimizer.state[p]`` (``step``
included, as a number) compared at the float64 tier. Every
``optim_error_inputs_func`` case torch rejects must be rejected with an error naming
the argument; cases about torch's ``params`` argument itself (a bare tensor, mixed
named and unnamed parameters) have no jaxgrad counterpart — parameters are always a
named pytree given at ``init`` — and are counted as not applicable.
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
from jaxgrad.parity import compare

STEPS = 30
SUPPORTED = {"SGD": "sgd", "Adam": "adam", "AdamW": "adamw", "RMSprop": "rmsprop",
             "Adagrad": "adagrad", "Adamax": "adamax", "NAdam": "nadam", "RAdam": "radam",
             "ASGD": "asgd"}
_NAMED = re.compile(r"`[A-Za-z_][A-Za-z0-9_\[\]]*`")
_NOT_APPLICABLE = ("should be an iterable of Tensors or dicts", "with/without names")


@dataclasses.dataclass
class Outcome:
    source: str  # "optim_db" / "optim_db errors"
    name: str
    index: int
    status: str  # pass | fail | refused | rejected | not applicable | error
    detail: str = ""


def _start():
    rng = np.random.default_rng(0)
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
            out[field] = (np.float64(value.item()) if field == "step"
                          else value.detach().numpy().copy())
    return out


def torch_trajectory(cls, kwargs, steps: int = STEPS) -> dict:
    params = {n: torch.tensor(v, requires_grad=True) for n, v in _start().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optimizer = cls(list(params.values()), **kwargs)
    history = []
    for k in range(steps):
        for p in params.values():
            p.grad = _grad_torch(p.detach(), k)
        optimizer.step()
        history.append({"params": {n: p.detach().numpy().copy() for n, p in params.items()},
                        "state": {n: _torch_state(optimizer.state[p]) for n, p in params.items()}})
    return {"history": history}


def jax_trajectory(optimizer: optax.GradientTransformation, steps: int = STEPS) -> dict:
    params = {n: jnp.asarray(v) for n, v in _start().items()}
    order = list(params)
    opt_state = optimizer.init(params)
    history = []
    for k in range(steps):
        grads = {n: _grad_jax(p, k) for n, p in params.items()}
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        state = joptim.torch_style_state(opt_state, order)
        history.append({
            "params": {n: np.asarray(params[n]) for n in order},
            "state": {n: {f: (np.float64(v) if f == "step" else np.asarray(v))
                          for f, v in fields.items()} for n, fields in state.items()}})
    return {"history": history}


def _failures(report) -> str:
    bad = [leaf for leaf in report.leaves if not leaf.passed]
    return "\n".join(f"{leaf.path}: {leaf.problem}" for leaf in bad[:6])


def _supported_infos():
    from torch.testing._internal.common_optimizers import optim_db
    return [info for info in optim_db if info.optim_cls.__name__ in SUPPORTED]


def config_outcomes() -> list[Outcome]:
    """Every supported ``optim_db`` configuration, 30 float64 steps each."""
    outcomes = []
    with jax.enable_x64(True):
        for info in _supported_infos():
            name = info.optim_cls.__name__
            factory = joptim.OPTIMIZERS[SUPPORTED[name]]
            for index, config in enumerate(info.optim_inputs_func(device="cpu")):
                label = f"{name}({config.desc})"
                try:
                    optimizer = factory(**_convert(config.kwargs))
                    candidate = jax_trajectory(optimizer)
                except (ValueError, TypeError) as error:
                    status = "refused" if _NAMED.search(str(error)) else "error"
                    outcomes.append(Outcome("optim_db", label, index, status, str(error)))
                    continue
                reference = torch_trajectory(info.optim_cls, config.kwargs)
                report = compare(reference, candidate, name=label)
                outcomes.append(Outcome("optim_db", label, index,
                                        "pass" if report.passed else "fail",
                                        "" if report.passed else _failures(report)))
    return outcomes


def error_outcomes() -> list[Outcome]:
    """Every ``optim_error_inputs_func`` case of the supported optimizers."""
    outcomes = []
    with jax.enable_x64(True):
        for info in _supported_infos():
            name = info.optim_cls.__name__
            factory = joptim.OPTIMIZERS[SUPPORTED[name]]
            errors = info.optim_error_inputs_func(device="cpu", dtype=torch.float64)
            for index, case in enumerate(errors):
                regex = str(case.error_regex)
                if any(text in regex for text in _NOT_APPLICABLE) or issubclass(
                        case.error_type, Warning):  # torch only warns (duplicate params)
                    outcomes.append(Outcome("optim_db errors", name, index, "not applicable",
                                            regex))
                    continue
                kwargs = _convert(case.optimizer_error_input.kwargs)
                if "more than one parameter group" in regex:
                    def run(kwargs=kwargs):
                        grouped = joptim.param_groups(factory, [{"params": "weight"},
                                                                {"params": "weight"}], **kwargs)
                        grouped.init({"weight": jnp.zeros((1, 1))})
                else:
                    def run(kwargs=kwargs):
                        factory(**kwargs)
                try:
                    run()
                except (ValueError, TypeError) as error:
                    status = "rejected" if _NAMED.search(str(error)) else "error"
                    outcomes.append(Outcome("optim_db errors", name, index, status, str(error)))
                    continue
                outcomes.append(Outcome("optim_db errors", name, index, "fail",
                                        f"accepted what torch rejects: {regex}"))
    return outcomes
