"""torch.optim run the ordinary way, recording parameters and optimizer state per step.

``optimizer_trajectory`` is the reference the jaxgrad optimizers are checked against:
``zero_grad(); loss.backward(); [clip_grad_norm_]; step()`` for ``steps`` steps on one
fixed batch, recording after every step each parameter and each tensor of
``optimizer.state[p]`` (``momentum_buffer``, ``exp_avg``, ``exp_avg_sq``,
``square_avg``, ``grad_avg``) under the parameter's ``named_parameters()`` name.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

OPTIMIZERS = {
    "sgd": torch.optim.SGD,
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "rmsprop": torch.optim.RMSprop,
    "adagrad": torch.optim.Adagrad,
    "adamax": torch.optim.Adamax,
    "nadam": torch.optim.NAdam,
    "radam": torch.optim.RAdam,
    "asgd": torch.optim.ASGD,
}
STATE_FIELDS = (
    "momentum_buffer",
    "exp_avg",
    "exp_avg_sq",
    "max_exp_avg_sq",
    "square_avg",
    "grad_avg",
    "sum",
    "exp_inf",
    "mu_product",
    "eta",
    "mu",
    "ax",
)


def make_optimizer(name: str, parameters, **hyper) -> torch.optim.Optimizer:
    """``torch.optim.<name>(parameters, **hyper)`` for a name in ``OPTIMIZERS``."""
    if name not in OPTIMIZERS:
        raise ValueError(f"`name` (={name!r}) must be one of {', '.join(OPTIMIZERS)}.")
    return OPTIMIZERS[name](parameters, **hyper)


def named_state(
    module: torch.nn.Module, optimizer: torch.optim.Optimizer, *, copy: bool = True
) -> dict:
    """``{param name: {field: numpy copy}}`` of ``optimizer.state``; ``None`` buffers left out.

    ``copy=False``: numpy views of torch's own buffers instead, which the optimizer's
    next step overwrites (for a caller done with them before it: no second copy of a
    large model's state)."""
    result = {}
    for name, param in module.named_parameters():
        state = optimizer.state.get(param, {})
        fields = {
            k: state[k].detach().numpy().copy() if copy else state[k].detach().numpy()
            for k in STATE_FIELDS
            if isinstance(state.get(k), torch.Tensor)
        }
        if fields:
            result[name] = fields
    return result


def optimizer_trajectory(
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable,
    steps: int,
    *,
    max_norm: float | None = None,
) -> dict:
    """Train ``steps`` steps on ``(x, y)``; record params and state after each step.

    Returns:
      ``{"loss": (steps,), "params": {name: (steps, *shape)},
      "state": {name: {field: (steps, *shape)}}}`` as numpy arrays; ``loss`` is the
      loss *before* each step.
    """
    if steps < 1:
        raise ValueError(f"`steps` (={steps}) must be >= 1.")
    losses, params, states = [], [], []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = loss_fn(module(x), y)
        loss.backward()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(module.parameters(), max_norm)
        optimizer.step()
        losses.append(loss.item())
        params.append({n: p.detach().numpy().copy() for n, p in module.named_parameters()})
        states.append(named_state(module, optimizer))
    dtype = next(module.parameters()).dtype
    return {
        "loss": np.asarray(losses, dtype=str(dtype).replace("torch.", "")),
        "params": {n: np.stack([p[n] for p in params]) for n in params[0]},
        "state": {
            n: {f: np.stack([s[n][f] for s in states]) for f in states[-1][n]} for n in states[-1]
        },
    }


def freeze(module: torch.nn.Module, prefixes) -> list[str]:
    """``requires_grad = False`` on every parameter whose name is or starts with ``prefix.``;
    returns the frozen names."""
    prefixes = (prefixes,) if isinstance(prefixes, str) else tuple(prefixes)
    frozen = []
    for name, param in module.named_parameters():
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            param.requires_grad_(False)
            frozen.append(name)
    if not frozen:
        raise ValueError(f"`prefixes` (={prefixes}) match no parameter of the module.")
    return frozen


def count_trainable(module: torch.nn.Module) -> int:
    """``sum(p.numel() for p in module.parameters() if p.requires_grad)``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def late_freeze_drift(
    module: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable,
    prefixes,
    *,
    warmup_steps: int,
    frozen_steps: int,
    set_to_none: bool,
    lr: float = 1e-2,
    weight_decay: float = 0.1,
) -> dict:
    """The freezing trap: AdamW built over all parameters, the layer frozen afterwards.

    ``warmup_steps`` ordinary steps, then ``freeze(module, prefixes)`` and
    ``frozen_steps`` more. With ``zero_grad(set_to_none=False)`` the frozen parameters
    keep a zero ``.grad``, so AdamW still decays them and their ``exp_avg`` still moves
    them; with ``set_to_none=True`` their ``.grad`` is None and ``step()`` skips them.

    Returns:
      ``{name: max |change|}`` of each frozen parameter over the frozen steps.
    """
    optimizer = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=weight_decay)

    def step():
        optimizer.zero_grad(set_to_none=set_to_none)
        loss_fn(module(x), y).backward()
        optimizer.step()

    for _ in range(warmup_steps):
        step()
    names = freeze(module, prefixes)
    before = {n: p.detach().clone() for n, p in module.named_parameters() if n in names}
    for _ in range(frozen_steps):
        step()
    return {
        n: (p.detach() - before[n]).abs().max().item()
        for n, p in module.named_parameters()
        if n in names
    }
