"""Capture with ``torch.export``: ``capture(module, args, kwargs) -> ExportedModule``.

``from_torch`` hands here what ``torch.fx.symbolic_trace`` cannot take (a Hugging Face
model, a vision transformer, a forward with ``torch._assert`` or ``torch.finfo``): the
module is exported (``torch.export.export(..., strict=False)``: torch runs the
Python forward on fake tensors, so any Python the forward contains is fine as long as
it does not branch on tensor *values*) once in training mode and once in evaluation
mode, each program decomposed to core ATen (``run_decompositions()``), and every
node mapped through the one ATen table (``jaxgrad.nn.aten``). torch is imported
here, lazily: ``import jaxgrad`` never imports it.

What the graph signature gives becomes the model's state: parameters keep their
``state_dict`` keys, persistent buffers are buffers, and buffers the training program
writes are the new buffers ``apply`` returns; non-persistent buffers and lifted
tensor constants are constants. In-place ops and writes through views arrive
functionalised by ``torch.export``; a forward that writes its own *input* or a
parameter is refused. Randomness torch cannot see (NumPy or Python's ``random``
drawn while the forward runs, e.g. Wav2Vec2's SpecAugment masks) would be frozen
into the program as a constant: when the training program holds tensors the forward
made (lifted constants, not a module's buffers), it is captured again under other
seeds and any such constant that changes is refused, named.

Every refusal is a ``ValueError`` naming the node, the op and the torch module path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import sys
import threading
import warnings

import numpy as np

from jaxgrad._arrays import canonical_dtype
from jaxgrad.nn import aten
from jaxgrad.nn.capture import export_autograd, python_numbers
from jaxgrad.nn.capture import layers as converters
from jaxgrad.nn.capture.program import (
    SYM_OPS,
    Constants,
    ExportedModule,
    FunctionSpec,
    OpNode,
    Program,
    TensorMeta,
    UserRule,
)
from jaxgrad.nn.capture.refs import Ref
from jaxgrad.nn.capture.shapes import ShapeSpec, SymDim, is_symbolic, symbols


def _where(path: str) -> str:
    return f"at {path!r}" if path else "at the top level"


# ------------------------------------------------------------- node contents
def _meta(value):
    """What torch recorded for a node's result: TensorMeta (sizes torch left symbolic
    as ``SymDim``), a tuple, or None (symbolic scalars included)."""
    kind = type(value).__name__
    if hasattr(value, "shape") and hasattr(value, "dtype") and kind != "ndarray":
        shape = tuple(_size(s) for s in value.shape)
        return TensorMeta(shape, np.dtype(canonical_dtype(value.dtype)).name)
    if isinstance(value, (tuple, list)):
        return tuple(_meta(v) for v in value)
    if kind == "SymInt":  # a size the program computes: its expression, for a region run alone
        return _size(value)
    return None


def _size(size):
    """A tensor size: an int, or a ``SymDim`` for a size torch kept symbolic."""
    if isinstance(size, int):
        return size
    expr = size.node.expr
    if expr.is_number:
        return int(expr)
    return SymDim(sym_expr(expr))


class _Dynamic(Exception):
    """A symbolic expression jaxgrad cannot evaluate."""


class DynamicShapeError(ValueError):
    """A capture with dynamic dimensions failed where one at the example's shapes may
    not: ``capture`` with ``dynamic_shapes="auto"`` captures again at static shapes."""


def sym_expr(expr):
    """A sympy expression (torch's symbolic sizes and guards) as ``jaxgrad.nn.capture.shapes``'
    nested tuples; ``_Dynamic`` for what it cannot hold (a data-dependent size,
    a float)."""
    import sympy

    name = type(expr).__name__
    if expr is sympy.true or expr is sympy.false:
        return bool(expr)
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        if not expr.name.startswith("s"):
            raise _Dynamic(f"a data-dependent size {expr.name} (its value comes from a tensor)")
        return ("sym", expr.name)
    args = expr.args
    if isinstance(expr, sympy.Pow) and args[1].is_Integer and int(args[1]) >= 0:
        return ("pow", sym_expr(args[0]), int(args[1]))
    ops = {
        "Add": "add",
        "Mul": "mul",
        "FloorDiv": "floordiv",
        "Mod": "mod",
        "PythonMod": "mod",
        "Max": "max",
        "Min": "min",
        "Equality": "eq",
        "Unequality": "ne",
        "GreaterThan": "ge",
        "StrictGreaterThan": "gt",
        "LessThan": "le",
        "StrictLessThan": "lt",
        "And": "and",
        "Or": "or",
        "Not": "not",
    }
    if name in ops:
        return (ops[name], *(sym_expr(a) for a in args))
    if name in ("CeilToInt", "FloorToInt") and type(args[0]).__name__ == "IntTrueDiv":
        # math.ceil / math.floor of an integer division of sizes (MobileViT's patches)
        numerator, denominator = (sym_expr(a) for a in args[0].args)
        if name == "FloorToInt":
            return ("floordiv", numerator, denominator)
        return ("mul", -1, ("floordiv", ("mul", -1, numerator), denominator))
    raise _Dynamic(f"a size expression jaxgrad does not evaluate ({name}: {expr})")


def _argument(value, describe):
    """A node argument as a hashable constant (``Ref`` for other nodes)."""
    kind = type(value).__name__
    if kind == "Node" and hasattr(value, "op"):
        return Ref(value.name)
    if isinstance(value, (list, tuple)):
        return tuple(_argument(v, describe) for v in value)
    if value is None or isinstance(value, (bool, int, float, complex, str)):
        return value
    text = str(value)
    if kind == "dtype" and text.startswith("torch."):
        return np.dtype(canonical_dtype(value))
    if kind in ("device", "layout", "memory_format"):
        return text
    if kind == "SymInt":
        return _size(value)
    raise ValueError(f"from_torch: {describe()}: unsupported argument {value!r} ({kind}).")


def module_path(node) -> str:
    """The torch module path a node ran in (its innermost ``nn_module_stack`` entry)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    path = path if isinstance(path, str) else str(path)
    # torch's placeholder for nodes it made outside any module (a dynamic capture's
    # size computations)
    return "" if path.startswith("_empty_nn_module_stack") else path


_NO_OPS = {
    # shape and value assertions torch already checked on the example
    "aten._assert_tensor_metadata.default",
    "aten.sym_constrain_range_for_size.default",
    "aten.sym_constrain_range.default",
    "aten._assert_async.msg",
}


def build_nodes(graph_nodes, placeholders: dict, *, class_name: str, path: str):
    """The ``OpNode``\\ s of an ATen graph's ``call_function`` nodes.

    Args:
      graph_nodes: the fx graph's nodes, in order.
      placeholders: the names of nodes whose values the caller supplies (placeholders,
        and ``get_attr`` constants of a ``make_fx`` graph).
      class_name, path: for messages.

    Raises:
      ValueError: an op outside the table, an in-place op, a dynamic shape, or
        an unsupported argument; naming the node, the op and the module path.
    """
    graph_nodes = list(graph_nodes)
    dead = _dead(graph_nodes)
    divisions = _ceil_divisions(graph_nodes)
    dead |= {division.name for division in divisions.values()}
    nodes, random_counts = [], {}
    for node in graph_nodes:
        if node.op in ("placeholder", "output") or node.name in placeholders:
            continue
        if node.name in dead:
            continue
        if node.name in divisions:  # math.ceil(a / b) of sizes: -(-a // b), exact for ints
            where = child_path_of(path, module_path(node))
            args = _argument(tuple(divisions[node.name].args), lambda: node.name)  # noqa: B023
            nodes.append(OpNode(node.name, "sym.ceildiv", args, (), where, None, None))
            continue
        where = child_path_of(path, module_path(node))

        def describe(node=node, where=where):
            return f"node {node.name!r} ({node.op} {node.target}) in {class_name} {_where(where)}"

        if node.op != "call_function":
            raise ValueError(
                f"from_torch: {describe()}: a captured program may hold only ATen calls "
                f"(got {node.op}); a torch.cond / higher-order op or a submodule call is "
                "not supported."
            )
        target = _target(node)
        if target in _NO_OPS:
            continue
        if target == "aten._local_scalar_dense.default":
            import torch

            number = python_numbers.from_stack_trace(torch, node.meta.get("stack_trace"))
            if number is not None:  # `.item()` / `.tolist()`, named with the user's line
                raise ValueError(python_numbers.refusal(describe(), number))
            raise ValueError(
                f"from_torch: {describe()} reads a tensor's value as a Python number "
                "(`.item()`, `int(t)`, `float(t)`): the forward computes a size or a branch "
                "from tensor values, which a captured program cannot do. Compute it from "
                "shapes, or outside the forward."
            )
        if target != "getitem" and aten.lookup(target) is None and target not in SYM_OPS:
            raise ValueError(
                f"from_torch: unmapped op {target} at {describe()}; jaxgrad's ATen table "
                f"maps {len(aten.supported())} overloads (jaxgrad.nn.aten.supported()), "
                "not this one."
            )
        if target.startswith("aten.as_strided"):
            source = node.args[0].meta.get("val") if hasattr(node.args[0], "meta") else None
            if source is None or not source.is_contiguous() or source.storage_offset() != 0:
                raise ValueError(
                    f"from_torch: {describe()} reads a tensor's memory through strides, and "
                    "the tensor is not a contiguous one of its own; jaxgrad's arrays have no "
                    "strides, so only as_strided of a contiguous tensor is reproduced."
                )
        name = target.split(".")[1] if target.startswith("aten.") else ""
        if name.endswith("_") and not name.startswith("_"):
            raise ValueError(
                f"from_torch: {describe()}: an in-place op survived "
                "functionalisation; this program cannot be reproduced purely."
            )
        try:
            args = _argument(tuple(node.args), describe)
            kwargs = tuple((k, _argument(v, describe)) for k, v in node.kwargs.items())
            meta = _meta(node.meta.get("val"))
        except _Dynamic as dynamic:
            raise DynamicShapeError(
                f"from_torch: {describe()} has {dynamic}; capture it at the example's "
                "shapes: `from_torch(..., dynamic_shapes=None)`."
            ) from None
        key_path = None
        op = aten.lookup(target) if target != "getitem" and target not in SYM_OPS else None
        if op is not None and op.sample is not None:
            index = random_counts.get(where, 0)
            random_counts[where] = index + 1
            key_path = f"{where}#{index}"
        nodes.append(OpNode(node.name, target, args, kwargs, where, meta, key_path))
    return tuple(nodes)


def _dead(graph_nodes) -> set:
    """Names of the pure nodes whose values nothing live reads.

    A dynamic capture keeps views that functionalisation regenerated and nobody reads
    (``view(addmm, [s0, s1, 8])`` beside the one the program uses); left in, such a node
    would read a layer's inner value from outside its region, and the region would not
    run whole as a stock layer. Only ops the table holds without randomness, size
    arithmetic and ``getitem`` are dropped; anything else (random ops, whose keys are
    numbered in order, jaxgrad's marks, asserts) stays."""
    live, dead = set(), set()
    for node in reversed(graph_nodes):
        if node.op != "call_function" or any(user.name in live for user in node.users):
            live.add(node.name)
            continue
        target = _target(node)
        op = aten.lookup(target) if target != "getitem" else None
        if "assert" in target:  # a check (torch's _assert_scalar on sizes) is never dead
            live.add(node.name)
        elif (
            target == "getitem"
            or target in SYM_OPS
            or (op is not None and op.sample is None and not target.startswith("jaxgrad"))
        ):
            dead.add(node.name)
        else:
            live.add(node.name)
    return dead


def _ceil_divisions(graph_nodes) -> dict:
    """``{ceil node: its division}`` for ``math.ceil(a / b)`` of sizes whose division
    nothing else reads (MobileViT's patch count): torch divides symbolic sizes as
    floats, which a ``jax.export`` dimension cannot; ``-(-a // b)`` is the same integer."""
    found = {}
    for node in graph_nodes:
        if node.op != "call_function" or _target(node) != "sym.ceil" or len(node.args) != 1:
            continue
        division = node.args[0]
        if (
            getattr(division, "op", None) == "call_function"
            and _target(division) == "sym.truediv"
            and len(division.users) == 1
        ):
            found[node.name] = division
    return found


def _target(node) -> str:
    """The table's name of an fx ``call_function`` node's target."""
    target = "getitem" if node.target is operator.getitem else str(node.target)
    if getattr(node.target, "__module__", None) in ("_operator", "torch", "math") and (
        f"sym.{node.target.__name__}" in SYM_OPS
    ):
        target = f"sym.{node.target.__name__}"  # arithmetic on symbolic sizes
    return target


def child_path_of(path: str, inner: str) -> str:
    if not inner:
        return path
    return f"{path}.{inner}" if path else inner


# ------------------------------------------------------------------- pytrees
def tree_of(spec, describe) -> tuple:
    """A torch pytree ``TreeSpec`` as jaxgrad's hashable structure (``program.flatten``):
    tuples, lists, dicts, None, and mapping-like types (Hugging Face ``ModelOutput``,
    whose context is its field names) as dicts."""
    if spec.is_leaf():
        return ("leaf",)
    kind = spec.type
    children = tuple(tree_of(child, describe) for child in spec.children())
    if kind is type(None):
        return ("none",)
    if kind is tuple or (
        isinstance(kind, type) and issubclass(kind, tuple) and not hasattr(kind, "_fields")
    ):
        return ("tuple", children)
    if kind is list:
        return ("list", children)
    if hasattr(kind, "_fields") or kind.__name__ == "namedtuple":
        # a namedtuple (torch's pytree files every namedtuple under collections.namedtuple,
        # its class as the context): a tuple of its fields, as torchvision's GoogLeNet
        # and Inception v3 return their auxiliary logits in training
        return ("tuple", children)
    context = spec.context
    if kind is dict or (
        isinstance(context, (list, tuple)) and all(isinstance(k, str) for k in context)
    ):
        return ("dict", tuple(context), children)
    raise ValueError(
        f"from_torch: {describe()}: unsupported container {kind.__name__} "
        "(supported: tuples, lists, dicts, None, Hugging Face ModelOutputs)."
    )


# ------------------------------------------------------------------ capture
def _program(
    ep,
    class_name: str,
    path: str,
    persistent: set,
    aliases: dict,
    frozen: set = frozenset(),
    specs: dict | None = None,
    written: set = frozenset(),
):
    """One mode's ``Program``, its constants and its input description; ``frozen``:
    parameters the forward freezes; ``specs``: captured Functions, by call;
    ``written``: parameters without a gradient that a mode's forward writes
    (``written_parameters``), read and returned as state like buffers."""
    specs = {} if specs is None else specs
    from torch.export.graph_signature import InputKind, OutputKind

    sig = ep.graph_signature
    inputs, constants, input_meta, user_index, dims = [], {}, [], 0, []
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    for spec in sig.input_specs:
        name = spec.arg.name
        if spec.kind == InputKind.PARAMETER:
            target = aliases.get(spec.target, spec.target)
            inputs.append((name, "buffer" if target in written else "param", target))
        elif spec.kind == InputKind.BUFFER and spec.target in persistent:
            inputs.append((name, "buffer", aliases.get(spec.target, spec.target)))
        elif spec.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            value = ep.constants[spec.target]
            constants[spec.target] = value.detach().cpu().numpy().copy()
            inputs.append((name, "constant", spec.target))
        elif spec.kind == InputKind.USER_INPUT:
            value = getattr(spec.arg, "value", None)
            if type(spec.arg).__name__ == "TensorArgument":
                try:
                    meta = _meta(placeholders[name].meta.get("val"))
                except _Dynamic as dynamic:
                    raise DynamicShapeError(
                        f"from_torch: input {name!r} of {class_name} has {dynamic}."
                    ) from None
                input_meta.append((user_index, meta))
                inputs.append((name, "input", user_index))
                if is_symbolic(meta.shape):
                    dims.append((name, meta.shape))
            else:  # a Python value torch specialised the program to
                input_meta.append((user_index, ("const", value)))
                if name in placeholders:
                    inputs.append((name, "input", user_index))
            user_index += 1
        else:
            raise ValueError(
                f"from_torch: {class_name} {_where(path)}: unsupported program "
                f"input {spec.arg.name!r} of kind {spec.kind.name}."
            )
    outputs, buffer_updates = [], []
    for spec in sig.output_specs:
        arg = spec.arg
        value = (
            Ref(arg.name) if type(arg).__name__ == "TensorArgument" else getattr(arg, "value", None)
        )
        if spec.kind == OutputKind.USER_OUTPUT:
            outputs.append(value)
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            if spec.target not in persistent:
                raise ValueError(
                    f"from_torch: {class_name} {_where(path)} writes the non-persistent buffer "
                    f"{spec.target!r} in its forward; jaxgrad keeps such buffers as constants. "
                    "Register it as a persistent buffer to thread it through `apply`."
                )
            buffer_updates.append((aliases.get(spec.target, spec.target), value))
        elif (
            spec.kind == OutputKind.PARAMETER_MUTATION
            and aliases.get(spec.target, spec.target) in written
        ):
            buffer_updates.append((aliases.get(spec.target, spec.target), value))
        else:
            what = {
                "USER_INPUT_MUTATION": "writes its input in place",
                "PARAMETER_MUTATION": "writes a parameter that torch trains (requires_grad=True) "
                "in place",
            }.get(spec.kind.name, spec.kind.name)
            raise ValueError(
                f"from_torch: {class_name} {_where(path)} {what} (output {arg.name!r}, "
                f"{spec.target!r}); a pure function cannot reproduce that side effect. Write "
                "the forward out of place."
            )
    nodes = build_nodes(ep.graph.nodes, placeholders, class_name=class_name, path=path)
    nodes = _with_function_specs(nodes, ep, class_name, path, specs)
    out_tree = tree_of(ep.call_spec.out_spec, lambda: f"the output of {class_name}")
    program = Program(
        tuple(inputs), nodes, tuple(outputs), out_tree, tuple(buffer_updates), tuple(dims)
    )
    return _freeze(program, frozen), constants, tuple(input_meta)


# ------------------------------------------------------ autograd in a forward
def _freeze(program: Program, frozen: set) -> Program:
    """Every read of a parameter in ``frozen`` (the forward called
    ``requires_grad_(False)`` on it: torch gives it no gradient) goes through a
    stop-gradient."""
    placeholders = {
        name: target
        for name, kind, target in program.inputs
        if kind == "param" and target in frozen
    }
    if not placeholders:
        return program
    renames = {name: f"{name}__frozen" for name in placeholders}
    cuts = tuple(
        OpNode(renames[name], "jaxgrad.stop_gradient.default", (Ref(name),), (), "", None)
        for name in placeholders
    )

    def rename(value):
        if isinstance(value, Ref):
            return Ref(renames.get(value.name, value.name))
        if isinstance(value, tuple):
            return tuple(rename(v) for v in value)
        return value

    nodes = tuple(
        dataclasses.replace(node, args=rename(node.args), kwargs=rename(node.kwargs))
        for node in program.nodes
    )
    return dataclasses.replace(
        program,
        nodes=cuts + nodes,
        outputs=tuple(rename(o) for o in program.outputs),
        buffer_updates=tuple((b, rename(r)) for b, r in program.buffer_updates),
    )


def _with_function_specs(nodes, ep, class_name, path, specs: dict) -> tuple:
    """Each ``jaxgrad.autograd_function`` node with its Function captured
    (``FunctionSpec``) or the user's registered rule (``UserRule``) in place of the
    call number; ``specs`` caches them by class and input shapes."""
    graph_nodes = {n.name: n for n in ep.graph.nodes}
    result = []
    for node in nodes:
        if not export_autograd.is_function_call(node.target):
            result.append(node)
            continue
        refs, call_id = node.args
        call = export_autograd.call_of(call_id)
        metas = tuple(_meta(graph_nodes[ref.name].meta.get("val")) for ref in refs)
        examples = tuple(_example_meta(graph_nodes[ref.name].meta.get("val")) for ref in refs)
        other = tuple(
            (i, _argument(a, lambda: call.name))  # noqa: B023
            for i, a in enumerate(call.args)
            if i not in call.tensor_positions
        )
        key = (
            call.cls,
            metas,
            other,
            tuple(sorted(call.kwargs.items()))
            if all(isinstance(v, (int, float, bool, str, type(None))) for v in call.kwargs.values())
            else id(call),
        )
        if key not in specs:
            where = child_path_of(path, node.path)
            if call.name in aten._autograd.FUNCTIONS:
                if call.kwargs:
                    raise ValueError(
                        f"from_torch: the custom autograd.Function {call.name} {_where(where)} "
                        "is called with keyword arguments; a registered rule takes positional "
                        "ones."
                    )
                specs[key] = UserRule(call.name, other)
            else:
                specs[key] = _capture_function(
                    call,
                    examples,
                    _example_meta(graph_nodes[node.name].meta.get("val")),
                    class_name,
                    where,
                    dynamic=any(is_symbolic(m.shape) for m in metas),
                )
        result.append(dataclasses.replace(node, args=(refs, specs[key])))
    return tuple(result)


class _Unreproducible(Exception):
    """Why a custom Function's forward or backward cannot be captured."""


def _example_meta(value):
    """``_meta`` with the example's sizes in place of symbolic ones."""
    if isinstance(value, (tuple, list)):
        return tuple(_example_meta(v) for v in value)
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        shape = tuple(s if isinstance(s, int) else int(s.node.hint) for s in value.shape)
        return TensorMeta(shape, np.dtype(canonical_dtype(value.dtype)).name)
    return None


def _capture_function(call, metas, output_meta, class_name, where, dynamic=False) -> FunctionSpec:
    """A custom ``autograd.Function``'s forward and its own backward, each captured
    on its own with ``torch.export`` at these input shapes (``metas``: the example's;
    ``dynamic``: every size kept symbolic, as the enclosing capture's are)."""
    import torch

    generator = torch.Generator().manual_seed(0)  # the user's global RNG left alone

    def example(meta):
        dtype = getattr(torch, np.dtype(meta.dtype).name)
        if np.dtype(meta.dtype).kind in "fc":
            return torch.randn(meta.shape, dtype=dtype, generator=generator)
        return torch.zeros(meta.shape, dtype=dtype)

    tensors = [example(m) for m in metas]
    outputs = output_meta if isinstance(output_meta, tuple) else (output_meta,)
    grads = [example(m) for m in outputs]
    n = len(tensors)
    record = {}

    class Forward(torch.nn.Module):
        def forward(self, *values):
            return tuple(
                call.run_forward(list(values), export_autograd._Ctx(call.needs_input_grad()))
            )

    class Backward(torch.nn.Module):
        def forward(self, *values):
            inputs, grads_in = list(values[:n]), list(values[n:])
            ctx = export_autograd._Ctx(call.needs_input_grad())
            outs = call.run_forward(inputs, ctx)
            record["non_differentiable"] = tuple(
                i for i, out in enumerate(outs) if any(out is t for t in ctx.non_differentiable)
            )
            result = call.cls.backward(ctx, *grads_in)
            result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
            grads_out = []
            for position, tensor in zip(call.tensor_positions, inputs):
                grad = result[position] if position < len(result) else None
                grads_out.append(torch.zeros_like(tensor) if grad is None else grad)
            return tuple(grads_out)

    def program_of(wrapper, args, part):
        problems: list[str] = []
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
                # `.data` read as detach(), a Function the Function calls captured in turn
                with export_autograd.during_export(wrapper, set(), problems):
                    exported = torch.export.export(
                        wrapper,
                        tuple(args),
                        strict=False,
                        dynamic_shapes=auto_dims(wrapper, args, {}) if dynamic else None,
                    )
                exported = exported.run_decompositions(decompositions())
            program, constants, _ = _program(exported, call.name, "", set(), {}, set(), {})
        except Exception as error:  # noqa: BLE001 - reported, named, below
            text = str(error).strip().split("\n")[0][:300]
            raise _Unreproducible(
                f"its {part} cannot be captured ({type(error).__name__}: {text})"
            ) from error
        if problems:
            raise _Unreproducible(f"in its {part}, {'; '.join(problems)}")
        if program.random_nodes():
            raise _Unreproducible(f"its {part} draws random numbers")
        return program, constants

    try:
        forward, forward_constants = program_of(Forward(), tensors, "forward")
        backward, backward_constants = program_of(Backward(), tensors + grads, "backward")
    except _Unreproducible as reason:
        if dynamic:  # perhaps at the example's shapes: the enclosing capture tries those
            raise DynamicShapeError(
                f"from_torch: the custom autograd.Function {call.name} "
                f"cannot be captured with dynamic sizes: {reason}"
            ) from None
        raise ValueError(
            f"from_torch: the custom autograd.Function {call.name} called {_where(where)} in "
            f"{class_name} cannot be reproduced: {reason}. jaxgrad honours a Function's own "
            "backward by capturing it, and refuses what it cannot capture rather than "
            "differentiate the forward instead. Give jaxgrad its JAX rule: "
            f"`jaxgrad.nn.register_autograd_function({call.name!r}, fn)`, fn taking the "
            "Function's tensor arguments (a jax.custom_vjp for your own backward)."
        ) from reason.__cause__
    return FunctionSpec(
        call.name,
        forward,
        backward,
        {"forward": forward_constants, "backward": backward_constants},
        tuple(outputs),
        record.get("non_differentiable", ()),
    )


@contextlib.contextmanager
def _rng_state(seed=None):
    """Restore NumPy's, Python's and torch's global random states afterwards (a
    non-strict export runs the forward's Python, which may draw); ``seed`` reseeds
    all three inside."""
    import random

    import torch

    saved = (np.random.get_state(), random.getstate(), torch.get_rng_state())
    try:
        if seed is not None:
            np.random.seed(seed)
            random.seed(seed)
            torch.manual_seed(seed)
        yield
    finally:
        np.random.set_state(saved[0])
        random.setstate(saved[1])
        torch.set_rng_state(saved[2])


def decompositions():
    """torch.export's core-ATen decomposition table, with two changes.

    - Scaled dot-product attention decomposes to its math form (matmuls and a softmax)
      directly. The default route goes through the CPU flash-attention kernel, whose
      output strides make a later ``view`` of GPT-2's attention fail to decompose;
      torch's math kernel expects a boolean mask converted first, as
      ``scaled_dot_product_attention`` itself does.
    - ``bernoulli(probs)`` stays one op (see below), and so do ``hardsigmoid`` (torch's
      backward constant), attention's ``_safe_softmax`` (its cost), and ``xlogy``,
      ``std``, ``sinc`` and ``hardswish`` (torch's derivatives at their edges).
    """
    import torch

    aten_ops = torch.ops.aten
    table = torch.export.default_decompositions()

    def sdpa(
        query,
        key,
        value,
        attn_mask=None,
        dropout_p=0.0,
        is_causal=False,
        scale=None,
        enable_gqa=False,
    ):
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill(
                attn_mask.logical_not(), float("-inf")
            )
        return aten_ops._scaled_dot_product_attention_math(
            query,
            key,
            value,
            attn_mask,
            dropout_p,
            is_causal,
            None,
            scale=scale,
            enable_gqa=enable_gqa,
        )[0]

    table[aten_ops.scaled_dot_product_attention.default] = sdpa
    # torch draws `bernoulli(probs)` as one op (0/1 values); decomposed, it would become
    # `rand(...) < probs`, whose uniform draw torch never makes: keep it whole, so a
    # recorded torch draw maps onto it
    table.pop(aten_ops.bernoulli.default, None)
    # hardsigmoid's backward multiplies by float32(1/6) in every dtype: decomposed to
    # add/clamp/div, JAX would differentiate the exact 1/6 (3e-8 relative in float64,
    # mobilenet_v3's squeeze-excitation gradients): keep it whole
    table.pop(aten_ops.hardsigmoid.default, None)
    # attention's safe softmax decomposes to softmax, an all(x == -inf) reduction and a
    # where: a third of the attention core's time on XLA:CPU; the table's entry costs
    # what a softmax costs and gives the fully masked rows torch's zero gradient
    table.pop(aten_ops._safe_softmax.default, None)
    # torch defines these derivatives where their decompositions' autodiff does not:
    # xlogy's d/dx log(y) at x = 0 (decomposed: 0), std's 0 on a constant row and
    # sinc's 0 at 0 (decomposed: 0·inf = NaN), hardswish's 0 at -3 and 1 at 3
    # (decomposed: the clamp passes its bounds): keep them whole
    for op in (
        aten_ops.xlogy.Tensor,
        aten_ops.std.correction,
        aten_ops.sinc.default,
        aten_ops.hardswish.default,
    ):
        table.pop(op, None)
    return table


def auto_dims(module, args, kwargs, axes: str = "auto"):
    """torch's ``dynamic_shapes`` with every size of every tensor input dynamic
    (``Dim.AUTO``: torch keeps what the code allows symbolic and fixes the rest), or
    with ``axes="batch"`` only each tensor input's first size; sizes 0 and 1 stay fixed,
    as torch would fix them anyway."""
    import torch
    from torch.export import Dim, ShapesCollection

    collection = ShapesCollection()
    for leaf in torch.utils._pytree.tree_leaves((tuple(args), dict(kwargs))):
        if isinstance(leaf, torch.Tensor):
            shape = leaf.shape[:1] if axes == "batch" else leaf.shape
            collection[leaf] = {axis: Dim.AUTO for axis, size in enumerate(shape) if size >= 2}
    return collection.dynamic_shapes(module, tuple(args), dict(kwargs))


def _dynamic_axes(spec) -> set:
    """The axis positions ``spec`` (``torch.export``'s ``dynamic_shapes``: nested
    tuples and dicts, each tensor's a ``{axis: Dim}`` dict or a per-axis list) makes
    dynamic, over every tensor."""
    if isinstance(spec, dict):
        if spec and all(isinstance(key, int) for key in spec):
            return {axis for axis, dim in spec.items() if dim is not None}
        return set().union(*(_dynamic_axes(value) for value in spec.values()))
    if isinstance(spec, (list, tuple)):
        if any(isinstance(value, (dict, list, tuple)) for value in spec):
            return set().union(*(_dynamic_axes(value) for value in spec))
        return {axis for axis, dim in enumerate(spec) if dim is not None}
    return set()


def _dynamic_kind(spec):
    """``_slow_capture_notice``'s ``dynamic``: None for a static capture, ``"batch"``
    where only the first axis of any tensor is dynamic, else ``"sizes"``."""
    if spec is None:
        return None
    return "batch" if _dynamic_axes(spec) <= {0} else "sizes"


SLOW_CAPTURE_SECONDS = 60.0
"""After this long in one ``torch.export`` with dynamic sizes, ``from_torch`` says so on
stderr, once, with what to do (``_slow_capture_notice``)."""


@contextlib.contextmanager
def _slow_capture_notice(class_name: str, mode: str, dynamic):
    """A line on stderr if the capture inside outlasts ``SLOW_CAPTURE_SECONDS`` with
    dynamic sizes: torch's reasoning about symbolic image sides can take many minutes
    (measured: a tiny Hugging Face Swin 524 s with every size dynamic, 8.5 s with only
    the batch), and nothing else shows the user why from_torch is still working.

    ``dynamic``: falsy for a static capture (nothing to say), ``"batch"`` where only
    batch axes are dynamic (the notice then offers only static shapes), else truthy."""
    if not dynamic:
        yield
        return
    faster = (
        "dynamic_shapes='batch' keeps only the batch dynamic and dynamic_shapes=None the "
        "example's shapes, both captured far faster"
        if dynamic != "batch"
        else "dynamic_shapes=None keeps the example's shapes, captured faster"
    )

    def notice():
        sys.stderr.write(
            f"from_torch: torch.export is still capturing {class_name} in {mode} mode after "
            f"{SLOW_CAPTURE_SECONDS:g} s with dynamic sizes. Symbolic sizes can take "
            f"torch many minutes (window reshapes, e.g. Swin); {faster}.\n"
        )
        sys.stderr.flush()

    timer = threading.Timer(SLOW_CAPTURE_SECONDS, notice)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _export(
    module,
    args,
    kwargs,
    train: bool,
    class_name: str,
    path: str,
    seed=None,
    frozen=None,
    dynamic_shapes=None,
):
    """One mode's program, decomposed; autograd written in the forward marked first
    (``export_autograd``). ``frozen`` receives the parameters the forward freezes;
    ``dynamic_shapes`` goes to ``torch.export`` as is (a failure is then a
    ``DynamicShapeError``). A failure caused by a Python number the forward reads from
    a tensor (``float(t)``, ``.item()``, ``if t > 0:``) names the construct and the
    user's line (``python_numbers``); torch's logs and partial-graph dumps are kept off
    stderr meanwhile."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    mode = "training" if train else "evaluation"
    module.train(train)
    problems: list[str] = []
    numbers: list = []  # Python numbers the forward reads from tensors (python_numbers)
    frozen = set() if frozen is None else frozen
    try:
        with _rng_state(seed), warnings.catch_warnings():
            # torch's own pytree code warns about its own deprecated LeafSpec
            warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
            # attention traced on torch's math kernel, the form `decompositions` gives it:
            # traced on the CPU flash kernel, whose output is laid out (batch, length,
            # heads, dim), a model's `.contiguous()` after transposing it back is a no-op
            # and left out of the graph, and the `view` after it (Data2VecVision's) fails
            # once the math form's output replaces the flash kernel's
            with (
                export_autograd.during_export(module, frozen, problems),
                python_numbers.recorded(torch, numbers),
                python_numbers.quiet(torch),
                sdpa_kernel(SDPBackend.MATH),
                _slow_capture_notice(class_name, mode, _dynamic_kind(dynamic_shapes)),
            ):
                exported = torch.export.export(
                    module, tuple(args), dict(kwargs), strict=False, dynamic_shapes=dynamic_shapes
                )
            if not problems:
                export_autograd.mark_autograd(
                    exported, lambda: f"{class_name} {_where(path)} in {mode} mode", frozen
                )
                return exported.run_decompositions(decompositions())
    except Exception as error:  # torch's own messages say what it could not follow
        if isinstance(error, ValueError) and str(error).startswith("from_torch:"):
            raise
        kind = DynamicShapeError if dynamic_shapes is not None else ValueError
        number = python_numbers.explained(torch, error, numbers)
        if number is not None:
            raise kind(
                python_numbers.refusal(f"{class_name} {_where(path)}", number, mode)
                + _data_dependent_hint(error, module, number=True)
            ) from error
        message = str(error).strip().split("\n")[0][:400]
        raise kind(
            f"from_torch: torch.export cannot capture {class_name} {_where(path)} in {mode} "
            f"mode ({type(error).__name__}: {message}). jaxgrad needs both of torch's modes "
            "(apply(train=True) and apply(train=False)); a forward that branches on tensor "
            "values (e.g. a random layer drop decided by `torch.rand() < p`) or returns a "
            "type torch cannot flatten (e.g. a KV cache: pass use_cache=False) cannot be "
            f"captured.{_data_dependent_hint(error, module)}"
        ) from error
    raise ValueError(
        f"from_torch: {class_name} {_where(path)} in {mode} mode: {'; '.join(problems)}. "
        "A construct jaxgrad cannot reproduce exactly is refused rather than converted with "
        "different gradients."
    )


def _data_dependent_hint(error, module=None, number: bool = False) -> str:
    """What to do about a shape or a loop that depends on tensor values; the
    mixture-of-experts advice only for a model with experts (``module`` names them, or
    torch failed on a user line that calls ``nonzero``). ``number``: the message already
    names a Python number read from a tensor (``python_numbers``), said once."""
    import torch

    if "DataDependent" not in type(error).__name__ and "data-dependent" not in str(error):
        return ""
    lines = python_numbers.failing_lines(torch, error)
    experts = (module is not None and python_numbers.names_experts(module)) or any(
        "nonzero" in line for line in lines
    )
    general = (
        ""
        if number
        else (
            " Here the forward's shapes or loop count depend on tensor values (a loop over "
            "`nonzero()`, `torch.where(mask)` indices): a static-shape program cannot hold "
            "that."
        )
    )
    if not experts:
        return general
    return general + (
        " A mixture-of-experts layer that runs only the experts its tokens chose is "
        "such a forward; compute every expert densely instead (Hugging Face models: "
        '`experts_implementation="batched_mm"` in the config, which converts).'
    )


def _state_names(module):
    """Params in ``named_parameters()`` order, persistent buffers, and the second names
    of tied tensors (``{alias: first name}``)."""
    params, first, aliases = [], {}, {}
    for name, tensor in module.named_parameters(remove_duplicate=False):
        if id(tensor) in first:
            aliases[name] = first[id(tensor)]
        else:
            first[id(tensor)] = name
            params.append((name, tensor))
    state = module.state_dict(keep_vars=True)
    buffers = []
    for name, tensor in module.named_buffers(remove_duplicate=False):
        if name not in state:
            continue  # non-persistent: a constant
        if id(tensor) in first:
            aliases[name] = first[id(tensor)]
        else:
            first[id(tensor)] = name
            buffers.append((name, tensor))
    return params, buffers, aliases, list(state)


def _tensor_meta(tensor) -> TensorMeta:
    return TensorMeta(tuple(tensor.shape), np.dtype(canonical_dtype(tensor.dtype)).name)


def _known_layers(module, param_names: set) -> tuple:
    """``((path, jaxgrad layer), ...)`` of torch layers jaxgrad converts whose
    parameters are all the model's, for ``init``."""
    layers = []
    for name, child in module.named_modules():
        cls = converters.torch_class_name(child)
        if (
            cls is None
            or cls == "Sequential"
            or not any(True for _ in child.parameters(recurse=False))
        ):
            continue
        try:
            layer = converters.convert_layer(child, name)
            shapes = layer.param_shapes()
        except Exception:  # noqa: BLE001 - only for init: a layer we cannot build draws zeros
            continue
        own = {f"{name}.{k}" if name else k: tuple(v.shape) for k, v in shapes.items()}
        expected = {
            f"{name}.{k}" if name else k: tuple(p.shape) for k, p in child.named_parameters()
        }
        if own == expected and set(own) <= param_names:
            layers.append((name, layer))
    return tuple(layers)


def _baked_randomness(module, args, kwargs, constants, class_name, path, dynamic_shapes):
    """Names of training-mode constants that change with the global seeds."""
    import torch  # noqa: F401 - _export needs it

    again = _export(
        module, args, kwargs, True, class_name, path, seed=12345, dynamic_shapes=dynamic_shapes
    )
    changed = []
    for name, value in constants.items():
        other = again.constants.get(name)
        if other is None:
            continue
        other = other.detach().cpu().numpy()
        if other.shape != value.shape or not np.array_equal(other, value):
            changed.append(name)
    return changed


def capture(
    module,
    args=(),
    kwargs=None,
    path: str = "",
    frozen=(),
    dynamic_shapes="auto",
    batch_one: bool = False,
) -> ExportedModule:
    """Capture ``module``'s two modes with ``torch.export`` and map them to JAX.

    Args:
      module: a torch ``nn.Module``.
      args, kwargs: an example of the forward's inputs (torch tensors, nested in
        tuples, lists and dicts; other Python values are specialised).
      path: its path in an enclosing model, for messages.
      frozen: names of parameters torch has with ``requires_grad=False``: every read of
        them goes through a stop-gradient.
      dynamic_shapes: ``"auto"``: every size of every tensor input dynamic
        (``Dim.AUTO``; torch fixes what the model's code needs), captured again at the
        example's shapes when torch cannot keep them dynamic (the model's
        ``shapes.static`` says why); ``"batch"``: likewise, with only each tensor
        input's first size dynamic (the others the example's: a much cheaper capture
        where torch's symbolic reasoning over image sides is slow); ``None``: the
        example's shapes; anything else goes to
        ``torch.export.export(dynamic_shapes=...)`` as torch takes it.
      batch_one: also capture the program at batch size 1 (every tensor input's first
        size 1): torch captures sizes 0 and 1 apart from the others, so a capture at
        a batch of 2 or more takes batches from 2 up; ``apply`` then runs whichever
        program the inputs' sizes fit.

    Returns:
      an ``ExportedModule`` (the model's mode flags are restored afterwards).

    Raises:
      ValueError: either mode cannot be exported, or the program holds an op
        outside the table, an input or parameter mutation, or randomness torch
        cannot see; naming the node, op and module path.
    """
    kwargs = dict(kwargs or {})
    # a string is 'auto' or 'batch' (from_torch checks it); a torch spec goes to torch as is
    axes = dynamic_shapes if isinstance(dynamic_shapes, str) else None
    auto = axes is not None
    if dynamic_shapes is None:
        model = _capture(
            module,
            args,
            kwargs,
            path,
            frozen,
            None,
            "`dynamic_shapes=None` asked for the example's shapes",
        )
    else:
        try:
            model = _capture(
                module,
                args,
                kwargs,
                path,
                frozen,
                auto_dims(module, args, kwargs, axes) if auto else dynamic_shapes,
                "",
            )
        except DynamicShapeError as error:
            if not auto:
                raise
            reason = str(error).removeprefix("from_torch: ").split(". ")[0][:300]
            model = _capture(
                module,
                args,
                kwargs,
                path,
                frozen,
                None,
                f"torch.export could not keep its sizes dynamic ({reason})",
            )
    if axes == "batch" and not model.shapes.static:
        model = dataclasses.replace(
            model,
            shapes=dataclasses.replace(
                model.shapes,
                first_only="`dynamic_shapes='batch'` kept only each input's first "
                "size dynamic; convert with dynamic_shapes='auto' to let torch keep this one "
                "dynamic too",
            ),
        )
    if batch_one and not model.shapes.static:
        one = _batch_of_one(args, kwargs)
        try:
            variant = capture(module, one[0], one[1], path, frozen, dynamic_shapes)
        except ValueError as error:
            # torch's own training forward may refuse a batch of 1 (BatchNorm over one
            # value per channel): the batch-1 program is then evaluation mode only, and
            # apply(train=True) at batch 1 refuses with torch's reason, as torch does
            try:
                variant = _capture(
                    module,
                    one[0],
                    one[1],
                    path,
                    frozen,
                    auto_dims(module, *one, axes) if auto else dynamic_shapes,
                    "",
                    modes=(False,),
                )
            except (ValueError, DynamicShapeError):
                raise error from None
            reason = str(error).removeprefix("from_torch: ").split("\n")[0][:400]
            variant = dataclasses.replace(variant, train_refused=reason)
        model = dataclasses.replace(model, variants=(variant,))
    return model


def _batch_of_one(args, kwargs):
    """The example with every tensor input's first size cut to 1."""
    import torch

    def first(leaf):
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0 and leaf.shape[0] > 1:
            return leaf[:1].clone()
        return leaf

    return torch.utils._pytree.tree_map(first, (tuple(args), dict(kwargs)))


def _capture(
    module, args, kwargs, path, frozen, dynamic_shapes, static, modes=(True, False)
) -> ExportedModule:
    """``capture`` with torch's ``dynamic_shapes`` (or None, ``static`` saying why);
    ``modes=(False,)``: the evaluation program alone (for training too)."""
    class_name = type(module).__name__
    params, buffers, aliases, order = _state_names(module)
    persistent = {name for name, _ in buffers} | {
        a for a in aliases if a not in {n for n, _ in params}
    }
    flags = {name: child.training for name, child in module.named_modules(remove_duplicate=False)}
    module_buffers = {name for name, _ in module.named_buffers(remove_duplicate=False)}
    # frozen: parameters with requires_grad=False (and those the forward freezes)
    frozen, specs, calls_before = set(frozen), {}, export_autograd.calls()
    try:
        programs, constants, input_metas, shape_specs = {}, {}, {}, []
        exports = {
            train: _export(
                module,
                args,
                kwargs,
                train,
                class_name,
                path,
                frozen=frozen,
                dynamic_shapes=dynamic_shapes,
            )
            for train in modes
        }
        written = written_parameters(exports.values(), frozen, aliases)
        for train in modes:
            exported = exports[train]
            if train == modes[0]:
                in_tree = tree_of(exported.call_spec.in_spec, lambda: f"the inputs of {class_name}")
            program, mode_constants, input_metas[train] = _program(
                exported, class_name, path, persistent, aliases, frozen, specs, written
            )
            if dynamic_shapes is not None:
                shape_specs.append(_shape_spec(exported))
            # a tensor the forward made (not a module's buffer) may hold a NumPy draw
            made = {
                name: value for name, value in mode_constants.items() if name not in module_buffers
            }
            if train and made:
                changed = _baked_randomness(
                    module, args, kwargs, made, class_name, path, dynamic_shapes
                )
                if changed:
                    raise ValueError(
                        f"from_torch: {class_name} {_where(path)} draws random numbers outside "
                        f"torch while its training-mode forward runs (NumPy or Python's "
                        f"`random`), which torch.export freezes into the constants "
                        f"{', '.join(changed)}: every step would reuse the same draw. Turn "
                        "that randomness off (e.g. Wav2Vec2's mask_time_prob=0) or draw it "
                        "with torch."
                    )
            for name, value in mode_constants.items():
                if name in constants and not np.array_equal(constants[name], value):
                    name_in_mode = f"{name}@{'train' if train else 'eval'}"
                    program = _rename_constant(program, name, name_in_mode)
                    name = name_in_mode
                constants[name] = value
            programs[train] = program
    finally:
        for name, child in module.named_modules(remove_duplicate=False):
            child.training = flags[name]
        export_autograd.forget(export_autograd.calls() - calls_before)
    if len(modes) == 1:
        programs[True], input_metas[True] = programs[False], input_metas[False]
        shape_specs = shape_specs * 2
    if input_metas[True] != input_metas[False]:
        # the two modes' symbols (named after their sources) or fixed sizes differ
        raise DynamicShapeError(
            f"from_torch: {class_name}'s two modes take different input sizes "
            f"({input_metas[True]} in training, {input_metas[False]} in evaluation)."
        )
    eval_program = programs[True] if programs[False] == programs[True] else programs[False]
    if shape_specs:
        shapes = ShapeSpec(
            ranges=tuple(sorted(set(shape_specs[0].ranges) | set(shape_specs[1].ranges))),
            guards=tuple(dict.fromkeys(shape_specs[0].guards + shape_specs[1].guards)),
            fixed=tuple(dict.fromkeys(shape_specs[0].fixed + shape_specs[1].fixed)),
            example=tuple(sorted(set(shape_specs[0].example) | set(shape_specs[1].example))),
        )
    else:
        shapes = ShapeSpec(static=static)
    return ExportedModule(
        class_name=class_name,
        train_program=programs[True],
        eval_program=eval_program,
        in_tree=in_tree,
        input_meta=input_metas[True],
        params=tuple((n, _tensor_meta(t)) for n, t in params if n not in written),
        buffers=tuple(
            (n, _tensor_meta(t))
            for n, t in [*buffers, *((n, t) for n, t in params if n in written)]
        ),
        constants=Constants(constants),
        aliases=tuple(aliases.items()),
        order=tuple(order),
        layers=_known_layers(module, {n for n, _ in params}),
        shapes=shapes,
    )


def written_parameters(exported_programs, frozen, aliases) -> set:
    """The parameters without a gradient (``frozen``: ``requires_grad=False``) that a
    mode's forward writes (a momentum encoder's key parameters, an EMA target's): each
    becomes state, read and returned by ``apply`` like a buffer in both modes, so one
    set of state keys serves both programs. A written parameter torch trains is
    refused where the program is built."""
    from torch.export.graph_signature import OutputKind

    return {
        aliases.get(spec.target, spec.target)
        for exported in exported_programs
        for spec in exported.graph_signature.output_specs
        if spec.kind == OutputKind.PARAMETER_MUTATION and spec.target in frozen
    }


def _shape_spec(exported) -> ShapeSpec:
    """The ranges of the symbols torch kept, the guards it recorded on them, and why it
    fixed the sizes it fixed, from the capture's shape environment."""
    shape_env = None
    for node in exported.graph.nodes:
        fake = node.meta.get("val")
        shape_env = getattr(getattr(fake, "fake_mode", None), "shape_env", None)
        if shape_env is not None:
            break
    ranges = []
    for symbol, value_range in exported.range_constraints.items():
        low = int(value_range.lower) if value_range.lower.is_Integer else 0
        high = int(value_range.upper) if value_range.upper.is_Integer else None
        ranges.append((str(symbol), low, high))
    if shape_env is None:
        return ShapeSpec(ranges=tuple(ranges))
    known = {name for name, _, _ in ranges}
    guards, fixed = [], []
    for guard in shape_env.guards:
        expr = shape_env.replace(guard.expr)
        try:
            converted = sym_expr(expr)
        except _Dynamic:
            continue  # a size no input carries: nothing to check at the call
        if isinstance(converted, bool) or not symbols(converted) <= known:
            continue
        guards.append((converted, _location(guard.sloc)))
    for symbol, value in shape_env.replacements.items():
        if getattr(value, "is_number", False):
            sloc = shape_env.replacements_slocs.get(symbol)
            fixed.append((str(symbol), _location(sloc) if sloc is not None else ""))
    hints = (
        shape_env.backed_var_to_val
        if hasattr(shape_env, "backed_var_to_val")
        else shape_env.var_to_val
    )  # torch >= 2.13 names it backed_var_to_val
    example = tuple(
        (str(symbol), int(value)) for symbol, value in hints.items() if str(symbol) in known
    )
    return ShapeSpec(
        ranges=tuple(ranges), guards=tuple(guards), fixed=tuple(fixed), example=example
    )


def _location(sloc) -> str:
    """Where torch recorded a guard: the user's line, or torch's check that needed it."""
    frame = getattr(sloc, "framework_loc", None)
    if frame is None:
        return ""
    filename = str(getattr(frame, "filename", ""))
    if "/torch/" in filename:
        return f"torch's check in {frame.name}"
    line = (getattr(frame, "line", "") or "").strip()
    return f"{filename.rsplit('/', 1)[-1]}:{frame.lineno} `{line}`"


def _rename_constant(program: Program, old: str, new: str) -> Program:
    inputs = tuple(
        (name, kind, new if kind == "constant" and target == old else target)
        for name, kind, target in program.inputs
    )
    return dataclasses.replace(program, inputs=inputs)


__all__ = ["capture", "build_nodes", "tree_of", "module_path"]
