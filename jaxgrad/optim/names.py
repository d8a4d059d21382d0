"""Dotted parameter names for any pytree: ``"0.weight"`` for a flat torch-style dict,
``"encoder.0.weight"`` for ``{"encoder": {"0.weight": …}}``."""

from __future__ import annotations

import jax


def _key_name(key) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def dotted_name(path) -> str:
    """``"a.b.0"`` for a ``jax.tree_util`` key path."""
    return ".".join(_key_name(key) for key in path)


def dotted_names(tree):
    """A pytree shaped like ``tree`` whose leaves are their dotted names.

    Args:
      tree: any pytree (``{"0": {"weight": w}}`` names ``w`` ``"0.weight"``).

    Returns:
      A pytree of strings with ``tree``'s structure.
    """
    return jax.tree_util.tree_map_with_path(lambda path, _: dotted_name(path), tree)
