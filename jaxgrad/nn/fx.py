"""Custom ``forward`` code through ``torch.fx``: ``trace(module) -> GraphModule``.

``from_torch`` hands a module whose ``forward`` is the user's own code (a residual
block, a torchvision-style ResNet) to ``trace``, which runs
``torch.fx.symbolic_trace`` (torch is imported here, lazily: ``import jaxgrad``
never imports it) and turns the graph into a ``GraphModule``, an ordinary jaxgrad
layer:

- ``call_module`` nodes of layers torch defines become jaxgrad layers, converted
  by ``jaxgrad.nn.convert``'s table and keyed by their module path
  (``layer1.0.conv1``), so params and buffers keep torch's ``state_dict`` keys;
- ``call_function`` / ``call_method`` nodes map to JAX through the one op table,
  ``jaxgrad.nn.fx_ops``;
- ``get_attr`` nodes read a parameter or buffer of the module by name.

The graph is stored as plain hashable tuples (``Node``): applying it is a pure
function of ``(params, inputs, buffers, train, key)`` that works under ``jit``,
``grad`` and ``vmap``; buffers (BatchNorm statistics) are threaded from layer to
layer in graph order. A module that ``torch.fx`` cannot trace (data-dependent
control flow), an op missing from the table, a tensor attribute outside the
``state_dict``, or an in-place op whose overwritten input is read afterwards is a
``ValueError`` naming the op, the node and the module path.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad._arrays import canonical_dtype
from jaxgrad.nn import fx_ops
from jaxgrad.nn.module import Module, child_path, layer_key, sub_dict


@dataclasses.dataclass(frozen=True)
class Ref:
    """An argument that is the value of the node called ``name``."""

    name: str


@dataclasses.dataclass(frozen=True)
class SliceArg:
    """A ``slice`` (unhashable before Python 3.12) inside a node's arguments."""

    start: Any
    stop: Any
    step: Any


@dataclasses.dataclass(frozen=True)
class DictArg:
    """A ``dict`` inside a node's arguments or output, as ``((key, value), ...)``."""

    items: tuple


@dataclasses.dataclass(frozen=True)
class Node:
    """One step of a traced forward.

    Attributes:
      name: the fx node's name (unique in the graph).
      op: ``"placeholder"``, ``"get_attr"``, ``"call_module"``, ``"call_op"`` or
        ``"output"``.
      target: the module path (``call_module``), the attribute's state-dict name
        (``get_attr``), or the op table's name (``call_op``, e.g. ``"torch.cat"``).
      args, kwargs: arguments, with ``Ref`` for values of earlier nodes;
        ``kwargs`` is ``((name, value), ...)``.
    """

    name: str
    op: str
    target: str
    args: tuple = ()
    kwargs: tuple = ()


def _materialize(value, env):
    if isinstance(value, Ref):
        return env[value.name]
    if isinstance(value, tuple):
        return tuple(_materialize(v, env) for v in value)
    if isinstance(value, SliceArg):
        return slice(_materialize(value.start, env), _materialize(value.stop, env),
                     _materialize(value.step, env))
    if isinstance(value, DictArg):
        return {k: _materialize(v, env) for k, v in value.items}
    return value


@dataclasses.dataclass(frozen=True)
class GraphModule(Module):
    """A traced torch ``forward``: a jaxgrad layer over converted layers and ops.

    Attributes:
      class_name: the torch module's class name, for messages.
      nodes: the graph, in execution order.
      layers: ``((module path, layer), ...)`` of every called module.
      tensors: ``((name, shape, dtype, kind), ...)`` of state-dict entries no
        converted layer owns (a bare ``nn.Parameter``, an unused layer's weights);
        ``kind`` is ``"param"`` or ``"buffer"``. ``init`` gives them zeros: torch's
        initialisation of a bare parameter is the user's code, not known here.
      order: torch's ``state_dict()`` key order.
    """

    class_name: str
    nodes: tuple
    layers: tuple
    tensors: tuple
    order: tuple

    def _collect(self, make_layer, kind):
        tree = {}
        for path, layer in self.layers:
            tree.update({f"{path}.{k}": v for k, v in make_layer(path, layer).items()})
        for name, shape, dtype, entry_kind in self.tensors:
            if entry_kind == kind:
                tree[name] = jnp.zeros(shape, jax.dtypes.canonicalize_dtype(dtype))
        rank = {name: i for i, name in enumerate(self.order)}
        return dict(sorted(tree.items(), key=lambda item: rank.get(item[0], len(rank))))

    def init(self, key):
        keys = dict(zip((p for p, _ in self.layers),
                        jax.random.split(key, max(len(self.layers), 1))))
        return self._collect(lambda path, layer: layer.init(keys[path]), "param")

    def init_buffers(self):
        return self._collect(lambda path, layer: layer.init_buffers(), "buffer")

    def state_dict_keys(self):
        return list(self.order)

    def forward_with_state(self, params, *inputs, buffers, train, key, path):
        layers = dict(self.layers)
        state = dict(buffers)
        env = {}
        placeholders = [n for n in self.nodes if n.op == "placeholder"]
        if len(inputs) > len(placeholders):
            raise TypeError(
                f"{self.class_name}.forward takes {len(placeholders)} inputs "
                f"({', '.join(n.name for n in placeholders)}), got {len(inputs)}."
            )
        position = 0
        for node in self.nodes:
            if node.op == "placeholder":
                if position < len(inputs):
                    env[node.name] = inputs[position]
                elif node.args:
                    env[node.name] = node.args[0]  # the forward's default value
                else:
                    raise TypeError(
                        f"{self.class_name}.forward: missing input {node.name!r}."
                    )
                position += 1
            elif node.op == "get_attr":
                env[node.name] = params[node.target] if node.target in params else \
                    state[node.target]
            elif node.op == "call_module":
                args = _materialize(node.args, env)
                kwargs = dict(_materialize(node.kwargs, env))
                env[node.name], new = layers[node.target].forward_with_state(
                    sub_dict(params, node.target), *args,
                    buffers=sub_dict(state, node.target), train=train, key=key,
                    path=child_path(path, node.target), **kwargs)
                state.update({f"{node.target}.{k}": v for k, v in new.items()})
            elif node.op == "call_op":
                op = fx_ops.lookup(node.target)
                args = _materialize(node.args, env)
                kwargs = dict(_materialize(node.kwargs, env))
                if op.stateful:
                    op_path = child_path(path, node.name)
                    kwargs["context"] = fx_ops.OpContext(
                        train, None if key is None else layer_key(key, op_path), op_path)
                env[node.name] = op.fn(*args, **kwargs)
            else:  # output
                return _materialize(node.args[0], env), state
        raise AssertionError("a traced graph ends with an output node")


# ------------------------------------------------------------------ tracing
def _where(path: str) -> str:
    return f"at {path!r}" if path else "at the top level"


def _names_of_callables(torch) -> dict[int, str]:
    """``id(torch callable) -> qualified name``: the table's names first, then every
    ``torch.nn.functional`` and ``torch`` function, then the operators."""
    import builtins
    import operator

    roots = {"torch": torch, "operator": operator, "builtins": builtins}
    names: dict[int, str] = {}
    for name in fx_ops.OPS:
        if name.startswith("method."):
            continue
        root, *rest = name.split(".")
        obj = roots.get(root)
        for part in rest:
            obj = getattr(obj, part, None)
        if obj is not None:
            names.setdefault(id(obj), name)
    for prefix, namespace in (("torch.nn.functional", torch.nn.functional),
                              ("torch", torch), ("operator", operator)):
        for attr in dir(namespace):
            obj = getattr(namespace, attr, None)
            if callable(obj):
                names.setdefault(id(obj), f"{prefix}.{attr}")
    return names


def _function_name(target, names) -> str:
    if id(target) in names:
        return names[id(target)]
    module = getattr(target, "__module__", None) or "?"
    return f"{module}.{getattr(target, '__qualname__', repr(target))}"


def _constant(value, describe):
    """A node argument as a hashable constant (``Ref`` for other nodes)."""
    kind = type(value).__name__
    if kind == "Node" and hasattr(value, "op"):
        return Ref(value.name)
    if isinstance(value, (list, tuple)):  # torch.Size and fx's immutable_list too
        return tuple(_constant(v, describe) for v in value)
    if isinstance(value, dict):
        return DictArg(tuple((k, _constant(v, describe)) for k, v in value.items()))
    if isinstance(value, slice):
        return SliceArg(*(_constant(v, describe) for v in (value.start, value.stop,
                                                           value.step)))
    if value is None or value is Ellipsis or isinstance(value, (bool, int, float, str)):
        return value
    if kind == "dtype" and str(value).startswith("torch."):
        return canonical_dtype(value)
    if kind in ("device", "memory_format"):
        return str(value)
    raise ValueError(f"from_torch: {describe()}: unsupported argument {value!r} ({kind}).")


def _module_path(node, trace_path: str) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    inner = list(stack)[-1] if stack else ""
    if node.op == "call_module":
        inner = node.target
    return child_path(trace_path, inner) if inner else trace_path


def _mutates(node, modules) -> bool:
    """Whether torch overwrites the node's first argument in place."""
    if dict(node.kwargs).get("inplace") is True:
        return True
    if node.op == "call_module":
        return getattr(modules[node.target], "inplace", False) is True
    if node.op == "call_method":
        return fx_ops.in_place_twin(f"method.{node.target}") is not None
    return False


def _check_in_place(node, order, describe, modules, op_name=None) -> None:
    in_place = _mutates(node, modules) or (
        op_name is not None and op_name.startswith("operator.i")
        and fx_ops.in_place_twin(op_name) is not None)
    if not in_place or not node.args or type(node.args[0]).__name__ != "Node":
        return
    overwritten = node.args[0]
    later = [u.name for u in overwritten.users if u is not node and order[u] > order[node]]
    if overwritten.op in ("placeholder", "get_attr") or later:
        reason = (f"it is read later by {', '.join(later)}" if later else
                  f"it is the {'input' if overwritten.op == 'placeholder' else 'attribute'} "
                  f"{overwritten.target!r}")
        raise ValueError(
            f"from_torch: {describe()} overwrites {overwritten.name!r} in place and {reason}; "
            "a pure function cannot reproduce that aliasing. Use the out-of-place form."
        )


def _refuse_tied_parameters(module, path: str) -> None:
    """One tensor under two names (tied weights): torch sums both uses' gradients into
    it; a flat dict would hold two independent copies and train them apart."""
    names: dict[int, list[str]] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    tied = [group for group in names.values() if len(group) > 1]
    if tied:
        raise ValueError(
            f"from_torch: {type(module).__name__} {_where(path)} shares parameters between "
            f"names ({'; '.join(' = '.join(group) for group in tied)}); jaxgrad's params hold "
            "one array per state_dict key, so tied weights are not supported."
        )


def trace(module, path: str = "") -> GraphModule:
    """Trace ``module``'s forward with ``torch.fx`` and convert it.

    Args:
      module: a torch ``nn.Module`` with custom ``forward`` code.
      path: its path in the enclosing model, for messages.

    Raises:
      ValueError: the module cannot be traced, or an op, argument, attribute or
        module is unsupported; naming the op, the node and the module path.
    """
    import torch.fx  # binds `torch` too: jaxgrad's one torch import, lazy, here only

    from jaxgrad.nn import convert

    class _Tracer(torch.fx.Tracer):
        # stop at every layer torch defines (converted or refused by the converter
        # table); trace through containers and the user's own code
        def is_leaf_module(self, m, qualname):
            return (convert.torch_class_name(m) not in (None, "Sequential")
                    or (type(m).__module__.startswith("torch.nn.")
                        and type(m).__name__ not in ("Sequential", "ModuleList",
                                                     "ModuleDict")))

    try:
        graph = _Tracer().trace(module)
    except Exception as error:  # TraceError, TypeError from control flow on proxies…
        raise ValueError(
            f"from_torch: cannot trace {type(module).__name__} {_where(path)} with "
            f"torch.fx.symbolic_trace ({type(error).__name__}: {error}); make the forward "
            "traceable (no Python control flow on tensor values) or use supported layers."
        ) from error

    modules = dict(module.named_modules(remove_duplicate=False))
    state = module.state_dict()
    parameters = {name for name, _ in module.named_parameters(remove_duplicate=False)}
    _refuse_tied_parameters(module, path)
    names = _names_of_callables(torch)
    fx_nodes = list(graph.nodes)
    order = {n: i for i, n in enumerate(fx_nodes)}
    nodes, layers, owned = [], {}, set()
    for fx_node in fx_nodes:
        where = _module_path(fx_node, path)
        target = (_function_name(fx_node.target, names) if fx_node.op == "call_function"
                  else str(fx_node.target))

        def describe(fx_node=fx_node, where=where, target=target):
            return (f"node {fx_node.name!r} ({fx_node.op} {target}) in "
                    f"{type(module).__name__} {_where(where)}")

        args = _constant(tuple(fx_node.args), describe)
        kwargs = tuple((k, _constant(v, describe)) for k, v in fx_node.kwargs.items())
        if fx_node.op in ("placeholder", "output"):
            nodes.append(Node(fx_node.name, fx_node.op, str(fx_node.target), args, kwargs))
        elif fx_node.op == "get_attr":
            if fx_node.target not in state:
                raise ValueError(
                    f"from_torch: {describe()} reads {fx_node.target!r}, a tensor outside "
                    "the module's state_dict (a plain attribute or non-persistent buffer); "
                    "register it as a parameter or a persistent buffer."
                )
            nodes.append(Node(fx_node.name, "get_attr", fx_node.target))
        elif fx_node.op == "call_module":
            _check_in_place(fx_node, order, describe, modules)
            target = fx_node.target
            if target not in layers:
                layers[target] = convert.convert_layer(modules[target], child_path(path, target))
                owned.update(f"{target}.{k}" for k in modules[target].state_dict())
            nodes.append(Node(fx_node.name, "call_module", target, args, kwargs))
        else:  # call_function, call_method
            if fx_node.op == "call_method":
                name = f"method.{fx_node.target}"
                name = fx_ops.in_place_twin(name) or name
            else:
                name = _function_name(fx_node.target, names)
            _check_in_place(fx_node, order, describe, modules, name)
            if fx_ops.lookup(name) is None:
                raise ValueError(
                    f"from_torch: unmapped op {name} at {describe()}; the op table "
                    f"(jaxgrad.nn.fx_ops) maps {', '.join(fx_ops.supported())}, and any "
                    "torch.nn.functional.X that jaxgrad.nn.functional defines."
                )
            nodes.append(Node(fx_node.name, "call_op", name, args, kwargs))
    tensors = tuple(
        (name, tuple(value.shape), np.dtype(canonical_dtype(value.dtype)).name,
         "param" if name in parameters else "buffer")
        for name, value in state.items() if name not in owned
    )
    return GraphModule(type(module).__name__, tuple(nodes), tuple(layers.items()), tensors,
                       tuple(state))
