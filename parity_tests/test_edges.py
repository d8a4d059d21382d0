"""Exact boundaries, ties, duplicates and zeros against torch (issue 44).

``op_db``'s samples are random normals: they never land on a clamp's bound, a tie, a
repeated index or a zero vector, so a table entry can be wrong exactly there and pass
every conformance test. Each group below puts its edge in a sample of its own, computes
torch's answer in float64 in the test, and compares value and vector-Jacobian products
at the float64 tier (NaN masks included): the table entry directly and, where a model
reaches it, through a captured model. Every group is held by an entry of the mutation
corpus (``jaxgrad_dev/mutations/edges.yaml``) that plants the bug it must catch.

Also here: the three bugs found while writing them (a variance over as many elements as
its correction, a traced ``chunk`` of an empty dimension, and the uninitialised
``new_empty`` of a capture test).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from parity_checks._capture_parity import draws_for, torch_run
from torch import nn as tnn

from jaxgrad import nn, parity
from jaxgrad import optim as joptim
from jaxgrad.doctor import match
from jaxgrad.nn import aten
from jaxgrad.nn.capture import fx_ops
from jaxgrad.optim import quasi_newton

D = torch.float64


# ---------------------------------------------------------------------- helpers
def _cotangent(shape, which=0):
    """A fixed cotangent with no zero and no two neighbours equal (a wrong split of
    the gradient cannot cancel out); ``which`` output of several gets its own scale."""
    ramp = 1.0 + 0.125 * (np.arange(int(np.prod(shape))) % 7)
    return np.asarray(ramp * (1.0 + which), np.float64).reshape(shape)


def _torch_vjp(torch_fn, arrays, differentiable):
    """torch's value of ``torch_fn(*arrays)`` (an array or a tuple of them) and its VJP
    with respect to the ``differentiable`` positions (a torch ``None`` gradient is a
    zero)."""
    leaves = [torch.from_numpy(np.array(a)) if isinstance(a, np.ndarray) else a for a in arrays]
    for i in differentiable:
        leaves[i].requires_grad_(True)
    out = torch_fn(*leaves)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    used = [(k, o) for k, o in enumerate(outs) if o.requires_grad]
    grads = (
        torch.autograd.grad(
            [o for _, o in used],
            [leaves[i] for i in differentiable],
            [torch.from_numpy(_cotangent(tuple(o.shape), k)) for k, o in used],
            allow_unused=True,
        )
        if used
        else [None] * len(differentiable)
    )
    return {
        "value": [o.detach().numpy() for o in outs],
        "grads": [
            np.zeros(leaves[i].shape) if g is None else g.numpy()
            for i, g in zip(differentiable, grads)
        ],
    }


def _jax_vjp(jax_fn, arrays, differentiable):
    values = [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in arrays]

    def of(*diff):
        full = list(values)
        for i, value in zip(differentiable, diff):
            full[i] = value
        out = jax_fn(*full)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    outs, vjp = jax.vjp(of, *[values[i] for i in differentiable])
    cotangents = [jnp.asarray(_cotangent(o.shape, k), o.dtype) for k, o in enumerate(outs)]
    return {"value": outs, "grads": list(vjp(cotangents))}


def _assert_vjp_matches(torch_fn, jax_fn, arrays, differentiable=(0,)):
    """Value and VJP of both at the float64 tier (pinned: round edge values must not
    be judged at the float32 tier), output dtypes float64."""
    reference = _torch_vjp(torch_fn, arrays, differentiable)
    candidate = _jax_vjp(jax_fn, arrays, differentiable)
    assert all(out.dtype == jnp.float64 for out in candidate["value"])
    report = parity.compare(reference, candidate, computed_in="float64")
    assert report.passed, report.table()


def _entry(overload):
    return aten.lookup(overload).fn


def _torch_op(overload):
    return eval(f"torch.ops.{overload}")  # noqa: S307 - "aten.X.Y", the table's own names


def _assert_entry_matches(overload, arrays, kwargs=None, differentiable=(0,)):
    kwargs = kwargs or {}
    _assert_vjp_matches(
        lambda *a: _torch_op(overload)(*a, **kwargs),
        lambda *a: _entry(overload)(*a, **kwargs),
        arrays,
        differentiable,
    )


def _assert_capture_matches(module, *arrays, capture="export"):
    """A captured ``module``: outputs and input VJPs against torch's."""
    module = module.to(D)
    example = tuple(torch.from_numpy(a) for a in arrays)
    # at the example's shapes (dynamic_shapes=None): these tests are about values at
    # edges; test_dynamic_shapes.py holds the symbolic sizes (and costs them once)
    model, params = nn.from_torch(module, example=example, capture=capture, dynamic_shapes=None)
    differentiable = tuple(range(len(arrays)))
    _assert_vjp_matches(module, lambda *a: model.apply(params, *a), arrays, differentiable)


# --------------------------------------------- 1. pow where base and exponent are 0
# torch's pow_backward: d/dbase is 0 where the exponent is 0 (0·0⁻¹ would be NaN), and
# d/dexponent is 0 where the base is 0 and the exponent ≥ 0 (1·log 0 would be −inf)
BASES = np.array([0.0, 0.0, 0.0, -0.0, 0.0, 2.5, -1.5, 0.5])
EXPONENTS = np.array([0.0, 2.0, 0.5, 0.0, 1.0, 0.0, 2.0, -1.0])


@pytest.mark.parametrize("case", ["zero-to-zero", "mixed"])
def test_pow_gradients_at_zero_to_the_zero_are_torchs_zeros(x64, case):
    bases, exponents = (np.zeros(3), np.zeros(3)) if case == "zero-to-zero" else (BASES, EXPONENTS)
    _assert_entry_matches("aten.pow.Tensor_Tensor", (bases, exponents), differentiable=(0, 1))
    _assert_entry_matches("aten.pow.Tensor_Scalar", (bases, 0.0))  # x ** 0
    _assert_entry_matches("aten.pow.Scalar", (0.0, exponents), differentiable=(1,))  # 0 ** y


class Power(tnn.Module):
    def forward(self, base, exponent):
        return base**exponent + base**0


def test_pow_at_zero_to_the_zero_through_a_captured_model(x64):
    _assert_capture_matches(Power(), BASES, EXPONENTS)


# ---------------------------------- 2. hardtanh / relu6 exactly at their bounds
# torch's hardtanh_backward passes the gradient strictly inside (min_val, max_val): 0 at
# both bounds (relu6 is hardtanh(0, 6) in a captured program)
def _bounds_and_neighbours(low, high):
    """Each bound twice, its nearest neighbours inside (1e-300 for 0: XLA flushes the
    subnormal next to 0 to 0), the middle and a point outside each bound."""
    inside_low = np.nextafter(low, high) if low != 0 else 1e-300
    return np.array(
        [
            low - 1.0,
            low,
            inside_low,
            0.5 * (low + high),
            np.nextafter(high, low),
            high,
            high + 1.0,
            low,
            high,
        ]
    )


@pytest.mark.parametrize(
    "low, high", [(-1.0, 1.0), (0.0, 6.0), (-2.0, 3.0)], ids=["hardtanh", "relu6", "hardtanh(-2,3)"]
)
def test_hardtanh_gradient_at_its_bounds_is_zero_like_torch(x64, low, high):
    _assert_entry_matches("aten.hardtanh.default", (_bounds_and_neighbours(low, high), low, high))


class Bounded(tnn.Module):
    def forward(self, x):
        return TF.relu6(x) * 2 + TF.hardtanh(x, -2.0, 3.0) + tnn.functional.hardtanh(x)


@pytest.mark.parametrize("capture", ["export", "layers"])
def test_relu6_and_hardtanh_at_their_bounds_through_a_captured_model(x64, capture):
    points = np.concatenate(
        [
            _bounds_and_neighbours(0.0, 6.0),
            _bounds_and_neighbours(-2.0, 3.0),
            _bounds_and_neighbours(-1, 1),
        ]
    )
    _assert_capture_matches(Bounded(), points, capture=capture)


def test_relu6_layer_gradient_at_its_bounds_is_zero_like_torch(x64):
    points = _bounds_and_neighbours(0.0, 6.0)
    model, params = nn.from_torch(tnn.ReLU6())
    _assert_vjp_matches(TF.relu6, lambda x: model.apply(params, x), (points,))


# ------------------------------------------------- 3. clamp exactly at min / max
# torch's clamp_backward passes the gradient to self on min ≤ x ≤ max, bounds included;
# with tensor bounds, min gets it where x < min < max and max where x > max or max < min
CLAMPED = np.array(
    [-3.0, -1.0, np.nextafter(-1.0, 0.0), 0.0, 2.0, np.nextafter(2.0, 3.0), 5.0, -1.0, 2.0]
)


@pytest.mark.parametrize(
    "low, high",
    [(-1.0, 2.0), (-1.0, None), (None, 2.0), (2.0, 2.0)],
    ids=["both", "min-only", "max-only", "min-equals-max"],
)
def test_clamp_passes_the_gradient_at_its_bounds_like_torch(x64, low, high):
    _assert_entry_matches("aten.clamp.default", (CLAMPED, low, high))


def test_clamp_with_tensor_bounds_at_ties_matches_torch(x64):
    x = np.array([-1.0, 2.0, 0.0, 3.0, -4.0, 1.0, 1.0, 5.0])
    low = np.array([-1.0, -1.0, 0.0, 3.0, -1.0, 1.0, 2.0, 2.0])  # ties, then min > max
    high = np.array([2.0, 2.0, 0.0, 3.0, 2.0, 1.0, 0.5, 4.0])
    _assert_entry_matches("aten.clamp.Tensor", (x, low, high), differentiable=(0, 1, 2))


class Clamped(tnn.Module):
    def forward(self, x):
        return x.clamp(-1.0, 2.0) + x.clamp(min=-1.0) * 0.5 + x.clamp(max=2.0) * 0.25


def test_clamp_at_its_bounds_through_a_captured_model(x64):
    _assert_capture_matches(Clamped(), CLAMPED)


# ----------------------------------------- 4. the 2-norm's gradient at a zero vector
# torch's norm_backward: 0 where the norm is 0 (x / ‖x‖ would be 0/0 = NaN)
ROWS = np.array([[0.0, 0.0, 0.0], [3.0, 0.0, -4.0], [-0.0, 0.0, 0.0], [1e-200, 0.0, 0.0]])


@pytest.mark.parametrize("dim, keepdim", [(None, False), ([-1], False), ([1], True)])
def test_vector_norm_gradient_at_a_zero_vector_is_zero_like_torch(x64, dim, keepdim):
    _assert_entry_matches("aten.linalg_vector_norm.default", (ROWS, 2, dim, keepdim))
    _assert_entry_matches("aten.linalg_vector_norm.default", (np.zeros(4), 2))


class RowNorms(tnn.Module):
    def forward(self, x):
        return torch.linalg.vector_norm(x, dim=-1) + torch.linalg.vector_norm(x[:1])


def test_vector_norm_at_a_zero_vector_through_a_captured_model(x64):
    _assert_capture_matches(RowNorms(), ROWS)


# ------------------------------------- 5. index_put / scatter with repeated indices
# torch's backward for the written values is a gather of the cotangent: every duplicate
# gets the cotangent of the position it writes, also the writes that lose the forward
# (JAX's scatter gives it to the winning write only). Duplicates write equal values
# where one write wins, so the forward does not depend on which one does.
INPUT = np.arange(1.0, 13.0).reshape(4, 3)


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_with_repeated_indices_gives_every_duplicate_its_gradient(x64, accumulate):
    rows = np.array([1, 3, 1, 1, -3])  # row 1 four times (-3 is row 1 too)
    values = (
        np.array(
            [[7.0, 8.0, 9.0], [1.5, 2.5, 3.5], [7.0, 8.0, 9.0], [7.0, 8.0, 9.0], [7.0, 8.0, 9.0]]
        )
        if not accumulate
        else np.arange(15.0).reshape(5, 3) * 0.5
    )
    _assert_vjp_matches(
        lambda x, v: torch.ops.aten.index_put.default(x, [torch.from_numpy(rows)], v, accumulate),
        lambda x, v: _entry("aten.index_put.default")(x, (jnp.asarray(rows),), v, accumulate),
        (INPUT, values),
        differentiable=(0, 1),
    )


def test_index_put_of_repeated_element_pairs_gives_every_duplicate_its_gradient(x64):
    rows, cols = np.array([0, 2, 0, 0]), np.array([1, 2, 1, 1])
    _assert_vjp_matches(
        lambda x, v: torch.ops.aten.index_put.default(
            x, [torch.from_numpy(rows), torch.from_numpy(cols)], v
        ),
        lambda x, v: _entry("aten.index_put.default")(x, (jnp.asarray(rows), jnp.asarray(cols)), v),
        (INPUT, np.array([5.0, -1.0, 5.0, 5.0])),
        differentiable=(0, 1),
    )


@pytest.mark.parametrize("overload", ["aten.scatter.src", "aten.scatter_add.default"])
def test_scatter_with_repeated_indices_gives_every_duplicate_its_gradient(x64, overload):
    index = np.array([[1, 0, 2], [1, 0, 2], [3, 0, 2]])  # rows 1 and 0 written twice or more
    src = np.array([[4.0, -2.0, 6.0], [4.0, -2.0, 6.0], [0.5, -2.0, 6.0]])
    _assert_vjp_matches(
        lambda x, s: _torch_op(overload)(x, 0, torch.from_numpy(index), s),
        lambda x, s: _entry(overload)(x, 0, jnp.asarray(index), s),
        (INPUT, src),
        differentiable=(0, 1),
    )


class WritesTwice(tnn.Module):
    def forward(self, x, values):
        rows = torch.tensor([2, 0, 2])
        return x.index_put((rows,), values) + x.index_put((rows,), values, accumulate=True)


def test_index_put_with_repeated_indices_through_a_captured_model(x64):
    values = np.array([[1.0, 2.0, 3.0], [-1.0, 0.0, 4.0], [1.0, 2.0, 3.0]])
    _assert_capture_matches(WritesTwice(), INPUT, values)


# -------------------------------------- 6. scatter_reduce amax / amin with ties
# torch's scatter_reduce_backward splits the cotangent evenly among the input and source
# elements equal to the result (without include_self, among the sources only)
TIED_INPUT = np.array([1.0, 5.0, 2.0, -1.0, 0.0])
TIED_INDEX = np.array([1, 1, 0, 2, 2, 2, 4, 4])
TIED_SRC = np.array([5.0, 3.0, 1.0, 2.0, 2.0, -7.0, 0.0, 0.0])  # ties with input and among src


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_splits_the_gradient_evenly_among_ties_like_torch(x64, reduce, include_self):
    src = TIED_SRC if reduce == "amax" else -TIED_SRC
    _assert_vjp_matches(
        lambda x, s: torch.ops.aten.scatter_reduce.two(
            x, 0, torch.from_numpy(TIED_INDEX), s, reduce, include_self=include_self
        ),
        lambda x, s: _entry("aten.scatter_reduce.two")(
            x, 0, jnp.asarray(TIED_INDEX), s, reduce, include_self=include_self
        ),
        (TIED_INPUT if reduce == "amax" else -TIED_INPUT, src),
        differentiable=(0, 1),
    )


def test_scatter_reduce_ties_in_two_dimensions_match_torch(x64):
    x = np.array([[3.0, 3.0, 1.0], [0.0, 2.0, 2.0]])
    index = np.array([[0, 1, 0, 0], [1, 1, 2, 2]])
    src = np.array([[3.0, 3.0, 3.0, -1.0], [2.0, 2.0, 2.0, 1.0]])
    _assert_vjp_matches(
        lambda x, s: torch.ops.aten.scatter_reduce.two(x, 1, torch.from_numpy(index), s, "amax"),
        lambda x, s: _entry("aten.scatter_reduce.two")(x, 1, jnp.asarray(index), s, "amax"),
        (x, src),
        differentiable=(0, 1),
    )


# ---------------------------------- 7. two random ops in one module draw independently
class TwoDraws(tnn.Module):
    """Two draws of one kind, in one module (one path): each needs its own key."""

    def forward(self, x):
        return (
            torch.rand_like(x),
            torch.rand_like(x),
            TF.dropout(x, 0.5, training=self.training),
            TF.dropout(x, 0.5, training=self.training),
        )


def test_two_random_ops_in_one_captured_module_draw_independently(x64):
    x = np.ones((64,))
    module = TwoDraws().to(D).train()
    (first, second, dropped, dropped_again), _ = torch_run(
        module, (torch.from_numpy(x),), train=True
    )
    # torch's property: two draws of one module are not the same numbers
    assert not torch.equal(first, second) and not torch.equal(dropped, dropped_again)
    model, params = nn.from_torch(module, example=(torch.from_numpy(x),), capture="export")
    nodes = model.train_program.random_nodes()
    assert len(nodes) == 4 and len({node.path for node in nodes}) == 1  # one module
    key = jax.random.key(3)
    ours = model.apply(params, jnp.asarray(x), train=True, key=key)
    assert all(out.dtype == jnp.float64 for out in ours)
    assert not np.array_equal(ours[0], ours[1])
    assert not np.array_equal(ours[2], ours[3])
    again = model.apply(params, jnp.asarray(x), train=True, key=key)  # the key decides
    for mine, repeated in zip(ours, again):
        np.testing.assert_array_equal(mine, repeated)
    # handed torch's own draws, each op takes its own one, in order
    module.train()
    out, recorded = torch_run(module, (torch.from_numpy(x),), train=True)
    given = model.apply(params, jnp.asarray(x), train=True, random_draws=draws_for(model, recorded))
    parity.assert_parity([t.detach().numpy() for t in out], list(given))


# ------------------------------------- 8. L-BFGS's strong-Wolfe zoom, off convexity
def _rosenbrock(p, xp):
    x = p["x"]
    return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()


# lr 1: zooms that keep their bracket's ends in place; lr 10 overshoots, so the zoom also
# replaces the high end where a trial fails the sufficient-decrease test. (Larger steps,
# lr 30, make the run chaotic: rounding differences of 1e-15 grow to 1e-1 in 60 evaluations.)
@pytest.mark.parametrize("lr", [1, 10])
def test_lbfgs_strong_wolfe_zoom_on_a_4d_rosenbrock_ends_where_torchs_does(x64, monkeypatch, lr):
    start = np.array([-1.2, 1.0, -1.2, 1.0])
    kwargs = {"lr": lr, "max_iter": 20, "line_search_fn": "strong_wolfe", "history_size": 10}
    params = {"x": torch.tensor(start, requires_grad=True)}
    optimizer = torch.optim.LBFGS(list(params.values()), **kwargs)

    def closure():
        optimizer.zero_grad()
        loss = _rosenbrock(params, torch)
        loss.backward()
        return loss

    torch_losses = [float(optimizer.step(closure).detach()) for _ in range(3)]
    torch_state = optimizer.state[params["x"]]

    zooms = []  # the zoom interpolates within its bracket: no `bounds`
    interpolate = quasi_newton._cubic_interpolate

    def counting(*args, bounds=None):
        zooms.append(bounds is None)
        return interpolate(*args, bounds=bounds)

    monkeypatch.setattr(quasi_newton, "_cubic_interpolate", counting)
    lbfgs = joptim.lbfgs(**kwargs)
    ours = {"x": jnp.asarray(start)}
    state = lbfgs.init(ours)
    value_and_grad = jax.jit(jax.value_and_grad(lambda p: _rosenbrock(p, jnp)))
    losses = []
    for _ in range(3):
        loss, ours, state = lbfgs.step(value_and_grad, ours, state)
        losses.append(float(loss))
    assert sum(zooms) >= 3, "the closure must reach the zoom phase, or this test proves nothing"
    view = joptim.torch_style_state(state, ["x"])["x"]
    assert (int(view["n_iter"]), int(view["func_evals"])) == (
        torch_state["n_iter"],
        torch_state["func_evals"],
    )
    parity.assert_parity(
        {"x": params["x"].detach().numpy(), "loss": np.array(torch_losses)},
        {"x": ours["x"], "loss": np.array(losses)},
    )


# ------------------------------- 9. the doctor's matcher judges each element at its scale
# float32 tier: |c − r| ≤ 1e-6·max|r| + 1e-5·|r| per element; judged at max|r| = 1000,
# 0.006 would pass for 0.001 (the allowance there is 1e-3 + 1e-2)
@pytest.mark.parametrize(
    "dtype, wrong, right",
    [
        (torch.float32, 0.006, 0.001 * (1 + 2e-6)),
        (torch.float64, 0.001 + 5e-8, 0.001 * (1 + 5e-11)),  # within 1e-10·1000, not 1e-10·0.001
    ],
    ids=["float32", "float64"],
)
def test_the_doctors_matcher_judges_each_element_at_its_own_scale(dtype, wrong, right):
    reference = (
        (torch.tensor([1.0, 1e-3], dtype=D) * torch.tensor([1000.0, 1.0], dtype=D))
        .to(dtype)
        .numpy()
    )  # torch's [1000, 0.001]
    numpy_dtype = reference.dtype
    wrong_value = np.array([1000.0, wrong], numpy_dtype)
    right_value = np.array([1000.0, right], numpy_dtype)
    assert match.close(reference, right_value)[1]
    assert not match.close(reference, wrong_value)[1]
    with_nan = np.append(reference, np.nan).astype(numpy_dtype)  # the non-finite branch
    assert match.close(with_nan, np.append(right_value, np.nan).astype(numpy_dtype))[1]
    assert not match.close(with_nan, np.append(wrong_value, np.nan).astype(numpy_dtype))[1]

    class Value:  # a port value as the doctor's trace records it
        def __init__(self, array, order):
            self.array, self.where, self.order, self.leaves = (
                array,
                f"eqn {order}",
                order,
                frozenset(),
            )

    assert not match.Pool([Value(wrong_value, 0)], chw=()).find(reference).ok
    assert match.Pool([Value(right_value, 0)], chw=()).find(reference).ok
    # parameters: the wrong leaf holds no torch parameter, the right one does
    assert match.match_params({"w": reference}, ["w"], [wrong_value], ())[0].port_name is None
    assert match.match_params({"w": reference}, ["w"], [right_value], ())[0].port_name == "w"


# ------------------------------------------------ 10. a chunk that does not divide evenly
# torch's chunk: ceil(size / chunks) per chunk, the last smaller, and fewer chunks when
# that step covers the dimension sooner (10 in 3 -> 4, 4, 2; 10 in 4 -> 3, 3, 3, 1;
# 10 in 6 -> five chunks of 2)
class Chunks(tnn.Module):
    def __init__(self, chunks, method=True):
        super().__init__()
        self.chunks, self.method = chunks, method

    def forward(self, x):
        if self.method:
            return x.chunk(self.chunks, dim=1)
        return torch.chunk(x, self.chunks, -1)


@pytest.mark.parametrize("capture", ["layers", "export"])
@pytest.mark.parametrize("method", [True, False], ids=["method", "function"])
@pytest.mark.parametrize("chunks, size", [(3, 10), (4, 10), (6, 10), (3, 3), (3, 2)])
def test_uneven_chunks_are_torchs_sizes_on_both_paths(x64, capture, method, chunks, size):
    x = np.arange(2.0 * size).reshape(2, size) / 7
    module = Chunks(chunks, method).to(D)
    expected = module(torch.from_numpy(x))
    model, params = nn.from_torch(
        module, example=(torch.from_numpy(x),), capture=capture, dynamic_shapes=None
    )
    ours = model.apply(params, jnp.asarray(x))
    assert [tuple(p.shape) for p in ours] == [tuple(p.shape) for p in expected]
    # each piece has its own cotangent scale: pieces swapped or resized cannot cancel out
    _assert_capture_matches(module, x, capture=capture)


def test_the_fx_tables_chunk_and_split_give_torchs_pieces(x64):
    x = np.arange(20.0).reshape(2, 10)
    for chunks in (1, 3, 4, 6, 10, 11):
        expected = torch.from_numpy(x).chunk(chunks, dim=1)
        ours = fx_ops.OPS["method.chunk"].fn(jnp.asarray(x), chunks, dim=1)
        parity.assert_parity([t.numpy() for t in expected], list(ours))
    for sections in (3, 4, [2, 3, 5]):
        expected = torch.from_numpy(x).split(sections, dim=-1)
        ours = fx_ops.OPS["method.split"].fn(jnp.asarray(x), sections, dim=-1)
        parity.assert_parity([t.numpy() for t in expected], list(ours))


# ------------------------------------------------------- 11. Adafactor's eps floors
# gradients near 1e-9: the variance estimate (≈1e-18) falls below eps1² and the row mean
# below eps1 (default eps1: float64's machine epsilon, 2.2e-16 — the row mean floors),
# and a parameter of RMS 1e-9 below eps2 (1e-3): every max(·, eps) of the rule decides
def _tiny_gradients(shape, steps):
    """``steps`` gradients of ``shape`` near 1e-9 (both signs), the same for both
    frameworks."""
    ramp = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    return [1e-9 * (np.cos(0.7 * ramp + 0.4 * k) + 0.5) for k in range(steps)]


@pytest.mark.parametrize(
    "eps", [(None, 1e-3), (1e-8, 1e-3), (1e-10, 1e-9)], ids=["default", "eps1-1e-8", "eps1-1e-10"]
)
def test_adafactor_where_its_eps_floors_apply_matches_torch(x64, eps):
    rng = np.random.default_rng(11)
    start = {
        "matrix": rng.standard_normal((3, 4)) * 1e-9,
        "vector": rng.standard_normal(5),
        "zeros": np.zeros((2, 3)),
        "tiny_vector": rng.standard_normal(4) * 1e-9,
    }
    gradients = {n: _tiny_gradients(v.shape, 6) for n, v in start.items()}
    params = {n: torch.tensor(v, requires_grad=True) for n, v in start.items()}
    optimizer = torch.optim.Adafactor(list(params.values()), lr=0.05, eps=eps)
    ours = {n: jnp.asarray(v) for n, v in start.items()}
    transform = joptim.adafactor(lr=0.05, eps=eps)
    state = transform.init(ours)
    for k in range(6):
        for n, p in params.items():
            p.grad = torch.from_numpy(gradients[n][k])
        optimizer.step()
        updates, state = transform.update(
            {n: jnp.asarray(gradients[n][k]) for n in ours}, state, ours
        )
        ours = jax.tree.map(lambda p, u: p + u, ours, updates)
    reference_state = {
        n: {f: v.numpy() for f, v in optimizer.state[p].items() if f != "step"}
        for n, p in params.items()
    }
    our_state = {
        n: {f: np.asarray(v) for f, v in entry.items() if f != "step"}
        for n, entry in joptim.torch_style_state(state, list(start)).items()
    }
    parity.assert_parity(
        {"params": {n: p.detach().numpy() for n, p in params.items()}, "state": reference_state},
        {"params": ours, "state": our_state},
    )


# ================================================================ the three bugs
# --------------------- a variance over as many elements as its correction: NaN, not a raise
class RowVariance(tnn.Module):
    def forward(self, x):
        return x.var(dim=-1) + x.var(dim=-1, correction=0) * 0.5


@pytest.mark.filterwarnings("ignore:var\\(\\). degrees of freedom")  # torch warns; the edge
@pytest.mark.parametrize(
    "shape, correction",
    [((3, 1), 1), ((2, 2), 2), ((1, 3), 0)],
    ids=["size-1-dim", "correction-2-of-2", "correction-0"],
)
def test_variance_over_as_many_elements_as_the_correction_is_nan_with_nan_gradient(
    x64, shape, correction
):
    x = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape) / 3
    _assert_entry_matches("aten.var.correction", (x, [-1]), {"correction": correction})


@pytest.mark.filterwarnings("ignore:var\\(\\). degrees of freedom")  # torch warns; the edge
def test_variance_of_a_size_1_dimension_through_a_captured_model(x64):
    _assert_capture_matches(RowVariance(), np.array([[0.5], [-2.0], [3.0]]))


# --------------------------------------------- a traced chunk of an empty dimension
class EmptyChunks(tnn.Module):
    def forward(self, x):
        return x.chunk(3, dim=1), torch.chunk(x, 2, dim=1), x.split(2, dim=1)


@pytest.mark.parametrize("capture", ["layers", "export"])
def test_chunk_of_an_empty_dimension_gives_torchs_empty_chunks(x64, capture):
    x = np.zeros((2, 0))
    expected = EmptyChunks()(torch.from_numpy(x))
    assert [len(pieces) for pieces in expected] == [3, 2, 1]
    model, params = nn.from_torch(
        EmptyChunks(), example=(torch.from_numpy(x),), capture=capture, dynamic_shapes=None
    )
    ours = model.apply(params, jnp.asarray(x))
    parity.assert_parity(
        [[t.numpy() for t in pieces] for pieces in expected], [list(pieces) for pieces in ours]
    )


def test_split_by_size_of_an_empty_dimension_is_one_empty_piece_like_torch(x64):
    x = np.zeros((2, 0))
    for split_size in (0, 1, 2):
        expected = torch.from_numpy(x).split(split_size, dim=1)
        ours = fx_ops.OPS["method.split"].fn(jnp.asarray(x), split_size, dim=1)
        parity.assert_parity([t.numpy() for t in expected], list(ours))


# --------------------------- new_empty's uninitialised memory: no test may read it
def test_no_capture_test_reads_uninitialised_new_empty_memory(monkeypatch):
    """torch's ``new_empty`` is whatever the allocator hands out: ``inf·0`` made the torch
    reference of ``test_capture.py``'s ``CommonOps`` NaN now and then. Its result may be
    used for its shape and dtype only: filled with NaN, the output must not change."""
    from parity_tests.test_capture import CommonOps

    torch.manual_seed(0)
    module = CommonOps().double()
    x = torch.randn(4, 6, dtype=D)
    reference = module(x)
    new_empty = torch.Tensor.new_empty
    monkeypatch.setattr(
        torch.Tensor,
        "new_empty",
        lambda self, *a, **k: new_empty(self, *a, **k).fill_(float("nan")),
    )
    filled = module(x)
    assert torch.isfinite(filled).all()
    torch.testing.assert_close(filled, reference, rtol=0, atol=0)


def test_torchs_recorded_draws_replay_in_torch_whatever_its_generator_holds():
    """``torchref.random_draws.replaying``: the recorded dropout masks handed back to
    torch give the same step again on another seed; reversed with the batch, each
    example keeps its own mask; a draw torch does not make as recorded is refused."""
    from torchref.random_draws import Draw, recording, replaying

    torch.manual_seed(0)
    module = tnn.Sequential(tnn.Linear(4, 8), tnn.Dropout(0.5), tnn.Linear(8, 2)).double()
    x = torch.randn(6, 4, dtype=torch.float64)
    with recording() as draws:
        expected = module(x)
    assert len(draws) == 1 and 0 < draws[0].values.sum() < draws[0].values.numel()
    torch.manual_seed(123)  # other numbers in torch's generator
    with replaying(draws) as replayer:
        again = module(x)
    assert replayer.used == 1 and torch.equal(again, expected)
    with replaying([Draw(d.op, d.values.flip(0)) for d in draws]):
        reversed_batch = module(x.flip(0))
    assert torch.equal(reversed_batch, expected.flip(0))
    with pytest.raises(ValueError, match="more than the 0 draws"), replaying([]):
        module(x)
    with pytest.raises(ValueError, match="shape"), replaying(draws):
        module(x[:3])
