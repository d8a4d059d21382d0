"""Autograd written inside a forward: the two entries it adds to the ATen table.

``torch.export`` records what a forward does to values, not what autograd does to
their gradients: decomposed, ``y.detach()`` is an ``alias`` and a ``no_grad`` region
is ordinary ops, and a custom ``torch.autograd.Function`` is its forward alone.
``jaxgrad.nn.capture.export_autograd`` marks these in torch's training program before it is
decomposed, with two ops of its own that survive decomposition, mapped here:

- ``jaxgrad.stop_gradient.default(x)``: ``jax.lax.stop_gradient`` at exactly the
  values torch cuts (``detach``, ``.data``, the inputs of a ``no_grad`` /
  ``set_grad_enabled(False)`` / ``inference_mode`` region, a parameter frozen by
  ``requires_grad_(False)`` inside the forward);
- ``jaxgrad.autograd_function.default(inputs, spec)``: a custom
  ``autograd.Function`` as a ``jax.custom_vjp`` whose forward is the Function's
  captured ``forward`` and whose rule is its own captured ``backward``
  (``FunctionSpec``, run by ``jaxgrad.nn.capture.program.call_function``), or the JAX
  function a user registered for the class (``register_autograd_function``).

Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable

import jax

from jaxgrad.nn.aten._table import register

# "module.QualName" of a torch.autograd.Function -> a JAX function of its tensor inputs
FUNCTIONS: dict[str, Callable] = {}


def register_autograd_function(name: str, fn: Callable, *, replace: bool = False) -> None:
    """Give ``from_torch`` the JAX rule of a custom ``torch.autograd.Function``.

    ``from_torch`` reproduces a Function by capturing its own ``forward`` and
    ``backward`` (a ``jax.custom_vjp``). When its backward cannot be captured (it
    leaves torch, calls an op outside the table, draws random numbers), register a
    JAX function instead: it is called where the model calls ``Function.apply``, with
    the Function's tensor arguments in order (its other arguments are fixed at
    capture and passed as keywords ``arg{i}``, ``i`` their position), and returns
    what the Function's forward returns (a ``jax.custom_vjp`` to give it your own
    backward).

    Args:
      name: the Function's class as ``"module.QualName"`` (``f"{cls.__module__}.
        {cls.__qualname__}"``), as named by the error that asks for it.
      fn: ``fn(*tensor_inputs, **other_args) -> output or tuple of outputs``.
      replace: replace a rule registered before (refused otherwise).

    Raises:
      ValueError: ``name`` is registered already and ``replace`` is False.
    """
    if name in FUNCTIONS and not replace:
        raise ValueError(
            f"register_autograd_function: {name!r} has a rule already; pass "
            "`replace=True` to replace it."
        )
    if not callable(fn):
        raise TypeError(
            f"register_autograd_function: `fn` must be callable, got {type(fn).__name__}."
        )
    FUNCTIONS[name] = fn


@register("jaxgrad.stop_gradient.default")
def stop_gradient(input):
    """``detach()`` and its kin: the value, with no gradient flowing back through it."""
    return jax.lax.stop_gradient(input)


@register("jaxgrad.autograd_function.default")
def autograd_function(inputs, spec):
    """A custom ``autograd.Function``'s outputs (a list): ``spec`` is the
    ``FunctionSpec`` captured from it, or a ``UserRule`` naming a registered one; each
    runs itself (``jaxgrad.nn.capture.program``, which runs programs, sits above this table)."""
    return spec(tuple(inputs))


__all__ = ["FUNCTIONS", "register_autograd_function"]
