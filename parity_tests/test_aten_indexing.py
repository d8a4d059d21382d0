"""What torch decides from tensor *values* while it runs, in the ATen table.

torch raises for an out-of-range index, sizes ``x[mask]`` and ``nonzero`` by the
number of True entries, and reads a value into Python with ``.item()``
(``aten._local_scalar_dense``). A captured program is traced without values, so
``jaxgrad.nn.aten._index`` checks them when they are concrete (the program run
eagerly) and says what happens when they are not:

- an out-of-range index raises ``IndexError`` naming the op, the index and the range,
  as torch does; under ``jit`` a gather clamps it and a scatter drops the update;
- ``nonzero`` and boolean-mask indexing run on concrete values and are refused,
  named, under ``jit``;
- ``.item()`` is refused, naming the op (no op_db sample reaches it: ``make_fx``
  cannot trace it, and ``from_torch`` refuses the program at capture).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from jaxgrad.nn import aten, from_torch


def _entry(overload: str):
    return aten.lookup(overload).fn


def test_item_is_refused_naming_the_op():
    class ScaledBySum(torch.nn.Module):
        def forward(self, x):
            return x * x.sum().item()

    # torch records .item() as aten._local_scalar_dense; the capture refuses it by name
    with pytest.raises(ValueError, match="aten._local_scalar_dense.default"):
        from_torch(ScaledBySum(), example=(torch.ones(3),), capture="export")
    with pytest.raises(ValueError, match=r"_local_scalar_dense.*\.item\(\)"):
        _entry("aten._local_scalar_dense.default")(jnp.ones(()))


@pytest.mark.parametrize(
    "overload, args, torch_call",
    [
        ("aten.gather.default", lambda x, i: (x, 0, i), lambda x, i: torch.gather(x, 0, i)),
        ("aten.index.Tensor", lambda x, i: (x, (i,)), lambda x, i: x[i]),
        (
            "aten.index_select.default",
            lambda x, i: (x, 0, i.ravel()),
            lambda x, i: torch.index_select(x, 0, i.ravel()),
        ),
        (
            "aten.scatter_add.default",
            lambda x, i: (x, 0, i, x[:1]),
            lambda x, i: torch.scatter_add(x, 0, i, x[:1]),
        ),
    ],
)
def test_an_out_of_range_index_raises_as_in_torch_and_is_clamped_or_dropped_under_jit(
    overload, args, torch_call
):
    x, index = np.arange(4.0), np.array([5])
    with pytest.raises((IndexError, RuntimeError)):
        torch_call(torch.from_numpy(x), torch.from_numpy(index))
    with pytest.raises(IndexError, match=r"index 5 is out of range .* size 4"):
        _entry(overload)(*args(jnp.asarray(x), jnp.asarray(index)))
    jitted = jax.jit(lambda x, i: _entry(overload)(*args(x, i)))(jnp.asarray(x), jnp.asarray(index))
    expected = x if overload.startswith("aten.scatter") else np.array([3.0])
    np.testing.assert_array_equal(jitted, expected)


def test_value_sized_outputs_run_on_concrete_values_and_are_refused_under_jit():
    x = jnp.asarray([[0.0, 1.5], [2.0, 0.0]])
    mask = x > 0
    np.testing.assert_array_equal(
        _entry("aten.nonzero.default")(x), torch.nonzero(torch.from_numpy(np.array(x))).numpy()
    )
    np.testing.assert_array_equal(_entry("aten.index.Tensor")(x, (mask,)), [1.5, 2.0])
    with pytest.raises(ValueError, match="nonzero: the output shape"):
        jax.jit(_entry("aten.nonzero.default"))(x)
    with pytest.raises(ValueError, match=r"index: indices\[0\] is a boolean mask"):
        jax.jit(lambda x, m: _entry("aten.index.Tensor")(x, (m,)))(x, mask)
