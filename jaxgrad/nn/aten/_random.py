"""Random ATen ops: dropout, Bernoulli draws (stochastic depth), uniform and normal
samples. Each is ``sample(key, ...) -> draw`` (the random numbers, from the node's own
key) and ``fn(draw, ...) -> output`` (what torch computes from them), so a caller can
supply torch's own draws instead (``random_draws=``) and compare a step with dropout
active exactly. The draws follow torch's distributions, not its bits: torch's
generator and ``jax.random`` never agree.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad.nn.aten._promote import DEFAULT_FLOAT, canonical
from jaxgrad.nn.aten._table import register


def _dtype(dtype, like=None):
    if dtype is not None:
        return canonical(dtype)
    return like.dtype if like is not None else canonical(DEFAULT_FLOAT)


# ------------------------------------------------------------------- dropout
def _dropout_keep(key, input, p, train):
    del train
    return jax.random.bernoulli(key, 1.0 - p, input.shape)


@register("aten.native_dropout.default", sample=_dropout_keep)
def native_dropout(keep, input, p, train):
    """``(output, mask)``: eager torch's ``input * (bernoulli(1 - p) / (1 - p))``."""
    if not train or p == 0:
        return input, jnp.ones(input.shape, bool)
    keep = jnp.asarray(keep).astype(bool)
    if p == 1:
        return jnp.zeros_like(input), keep & False
    noise = keep.astype(input.dtype) / np.asarray(1.0 - p, input.dtype)
    return input * noise, keep


# ----------------------------------------------------------------- Bernoulli
def _bernoulli_p_sample(key, input, p=0.5, *, generator=None):
    del generator
    return jax.random.bernoulli(key, p, input.shape)


@register("aten.bernoulli.p", sample=_bernoulli_p_sample)
def bernoulli_p(draw, input, p=0.5, *, generator=None):
    """A tensor shaped and typed like ``input`` of Bernoulli(``p``) zeros and ones
    (stochastic depth: ``empty(N, 1, 1, 1).bernoulli_(survival)``)."""
    del p, generator
    return jnp.asarray(draw).astype(input.dtype)


def _bernoulli_sample(key, input, *, generator=None):
    del generator
    return jax.random.uniform(key, input.shape, input.dtype) < input


@register("aten.bernoulli.default", sample=_bernoulli_sample)
def bernoulli(draw, input, *, generator=None):
    """Bernoulli(``input``) elementwise, in ``input``'s dtype."""
    del generator
    return jnp.asarray(draw).astype(input.dtype)


# ------------------------------------------------------- uniform and normal
def _factory_sample(draw_fn):
    def sample(key, size, *, dtype=None, layout=None, device=None, pin_memory=None, generator=None):
        del layout, device, pin_memory, generator
        return draw_fn(key, tuple(size), _dtype(dtype))

    return sample


def _factory(draw, size, *, dtype=None, layout=None, device=None, pin_memory=None, generator=None):
    del size, layout, device, pin_memory, generator
    return jnp.asarray(draw).astype(_dtype(dtype))


register("aten.rand.default", sample=_factory_sample(jax.random.uniform))(_factory)
register("aten.randn.default", sample=_factory_sample(jax.random.normal))(_factory)


def _like_sample(draw_fn):
    def sample(
        key, input, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None
    ):
        del layout, device, pin_memory, memory_format
        return draw_fn(key, input.shape, _dtype(dtype, input))

    return sample


def _like(
    draw, input, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None
):
    del layout, device, pin_memory, memory_format
    return jnp.asarray(draw).astype(_dtype(dtype, input))


register("aten.rand_like.default", sample=_like_sample(jax.random.uniform))(_like)
register("aten.randn_like.default", sample=_like_sample(jax.random.normal))(_like)


# ------------------------------------------------------------- permutations
def _randperm_sample(
    key, n, *, dtype=None, layout=None, device=None, pin_memory=None, generator=None
):
    del layout, device, pin_memory, generator
    return jax.random.permutation(key, n)


@register("aten.randperm.default", sample=_randperm_sample)
def randperm(draw, n, *, dtype=None, layout=None, device=None, pin_memory=None, generator=None):
    """A random permutation of ``range(n)``, int64 unless ``dtype`` says otherwise."""
    del n, layout, device, pin_memory, generator
    return jnp.asarray(draw).astype(canonical(np.int64 if dtype is None else dtype))


__all__ = ["native_dropout", "bernoulli_p", "bernoulli", "randperm"]
