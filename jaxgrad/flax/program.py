"""A program captured with ``torch.export`` as an nnx module: ``TorchProgram``.

``from_torch`` captures a model its layer path cannot trace as an ``ExportedModule``
(core ATen ops, ``jaxgrad.nn.capture.program``). Its nnx twin keeps flax's idiom where a
layer has one and torch's program everywhere else:

- every call of a torch layer stock flax expresses (``Linear`` → ``nnx.Linear``,
  ``Embedding`` → ``nnx.Embed``, ``LayerNorm`` → ``nnx.LayerNorm``, ``Conv2d`` →
  ``nnx.Conv``…, built by ``to_nnx``'s own converters, so with torch's
  hyperparameters) runs as that layer, held in ``layers`` (an ``nnx.Dict`` keyed by
  torch module path), its parameters in flax's layout;
- the rest of the program — the model's own code between those layers, attention
  arithmetic, masks, residual adds — runs as torch's ATen ops through the table,
  its parameters and buffers under their torch names in torch's layout.

A layer's calls are its *region* of the program (``jaxgrad.nn.capture.regions``). A region
becomes the stock layer only when the swap is exact by construction: the layer is a
torch class jaxgrad knows with torch's own ``forward`` and no buffers, it is called
once, its region reads exactly its own parameters (none of them tied to another
module: GPT-2's tied ``wte``/``lm_head`` stay in the program) and one input, has one
output, and the stock layer gives torch's recorded shape and dtype for it. Anything
else stays in the program; ``stock_layers`` / ``program_layers`` say which is which.
Layers that work channels-last in flax (convolutions) are given channels-last input
and hand back torch's layout, so the program around them is untouched.

``deterministic`` is nnx's mode switch (``module.eval()`` sets it): ``False`` runs
torch's training-mode program, drawing random ops from ``rngs``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jaxgrad.nn.capture.program import TensorMeta
from jaxgrad.nn.capture.regions import readers, regions, state_read
from jaxgrad.nn.capture.shapes import concrete, is_symbolic
from jaxgrad.nn.module import child_path


def _input_meta(model, program, name):
    """torch's recorded shape and dtype of the value ``name`` (a node or an input)."""
    for node in program.nodes:
        if node.name == name:
            return node.meta
    index = {
        placeholder: target for placeholder, kind, target in program.inputs if kind == "input"
    }.get(name)
    return dict(model.input_meta).get(index) if index is not None else None


def _fits(module, channels_last: bool, meta_in, meta_out, example=None) -> bool:
    """Whether the stock layer maps torch's recorded input to its recorded output, at
    the example's sizes (``example``: ``{symbol: size}`` of a dynamic capture)."""
    if not isinstance(meta_in, TensorMeta) or not isinstance(meta_out, TensorMeta):
        return False
    meta_in, meta_out = (
        TensorMeta(concrete(m.shape, example or {}), m.dtype) for m in (meta_in, meta_out)
    )
    if is_symbolic(meta_in.shape) or is_symbolic(meta_out.shape):
        return False

    def call(x):
        if channels_last:
            return jnp.moveaxis(module(jnp.moveaxis(x, 1, -1)), -1, 1)
        return module(x)

    try:
        out = jax.eval_shape(
            call, jax.ShapeDtypeStruct(meta_in.shape, jax.dtypes.canonicalize_dtype(meta_in.dtype))
        )
    except Exception:  # noqa: BLE001 - a layer that cannot take this input stays in the program
        return False
    return tuple(out.shape) == tuple(meta_out.shape) and (
        jnp.dtype(out.dtype) == jnp.dtype(jax.dtypes.canonicalize_dtype(meta_out.dtype))
    )


def swappable(model, program) -> dict:
    """``{module path: Region}`` of ``program``'s regions that a stock layer may run
    (the conditions in the module docstring, shapes aside)."""
    known = dict(model.layers)
    found = regions(program)
    calls: dict[str, int] = {}
    for region in found:
        calls[region.path] = calls.get(region.path, 0) + 1
    read_by = readers(program)
    chosen = {}
    for region in found:
        layer = known.get(region.path)
        if layer is None or calls[region.path] != 1 or len(region.outputs) != 1:
            continue
        if layer.buffer_shapes():
            continue
        state = state_read(region, program)
        expected = {child_path(region.path, k) for k in layer.param_shapes()}
        if set(state.values()) != expected:
            continue  # reads a buffer or constant, or a tied (aliased) parameter
        inside = {node.name for node in region.nodes}
        if any(read_by.get(placeholder, set()) - inside for placeholder in state):
            continue  # its parameter is read elsewhere too
        chosen[region.path] = region
    return chosen


def build(model, params: dict, buffers: dict, make_layer, seed: int = 0):
    """The ``TorchProgram`` of ``model`` (an ``ExportedModule``) and its state.

    ``make_layer(layer, layer_params, path) -> (nnx module, need)`` builds a jaxgrad
    layer's stock twin (``to_nnx``'s converters), ``need`` being ``"cl"`` for a layer
    that works channels-last, or returns None where it has none."""
    programs = {True: model.train_program, False: model.eval_program}
    candidates = {train: swappable(model, program) for train, program in programs.items()}
    paths = [p for p in candidates[True] if p in candidates[False]]
    known = dict(model.layers)
    layers, needs, plans = {}, {}, {True: [], False: []}
    for path in paths:
        layer = known[path]
        own = {k: params[child_path(path, k)] for k in layer.param_shapes()}
        made = make_layer(layer, own, path)
        if made is None:
            continue
        module, need = made
        channels_last = need == "cl"
        if not all(
            _fits(
                module,
                channels_last,
                _input_meta(model, programs[train], candidates[train][path].input),
                next(
                    n.meta
                    for n in candidates[train][path].nodes
                    if n.name == candidates[train][path].outputs[0]
                ),
                dict(model.shapes.example),
            )
            for train in programs
        ):
            continue
        layers[path], needs[path] = module, channels_last
        for train in programs:
            plans[train].append(candidates[train][path])
    owned = {child_path(path, k) for path in layers for k in known[path].param_shapes()}
    rest = {k: v for k, v in params.items() if k not in owned}
    return TorchProgram(
        model, layers, needs, {t: tuple(p) for t, p in plans.items()}, rest, buffers, seed
    )


class TorchProgram(nnx.Module):
    """A captured torch program as an nnx module (see the module docstring).

    Attributes:
      model: the ``ExportedModule`` (static: its two programs, names, constants).
      layers: ``nnx.Dict`` of stock nnx layers, keyed by torch module path.
      params, buffers: the program's other parameters (``nnx.Param``) and buffers
        (``nnx.BatchStat``), torch names and layouts.
    """

    def __init__(
        self,
        model,
        layers: dict,
        channels_last: dict,
        plans: dict,
        params: dict,
        buffers: dict,
        seed: int = 0,
    ):
        self.model = model
        self.layers = nnx.Dict(layers)
        self.channels_last = channels_last  # module path -> takes channels-last input
        self.plans = plans  # train flag -> the regions run by ``layers``
        self.params = nnx.Dict({k: nnx.Param(jnp.asarray(v)) for k, v in params.items()})
        self.buffers = nnx.Dict({k: nnx.BatchStat(jnp.asarray(v)) for k, v in buffers.items()})
        self.deterministic = False
        self.rngs = nnx.Rngs(dropout=seed)

    @property
    def stock_layers(self) -> dict:
        """``{torch module path: nnx class name}`` of the layers run as stock nnx layers."""
        return {path: type(module).__name__ for path, module in self.layers.items()}

    def program_layers(self) -> list:
        """Torch module paths of the known layers left in the ATen program."""
        return [path for path, _ in self.model.layers if path not in self.layers]

    def _layer_fn(self, path, capture):
        module, channels_last = self.layers[path], self.channels_last[path]

        def call(x):
            if channels_last:
                out = jnp.moveaxis(module(jnp.moveaxis(x, 1, -1)), -1, 1)
            else:
                out = module(x)
            if capture is not None:
                capture[path] = out
            return out

        return call

    def __call__(self, *inputs, capture: dict | None = None, **kwargs):
        """torch's forward; ``capture``, when a dict, receives each stock layer's
        output (torch's layout) under its module path."""
        from jaxgrad.nn.capture.program import run, unflatten

        train = not self.deterministic
        plan = self.plans[train]
        unread = {
            child_path(region.path, k)
            for region in plan
            for k in dict(self.model.layers)[region.path].param_shapes()
        }
        params = {k: v[...] for k, v in self.params.items()}
        buffers = {k: v[...] for k, v in self.buffers.items()}
        program, env = self.model.bind(params, inputs, kwargs, buffers, train, unread=unread)
        key = self.rngs.dropout() if train else None
        outputs, updates = run(
            program,
            env,
            key=key,
            path="",
            random_draws=None,
            class_name=self.model.class_name,
            regions=tuple((region, self._layer_fn(region.path, capture)) for region in plan),
        )
        for name, value in updates.items():
            self.buffers[name][...] = value
        return unflatten(program.out_tree, iter(outputs))


__all__ = ["TorchProgram", "build", "swappable"]
