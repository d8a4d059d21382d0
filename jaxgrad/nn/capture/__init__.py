"""``from_torch``: a torch module in, its jaxgrad twin out (the face of capture).

Capture reads a torch model into jaxgrad in one direction, each module importing only
those below it:

| level | modules | holds |
|---|---|---|
| the face | ``jaxgrad.nn.capture`` (here) | ``from_torch``: which front end, frozen parameters, the module left as it was |
| front ends | ``layers``; ``fx``; ``export`` (with ``export_autograd``); ``writes`` | a torch module to a jaxgrad layer: by class, by ``torch.fx`` trace, by ``torch.export`` program; the state torch's own forward writes, each key returned as new state or refused |
| the program | ``program`` (``ExportedModule``, the interpreter), ``regions``, ``shapes``, ``artifact`` | the captured program, its sizes, its ``jax.export`` file |
| shared types | ``refs`` (``Ref``, ``SliceArg``, ``DictArg``) | a node's arguments, read by every front end and the program |
| op tables | ``fx_ops`` (torch.fx callables), ``jaxgrad.nn.aten`` (ATen overloads) | one JAX function per torch op |
| layers | ``jaxgrad.nn``'s layers and ``functional`` | what the ops and converters build |

torch is imported only lazily, inside ``fx``'s, ``export``'s and ``writes``' functions, when a torch
module is handed over: ``import jaxgrad`` never imports it. ``parity_tests/test_graph``
holds this order (no module imports one above it; no import cycle in ``jaxgrad``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from jaxgrad.nn.capture import export, fx, writes
from jaxgrad.nn.capture.layers import SUPPORTED, _is_torch_module, convert_layer, torch_class_name
from jaxgrad.nn.container import Frozen


def _convert(module, path: str):
    """A torch layer through the converters (a ``Sequential``'s children through this
    again), anything else traced with ``torch.fx``."""
    if torch_class_name(module) is not None or _is_torch_module(type(module)):
        return convert_layer(module, path, convert_child=_convert)
    return fx.trace(module, path)  # custom forward code (fx imports torch.fx lazily)


def from_torch(
    module: Any,
    example: Any = None,
    *,
    example_kwargs: dict | None = None,
    with_buffers: bool = False,
    capture: str = "auto",
    dynamic_shapes: str | dict | tuple | list | None = "auto",
    batch_one: bool = False,
) -> tuple:
    """Build the jaxgrad twin of ``module`` and copy its weights.

    Two front ends (see "Capture" in the docs):

    - *layers*: a module made of supported layers (``SUPPORTED``), nested
      ``Sequential`` included, or with a custom ``forward`` that
      ``torch.fx.symbolic_trace`` can trace (residual blocks, ResNets): its calls
      become jaxgrad layers and ops (``jaxgrad.nn.capture.fx``); ``jaxgrad.flax`` maps such a
      model to stock nnx layers. Needs no example.
    - *export*: anything else (Hugging Face transformers, vision transformers, a
      forward with shape assertions, ``torch.finfo``, tied weights, writes through
      views) is captured with ``torch.export`` on ``example`` and decomposed to core
      ATen ops (``jaxgrad.nn.capture.export``). Every size torch's program does not fix stays
      symbolic: one capture runs at every batch size and sequence length the program
      accepts, and a shape it cannot take is refused by name before JAX runs.

    Either way ``apply(train=...)`` runs torch's training-mode or evaluation-mode
    forward, whichever is asked, and random ops take the explicit ``key``.

    Args:
      module: a torch ``nn.Module``.
      example: example positional input(s) of the forward: a tensor or a tuple of
        them (required by the export front end).
      example_kwargs: example keyword inputs (``{"attention_mask": mask}``).
      with_buffers: also return the module's buffers (BatchNorm running statistics),
        validated by ``model.load_buffers``.
      capture: ``"auto"`` (the layer path when the module converts and traces,
        else export), ``"layers"`` or ``"export"``.
      dynamic_shapes: for the export front end: ``"auto"`` (every size of every tensor
        input dynamic, ``torch.export.Dim.AUTO``; torch fixes what the model's code
        needs, and a model torch cannot capture so is captured at the example's
        shapes, ``model.shapes.static`` saying why), ``"batch"`` (only each tensor
        input's first size dynamic: every batch size from one capture, the other sizes
        the example's; much cheaper to capture where torch reasons slowly about image
        sides, e.g. Swin's window reshapes), ``None`` (the example's shapes), or a
        ``dynamic_shapes`` spec as ``torch.export.export`` takes it. A capture with
        dynamic sizes still running after a minute says so on stderr.
      batch_one: export front end: also capture the program at batch size 1. torch
        captures sizes 0 and 1 apart from the others (broadcasting treats them so),
        so a capture at batch 2 or more runs batches from 2 up; with this, ``apply``
        runs batch 1 too (one more capture).

    Returns:
      ``(model, params)``, or ``(model, params, buffers)`` with ``with_buffers=True``:
      the jaxgrad model and its params (and buffers), keyed like
      ``module.state_dict()``, with the module's dtype.

    Raises:
      ValueError: naming the first unsupported module's class and path, or the
        unmapped op, its node and module path; with ``capture="auto"`` and no
        ``example``, the layer path's reason and that an example would let export try.
    """
    if not any(
        cls.__name__ == "Module" and cls.__module__ == "torch.nn.modules.module"
        for cls in type(module).__mro__
    ):  # duck typing: torch is not imported for this
        cls, given = type(module), repr(module)
        kind = (
            cls.__qualname__
            if cls.__module__ == "builtins"
            else (f"{cls.__module__}.{cls.__qualname__}")
        )
        given = given if len(given) <= 80 else given[:77] + "..."
        raise TypeError(
            f"from_torch expects a torch `nn.Module`, got a `{kind}` ({given})"
            + (
                "; wrap a function in a module whose `forward` calls it."
                if callable(module)
                else "."
            )
        )
    if capture not in ("auto", "layers", "export"):
        raise ValueError(f"`capture` must be 'auto', 'layers' or 'export', got {capture!r}.")
    if isinstance(dynamic_shapes, str) and dynamic_shapes not in ("auto", "batch"):
        raise ValueError(
            f"`dynamic_shapes` must be 'auto', 'batch', None or a torch.export "
            f"dynamic_shapes spec, got {dynamic_shapes!r}."
        )
    if example_kwargs is not None and not isinstance(example_kwargs, dict):
        raise TypeError(
            f"`example_kwargs` must be a dict of keyword inputs, got "
            f"{type(example_kwargs).__name__}."
        )
    args = (
        None
        if example is None
        else (tuple(example) if isinstance(example, (tuple, list)) else (example,))
    )
    # every parameter and buffer, kept once: both front ends run the forward's Python
    # (torch.fx on proxies, a non-strict export on fake tensors), from_torch runs torch's
    # own forward, and a forward that writes a module tensor directly (timm's
    # BatchNormAct2d adds 1 to its real num_batches_tracked while fx traces it) would
    # change the user's module
    untouched = writes.snapshot(module)
    try:
        model = _front_end(
            module, args, example_kwargs, capture, (dynamic_shapes, batch_one), untouched
        )
    finally:
        writes.restore(untouched)  # the user's module exactly as it was
    state = module.state_dict()
    params = model.load_state_dict(state)
    if with_buffers:
        return model, params, model.load_buffers(state)
    return model, params


def _front_end(module, args, example_kwargs, capture, shapes=("auto", False), untouched=None):
    """The model from the front end ``capture`` names (``auto``: layers, then export).

    Parameters with ``requires_grad=False`` (a frozen backbone, Whisper's
    ``embed_positions``) are read through a stop-gradient on either front end (the
    layer path's model holds their names: ``GraphModule.frozen``, or ``Frozen``)."""
    frozen = tuple(name for name, p in module.named_parameters() if not p.requires_grad)
    example = args is not None or example_kwargs is not None
    untouched = writes.snapshot(module) if untouched is None else untouched
    # what torch's own forward writes of the module's state, in each mode (run once)
    torch_writes = functools.cache(
        lambda: writes.torch_writes(module, args or (), example_kwargs or {}, untouched)
    )
    class_name = type(module).__name__
    if capture == "export":
        model = _capture_export(module, args, example_kwargs, frozen, shapes)
        writes.refuse_unreproduced(model, torch_writes(), class_name, "The export front end")
    else:
        try:
            model = _layer_path(module, frozen, class_name, untouched)
            if example:
                writes.refuse_unreproduced(model, torch_writes(), class_name, "The layer path")
        except ValueError as layers_error:
            if capture == "layers":
                raise
            if args is None and example_kwargs is None:
                raise ValueError(
                    f"{layers_error} (from_torch tries torch.export next when it has an "
                    "example input: `from_torch(module, example=(x,))`.)"
                ) from layers_error
            try:
                model = _capture_export(module, args, example_kwargs, frozen, shapes)
                writes.refuse_unreproduced(
                    model, torch_writes(), class_name, "The export front end"
                )
            except ValueError as export_error:
                raise ValueError(
                    f"{export_error}\n(The layer path failed first: {layers_error})"
                ) from export_error
    return model


def _layer_path(module, frozen, class_name, entries):
    """The layer path's model; refused when tracing wrote a module tensor for real
    (``torch.fx`` runs such a write on the real tensor, outside the graph: a
    ``.data =`` update of parameters read through ``parameters()``, ``+=`` on a
    buffer). ``entries``: ``writes.snapshot(module)``, put back afterwards."""
    try:
        model = _convert(module, "")
        traced = writes.changes(entries)
    finally:
        writes.restore(entries)
    writes.refuse_unreproduced(model, {True: traced}, class_name, "The layer path (torch.fx)")
    return model if not frozen else _with_frozen(model, frozen)


def _with_frozen(model, frozen):
    """``model`` reading the parameters ``frozen`` through a stop-gradient: a traced
    ``GraphModule`` holds the names, any other model is wrapped (``Frozen``)."""
    if type(model).__name__ == "GraphModule":
        return dataclasses.replace(model, frozen=frozen)
    return Frozen(model, frozen)


def _capture_export(module, args, kwargs, frozen=(), shapes=("auto", False)):
    if args is None and not kwargs:
        raise ValueError(
            f"from_torch: capturing {type(module).__name__} with torch.export needs an "
            "example input: `from_torch(module, example=(x,))`."
        )
    return export.capture(
        module,
        args or (),
        kwargs or {},
        frozen=frozen,
        dynamic_shapes=shapes[0],
        batch_one=shapes[1],
    )


__all__ = ["from_torch", "SUPPORTED"]
