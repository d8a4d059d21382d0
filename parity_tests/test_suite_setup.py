"""The suite's own set-up changes nothing a verdict could see.

``conftest.py`` lowers every program of a test process into one MLIR context
(``_mlir_context.py``) where jax would build a new one per program. Here the same
programs are lowered both ways, each traced anew so that no lowering cache can hand back
the first result, and the text jax gives XLA must be identical. ``_sampling.one_in``,
which picks what the default run takes of a parametrization, drops nothing.
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.interpreters import mlir

from parity_tests._mlir_context import share_one_mlir_context
from parity_tests._sampling import one_in


def _programs():
    """Fresh closures (new jaxprs on every call): a dense layer's gradient closing over a
    constant weight, a tanh recurrence under ``lax.scan``, a strided convolution."""
    w = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3)

    def dense_grad(x):
        return jax.grad(lambda x: jnp.sum(jnp.tanh(x @ w) ** 2))(x)

    def recurrence(x):
        def step(h, xt):
            h = jnp.tanh(xt @ w[:3] + h @ w[:3, :3])
            return h, h

        return jax.lax.scan(step, jnp.zeros(3, x.dtype), x)[1]

    def conv(x):
        kernel = jnp.asarray(w[None, None, :3, :3])
        return jax.lax.conv_general_dilated(x[None, None], kernel, (2, 2), "SAME")

    return [
        (dense_grad, np.ones((2, 4), np.float32)),
        (recurrence, np.ones((5, 3), np.float32)),
        (conv, np.ones((6, 6), np.float32)),
    ]


def _lower_all(monkeypatch, make):
    monkeypatch.setattr(mlir, "make_ir_context", make)
    out = []
    for f, x in _programs():
        lowered = jax.jit(f).lower(x)
        out.append(
            (lowered.as_text(), lowered.compiler_ir().context, np.asarray(lowered.compile()(x)))
        )
    return out


def test_one_shared_mlir_context_lowers_the_text_fresh_contexts_do(monkeypatch):
    fresh = getattr(mlir.make_ir_context, "fresh", mlir.make_ir_context)
    stand_in = types.SimpleNamespace(make_ir_context=fresh)
    assert share_one_mlir_context(stand_in)
    shared = stand_in.make_ir_context
    assert shared.fresh is fresh

    by_fresh = _lower_all(monkeypatch, fresh)
    by_shared = _lower_all(monkeypatch, shared)
    again = _lower_all(monkeypatch, shared)  # after other modules lived in the context

    contexts = {id(context) for _, context, _ in by_shared + again}
    assert len(contexts) == 1, "the shared programs were not lowered into one context"
    assert all(context is not by_shared[0][1] for _, context, _ in by_fresh)
    for (text, _, value), (text_s, _, value_s), (text_a, _, value_a) in zip(
        by_fresh, by_shared, again
    ):
        assert text_s == text and text_a == text
        np.testing.assert_array_equal(value_s, value)
        np.testing.assert_array_equal(value_a, value)


def test_sharing_wraps_once_and_leaves_other_jax_versions_alone():
    calls = []
    stand_in = types.SimpleNamespace(make_ir_context=lambda: calls.append(1) or object())
    assert share_one_mlir_context(stand_in) and share_one_mlir_context(stand_in)
    first = stand_in.make_ir_context()
    assert stand_in.make_ir_context() is first and calls == [1]
    assert not share_one_mlir_context(types.SimpleNamespace())


def test_one_in_leaves_the_first_of_each_stride_to_the_default_run():
    """``one_in`` (the default run's selection of a parametrization, the rest marked
    ``exhaustive`` or ``long``) keeps values, ids and marks and drops nothing."""
    slow = pytest.mark.slow
    params = ["a", ("b", 2), pytest.param("c", 3, id="cee", marks=slow), "d", ("e", 5)]
    out = one_in(2, params)
    assert out[0] == "a" and out[2] is params[2] and out[4] == ("e", 5)  # kept as they are
    assert out[1].values == ("b", 2) and [m.name for m in out[1].marks] == ["exhaustive"]
    assert out[3].values == ("d",) and [m.name for m in out[3].marks] == ["exhaustive"]
    again = one_in(3, params, marker=pytest.mark.long)
    assert again[2].id == "cee" and again[2].values == ("c", 3)
    assert [m.name for m in again[2].marks] == ["slow", "long"]  # its own marks merged
    assert [p for i, p in enumerate(again) if i % 3 == 0] == ["a", "d"]
    assert one_in(1, params) == params
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="`every`"):
            one_in(bad, params)
