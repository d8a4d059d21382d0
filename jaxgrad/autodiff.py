"""Gradients on demand and gradients of intermediate values — no ``.grad``, no hooks.

- ``grad_wrt(loss_fn, params, names)`` is ``torch.autograd.grad(loss, [w1, w2])``: the
  gradient with respect to a chosen subset of a params dict, as a tuple in the order
  asked, nothing else computed or stored.
- ``intermediate_grads(fn, args, names)`` is the ``retain_grad()`` analogue. ``fn`` is
  written once with a ``tap`` keyword: ``h = tap("hidden", h)`` marks an intermediate
  value (``tap`` returns its argument). The gradient of the scalar output with
  respect to a tapped value is the gradient with respect to a zero perturbation added
  at that point, so it is an ordinary ``jax.grad`` — jit-compatible and exact.
- ``detach`` is ``jax.lax.stop_gradient``, torch's ``.detach()``: the value passes, its
  gradient is exactly zero (torch's is absent: ``None``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

from jaxgrad.losses import mse_loss

detach = jax.lax.stop_gradient


def _require_scalar(out, what: str) -> None:
    shape = getattr(out, "shape", None)
    if shape != ():
        received = shape if shape is not None else type(out).__name__
        raise ValueError(
            f"{what} must return a scalar to differentiate (torch: 'grad can be implicitly "
            f"created only for scalar outputs'); it returned shape {received}."
        )


def grad_wrt(loss_fn: Callable, params: dict, names: Sequence[str]) -> tuple:
    """``torch.autograd.grad(loss, [params[n] for n in names])`` for ``loss_fn(params)``.

    Args:
      loss_fn: ``loss_fn(params) -> scalar``.
      params: a flat ``{name: array}`` dict.
      names: the parameter names to differentiate with respect to, in order.

    Returns:
      A tuple of gradients, one per name, each shaped like its parameter.
    """
    if isinstance(names, str):
        raise TypeError(f"`names` (={names!r}) must be a sequence of names, not one string.")
    unknown = [n for n in names if n not in params]
    if unknown:
        raise ValueError(f"`names` {unknown} are not in `params` (keys: {sorted(params)}).")
    _require_scalar(jax.eval_shape(loss_fn, params), "`loss_fn`")
    chosen = {n: params[n] for n in names}
    rest = {n: v for n, v in params.items() if n not in chosen}
    grads = jax.grad(lambda chosen: loss_fn({**rest, **chosen}))(chosen)
    return tuple(grads[n] for n in names)


def tapped_shapes(fn: Callable, args: Sequence) -> tuple[dict, jax.ShapeDtypeStruct]:
    """``({name: ShapeDtypeStruct}, output shape)`` of every ``tap`` in ``fn(*args, tap=…)``."""
    shapes: dict[str, jax.ShapeDtypeStruct] = {}

    def record(name, value):
        if name in shapes:
            raise ValueError(f"`tap` name {name!r} is used twice in `fn`; names must be unique.")
        shapes[name] = jax.ShapeDtypeStruct(jnp.shape(value), jnp.result_type(value))
        return value

    out = jax.eval_shape(lambda *a: fn(*a, tap=record), *args)
    return shapes, out


def intermediate_grads(fn: Callable, args: Sequence, names: Sequence[str]):
    """``(output, {name: d output / d intermediate})`` — torch's ``.retain_grad()``.

    Args:
      fn: ``fn(*args, tap=tap) -> scalar``; inside, ``v = tap("name", v)`` marks ``v``.
      args: the positional arguments of ``fn``.
      names: the tapped names whose gradients to return.

    Returns:
      The scalar output and a dict of gradients, each shaped like its tapped value.
    """
    args = tuple(args)
    if isinstance(names, str):
        raise TypeError(f"`names` (={names!r}) must be a sequence of tap names, not one string.")
    shapes, out = tapped_shapes(fn, args)
    _require_scalar(out, "`fn`")
    unknown = [n for n in names if n not in shapes]
    if unknown:
        raise ValueError(f"`names` {unknown} were never tapped in `fn` (tapped: {list(shapes)}).")
    perturbations = {n: jnp.zeros(shapes[n].shape, shapes[n].dtype) for n in names}

    def perturbed(perturbations):
        def tap(name, value):
            return value + perturbations[name] if name in perturbations else value

        return fn(*args, tap=tap)

    return jax.value_and_grad(perturbed)(perturbations)


def no_tap(name: str, value):
    """The identity ``tap``: call a tapped ``fn`` normally with ``fn(*args, tap=no_tap)``."""
    del name
    return value


def target_network_grads(
    online_model, online_params: dict, target_model, target_params: dict, batches
) -> dict:
    """Lesson 002's target network, the JAX way: ``mse(online(x), detach(target_net(x)))``.

    The twin of ``torchref.autodiff.target_network_step``: gradients with respect to
    *both* parameter sets, summed over ``batches`` (a sequence of `(batch, in)` arrays),
    and the running loss total as a Python float (``float(loss)`` is allowed here: it
    happens outside any transformation).

    Returns:
      ``{"online": grads, "target": grads (exactly zero), "running": float}``
    """

    def loss_fn(online_params, target_params, x):
        target = detach(target_model.apply(target_params, x))
        return mse_loss(online_model.apply(online_params, x), target)

    value_and_grad = jax.value_and_grad(loss_fn, argnums=(0, 1))
    online_total = jax.tree.map(jnp.zeros_like, online_params)
    target_total = jax.tree.map(jnp.zeros_like, target_params)
    running = 0.0
    for x in batches:
        loss, (online_grads, target_grads) = value_and_grad(online_params, target_params, x)
        online_total = jax.tree.map(jnp.add, online_total, online_grads)
        target_total = jax.tree.map(jnp.add, target_total, target_grads)
        running += float(loss)
    return {"online": online_total, "target": target_total, "running": running}
