"""Every entry of the ATen table against PyTorch's own op samples (``op_db``).

For each family of ``jaxgrad.nn.aten`` (pointwise, reductions, shapes, indexing,
factories, neural-network ops, random ops), float64 samples of every OpInfo that
exercises one of its overloads are captured to core ATen, run through the table, and
compared with torch: outputs and the vector-Jacobian product at the float64 tier
(``scripts/parity_checks/_conformance_aten.py``). Each overload must be reached by at
least one sample (or be listed in ``UNSAMPLED`` with the test that holds it instead),
and each of torch's ``error_inputs`` must be rejected. A sample that writes its own input in
place (``inplace=True``), or reads a view's storage through ``as_strided``, is refused, as
``from_torch`` refuses such a forward, naming why.

The default run takes the quick selection (each OpInfo's first sample, and the first
sample that reaches each overload the earlier ones did not, every error input) of five
families, the exhaustive run that of ``_nn`` and ``_pointwise`` too; the
``exhaustive`` tests run every sample (~8 CPU-minutes; CI runs them with ``pytest -m
exhaustive``, as does ``python scripts/conformance_aten.py``).
"""

import pytest
from parity_checks import _conformance_aten as conformance

from jaxgrad.nn import aten

FAMILIES = ("_pointwise", "_reduce", "_shape", "_index", "_factory", "_nn", "_random")


def test_every_overload_belongs_to_a_family_and_unsampled_ones_are_mapped():
    families = {conformance.family(name) for name in aten.supported()}
    # `_autograd`: jaxgrad's own marks of autograd in a forward (no op_db samples; held
    # to torch by the tests UNSAMPLED names)
    assert families <= set(FAMILIES) | {"_autograd"}, families
    assert set(conformance.UNSAMPLED) <= set(aten.supported())
    assert {name for name in aten.supported() if conformance.family(name) == "_autograd"} <= set(
        conformance.UNSAMPLED
    )


# the quick selections of `_nn` (~40 s) and `_pointwise` (~16 s) run in the exhaustive
# run only (CI: -m "exhaustive or long"), beside every sample of theirs; the default run
# takes the quick selection of the five other families (~17 worker-seconds)
@pytest.mark.parametrize(
    "family",
    [
        pytest.param(f, marks=pytest.mark.exhaustive) if f in ("_nn", "_pointwise") else f
        for f in FAMILIES
    ],
)
def test_family_passes_its_op_db_samples(family):
    verdict = conformance.family_verdict(family, quick=True)
    assert verdict.overloads, f"no overloads in {family}"
    assert not verdict.bad, f"{len(verdict.bad)} of {len(verdict.outcomes)} samples: " + "\n".join(
        f"{o.source} {o.name}[{o.index}] {o.status}: {o.detail[:600]}" for o in verdict.bad[:20]
    )
    assert not verdict.unreached, f"no op_db sample reaches {verdict.unreached}"
    assert any(o.status == "pass" for o in verdict.outcomes)


@pytest.mark.exhaustive
@pytest.mark.parametrize("family", FAMILIES)
def test_family_passes_every_op_db_sample(family):
    verdict = conformance.family_verdict(family)
    assert not verdict.bad, f"{len(verdict.bad)} of {len(verdict.outcomes)} samples: " + "\n".join(
        f"{o.source} {o.name}[{o.index}] {o.status}: {o.detail[:600]}" for o in verdict.bad[:20]
    )
    assert not verdict.unreached, f"no op_db sample reaches {verdict.unreached}"
