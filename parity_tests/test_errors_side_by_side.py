"""scripts/errors.py's claims about both frameworks, checked live."""

from __future__ import annotations

import errors
import pytest

EXPECTED = {
    "backward on a non-scalar output": (
        "raises RuntimeError: grad can be implicitly created",
        "raises TypeError: Gradient only defined for scalar-output",
    ),
    "backward twice through one graph": (
        "raises RuntimeError: Trying to backward through the graph",
        "no error",
    ),
    "nothing requires grad": (
        "raises RuntimeError: element 0 of tensors does not require grad",
        "no error",
    ),
    ".item() / float() mid-graph": (
        "no error: d/dx [x * (3x).item()] at 2 = 6.0",
        "raises ConcretizationTypeError",
    ),
    "in-place change of a saved tensor": (
        "raises RuntimeError: one of the variables needed",
        "raises TypeError: JAX arrays are immutable",
    ),
    "integer inputs": (
        "raises RuntimeError: Only Tensors of floating point",
        "raises TypeError: grad requires real- or complex-valued inputs",
    ),
    "an input the output does not use": (
        "no error: backward(): unused.grad = None",
        "no error: gradient w.r.t. the unused input is zeros",
    ),
}


@pytest.mark.parametrize(
    "title,torch_case,jax_case", errors.CASES, ids=[c[0] for c in errors.CASES]
)
def test_each_framework_behaves_as_the_table_says(title, torch_case, jax_case):
    torch_expected, jax_expected = EXPECTED[title]
    assert errors.outcome(torch_case).startswith(torch_expected)
    assert errors.outcome(jax_case).startswith(jax_expected)


@pytest.mark.parametrize(
    "title,case", errors.JAXGRAD_CASES, ids=[c[0] for c in errors.JAXGRAD_CASES]
)
def test_jaxgrad_input_errors_are_value_or_type_errors_naming_the_argument(title, case):
    result = errors.outcome(lambda: str(case()))
    assert result.startswith(("raises ValueError: `", "raises TypeError: `")), result
