"""Capturing every layer's inputs and outputs, on the torch side and on the port's.

The torch side is read by duck typing, as ``jaxgrad.nn.from_torch`` reads modules:
``named_modules()``, ``register_forward_pre_hook`` / ``register_forward_hook``,
``named_buffers()`` and tensors' ``detach().cpu().numpy()``. ``jaxgrad`` never imports
torch: where an array must become a tensor, the ``torch`` module the caller already
loaded (``sys.modules["torch"]``) is used.

Each call of each module is recorded as a ``Call`` (``jaxgrad.doctor.calls``: its
path, call index, inputs, output and buffers), copied as numpy arrays at hook time
(torch's in-place ops overwrite them later).

The port side wraps each leaf layer of a jaxgrad model in a ``Tap``: a layer that
records its inputs and outputs (input injection runs each leaf alone, on the torch
layer's recorded inputs; see ``jaxgrad.doctor.diagnose``); a captured program's leaf
torch modules are its regions (``jaxgrad.doctor.regions``).
"""

from __future__ import annotations

import dataclasses
import sys
from collections import OrderedDict
from typing import Any

import numpy as np

from jaxgrad.doctor import regions
from jaxgrad.doctor.calls import Call, numpy_copy, numpy_tree
from jaxgrad.nn.module import Module


def torch_tensor(array, like=None):
    """``array`` as a torch tensor (torch is whatever the caller already imported)."""
    torch = sys.modules.get("torch")
    if torch is None:  # pragma: no cover - a torch module implies torch is loaded
        raise TypeError("a torch tensor is needed but torch is not imported.")
    if isinstance(array, torch.Tensor):
        return array
    return torch.from_numpy(np.array(array))


def capture_torch(module, inputs: tuple, kwargs: dict | None = None, *, train: bool = False):
    """Run ``module(*inputs, **kwargs)`` and record every submodule's calls.

    Returns:
      ``(output, calls)``: the model's output as numpy, and ``[Call, ...]`` in the
      order the calls *finished* (post-order: a child before its parent).

    Raises:
      ValueError: the module rejects the input (torch's message and the input's
        shapes and dtypes).
    """
    calls, pending, handles = [], {}, []
    counts: dict[str, int] = {}
    for path, sub in module.named_modules():  # "" is the module itself

        def pre(mod, args, kw, path=path):
            pending.setdefault(path, []).append((numpy_copy(args), numpy_copy(kw)))

        def post(mod, args, kw, out, path=path):
            a, k = pending[path].pop()
            index = counts.get(path, 0)
            counts[path] = index + 1
            bufs = {n: numpy_copy(b) for n, b in mod.named_buffers(recurse=False)}
            calls.append(Call(path, index, type(mod).__name__, a, k, numpy_copy(out), bufs))

        handles.append(sub.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(sub.register_forward_hook(post, with_kwargs=True))
    was_training = module.training
    # training mode updates BatchNorm statistics in place: the doctor leaves the
    # reference as it found it
    saved = [(b, b.detach().clone()) for _, b in module.named_buffers()]
    module.train(train)
    tensors = tuple(torch_tensor(x) for x in inputs)
    try:
        output = module(*tensors, **(kwargs or {}))
    except Exception as error:  # torch raises RuntimeError / ValueError / TypeError
        described = ", ".join(
            f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}" for t in tensors
        )
        raise ValueError(
            f"the torch module {type(module).__name__} rejects the example input "
            f"({described}): {type(error).__name__}: {error}"
        ) from error
    finally:
        module.train(was_training)
        for buffer, value in saved:
            buffer.detach().copy_(value)
        for handle in handles:
            handle.remove()
    return numpy_copy(output), calls


# ------------------------------------------------------------------ port side
@dataclasses.dataclass(frozen=True)
class Tap(Module):
    """A leaf layer that reports its calls to ``recorder`` (a ``Recorder``)."""

    inner: Module
    path: str
    recorder: Any

    def init(self, key):
        return self.inner.init(key)

    def init_buffers(self):
        return self.inner.init_buffers()

    def state_dict_keys(self):
        return self.inner.state_dict_keys()

    def forward_with_state(self, params, *inputs, buffers, train, key, path, **options):
        return self.recorder.call(self, params, inputs, options, buffers, train, key, path)


class Recorder:
    """Records the port's leaf calls (inputs, options, output, updated buffers)."""

    def __init__(self):
        self.calls: list[Call] = []
        self.started: list[tuple[str, int]] = []  # (path, index) as calls begin
        self.counts: dict[str, int] = {}

    def call(self, tap, params, inputs, options, buffers, train, key, path):
        index = self.counts.get(tap.path, 0)
        self.counts[tap.path] = index + 1
        self.started.append((tap.path, index))
        out, new = tap.inner.forward_with_state(
            params, *inputs, buffers=buffers, train=train, key=key, path=path, **options
        )
        self.calls.append(
            Call(
                tap.path,
                index,
                type(tap.inner).__name__,
                numpy_tree(inputs),
                dict(options),
                numpy_tree(out),
                {k: np.asarray(v) for k, v in new.items()},
            )
        )
        return out, new


def leaves(model: Module, path: str = ""):
    """``[(path, layer), ...]`` of the model's leaf layers (containers walked)."""
    from jaxgrad.nn.capture.fx import GraphModule
    from jaxgrad.nn.capture.program import ExportedModule
    from jaxgrad.nn.container import Sequential

    if isinstance(model, Sequential):
        out = []
        for name, layer in zip(model.names, model.layers):
            out += leaves(layer, f"{path}.{name}" if path else name)
        return out
    if isinstance(model, ExportedModule):  # leaf torch modules, by their torch path
        return [(f"{path}.{p}" if path else p, layer) for p, layer in regions.leaves(model)]
    if isinstance(model, GraphModule):
        out = []
        for name, layer in model.layers:
            out += leaves(layer, f"{path}.{name}" if path else name)
        return out
    return [(path, model)]


def tapped(model: Module, recorder: Recorder, path: str = "") -> Module:
    """``model`` with every leaf wrapped in a ``Tap``."""
    from jaxgrad.nn.capture.fx import GraphModule
    from jaxgrad.nn.capture.program import ExportedModule
    from jaxgrad.nn.container import Sequential

    if isinstance(model, ExportedModule):
        return regions.TappedProgram(model, recorder)
    if isinstance(model, Sequential):
        return Sequential(
            OrderedDict(
                (name, tapped(layer, recorder, f"{path}.{name}" if path else name))
                for name, layer in zip(model.names, model.layers)
            )
        )
    if isinstance(model, GraphModule):
        return dataclasses.replace(
            model,
            layers=tuple(
                (name, tapped(layer, recorder, f"{path}.{name}" if path else name))
                for name, layer in model.layers
            ),
        )
    return Tap(model, path, recorder)
