"""Custom ``forward`` code through ``torch.fx``: ``trace(module) -> GraphModule``.

``from_torch`` hands a module whose ``forward`` is the user's own code (a residual
block, a torchvision-style ResNet) to ``trace``, which runs
``torch.fx.symbolic_trace`` (torch is imported here, lazily: ``import jaxgrad``
never imports it) and turns the graph into a ``GraphModule``, an ordinary jaxgrad
layer:

- ``call_module`` nodes of layers torch defines become jaxgrad layers, converted
  by ``jaxgrad.nn.capture.layers``'s table and keyed by their module path
  (``layer1.0.conv1``), so params and buffers keep torch's ``state_dict`` keys;
- ``call_function`` / ``call_method`` nodes map to JAX through the one op table,
  ``jaxgrad.nn.capture.fx_ops``;
- ``get_attr`` nodes read a parameter or buffer of the module by name.

The forward is traced in both of torch's modes (``module.train()`` and
``module.eval()``): a forward that reads ``self.training`` keeps a graph per mode and
``apply(train=...)`` runs the one asked for, never the mode the module was in when
converted. An in-place write (``y.relu_()``, ``out += x``, ``ReLU(inplace=True)``)
on a value nothing else aliases is reproduced: later reads of the value read the
written result.

The graph is stored as plain hashable tuples (``Node``): applying it is a pure
function of ``(params, inputs, buffers, train, key)`` that works under ``jit``,
``grad`` and ``vmap``; buffers (BatchNorm statistics) are threaded from layer to
layer in graph order. A module that ``torch.fx`` cannot trace (data-dependent
control flow), an op missing from the table, a tensor attribute outside the
``state_dict``, or an in-place write to an input, a module tensor or through a
view is a ``ValueError`` naming the op, the node and the module path (a Python number
read from a traced tensor, ``float(t)``, ``.item()``, ``if t > 0:``, names the construct
and the user's line: ``python_numbers``);
``from_torch`` then captures the module with ``torch.export`` instead when it has
an example input (``jaxgrad.nn.capture.export``).
"""

from __future__ import annotations

import contextlib
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad._arrays import canonical_dtype
from jaxgrad.nn.capture import fx_ops, python_numbers
from jaxgrad.nn.capture import layers as converters
from jaxgrad.nn.capture.refs import DictArg, Ref, SliceArg
from jaxgrad.nn.module import Module, child_path, layer_key, sub_dict


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
        return slice(
            _materialize(value.start, env),
            _materialize(value.stop, env),
            _materialize(value.step, env),
        )
    if isinstance(value, DictArg):
        return {k: _materialize(v, env) for k, v in value.items}
    return value


_STOPS = {"jaxgrad.stop_gradient", "method.detach", "torch.detach"}


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
      eval_nodes: the graph traced in evaluation mode when the forward reads
        ``self.training`` and the two traces differ (``nodes`` is then the
        training-mode graph); ``None`` when one graph serves both modes.
      frozen: the parameters torch has with ``requires_grad=False``: read through a
        stop-gradient, so they get no gradient, as in torch.
    """

    class_name: str
    nodes: tuple
    layers: tuple
    tensors: tuple
    order: tuple
    eval_nodes: tuple | None = None
    frozen: tuple = ()

    def nodes_for(self, train: bool) -> tuple:
        """The graph of torch's training (``train=True``) or evaluation mode."""
        return self.nodes if train or self.eval_nodes is None else self.eval_nodes

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
        keys = dict(
            zip((p for p, _ in self.layers), jax.random.split(key, max(len(self.layers), 1)))
        )
        return self._collect(lambda path, layer: layer.init(keys[path]), "param")

    def init_buffers(self):
        return self._collect(lambda path, layer: layer.init_buffers(), "buffer")

    def state_dict_keys(self):
        return list(self.order)

    def params_without_gradient(self, train: bool = True) -> tuple:
        """The parameters torch leaves without a ``.grad`` after a backward of this
        mode's forward: those it never reads, and those it reads only through a
        stop-gradient (``detach``, ``.data``, layers called in a ``no_grad`` region).
        torch's optimizers skip them (no state, no weight decay); pass them to
        ``jaxgrad.optim.freeze`` to do the same."""
        nodes = self.nodes_for(train)
        readers: dict[str, list] = {}

        def note(value, reader):
            if isinstance(value, Ref):
                readers.setdefault(value.name, []).append(reader)
            elif isinstance(value, (tuple, list)):
                for item in value:
                    note(item, reader)
            elif isinstance(value, DictArg):
                note(tuple(v for _, v in value.items), reader)
            elif isinstance(value, SliceArg):
                note((value.start, value.stop, value.step), reader)

        for node in nodes:
            note((node.args, node.kwargs), node)

        def cut(name):
            return all(
                r.op == "call_op"
                and (
                    r.target in _STOPS
                    or (r.target == "builtins.getattr" and r.args[1:] == ("data",))
                )
                for r in readers.get(name, ())
            )

        names = list(jax.eval_shape(self.init, jax.random.key(0)))
        graded = set()
        for node in nodes:
            if node.op == "get_attr" and not cut(node.name):
                graded.add(node.target)
            elif node.op == "call_module" and not cut(node.name):
                graded.update(n for n in names if n.startswith(node.target + "."))
        return tuple(n for n in names if n not in graded or n in self.frozen)

    def forward_with_state(self, params, *inputs, buffers, train, key, path):
        if self.frozen:  # requires_grad=False in torch: read, never differentiated
            params = {
                k: jax.lax.stop_gradient(v) if k in self.frozen else v for k, v in params.items()
            }
        layers = dict(self.layers)
        state = dict(buffers)
        env = {}
        nodes = self.nodes_for(train)
        placeholders = [n for n in nodes if n.op == "placeholder"]
        if len(inputs) > len(placeholders):
            raise TypeError(
                f"{self.class_name}.forward takes {len(placeholders)} inputs "
                f"({', '.join(n.name for n in placeholders)}), got {len(inputs)}."
            )
        position = 0
        for node in nodes:
            if node.op == "placeholder":
                if position < len(inputs):
                    env[node.name] = inputs[position]
                elif node.args:
                    env[node.name] = node.args[0]  # the forward's default value
                else:
                    raise TypeError(f"{self.class_name}.forward: missing input {node.name!r}.")
                position += 1
            elif node.op == "get_attr":
                env[node.name] = (
                    params[node.target] if node.target in params else state[node.target]
                )
            elif node.op == "call_module":
                args = _materialize(node.args, env)
                kwargs = dict(_materialize(node.kwargs, env))
                env[node.name], new = layers[node.target].forward_with_state(
                    sub_dict(params, node.target),
                    *args,
                    buffers=sub_dict(state, node.target),
                    train=train,
                    key=key,
                    path=child_path(path, node.target),
                    **kwargs,
                )
                state.update({f"{node.target}.{k}": v for k, v in new.items()})
            elif node.op == "call_op":
                op = fx_ops.lookup(node.target)
                args = _materialize(node.args, env)
                kwargs = dict(_materialize(node.kwargs, env))
                if op.stateful:
                    op_path = child_path(path, node.name)
                    kwargs["context"] = fx_ops.OpContext(
                        train, None if key is None else layer_key(key, op_path), op_path
                    )
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
    for prefix, namespace in (
        ("torch.nn.functional", torch.nn.functional),
        ("torch", torch),
        ("operator", operator),
    ):
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
        return SliceArg(*(_constant(v, describe) for v in (value.start, value.stop, value.step)))
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


# modules whose output can be their input itself (a view or the same tensor), so an
# in-place write to the output would also write the input
_ALIASING_MODULES = {
    "Identity",
    "Flatten",
    "Unflatten",
    "Dropout",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "AlphaDropout",
}


def _in_place_base(node, modules, op_name):
    """The fx node whose value torch overwrites at ``node``, or None."""
    if not node.args or type(node.args[0]).__name__ != "Node":
        return None
    if dict(node.kwargs).get("inplace") is True:
        return node.args[0]
    if node.op == "call_module":
        return node.args[0] if getattr(modules[node.target], "inplace", False) is True else None
    if op_name is not None and (
        (node.op == "call_method" and fx_ops.in_place_twin(f"method.{node.target}"))
        or (op_name.startswith("operator.i") and fx_ops.in_place_twin(op_name))
    ):
        return node.args[0]
    return None


def _aliases_its_input(node, modules, names) -> bool:
    """Whether ``node``'s value may share memory with another value (a view)."""
    if node.op in ("placeholder", "get_attr"):
        return True
    if node.op == "call_module":
        module = modules[node.target]
        return (
            type(module).__name__ in _ALIASING_MODULES or getattr(module, "inplace", False) is True
        )
    if node.op == "call_method":
        return f"method.{node.target}" in fx_ops.VIEWS
    if node.op == "call_function":
        return _function_name(node.target, names) in fx_ops.VIEWS
    return False


def _in_place_problem(node, base, modules, names, accepted) -> str | None:
    """Why writing ``base`` in place at ``node`` cannot be reproduced by rebinding
    (later reads of ``base`` read ``node``'s result), or None when it can."""
    if base.op == "placeholder":
        return f"it is the forward's input {base.target!r} (torch changes the caller's tensor)"
    if base.op == "get_attr":
        return f"it is the module's tensor {base.target!r} (torch changes the module)"
    if base.name not in accepted and _aliases_its_input(base, modules, names):
        return f"{base.name!r} is a view of another value, which torch changes too"
    views = [u.name for u in base.users if u is not node and _aliases_its_input(u, modules, names)]
    if views:
        return f"{', '.join(views)} {'is a view' if len(views) == 1 else 'are views'} of it"
    return None


def _rename(value, renames):
    if isinstance(value, Ref):
        return Ref(renames.get(value.name, value.name))
    if isinstance(value, tuple):
        return tuple(_rename(v, renames) for v in value)
    if isinstance(value, SliceArg):
        return SliceArg(*(_rename(v, renames) for v in (value.start, value.stop, value.step)))
    if isinstance(value, DictArg):
        return DictArg(tuple((k, _rename(v, renames)) for k, v in value.items))
    return value


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
            f"names ({'; '.join(' = '.join(group) for group in tied)}); the layer path "
            "holds one array per state_dict key. Pass `example=` so from_torch captures it "
            "with torch.export, which keeps tied weights as one parameter."
        )


def _trace_mode(module, path, tracer, names, state):
    """One mode's graph: ``(nodes, layers, owned state keys)``."""
    try:
        graph = tracer().trace(module)
    except python_numbers.PythonNumberError as error:  # float(t), .item(), `if t > 0:`…
        name = type(module).__name__
        subject = f"cannot trace {name} {_where(path)} with torch.fx.symbolic_trace: {name}"
        raise ValueError(python_numbers.refusal(subject, error.number)) from None
    except Exception as error:  # TraceError, TypeError from control flow on proxies…
        raise ValueError(
            f"from_torch: cannot trace {type(module).__name__} {_where(path)} with "
            f"torch.fx.symbolic_trace ({type(error).__name__}: {error}); make the forward "
            "traceable (no Python control flow on tensor values) or pass `example=` so "
            "from_torch captures it with torch.export."
        ) from error

    modules = dict(module.named_modules(remove_duplicate=False))
    nodes, layers, owned, renames, accepted = [], {}, set(), {}, set()
    for fx_node in graph.nodes:
        where = _module_path(fx_node, path)
        target = (
            _function_name(fx_node.target, names)
            if fx_node.op == "call_function"
            else str(fx_node.target)
        )

        def describe(fx_node=fx_node, where=where, target=target):
            return (
                f"node {fx_node.name!r} ({fx_node.op} {target}) in "
                f"{type(module).__name__} {_where(where)}"
            )

        args = _rename(_constant(tuple(fx_node.args), describe), renames)
        kwargs = _rename(
            tuple((k, _constant(v, describe)) for k, v in fx_node.kwargs.items()), renames
        )
        name = None
        if fx_node.op == "call_method" and fx_node.target == "requires_grad_":
            raise ValueError(
                f"from_torch: {describe()} calls `requires_grad_` inside the forward (on a "
                "parameter, torch then gives it no gradient at all); the layer path cannot "
                "reproduce it. Pass `example=` so from_torch captures it with torch.export, "
                "which does."
            )
        if fx_node.op == "call_method":
            name = f"method.{fx_node.target}"
            name = fx_ops.in_place_twin(name) or name
        elif fx_node.op == "call_function":
            name = _function_name(fx_node.target, names)
        base = (
            None
            if fx_node.op in ("placeholder", "output", "get_attr")
            else _in_place_base(fx_node, modules, name)
        )
        if base is not None:
            problem = _in_place_problem(fx_node, base, modules, names, accepted)
            if problem:
                raise ValueError(
                    f"from_torch: {describe()} overwrites {base.name!r} in place and "
                    f"{problem}; the layer path reproduces in-place writes only on values no "
                    "other value aliases. Pass `example=` so from_torch captures it with "
                    "torch.export, which reproduces the aliasing, or write it out of place."
                )
        if fx_node.op in ("placeholder", "output"):
            nodes.append(Node(fx_node.name, fx_node.op, str(fx_node.target), args, kwargs))
        elif fx_node.op == "get_attr":
            if fx_node.target not in state:
                raise ValueError(
                    f"from_torch: {describe()} reads {fx_node.target!r}, a tensor outside "
                    "the module's state_dict (a plain attribute or non-persistent buffer); "
                    "register it as a persistent buffer, or pass `example=` so from_torch "
                    "captures it with torch.export, which keeps it as a constant."
                )
            nodes.append(Node(fx_node.name, "get_attr", fx_node.target))
        elif fx_node.op == "call_module":
            target = fx_node.target
            if target not in layers:
                layers[target] = converters.convert_layer(modules[target], child_path(path, target))
                owned.update(f"{target}.{k}" for k in modules[target].state_dict())
            nodes.append(Node(fx_node.name, "call_module", target, args, kwargs))
        else:  # call_function, call_method
            if fx_ops.lookup(name) is None:
                raise ValueError(
                    f"from_torch: unmapped op {name} at {describe()}; the op table "
                    f"(jaxgrad.nn.capture.fx_ops) maps {', '.join(fx_ops.supported())}, and any "
                    "torch.nn.functional.X that jaxgrad.nn.functional defines. Pass "
                    "`example=` so from_torch captures it with torch.export instead."
                )
            nodes.append(Node(fx_node.name, "call_op", name, args, kwargs))
        result = fx_node.name
        if (
            fx_node.op in ("call_module", "call_function", "call_method")
            and fx_node.meta.get("grad_enabled") is False
        ):
            # computed with grad mode off (no_grad, set_grad_enabled(False),
            # inference_mode): torch's result has no gradient
            if base is not None and base.meta.get("grad_enabled") is not False:
                raise ValueError(
                    f"from_torch: {describe()} writes {base.name!r}, computed outside a "
                    "`torch.no_grad()` region, in place inside it; torch then keeps the old "
                    "value's gradient path for the new value, which jaxgrad does not "
                    "reproduce. Write it out of place: `y = y + (new - y).detach()` is the "
                    "same straight-through value and gradient."
                )
            result = f"{fx_node.name}__no_grad"
            nodes.append(Node(result, "call_op", "jaxgrad.stop_gradient", (Ref(fx_node.name),)))
            renames[fx_node.name] = result
        if base is not None:  # later reads of the overwritten value read this result
            renames[base.name] = result
            accepted.add(fx_node.name)
    return tuple(nodes), layers, owned


@contextlib.contextmanager
def _autograd_the_layer_path_refuses(torch, module, path):
    """While tracing: a custom ``autograd.Function`` called on traced values (fx would
    run its forward and drop its backward) and ``requires_grad`` set on a traced value
    (fx would drop it) are refused, named; the export front end reproduces both."""
    function_class = torch.autograd.Function
    original_apply = function_class.__dict__["apply"]
    original_setattr = torch.fx.Proxy.__setattr__

    def refuse(what):
        raise ValueError(
            f"from_torch: {type(module).__name__} {_where(path)} {what}; the layer path cannot "
            "reproduce it. Pass `example=` so from_torch captures it with torch.export, which "
            "does."
        )

    def apply(cls, *args, **kwargs):
        from jaxgrad.nn.capture.export_autograd import AUTODIFF_FUNCTIONS

        name = f"{cls.__module__}.{cls.__qualname__}"
        if name in AUTODIFF_FUNCTIONS:  # reentrant checkpointing: the function it wraps
            return AUTODIFF_FUNCTIONS[name](*args, **kwargs)
        if any(isinstance(a, torch.fx.Proxy) for a in (*args, *kwargs.values())):
            refuse(
                f"calls the custom autograd.Function {cls.__module__}.{cls.__qualname__} "
                "(torch.fx would trace its forward and drop its backward)"
            )
        return original_apply.__func__(cls, *args, **kwargs)

    def setattr_(self, name, value):
        if name == "requires_grad":
            refuse("sets `requires_grad` on a tensor inside its forward")
        original_setattr(self, name, value)

    from jaxgrad.nn.capture.export_autograd import patched

    with patched(
        (function_class, "apply", classmethod(apply)), (torch.fx.Proxy, "__setattr__", setattr_)
    ):
        yield


def trace(module, path: str = "") -> GraphModule:
    """Trace ``module``'s forward with ``torch.fx``, in both of torch's modes, and
    convert it.

    The forward is traced once after ``module.train()`` and once after
    ``module.eval()`` (the flags of every submodule are restored afterwards): a
    forward that reads ``self.training`` gets a graph per mode, and ``apply(train=...)``
    runs the one asked for. In-place writes (``y.relu_()``, ``out += identity``,
    ``ReLU(inplace=True)``) are reproduced by reading the written result afterwards,
    when nothing else aliases the written value; a write to an input, a module
    tensor or through a view is refused.

    Args:
      module: a torch ``nn.Module`` with custom ``forward`` code.
      path: its path in the enclosing model, for messages.

    Raises:
      ValueError: the module cannot be traced, or an op, argument, attribute,
        module or in-place write is unsupported; naming the op, the node and the
        module path.
    """
    import torch.fx  # binds `torch` too: jaxgrad's one torch import, lazy, here only

    class _Tracer(torch.fx.Tracer):
        # stop at every layer torch defines (converted or refused by the converter
        # table); trace through containers and the user's own code
        def is_leaf_module(self, m, qualname):
            return converters.torch_class_name(m) not in (None, "Sequential") or (
                type(m).__module__.startswith("torch.nn.")
                and type(m).__name__ not in ("Sequential", "ModuleList", "ModuleDict")
            )

        # the forward runs for real while it is traced, so a `no_grad`,
        # `set_grad_enabled(False)` or `inference_mode` region turns torch's grad mode
        # off around the nodes it records: what torch computes there has no gradient
        def create_node(self, *args, **kwargs):
            node = super().create_node(*args, **kwargs)
            node.meta["grad_enabled"] = torch.is_grad_enabled()
            return node

    state = module.state_dict()
    parameters = {name for name, _ in module.named_parameters(remove_duplicate=False)}
    _refuse_tied_parameters(module, path)
    names = _names_of_callables(torch)
    flags = {name: m.training for name, m in module.named_modules(remove_duplicate=False)}
    traces = {}
    try:
        with (
            _autograd_the_layer_path_refuses(torch, module, path),
            python_numbers.refused_on_proxies(torch),
            torch.enable_grad(),
        ):
            for train in (True, False):
                module.train(train)
                traces[train] = _trace_mode(module, path, _Tracer, names, state)
    finally:
        for name, m in module.named_modules(remove_duplicate=False):
            m.training = flags[name]
    (nodes, layers, owned), (eval_nodes, eval_layers, eval_owned) = traces[True], traces[False]
    layers = {**layers, **{k: v for k, v in eval_layers.items() if k not in layers}}
    owned |= eval_owned
    tensors = tuple(
        (
            name,
            tuple(value.shape),
            np.dtype(canonical_dtype(value.dtype)).name,
            "param" if name in parameters else "buffer",
        )
        for name, value in state.items()
        if name not in owned
    )
    return GraphModule(
        type(module).__name__,
        nodes,
        tuple(layers.items()),
        tensors,
        tuple(state),
        None if eval_nodes == nodes else eval_nodes,
    )
