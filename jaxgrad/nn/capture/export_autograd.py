"""Autograd written inside a forward, seen by the export front end before it is erased.

``torch.export`` records what a forward computes; what autograd does with it is gone
once the program is decomposed to core ATen: ``y.detach()`` becomes an ``alias``, a
``torch.no_grad()`` region becomes ordinary ops, ``inference_mode`` and
``requires_grad_(False)`` leave no trace at all, ``y.data`` fails to export, and a
custom ``torch.autograd.Function`` is inlined as its forward, its ``backward``
dropped. Converted as recorded, each would give torch's outputs and wrong gradients.
So, while ``jaxgrad.nn.capture.export`` captures a module (torch is imported lazily, here):

- ``during_export()`` runs the export with

  - ``Function.apply`` calling one op of jaxgrad's own, ``jaxgrad::autograd_function``
    (opaque to decomposition), in place of the Function's forward; every call is
    remembered (``Call``) so its forward and backward can be captured on their own
    (``_capture_function`` in ``jaxgrad.nn.capture.export``); torch's reentrant
    ``checkpoint`` Function, whose backward is the autodiff of its forward, runs the
    function it wraps;
  - ``Tensor.data`` read as ``detach()`` (the same value, no gradient), so that it
    exports and is marked like ``detach``;
  - ``inference_mode`` entered as ``no_grad`` (torch records the region);
  - ``requires_grad_(False)`` and ``requires_grad = False`` called by the forward
    on a parameter remembered: torch then gives that parameter no gradient at all
    (even for uses before the call), so the program reads it through a stop-gradient;
    on any other tensor that requires a gradient it is refused, named;

  - ``register_hook`` on a tensor refused, named (export drops the hook);

- ``mark_autograd(ep)`` rewrites the training program (before decomposition): each
  ``aten.detach`` (and ``detach_``) becomes ``jaxgrad::stop_gradient``, and each grad-disabled region
  (``wrap_with_set_grad_enabled(False, ...)``, what ``no_grad`` and
  ``set_grad_enabled(False)`` record) reads its inputs through one, except buffers and
  constants (no gradient flows through them, and a buffer the region updates must
  stay the buffer). A region that writes a value from outside it in place (torch's
  "in-place under no_grad" trick keeps the old gradient path for a new value) is
  refused, named: jaxgrad does not reproduce it.

Both jaxgrad ops map through the ATen table (``jaxgrad.nn.aten._autograd``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import sys
from typing import Any

_CALLS: dict[int, Call] = {}
_COUNTER = itertools.count()
# torch's own Functions whose backward is the autodiff of their forward, and how to run
# the forward they wrap: reentrant checkpointing runs `run_function` under no_grad and
# recomputes it with grad enabled in its backward, i.e. the plain function's gradient
AUTODIFF_FUNCTIONS = {
    "torch.utils.checkpoint.CheckpointFunction": lambda run_function, preserve_rng_state, *args: (
        run_function(*args)
    ),
}
_REGISTERED = False


def class_name_of(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _ops():
    """Register ``jaxgrad::stop_gradient`` and ``jaxgrad::autograd_function`` (once)."""
    global _REGISTERED
    import torch

    if _REGISTERED:
        return

    # explicit schemas: this module's annotations are strings (`from __future__`)
    def stop_gradient(x):
        return x.detach().clone()

    def autograd_function(inputs, call):
        return [out.clone() for out in _CALLS[call].forward(inputs)]

    stop = torch.library.custom_op(
        "jaxgrad::stop_gradient", stop_gradient, mutates_args=(), schema="(Tensor x) -> Tensor"
    )
    stop.register_fake(lambda x: torch.empty_like(x))
    function = torch.library.custom_op(
        "jaxgrad::autograd_function",
        autograd_function,
        mutates_args=(),
        schema="(Tensor[] inputs, int call) -> Tensor[]",
    )
    function.register_fake(
        lambda inputs, call: [torch.empty_like(out) for out in _CALLS[call].forward(inputs)]
    )
    _REGISTERED = True


class _Ctx:
    """What a Function's ``forward`` and ``backward`` may use of ``ctx`` while jaxgrad
    captures them; any other attribute is the Function's own."""

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self.saved_tensors = ()
        self.non_differentiable = []
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        self.saved_tensors = tuple(tensors)

    @property
    def saved_variables(self):
        return self.saved_tensors

    def mark_non_differentiable(self, *tensors):
        self.non_differentiable.extend(tensors)

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors):
        raise ValueError(
            "its forward writes its input in place (`ctx.mark_dirty`), which a "
            "pure function cannot reproduce"
        )


@dataclasses.dataclass
class Call:
    """One ``Function.apply`` call: the class, and its arguments with the tensors'
    positions (the tensors themselves are the op's inputs)."""

    cls: Any
    args: tuple
    kwargs: dict
    tensor_positions: tuple
    single: bool = True

    @property
    def name(self) -> str:
        return class_name_of(self.cls)

    def arguments(self, tensors):
        args = list(self.args)
        for position, tensor in zip(self.tensor_positions, tensors):
            args[position] = tensor
        return args

    def run_forward(self, tensors, ctx):
        """The Function's forward (and ``setup_context``) on ``tensors``: its outputs
        as a list of tensors."""
        import torch
        from torch.autograd.function import _is_setup_context_defined

        args = self.arguments(tensors)
        if _is_setup_context_defined(self.cls.setup_context):
            output = self.cls.forward(*args, **self.kwargs)
            self.cls.setup_context(ctx, tuple(args), output)
        else:
            output = self.cls.forward(ctx, *args, **self.kwargs)
        outputs = list(output) if isinstance(output, (tuple, list)) else [output]
        self.single = not isinstance(output, (tuple, list))
        if not all(isinstance(out, torch.Tensor) for out in outputs):
            kinds = [type(out).__name__ for out in outputs]
            raise ValueError(
                f"its forward returns {kinds}; jaxgrad captures Functions whose "
                "forward returns a tensor or a tuple of tensors"
            )
        return outputs

    def needs_input_grad(self):
        import torch

        return tuple(
            isinstance(a, torch.Tensor) and (a.is_floating_point() or a.is_complex())
            for a in self.args
        )

    def forward(self, tensors):
        import torch

        with torch.no_grad():
            return self.run_forward(tensors, _Ctx(self.needs_input_grad()))


def _user_frame(depth: int = 2) -> bool:
    """Whether the frame ``depth`` frames up from here (the caller of a patched torch
    method) is the user's code, not torch's own."""
    import torch

    torch_dir = os.path.dirname(torch.__file__)
    frame = sys._getframe(depth)
    return not frame.f_code.co_filename.startswith(torch_dir)


_MISSING = object()


@contextlib.contextmanager
def patched(*replacements):
    """Set ``(owner, name, value)`` attributes for the duration, then put back exactly
    what was there (an inherited attribute is deleted again, not shadowed)."""
    saved = [(owner, name, owner.__dict__.get(name, _MISSING)) for owner, name, _ in replacements]
    try:
        for owner, name, value in replacements:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in reversed(saved):
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


@contextlib.contextmanager
def during_export(module, frozen: set, problems: list):
    """The patches of torch's autograd entry points while ``module`` is exported (see
    the module docstring). ``frozen`` receives the names of parameters the forward
    calls ``requires_grad_(False)`` on; ``problems`` what cannot be reproduced."""
    import torch
    from torch._C import TensorBase

    _ops()
    function_class = torch.autograd.Function
    original_apply = function_class.__dict__["apply"]
    original_data = TensorBase.data
    original_requires_grad_ = torch.Tensor.requires_grad_
    original_requires_grad = TensorBase.requires_grad
    original_register_hook = torch.Tensor.register_hook
    inference = torch.autograd.grad_mode.inference_mode

    def apply(cls, *args, **kwargs):
        if class_name_of(cls) in AUTODIFF_FUNCTIONS:
            return AUTODIFF_FUNCTIONS[class_name_of(cls)](*args, **kwargs)
        positions = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
        nested = [
            i
            for i, a in enumerate(args)
            if isinstance(a, (list, tuple, dict))
            and any(isinstance(v, torch.Tensor) for v in (a.values() if isinstance(a, dict) else a))
        ]
        if nested or any(isinstance(v, torch.Tensor) for v in kwargs.values()):
            problems.append(
                f"the custom autograd.Function {class_name_of(cls)} is called with "
                "tensors inside containers or as keywords; jaxgrad captures "
                "Functions called with tensors as positional arguments"
            )
            return original_apply.__func__(cls, *args, **kwargs)
        call_id = next(_COUNTER)
        call = Call(cls, tuple(args), dict(kwargs), positions)
        _CALLS[call_id] = call
        # the op's fake kernel runs the forward on fake tensors (below the tracer, so
        # nothing of it is recorded), which also tells whether it returns a tuple
        outputs = torch.ops.jaxgrad.autograd_function([args[i] for i in positions], call_id)
        return outputs[0] if call.single else tuple(outputs)

    def owner(tensor, buffers=False):
        named = module.named_parameters(remove_duplicate=False)
        if buffers:
            named = itertools.chain(named, module.named_buffers(remove_duplicate=False))
        for name, param in named:
            if param is tensor:
                return name
        return None

    def freeze(tensor, flag):
        # 0 _user_frame, 1 freeze, 2 the patched method, 3 its caller
        if not flag and _user_frame(3) and tensor.requires_grad:
            name = owner(tensor)
            if name is not None:
                frozen.add(name)
            else:
                problems.append(
                    "the forward calls `requires_grad_(False)` on a computed tensor (torch "
                    "refuses it on a non-leaf: use `.detach()`)"
                )

    def requires_grad_(self, requires_grad=True):
        freeze(self, requires_grad)
        return original_requires_grad_(self, requires_grad)

    def set_requires_grad(self, value):
        freeze(self, value)
        original_requires_grad.__set__(self, value)

    def register_hook(self, hook):
        if _user_frame():
            problems.append(
                "the forward registers a gradient hook on a tensor (`register_hook`), which "
                "torch.export drops; jaxgrad does not reproduce tensor hooks: write the "
                "gradient change as a custom autograd.Function, whose backward jaxgrad "
                "captures"
            )
        return original_register_hook(self, hook)

    def set_data(self, value):
        # `t.data = v` swaps t's storage, which neither torch.fx nor torch.export
        # records: written as the in-place copy it amounts to (outside autograd), the
        # program holds it as a parameter or buffer mutation, returned as new state
        if not _user_frame(2):
            return original_data.__set__(self, value)
        if not isinstance(value, torch.Tensor) or (value.shape, value.dtype) != (
            self.shape,
            self.dtype,
        ):
            name = owner(self, buffers=True)
            got = (
                f"{tuple(value.shape)} {value.dtype}"
                if isinstance(value, torch.Tensor)
                else type(value).__name__
            )
            problems.append(
                f"the forward assigns `.data` of {repr(name) if name else 'a computed tensor'} "
                f"({tuple(self.shape)} {self.dtype}) "
                f"a value of another shape or dtype ({got}), which replaces the tensor rather "
                "than updating it; jaxgrad reproduces `.data =` only as an update of the same "
                "shape and dtype"
            )
            return original_data.__set__(self, value)
        with torch.no_grad():
            self.detach().copy_(value)

    def enter(self):
        if not self.mode:
            return None
        self._jaxgrad_no_grad = torch.no_grad()
        return self._jaxgrad_no_grad.__enter__()

    def exit(self, *exc):
        no_grad = self.__dict__.pop("_jaxgrad_no_grad", None)
        return None if no_grad is None else no_grad.__exit__(*exc)

    with (
        patched(
            (function_class, "apply", classmethod(apply)),
            (
                torch.Tensor,
                "data",
                property(lambda self: self.detach(), set_data),
            ),
            (torch.Tensor, "requires_grad_", requires_grad_),
            (
                torch.Tensor,
                "requires_grad",
                property(lambda self: original_requires_grad.__get__(self), set_requires_grad),
            ),
            (torch.Tensor, "register_hook", register_hook),
            (inference, "__enter__", enter),
            (inference, "__exit__", exit),
        ),
        torch.enable_grad(),
    ):
        yield


# views: an in-place write to one writes its base
_VIEWS = {
    "view",
    "_unsafe_view",
    "alias",
    "select",
    "slice",
    "narrow",
    "expand",
    "permute",
    "transpose",
    "t",
    "unsqueeze",
    "squeeze",
    "as_strided",
    "diagonal",
    "unfold",
    "view_as",
    "reshape",
    "flatten",
    "unflatten",
    "movedim",
    "split",
    "chunk",
    "unbind",
    "split_with_sizes",
    "detach",
    "expand_as",
    "swapaxes",
    "real",
    "imag",
}


def _overload_name(target) -> str:
    text = str(target)
    return text.split(".")[1] if text.startswith("aten.") else ""


def _writes_outside(subgraph, allowed: set) -> list[str]:
    """The in-place ops of a region that write one of its inputs (through views),
    except the inputs named in ``allowed`` (buffers: a running statistic updated
    under ``no_grad`` is an ordinary buffer update)."""
    found = []
    for node in subgraph.nodes:
        if node.op != "call_function":
            continue
        name = _overload_name(node.target)
        if not (name.endswith("_") and not name.startswith("_")) or not node.args:
            continue
        base = node.args[0]
        while (
            getattr(base, "op", None) == "call_function"
            and _overload_name(base.target).rstrip("_") in _VIEWS
            and base.args
        ):
            base = base.args[0]
        if getattr(base, "op", None) == "placeholder" and base.name not in allowed:
            found.append(f"{node.target} on {base.name}")
    return found


def mark_autograd(ep, describe, frozen=()) -> None:
    """Rewrite ``ep``'s training program in place: ``detach`` -> ``stop_gradient``,
    every grad-disabled region's inputs (buffers, constants and the parameters in
    ``frozen`` aside) through ``stop_gradient``. ``describe()`` names the model for
    messages; ``frozen``: parameters torch gives no gradient (``requires_grad=False``),
    which a region may update in place like a buffer (a momentum encoder).

    Raises:
      ValueError: a grad-disabled region writes a value from outside it in place.
    """
    import torch
    from torch.export.graph_signature import InputKind

    _ops()
    stop = torch.ops.jaxgrad.stop_gradient.default
    graph = ep.graph_module.graph
    untracked = {
        spec.arg.name
        for spec in ep.graph_signature.input_specs
        if spec.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
        or (spec.kind == InputKind.PARAMETER and spec.target in frozen)
    }
    trainable = {
        spec.arg.name: spec.target
        for spec in ep.graph_signature.input_specs
        if spec.kind == InputKind.PARAMETER and spec.target not in frozen
    }
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in (torch.ops.aten.detach.default, torch.ops.aten.detach_.default):
            node.target = stop
            changed = True
            continue
        if node.target is not torch.ops.higher_order.wrap_with_set_grad_enabled:
            continue
        enabled, submodule, *inputs = node.args
        if enabled:
            continue
        body = getattr(ep.graph_module, submodule.target)
        region_inputs = [n for n in body.graph.nodes if n.op == "placeholder"]
        allowed = {
            inner.name
            for inner, outer in zip(region_inputs, inputs)
            if getattr(outer, "name", None) in untracked
        }
        written = _writes_outside(body.graph, allowed)
        inner_of = {
            inner.name: getattr(outer, "name", None) for inner, outer in zip(region_inputs, inputs)
        }
        parameters = sorted(
            {
                trainable[inner_of[base]]
                for base in (w.rsplit(" on ", 1)[1] for w in written)
                if inner_of.get(base) in trainable
            }
        )
        if parameters:
            raise ValueError(
                f"from_torch: {describe()} writes the parameter(s) {', '.join(map(repr, parameters))} "
                "inside a `torch.no_grad()` region (an in-place op or `.data =`), and torch "
                "trains them too (requires_grad=True). jaxgrad returns a parameter the forward "
                "writes as new state (like a buffer) only when torch gives it no gradient: call "
                "`requires_grad_(False)` on it (as a momentum encoder's or EMA target's "
                "parameters are), or register it as a buffer."
            )
        if written:
            raise ValueError(
                f"from_torch: {describe()} writes a value computed outside a `torch.no_grad()` "
                f"region in place inside it ({', '.join(written)}); torch then keeps the "
                "old value's gradient path for the new value, which jaxgrad does not "
                "reproduce. Write it out of place: `y = y + (new - y).detach()` is the same "
                "straight-through value and gradient."
            )
        new_inputs = []
        for value in inputs:
            if (
                getattr(value, "op", None) is None
                or value.name in untracked
                or not isinstance(value.meta.get("val"), torch.Tensor)
            ):
                new_inputs.append(value)
                continue
            with graph.inserting_before(node):
                cut = graph.call_function(stop, (value,))
            cut.meta = dict(value.meta)
            cut.meta.update(
                {k: node.meta[k] for k in ("nn_module_stack", "stack_trace") if k in node.meta}
            )
            new_inputs.append(cut)
        node.args = (enabled, submodule, *new_inputs)
        changed = True
    if changed:
        ep.graph_module.recompile()


def is_function_call(target) -> bool:
    return str(target) == "jaxgrad.autograd_function.default"


def call_of(call_id: int) -> Call:
    return _CALLS[call_id]


def calls() -> set:
    """The numbers of the calls remembered now."""
    return set(_CALLS)


def forget(call_ids) -> None:
    for call_id in call_ids:
        _CALLS.pop(call_id, None)


__all__ = [
    "during_export",
    "patched",
    "mark_autograd",
    "Call",
    "call_of",
    "calls",
    "forget",
    "is_function_call",
    "class_name_of",
]
