"""Recording the random numbers torch draws during a forward.

torch's generator and ``jax.random`` never agree, so a training step with dropout
active can only be compared across the frameworks on the *same* draws. ``recording()``
records, in order, every random tensor torch produces while it is active (the
Bernoulli masks behind ``F.dropout`` and stochastic depth, ``torch.rand`` and
``torch.randn`` samples); a jaxgrad model captured from the same module runs its random
ops in the same order and takes these draws instead of its own (``random_draws=``).
``replaying(draws)`` hands them back to torch itself: the same step run again (in
another layout, or with the batch reversed and the draws with it) on the same numbers.

The recording sits below autograd (a ``TorchDispatchMode``), where ``F.dropout`` on
the CPU is ``empty_like(x).bernoulli_(1 - p)``, then a scale and a product: what is
recorded is the 0/1 keep mask, before the scale.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_aten = torch.ops.aten
# ops whose result (or, in place, whose written tensor) is a fresh random draw
RANDOM_OPS = {
    _aten.bernoulli_.float,
    _aten.bernoulli_.Tensor,
    _aten.bernoulli.default,
    _aten.bernoulli.p,
    _aten.uniform_.default,
    _aten.normal_.default,
    _aten.rand.default,
    _aten.randn.default,
    _aten.rand_like.default,
    _aten.randn_like.default,
    _aten.native_dropout.default,
    _aten.randint.low,
    _aten.randint.default,
    _aten.randperm.default,
    _aten.exponential_.default,
}


class Draw(NamedTuple):
    op: str  # the ATen overload torch ran, e.g. "aten.bernoulli_.float"
    values: torch.Tensor  # the draw (for native_dropout, its keep mask)


class _Recorder(TorchDispatchMode):
    def __init__(self, draws: list):
        super().__init__()
        self.draws = draws

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in RANDOM_OPS:
            values = out[1] if func is _aten.native_dropout.default else out
            self.draws.append(Draw(str(func), values.detach().clone()))
        return out


@contextlib.contextmanager
def recording():
    """``with recording() as draws: module(x)``: ``draws`` lists every random draw, in
    order. SDPA runs its math kernel meanwhile (its fused kernels draw dropout masks
    internally, out of reach)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    draws: list[Draw] = []
    with sdpa_kernel(SDPBackend.MATH), _Recorder(draws):
        yield draws


class _Replayer(TorchDispatchMode):
    def __init__(self, draws: list):
        super().__init__()
        self.draws = list(draws)
        self.used = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func not in RANDOM_OPS:
            return func(*args, **(kwargs or {}))
        if func is _aten.native_dropout.default:
            raise ValueError(
                "replaying: native_dropout's draw is its keep mask, not replayed; only "
                "draws made as separate random ops are"
            )
        if self.used == len(self.draws):
            raise ValueError(f"replaying: torch drew more than the {len(self.draws)} draws given")
        draw = self.draws[self.used]
        self.used += 1
        if draw.op != str(func):
            raise ValueError(
                f"replaying: draw {self.used} was {draw.op}, torch now draws {func} (the "
                "forward draws in another order than the one recorded)"
            )
        if func._schema.name.endswith("_"):  # in place: the tensor it fills
            target = args[0]
            if target.shape != draw.values.shape:
                raise ValueError(
                    f"replaying: draw {self.used} has shape {tuple(draw.values.shape)}, "
                    f"torch now fills {tuple(target.shape)}"
                )
            return target.copy_(draw.values)
        return draw.values.clone()


@contextlib.contextmanager
def replaying(draws):
    """``with replaying(draws): module(x)``: torch's random ops return ``draws`` (as
    ``recording`` lists them), in order, instead of drawing: the same step again on the
    same random numbers, whatever torch's generator holds (a dropout mask reversed along
    the batch follows a reversed batch). A draw of another op or shape than torch asks
    for, or too few draws, is a ``ValueError``; SDPA runs its math kernel, as when
    recording."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    replayer = _Replayer(draws)
    with sdpa_kernel(SDPBackend.MATH), replayer:
        yield replayer


__all__ = ["Draw", "RANDOM_OPS", "recording", "replaying"]
