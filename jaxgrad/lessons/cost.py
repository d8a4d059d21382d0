"""The lessons' cost claim in JAX: one backward gives every partial derivative.

Lesson 000: "all 203,530 partial derivatives come out of one single backward pass;
nudging one parameter at a time needs 203,530 forward passes". ``naive_gradient``
is that naive approach — central differences, one parameter at a time, two
forward passes each — so its cost can be measured and set against one backward.
``median_seconds`` is the timer both frameworks' measurements share (framework-
neutral: give it a function that blocks until its result is ready).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree


def median_seconds(
    fn: Callable[[], object], repeats: int, *, warmup: int = 1, min_sample: float = 0.02
) -> float:
    """Median wall time of one ``fn()`` call, over ``repeats`` samples.

    After ``warmup`` calls (compilation, allocator), each sample times enough calls
    to last ``min_sample`` seconds (as ``timeit`` does), so microsecond functions are
    not measured by the clock's jitter.
    """
    if repeats < 1:
        raise ValueError(f"`repeats` (={repeats}) must be at least 1.")
    last = 0.0
    for _ in range(warmup):
        start = time.perf_counter()
        fn()
        last = time.perf_counter() - start
    number = max(1, math.ceil(min_sample / last)) if warmup and last > 0 else 1
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


def naive_gradient(loss: Callable, params, *, eps: float = 1e-3):
    """Central differences of ``loss(params)``, one parameter at a time.

    ``2 × n_params`` forward passes, the loop in Python as a user would write it.
    Returns the gradient with ``params``' structure.
    """
    return naive_gradient_fn(loss, params, eps=eps)()


def naive_gradient_fn(loss: Callable, params, *, eps: float = 1e-3) -> Callable[[], object]:
    """``naive_gradient`` as a function of nothing, compiled once (so it can be timed)."""
    flat, unravel = ravel_pytree(params)

    @jax.jit
    def one(vector, index):
        step = jnp.zeros_like(vector).at[index].set(eps)
        return (loss(unravel(vector + step)) - loss(unravel(vector - step))) / (2 * eps)

    def run():
        return unravel(jnp.stack([one(flat, index) for index in range(flat.size)]))

    return run
