"""Shape and view ATen ops: views (``view``, ``permute``, ``expand``, ``slice``…) are
values here, since a captured program is functional (``torch.export`` has already
turned every write through a view into ``*_scatter`` copies)."""

from __future__ import annotations

import jax.numpy as jnp

from jaxgrad.nn.aten import register


@register("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default")
def view(input, size):
    return jnp.reshape(input, tuple(size))


@register("aten.permute.default")
def permute(input, dims):
    return jnp.transpose(input, tuple(dims))
