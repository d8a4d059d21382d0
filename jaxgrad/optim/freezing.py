"""Freezing parameters: torch's ``requires_grad=False`` as an optimizer wrapper.

``freeze(optimizer, frozen)`` routes every parameter whose dotted name is frozen to
``optax.set_to_zero()`` and the rest to ``optimizer`` (``optax.multi_transform``).
A frozen parameter therefore gets a zero update of every kind — no gradient step, no
momentum, no weight decay — and stays bit-identical over any number of steps; the
wrapped optimizer keeps no state for it (like torch, which never creates
``optimizer.state[p]`` for a parameter that never had a gradient).

Gradients still flow *through* a frozen layer to everything upstream: freezing changes
the optimizer, not the model.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import jax
import optax

from jaxgrad.optim.names import dotted_names

TRAINABLE = "trainable"
FROZEN = "frozen"


def _matches_prefix(name: str, prefix: str) -> bool:
    if prefix.endswith("."):
        return name.startswith(prefix)
    return name == prefix or name.startswith(prefix + ".")


def frozen_predicate(frozen) -> Callable[[str], bool]:
    """A ``name -> bool`` predicate from a predicate, a prefix, or a collection of prefixes.

    A prefix ``"0"`` matches ``"0"`` and ``"0.weight"`` but not ``"01.weight"``.
    """
    if callable(frozen):
        return frozen
    if isinstance(frozen, str):
        frozen = (frozen,)
    if not isinstance(frozen, Collection) or not all(isinstance(p, str) for p in frozen):
        raise TypeError(
            f"`frozen` (={frozen!r}) must be a predicate on the dotted parameter name or a "
            f"collection of name prefixes (strings)."
        )
    prefixes = tuple(frozen)
    return lambda name: any(_matches_prefix(name, p) for p in prefixes)


def frozen_mask(params, frozen):
    """A pytree of bools shaped like ``params``: True where the parameter is frozen.

    Args:
      params: the parameters (a flat dict under torch's keys, or any pytree).
      frozen: a predicate ``name -> bool`` on dotted parameter names, or a collection
        of name prefixes (``{"0"}`` matches ``0.weight`` and ``0.bias``, not
        ``01.weight``).

    Returns:
      A pytree of Python bools with ``params``' structure.

    Raises:
      ValueError: when a prefix in ``frozen`` matches no parameter (a typo would
        otherwise freeze nothing, silently).
      TypeError: ``frozen`` that is neither a predicate nor a collection of strings.
    """
    names = dotted_names(params)
    predicate = frozen_predicate(frozen)
    if not callable(frozen):
        prefixes = (frozen,) if isinstance(frozen, str) else tuple(frozen)
        all_names = jax.tree.leaves(names)
        unmatched = [p for p in prefixes if not any(_matches_prefix(n, p) for n in all_names)]
        if unmatched:
            raise ValueError(
                f"`frozen` prefixes {unmatched} match no parameter; parameter names are "
                f"{all_names}."
            )
    mask = jax.tree.map(lambda name: bool(predicate(name)), names)
    return mask


def freeze(optimizer: optax.GradientTransformation, frozen) -> optax.GradientTransformation:
    """``optimizer`` for the trainable parameters, exactly-zero updates for the frozen ones.

    Args:
      optimizer: any optax transformation (``jaxgrad.optim.adamw(...)``, a chain, …).
      frozen: a predicate ``name -> bool`` on dotted parameter names (``"0.weight"``),
        or a collection of name prefixes (``{"0"}`` freezes ``0.weight`` and ``0.bias``).

    Returns:
      An ``optax.GradientTransformation`` (``optax.multi_transform`` of ``optimizer``
      and zero updates): a frozen parameter gets no optimizer state, as in torch.

    Raises:
      TypeError: an ``optimizer`` that is not an optax transformation, or a bad
        ``frozen``.
      ValueError: at ``init``, a prefix that matches no parameter.
    """
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(
            f"`optimizer` (={type(optimizer).__name__}) must be an optax GradientTransformation."
        )
    frozen_predicate(frozen)  # validate the type now, not at init time

    def labels(params):
        return jax.tree.map(
            lambda is_frozen: FROZEN if is_frozen else TRAINABLE, frozen_mask(params, frozen)
        )

    return optax.multi_transform({TRAINABLE: optimizer, FROZEN: optax.set_to_zero()}, labels)


def freeze_untrained(
    optimizer: optax.GradientTransformation, model
) -> optax.GradientTransformation:
    """``optimizer`` as torch's steps ``model``: the parameters its forward leaves without
    a ``.grad`` (``requires_grad=False``, or read only through ``detach`` or a
    ``no_grad`` region: ``model.params_without_gradient()``) are frozen, since torch's
    optimizers skip a parameter whose ``.grad`` is None (no state, no weight decay).

    Args:
      optimizer: any optax transformation.
      model: a jaxgrad model (``jaxgrad.nn``, or converted by ``from_torch``).

    Returns:
      ``freeze(optimizer, those names)``, or ``optimizer`` itself when there are none.
    """
    names = getattr(model, "params_without_gradient", lambda: ())()
    return freeze(optimizer, set(names)) if names else optimizer


def count_trainable(params, frozen=()) -> int:
    """Number of scalar parameters not frozen (torch: ``sum(p.numel() for p if p.requires_grad)``).

    Args:
      params: the parameters.
      frozen: as ``freeze``; ``()`` (the default) or None counts every parameter.

    Returns:
      An int.

    Raises:
      ValueError: as ``frozen_mask``.
    """
    if frozen == () or frozen is None:
        return sum(leaf.size for leaf in jax.tree.leaves(params))
    mask = frozen_mask(params, frozen)
    return sum(
        leaf.size
        for leaf, is_frozen in zip(jax.tree.leaves(params), jax.tree.leaves(mask))
        if not is_frozen
    )
