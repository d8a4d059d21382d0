"""Every entry of the ATen table against PyTorch's own op samples (``op_db``).

For each family of ``jaxgrad.nn.aten`` (pointwise, reductions, shapes, indexing,
factories, neural-network ops), every float64 sample of every OpInfo that exercises
one of its overloads is captured to core ATen, run through the table, and compared with
torch: outputs and the vector-Jacobian product at the float64 tier
(``scripts/parity_checks/_conformance_aten.py``). Each overload must be reached by at
least one sample (or be listed in ``UNSAMPLED`` with the test that holds it instead),
and each of torch's ``error_inputs`` must be rejected.
"""

from collections import Counter

import pytest

from jaxgrad.nn import aten
from parity_checks import _conformance_aten as conformance

FAMILIES = ("_pointwise", "_reduce", "_shape", "_index", "_factory", "_nn", "_random")

# overloads no op_db sample reaches, and where each is held to torch instead
UNSAMPLED = {
    # .item(): make_fx cannot trace it, so no sample reaches it; refused, named
    "aten._local_scalar_dense.default":
        "test_aten_indexing.py::test_item_is_refused_naming_the_op",
}


def _family(overload: str) -> str:
    return aten.lookup(overload).fn.__module__.rsplit(".", 1)[-1]


def test_every_overload_belongs_to_a_family():
    families = {_family(name) for name in aten.supported()}
    assert families <= set(FAMILIES), families


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_family_passes_its_op_db_samples(family):
    overloads = [name for name in aten.supported() if _family(name) == family]
    if not overloads:
        pytest.skip(f"no overloads in {family} yet")
    outcomes, reached = conformance.op_outcomes(overloads)
    bad = [o for o in outcomes if o.status not in ("pass", "rejected")]
    counts = Counter((o.source, o.status) for o in outcomes)
    assert not bad, f"{len(bad)} of {len(outcomes)} samples: " + "\n".join(
        f"{o.source} {o.name}[{o.index}] {o.status}: {o.detail[:600]}" for o in bad[:20])
    unreached = [name for name in overloads if name not in reached and name not in UNSAMPLED]
    assert not unreached, f"no op_db sample reaches {unreached} ({dict(counts)})"
