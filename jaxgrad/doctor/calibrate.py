"""torch's float64 run beside its float32 run: the float64 answer the doctor judges by.

A float32 torch module and a correct float32 port both approximate the same exact
answer, each with its own rounding; where torch's own float32 result already misses
the float32 tier against that answer, the tier alone would blame the port for
torch's rounding. So, when the torch module is float32, the doctor runs a float64
copy of it on the same values — ``copy.deepcopy(module).double()``, the float32
inputs cast up, the same train/eval mode, the same forward hooks — and judges every
float32 layer output and the final output with ``jaxgrad.parity.compare(...,
reference64=...)``: a leaf outside the tier passes when the port is within the tier
of the float64 answer, or within ``CALIBRATION_MULTIPLE`` times torch float32's own
distance from it (``docs/parity.md``). A real float32 mistake (an eps of 1e-6 where
torch has 1e-5) moves the port away from the float64 answer, not only from torch's
rounding of it, and still fails.

Two float64 answers are kept:

- *end to end* (``capture64``): the float64 module on the model's input; each
  module's float64 output is what the float32 chain up to it approximates (the
  port's end-to-end values, and a traced port's values, are judged against it);
- *per layer* (``replay64``): each float64 submodule on torch float32's own recorded
  input to it, cast up; the answer the input-injected comparison (one float32 layer on
  torch's float32 input) approximates, free of the rounding carried in from earlier
  layers.

Torch rule: torch is never imported. The module is copied with ``copy.deepcopy`` and
made float64 with its own ``.double()``; arrays become tensors through
``capture.torch_tensor`` (the caller's torch).
"""

from __future__ import annotations

import copy

import numpy as np

from jaxgrad.doctor import capture as cap
from jaxgrad.doctor.calls import numpy_copy


def is_float32(tree) -> bool:
    """Whether the first floating array of ``tree`` (torch's output) is float32."""
    if isinstance(tree, (tuple, list)):
        return any(is_float32(v) for v in tree[:1]) if tree else False
    if isinstance(tree, dict):
        return is_float32(list(tree.values()))
    return tree is not None and np.asarray(tree).dtype == np.float32


def up(value):
    """``value`` (numpy arrays in tuples, lists, dicts) with its float32 arrays cast to
    float64; other arrays and leaves as they are."""
    if isinstance(value, (tuple, list)):
        return type(value)(up(v) for v in value)
    if isinstance(value, dict):
        return {k: up(v) for k, v in value.items()}
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        return value.astype(np.float64)
    return value


def _tensors(value):
    if isinstance(value, (tuple, list)):
        return type(value)(_tensors(v) for v in value)
    if isinstance(value, dict):
        return {k: _tensors(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return cap.torch_tensor(value)
    return value


def twin64(module):
    """A float64 copy of ``module`` (the original is left as it is), or None when it
    cannot be copied or made float64 (then the doctor judges by the tier alone)."""
    try:
        return copy.deepcopy(module).double()
    except Exception:  # noqa: BLE001 - an uncopyable module: no calibration, not an error
        return None


def capture64(module64, inputs: tuple, kwargs: dict, *, train: bool):
    """The end-to-end float64 answer: ``(output, {(path, index): Call})`` of the float64
    copy on the float32 inputs cast up (torch's hooks, as ``capture.capture_torch``)."""
    out, calls = cap.capture_torch(
        module64,
        tuple(up(numpy_copy(x)) for x in inputs),
        {k: up(numpy_copy(v)) for k, v in kwargs.items()},
        train=train,
    )
    return out, {(c.path, c.index): c for c in calls}


def replay64(module64, calls, *, train: bool) -> dict:
    """The per-layer float64 answers: ``{(path, index): (output, buffers)}``, each
    float64 submodule run on torch float32's recorded inputs of that call, cast up, in
    the order torch ran the calls (a training-mode BatchNorm's statistics move as they
    did in float32). Only for the ``calls`` given (the port's leaf layers); a call whose
    replay raises is left out (judged by the tier)."""
    modules = dict(module64.named_modules())
    saved = [(b, b.detach().clone()) for _, b in module64.named_buffers()]
    was_training = module64.training
    module64.train(train)
    found = {}
    try:
        for call in calls:
            sub = modules.get(call.path)
            if sub is None:
                continue
            try:
                out = sub(*_tensors(up(call.args)), **_tensors(up(call.kwargs)))
            except Exception:  # noqa: BLE001 - e.g. an input torch only accepts as float32
                continue
            buffers = {n: numpy_copy(b) for n, b in sub.named_buffers(recurse=False)}
            found[(call.path, call.index)] = (numpy_copy(out), buffers)
    finally:
        module64.train(was_training)
        for buffer, value in saved:
            buffer.detach().copy_(value)
    return found
