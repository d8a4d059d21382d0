"""A captured torch program as a jaxgrad layer: ``ExportedModule``.

``from_torch`` captures a model ``torch.fx`` cannot trace with ``torch.export``
(``jaxgrad.nn.capture.export``); this module holds the result and runs it, with JAX only:

- two ``Program``\\ s, torch's training-mode and evaluation-mode graphs of core ATen
  ops (the same object when torch's two modes compute the same thing);
  ``apply(train=True)`` runs the first, ``apply(train=False)`` the second: the mode
  the module was in when converted is never baked in;
- params are the module's ``named_parameters()``, buffers its persistent
  ``named_buffers()`` (together its ``state_dict()``); tied weights (GPT-2's
  ``lm_head.weight`` is ``transformer.wte.weight``) are one parameter, as in torch,
  and their second name is an alias that ``state_dict`` writes back;
- non-persistent buffers (BERT's ``position_ids``, a rotary ``inv_freq``, a
  registered causal mask) and tensors the forward creates from Python values are
  *constants* of the model: neither trained nor saved, as in torch;
- buffers the training program writes (BatchNorm statistics) come back as the new
  buffers; the evaluation program returns them unchanged;
- random ops (dropout, stochastic depth, ``torch.rand``) draw from the ``key`` of
  ``apply``, folded with the op's module path, or take ``random_draws`` given by
  the caller;
- every node carries the torch module path it ran in (``nn_module_stack``), for
  messages and the doctor, and the shape and dtype torch recorded for its result,
  which the interpreter checks as it traces.

The program is specialised to the example's shapes (``torch.export`` without
dynamic dimensions): inputs of other shapes are refused by name.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad._arrays import to_numpy
from jaxgrad.nn import aten
from jaxgrad.nn.capture.refs import Ref
from jaxgrad.nn.capture.shapes import (
    ShapeSpec,
    SymDim,
    Unbound,
    bind,
    concrete,
    evaluate,
    is_symbolic,
)
from jaxgrad.nn.module import Module, child_path, layer_key


@dataclasses.dataclass(frozen=True)
class TensorMeta:
    """The shape and dtype (numpy name) torch recorded for a tensor."""

    shape: tuple
    dtype: str

    def describe(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


@dataclasses.dataclass(frozen=True)
class OpNode:
    """One ATen call of a captured program.

    Attributes:
      name: the node's name in torch's graph (unique in its program).
      target: the table's name, ``"aten.add.Tensor"``, or ``"getitem"``.
      args, kwargs: the schema's arguments, ``Ref`` for other nodes' values;
        ``kwargs`` is ``((name, value), ...)``.
      path: the torch module path the op ran in (``"encoder.layer.0.attention"``).
      meta: the expected result, a ``TensorMeta``, a tuple of them (``None`` for
        non-tensor entries), or ``None``.
      key_path: for a random op, the path its key is folded with
        (``"features.1.0.stochastic_depth#0"``: module path and the op's index in it).
    """

    name: str
    target: str
    args: tuple
    kwargs: tuple
    path: str
    meta: Any = None
    key_path: str | None = None


@dataclasses.dataclass(frozen=True)
class Program:
    """One mode's graph.

    Attributes:
      inputs: ``((placeholder name, kind, target), ...)``: kind ``"param"``,
        ``"buffer"`` or ``"constant"`` with a state name as target, or ``"input"``
        with the index of the user's flattened input.
      nodes: the ATen calls, in execution order.
      outputs: the flattened user outputs (``Ref`` or constants).
      out_tree: their structure (``tree`` below).
      buffer_updates: ``((buffer name, Ref), ...)``: what the program writes.
      dims: ``((placeholder name, shape), ...)`` for the inputs whose shapes torch
        kept symbolic (``SymDim``): ``run`` binds the symbols from the values given.
    """

    inputs: tuple
    nodes: tuple
    outputs: tuple
    out_tree: tuple
    buffer_updates: tuple = ()
    dims: tuple = ()

    def random_nodes(self) -> list[OpNode]:
        """The nodes that draw random numbers, in execution order."""
        return [n for n in self.nodes if n.key_path is not None]

    def float_dtypes(self) -> dict[str, list[str]]:
        """``{float dtype name: [module paths]}`` of the floating results the program
        computes: a float64 model whose program also computes in float32 (Hugging
        Face's ``LlamaRMSNorm`` casts to float32 inside) carries float32 rounding into
        its float64 outputs, and is compared at the float32 tier."""
        found: dict[str, list[str]] = {}

        def visit(meta, path):
            if isinstance(meta, tuple):
                for item in meta:
                    visit(item, path)
            elif isinstance(meta, TensorMeta) and np.dtype(meta.dtype).kind == "f":
                paths = found.setdefault(meta.dtype, [])
                if path not in paths:
                    paths.append(path)

        for node in self.nodes:
            visit(node.meta, node.path)
        return found


@dataclasses.dataclass(frozen=True, eq=False)
class Constants:
    """Named arrays (numpy) a program reads but never trains or saves; compared by
    identity, so a model stays cheap to hash."""

    arrays: dict

    def __getitem__(self, name):
        return self.arrays[name]


# --------------------------------------------------------------------- trees
# A pytree's structure as hashable tuples: ("leaf",), ("none",), ("tuple", children),
# ("list", children), ("dict", keys, children).
def flatten(value, tree, where: str, leaves: list) -> list:
    """Append ``value``'s leaves to ``leaves`` following ``tree``; a structure that
    does not match is a ``TypeError`` naming ``where``."""
    kind = tree[0]
    if kind == "leaf":
        leaves.append(value)
    elif kind == "none":
        if value is not None:
            raise TypeError(
                f"{where}: expected None (as in the example), got {type(value).__name__}."
            )
    elif kind in ("tuple", "list"):
        children = tree[1]
        if not isinstance(value, (tuple, list)) or len(value) != len(children):
            raise TypeError(
                f"{where}: expected a {kind} of {len(children)} (as in the example), got "
                f"{type(value).__name__}{'' if not isinstance(value, (tuple, list)) else f' of {len(value)}'}."
            )
        for i, (item, child) in enumerate(zip(value, children)):
            flatten(item, child, f"{where}[{i}]", leaves)
    elif kind == "dict":
        keys, children = tree[1], tree[2]
        if not hasattr(value, "keys") or set(value.keys()) != set(keys):
            got = sorted(value.keys()) if hasattr(value, "keys") else type(value).__name__
            raise TypeError(
                f"{where}: expected the keys {list(keys)} (as in the example), got {got}."
            )
        for key, child in zip(keys, children):
            flatten(value[key], child, f"{where}[{key!r}]", leaves)
    else:  # pragma: no cover - trees are built by jaxgrad.nn.capture.export
        raise AssertionError(kind)
    return leaves


def unflatten(tree, leaves):
    """The inverse of ``flatten``: consumes ``leaves`` (an iterator)."""
    kind = tree[0]
    if kind == "leaf":
        return next(leaves)
    if kind == "none":
        return None
    if kind == "tuple":
        return tuple(unflatten(child, leaves) for child in tree[1])
    if kind == "list":
        return [unflatten(child, leaves) for child in tree[1]]
    return {key: unflatten(child, leaves) for key, child in zip(tree[1], tree[2])}


# ------------------------------------------------------------------- running
def _materialize(value, env, dims=None):
    if isinstance(value, Ref):
        return env[value.name]
    if isinstance(value, tuple):
        return tuple(_materialize(v, env, dims) for v in value)
    if isinstance(value, SymDim):
        return evaluate(value.expr, dims or {})
    return value


def _canonical(dtype_name: str) -> np.dtype:
    return np.dtype(jax.dtypes.canonicalize_dtype(np.dtype(dtype_name)))


def _check_meta(node: OpNode, value, meta, where, dims=None) -> None:
    if meta is None:
        return
    if isinstance(meta, tuple):
        for i, (item, item_meta) in enumerate(zip(value, meta)):
            _check_meta(node, item, item_meta, f"{where}[{i}]", dims)
        return
    shape, dtype = tuple(np.shape(value)), getattr(value, "dtype", None)
    expected = concrete(meta.shape, dims or {})
    # a size of a symbol no input binds (a region run alone) is not checked
    same_shape = len(shape) == len(expected) and all(
        isinstance(want, SymDim) or _same_size(got, want) for got, want in zip(shape, expected)
    )
    # canonical on both sides: a NumPy constant (HF's int64 position_ids) keeps int64
    # where JAX without x64 computes int32; jnp canonicalises it at its next op
    if (
        not same_shape
        or dtype is None
        or (_canonical(np.dtype(dtype).name) != _canonical(meta.dtype))
    ):
        got = f"{np.dtype(dtype).name if dtype is not None else type(value).__name__}{list(shape)}"
        raise ValueError(
            f"jaxgrad's ATen table computed {got} for node {where} ({node.target}) at "
            f"{node.path or 'the top level'!r}, where torch's program has "
            f"{_describe(meta, expected)}. This is a bug in jaxgrad.nn.aten: please report it "
            "with the model."
        )


def _same_size(got, want) -> bool:
    """Sizes equal. With ``jax.export`` dimension variables, unequal only when their
    difference is a nonzero constant: jax's ``==`` answers False where it cannot prove
    two forms equal (``(s - 1) // 2 // 2`` and ``(s - 1) // 4``), which torch's recorded
    shape, valid at every size its guards admit, already proves."""
    if isinstance(got, (int, np.integer)) and isinstance(want, (int, np.integer)):
        return got == want
    try:
        difference = got - want
    except Exception:  # noqa: BLE001 - jax's InconclusiveDimensionOperation
        return True
    return not isinstance(difference, (int, np.integer)) or difference == 0


def _describe(meta, expected) -> str:
    if not is_symbolic(meta.shape):
        return meta.describe()
    return f"{meta.dtype}{[str(s) for s in meta.shape]} = {meta.dtype}{list(expected)}"


# Arithmetic on symbolic sizes in a dynamic capture (``x.size(0) * 16``), and the
# ATen ops that read sizes: Python ints while JAX traces.
def _contiguous_stride(x, dim):
    stride = 1
    for size in x.shape[dim + 1 if dim >= 0 else x.ndim + dim + 1 :]:
        stride = stride * size
    return stride


def _assert_scalar(condition, message=""):
    if isinstance(condition, (bool, np.bool_)) and not condition:
        raise ValueError(
            f"the inputs' sizes break a condition torch's program was captured under ({message})."
        )


SYM_OPS = {
    "sym.add": operator.add,
    "sym.sub": operator.sub,
    "sym.mul": operator.mul,
    "sym.floordiv": operator.floordiv,
    "sym.mod": operator.mod,
    "sym.truediv": operator.truediv,
    "sym.pow": operator.pow,
    "sym.neg": operator.neg,
    "sym.eq": operator.eq,
    "sym.ne": operator.ne,
    "sym.ge": operator.ge,
    "sym.gt": operator.gt,
    "sym.le": operator.le,
    "sym.lt": operator.lt,
    "sym.and_": operator.and_,
    "sym.or_": operator.or_,
    "sym.sym_float": float,
    "sym.sym_int": int,
    "sym.sym_max": max,
    "sym.sym_min": min,
    "sym.sym_not": operator.not_,
    "sym.sym_sqrt": lambda v: v**0.5,
    "sym.ceil": math.ceil,
    "sym.floor": math.floor,
    "sym.trunc": math.trunc,
    "sym.ceildiv": lambda a, b: -(-a // b),  # export's math.ceil(a / b) of sizes
    "aten.sym_size.int": lambda x, dim: x.shape[dim],
    "aten.sym_numel.default": lambda x: (
        int(np.prod(x.shape)) if all(isinstance(s, int) for s in x.shape) else x.size
    ),
    "aten.sym_stride.int": _contiguous_stride,
    "aten.sym_storage_offset.default": lambda x: 0,
    "aten._assert_scalar.default": _assert_scalar,
}


def run(
    program: Program,
    env: dict,
    *,
    key,
    path: str,
    random_draws,
    class_name: str,
    nodes=None,
    regions=(),
):
    """Run ``program``'s nodes (or ``nodes``, a part of them) on ``env``, which holds the
    placeholders' values and receives every node's; returns the user outputs (flat)
    and the buffer updates.

    ``regions``: ``((Region, fn), ...)`` (``jaxgrad.nn.capture.regions``, each with one output):
    each region's nodes are skipped and, at its first node, ``fn(env[region.input])``
    gives the value of its output (checked against torch's recorded shape and dtype
    like any node): how the nnx twin runs a layer of the program as a stock nnx layer
    (``jaxgrad.flax.program``)."""
    starts = {region.nodes[0].name: (region, fn) for region, fn in regions}
    dims = bind((shape, np.shape(env[name])) for name, shape in program.dims if name in env)
    sizes = {}  # a dynamic capture's size nodes: their expressions, for nodes run alone
    for node in program.nodes:
        if isinstance(node.meta, SymDim):
            sizes[node.name] = node.meta
        elif (
            node.name in env and isinstance(node.meta, TensorMeta) and is_symbolic(node.meta.shape)
        ):  # a region's input: its sizes bind the symbols too
            bind([(node.meta.shape, np.shape(env[node.name]))], dims)
    if nodes is not None:
        for name, size in sizes.items():
            if name not in env:
                try:
                    env[name] = evaluate(size.expr, dims)
                except Unbound:
                    pass
    inside = {node.name for region, _ in regions for node in region.nodes}
    draws = dict(random_draws or {})
    unknown = set(draws) - {n.name for n in program.random_nodes()}
    if unknown:
        raise ValueError(
            f"{class_name}.apply: `random_draws` names {sorted(unknown)}, which are not random "
            f"ops of this program; its random ops are "
            f"{[n.name for n in program.random_nodes()] or 'none'}."
        )
    for node in program.nodes if nodes is None else nodes:
        if node.name in inside:
            if node.name in sizes:  # a size the region computes, read after it
                env[node.name] = evaluate(sizes[node.name].expr, dims)
            if node.name in starts:
                region, fn = starts[node.name]
                (result,) = region.outputs
                value = fn(env[region.input])
                last = next(n for n in region.nodes if n.name == result)
                _check_meta(last, value, last.meta, repr(result), dims)
                env[result] = value
            continue
        args = _materialize(node.args, env, dims)
        kwargs = dict(_materialize(node.kwargs, env, dims))
        if node.target == "getitem":
            env[node.name] = operator.getitem(*args)
            continue
        if node.target in SYM_OPS:
            env[node.name] = SYM_OPS[node.target](*args, **kwargs)
            continue
        op = aten.lookup(node.target)
        if op.sample is not None:
            if node.name in draws:
                draw = draws[node.name]
            elif key is None:
                raise ValueError(
                    f"{class_name}: the random op {node.target} at "
                    f"{node.path or 'the top level'!r} (node {node.name!r}) needs a key: "
                    "pass `key=` (a jax.random key) with `train=True`."
                )
            else:
                draw = op.sample(layer_key(key, child_path(path, node.key_path)), *args, **kwargs)
            value = op.fn(draw, *args, **kwargs)
        else:
            value = op.fn(*args, **kwargs)
        _check_meta(node, value, node.meta, repr(node.name), dims)
        env[node.name] = value
    if nodes is not None:
        return None, None
    outputs = [_materialize(item, env, dims) for item in program.outputs]
    updates = {name: env[ref.name] for name, ref in program.buffer_updates}
    return outputs, updates


# ------------------------------------------------- custom autograd Functions
@dataclasses.dataclass(frozen=True, eq=False)
class FunctionSpec:
    """A custom ``torch.autograd.Function`` as captured (``jaxgrad.nn.capture.export_autograd``):
    a ``jax.custom_vjp`` of its own forward and backward (``call_function``).

    Attributes:
      name: the Function's class, ``"module.QualName"``, for messages.
      forward: its ``forward`` on the tensor arguments (inputs ``0..n-1``), the
        other arguments fixed at capture; outputs flat, one per tensor output.
      backward: its ``backward``, captured after a run of its ``forward`` on the same
        inputs (so what ``ctx.save_for_backward`` saved is computed there): inputs
        ``0..n-1`` the tensor arguments, then one gradient per output; outputs one
        gradient (or ``None``) per tensor argument.
      constants: ``{"forward": {...}, "backward": {...}}``: tensors each program
        holds that are not inputs (numpy).
      outputs: ``TensorMeta`` of each output.
      non_differentiable: indices of the outputs ``ctx.mark_non_differentiable``
        named (torch hands their backward zeros, whatever the outputs' use).
    """

    name: str
    forward: Program
    backward: Program
    constants: dict
    outputs: tuple
    non_differentiable: tuple = ()

    def __call__(self, inputs: tuple) -> list:
        return call_function(self, inputs)


@dataclasses.dataclass(frozen=True)
class UserRule:
    """A Function whose JAX rule the user registered
    (``jaxgrad.nn.register_autograd_function``): ``name`` and the non-tensor arguments
    as ``((position, value), ...)``."""

    name: str
    other_args: tuple = ()

    def __call__(self, inputs: tuple) -> list:
        return call_function(self, inputs)


def _run_part(program: Program, values: tuple, constants: dict, name: str) -> list:
    env = {}
    for placeholder, kind, target in program.inputs:
        env[placeholder] = values[target] if kind == "input" else constants[target]
    outputs, _ = run(program, env, key=None, path="", random_draws=None, class_name=name)
    return outputs


def _sum_to(grad, shape):
    """torch's ``sum_to``: a gradient of a broadcast shape summed down to ``shape``."""
    if tuple(grad.shape) == tuple(shape):
        return grad
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, size in enumerate(shape) if size == 1 and grad.shape[lead + i] != 1
    )
    return jnp.sum(grad, axis=axes, keepdims=True).reshape(shape)


def call_function(spec, inputs: tuple) -> list:
    """Run a captured ``autograd.Function`` (``FunctionSpec``) as a ``jax.custom_vjp``:
    values from its forward, gradients from its own backward, as torch's autograd
    does (a gradient of an input's broadcast shape summed to the input's shape, cast to
    its dtype; ``None`` is zero; integer inputs get none). A ``UserRule`` calls the
    registered JAX function instead."""
    if isinstance(spec, UserRule):
        from jaxgrad.nn.aten._autograd import FUNCTIONS

        out = FUNCTIONS[spec.name](*inputs, **{f"arg{i}": v for i, v in spec.other_args})
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def forward(*xs):
        return tuple(_run_part(spec.forward, xs, spec.constants["forward"], spec.name))

    function = jax.custom_vjp(forward)

    def fwd(*xs):
        return forward(*xs), xs

    def bwd(xs, cotangents):
        grads_out = []
        for i, (cotangent, meta) in enumerate(zip(cotangents, spec.outputs)):
            dtype = _canonical(meta.dtype)
            if i in spec.non_differentiable or cotangent.dtype == jax.dtypes.float0:
                cotangent = jnp.zeros(np.shape(cotangent), dtype)
            grads_out.append(cotangent.astype(dtype))
        grads = _run_part(
            spec.backward, xs + tuple(grads_out), spec.constants["backward"], spec.name
        )
        result = []
        for x, grad in zip(xs, grads):
            if not jnp.issubdtype(x.dtype, jnp.inexact):
                result.append(np.zeros(x.shape, jax.dtypes.float0))
            elif grad is None:
                result.append(jnp.zeros_like(x))
            else:
                result.append(_sum_to(jnp.asarray(grad), x.shape).astype(x.dtype))
        return tuple(result)

    function.defvjp(fwd, bwd)
    return list(function(*inputs))


@dataclasses.dataclass(frozen=True, eq=False)
class ExportedModule(Module):
    """A torch model captured with ``torch.export``: a jaxgrad layer over ATen ops.

    Built by ``jaxgrad.nn.from_torch`` (see ``jaxgrad.nn.capture.export.capture``).
    ``apply(params, *inputs, buffers=None, train=False, key=None, random_draws=None,
    **kwarg_inputs)`` takes the inputs as the torch forward took them in the example
    (positional and keyword, same structure and shapes) and returns the output with
    torch's structure (Hugging Face ``ModelOutput``\\ s as dicts of their fields).

    Attributes:
      class_name: the torch module's class, for messages.
      train_program, eval_program: torch's two modes (may be the same object).
      in_tree: the structure of ``(args, kwargs)`` in the example.
      input_meta: ``((leaf index, TensorMeta or ("const", value)), ...)`` for every
        flattened input: its shape and dtype, or the Python value torch specialised.
      params, buffers: ``((name, TensorMeta), ...)`` in ``named_parameters()`` /
        ``named_buffers()`` order (persistent buffers only).
      constants: non-persistent buffers and lifted constants.
      aliases: ``((alias, name), ...)``: second names of tied tensors.
      order: torch's ``state_dict()`` keys, aliases included.
      layers: ``((module path, jaxgrad layer), ...)`` of torch layers jaxgrad knows,
        used by ``init`` for torch's default initialisation of their parameters.
      shapes: the sizes torch's program accepts (``jaxgrad.nn.capture.shapes.ShapeSpec``):
        ``input_meta`` holds a ``SymDim`` for every size torch kept symbolic.
      variants: ``ExportedModule``\\ s of the same model captured at other sizes
        (``from_torch(..., batch_one=True)``: batch 1), each run when the inputs fit
        it and not this one.
      train_refused: why torch cannot run this program's training forward (a batch of
        1 through BatchNorm): ``apply(train=True)`` refuses with it; the training
        program is then the evaluation one, never run.
    """

    class_name: str
    train_program: Program
    eval_program: Program
    in_tree: tuple
    input_meta: tuple
    params: tuple
    buffers: tuple
    constants: Constants
    aliases: tuple = ()
    order: tuple = ()
    layers: tuple = ()
    shapes: ShapeSpec = ShapeSpec(static="captured without dynamic dimensions")
    variants: tuple = ()
    train_refused: str = ""

    # ---- state
    def param_shapes(self):
        return {name: jax.ShapeDtypeStruct(m.shape, _canonical(m.dtype)) for name, m in self.params}

    def buffer_shapes(self):
        return {
            name: jax.ShapeDtypeStruct(m.shape, _canonical(m.dtype)) for name, m in self.buffers
        }

    def state_dict_keys(self):
        return list(self.order)

    def params_without_gradient(self, train: bool = True) -> tuple:
        """The parameters torch leaves without a ``.grad`` after a backward of this
        mode's forward: those it never reads, and those it reads only through a
        stop-gradient (``detach``, a ``no_grad`` region, ``requires_grad_(False)``).
        torch's optimizers skip them (no state, no weight decay); pass them to
        ``jaxgrad.optim.freeze`` to do the same."""
        program = self.train_program if train else self.eval_program
        readers: dict[str, list] = {}

        def note(value, reader):
            if isinstance(value, Ref):
                readers.setdefault(value.name, []).append(reader)
            elif isinstance(value, tuple):
                for item in value:
                    note(item, reader)

        for node in program.nodes:
            note((node.args, node.kwargs), node.target)
        note(tuple(program.outputs) + tuple(r for _, r in program.buffer_updates), "<output>")
        # a tied parameter has one placeholder per name: it has a gradient when any does
        graded = {
            target
            for name, kind, target in program.inputs
            if kind == "param"
            and any(reader != "jaxgrad.stop_gradient.default" for reader in readers.get(name, ()))
        }
        return tuple(name for name, _ in self.params if name not in graded)

    def init(self, key):
        """Params with torch's default initialisation for the parameters of torch layers
        jaxgrad knows (``Linear``, ``Conv2d``, ``LayerNorm``…); zeros for the rest (a
        model's own ``nn.Parameter``\\ s and ``_init_weights`` are its code, not known
        here: take the weights from the torch model, as ``from_torch`` does)."""
        drawn = {}
        keys = jax.random.split(key, max(len(self.layers), 1))
        for (path, layer), layer_key_ in zip(self.layers, keys):
            drawn.update({child_path(path, k): v for k, v in layer.init(layer_key_).items()})
        return {
            name: drawn[name] if name in drawn else jnp.zeros(m.shape, _canonical(m.dtype))
            for name, m in self.params
        }

    def init_buffers(self):
        """Zeros: the buffers' values at construction are the module's code; take them
        from the torch model (``from_torch(..., with_buffers=True)``)."""
        return {name: jnp.zeros(m.shape, _canonical(m.dtype)) for name, m in self.buffers}

    def load_state_dict(self, mapping):
        self._check_aliases(mapping)
        return super().load_state_dict(
            {k: v for k, v in mapping.items() if k not in dict(self.aliases)}
        )

    def load_buffers(self, mapping):
        return super().load_buffers(
            {k: v for k, v in mapping.items() if k not in dict(self.aliases)}
        )

    def _check_aliases(self, mapping):
        for alias, name in self.aliases:
            if alias in mapping and name in mapping:
                if not np.array_equal(to_numpy(mapping[alias]), to_numpy(mapping[name])):
                    raise ValueError(
                        f"load_state_dict for {self.class_name}: `{alias}` is tied to "
                        f"`{name}` (one tensor in torch), but the two values differ."
                    )

    def state_dict(self, params, buffers=None):
        merged = dict(buffers or {})
        if self.buffers and buffers is None:
            raise ValueError(
                f"{self.class_name}.state_dict: this model has buffers; pass them: "
                "`state_dict(params, buffers)`."
            )
        merged.update(params)
        for alias, name in self.aliases:
            merged[alias] = merged[name]
        missing = [k for k in self.order if k not in merged]
        if missing:
            raise ValueError(f"state_dict: missing keys: {', '.join(missing)}.")
        return {name: np.array(merged[name], copy=True) for name in self.order}

    # ---- running
    def _leaves(self, inputs, kwargs) -> list:
        leaves = flatten(
            (tuple(inputs), dict(kwargs)), self.in_tree, f"{self.class_name} inputs", []
        )
        for index, meta in self.input_meta:
            value = leaves[index]
            if isinstance(meta, TensorMeta):
                if not hasattr(value, "shape"):
                    raise TypeError(
                        f"{self.class_name}.apply: input {index} must be an array "
                        f"({meta.describe()}), got {type(value).__name__}."
                    )
                if np.dtype(value.dtype) != _canonical(meta.dtype):
                    raise TypeError(
                        f"{self.class_name}.apply: input {index} has dtype "
                        f"{np.dtype(value.dtype).name}, the model was captured with {meta.dtype}."
                    )
            elif value != meta[1]:
                raise ValueError(
                    f"{self.class_name}.apply: input {index} is {value!r}, but torch "
                    f"specialised the program to {meta[1]!r} (a Python value in the example); "
                    "convert again with this value."
                )
        self.shapes.check(f"{self.class_name}.apply", self.input_meta, leaves)
        return leaves

    def bind(
        self, params, inputs, kwargs, buffers, train, unread=frozenset()
    ) -> tuple[Program, dict]:
        """The program of ``train``'s mode and its placeholders' values; the params
        named in ``unread`` (read only by regions run otherwise) are left unbound."""
        leaves = self._leaves(inputs, kwargs)
        if train and self.train_refused:
            raise ValueError(
                f"{self.class_name}.apply(train=True) at these sizes: torch "
                f"cannot run its training forward ({self.train_refused})."
            )
        program = self.train_program if train else self.eval_program
        env = {}
        for name, kind, target in program.inputs:
            if kind == "param" and target in unread:
                continue
            if kind == "param":
                if target not in params:
                    raise ValueError(
                        f"{self.class_name}.apply: `params` lacks {target!r}; pass this "
                        "model's params (from `from_torch` or `load_state_dict`)."
                    )
                env[name] = params[target]
            elif kind == "buffer":
                env[name] = buffers[target]
            elif kind == "constant":
                env[name] = self.constants[target]
            else:
                env[name] = (
                    jnp.asarray(leaves[target])
                    if isinstance(leaves[target], np.ndarray)
                    else leaves[target]
                )
        return program, env

    def for_inputs(self, inputs, kwargs) -> ExportedModule:
        """This model, or the variant whose program these inputs' sizes fit."""
        try:
            self._leaves(inputs, kwargs)
            return self
        except ValueError as error:
            for variant in self.variants:
                try:
                    variant._leaves(inputs, kwargs)
                    return variant
                except ValueError:
                    continue
            raise error

    def forward_with_state(
        self, params, *inputs, buffers, train, key, path, random_draws=None, **kwargs
    ):
        model = self.for_inputs(inputs, kwargs) if self.variants else self
        if model is not self:
            return model.forward_with_state(
                params,
                *inputs,
                buffers=buffers,
                train=train,
                key=key,
                path=path,
                random_draws=random_draws,
                **kwargs,
            )
        program, env = self.bind(params, inputs, kwargs, buffers, train)
        outputs, updates = run(
            program, env, key=key, path=path, random_draws=random_draws, class_name=self.class_name
        )
        new_buffers = dict(buffers)
        new_buffers.update(updates)
        return unflatten(program.out_tree, iter(outputs)), new_buffers


__all__ = [
    "ExportedModule",
    "Program",
    "OpNode",
    "TensorMeta",
    "Constants",
    "FunctionSpec",
    "UserRule",
    "call_function",
    "flatten",
    "unflatten",
    "run",
]
