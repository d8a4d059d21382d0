"""Every entry of the ATen table against PyTorch's own op samples (``op_db``).

For each family of ``jaxgrad.nn.aten`` (pointwise, reductions, shapes, indexing,
factories, neural-network ops), every float64 sample of every OpInfo that exercises
one of its overloads is captured to core ATen, run through the table, and compared with
torch: outputs and the vector-Jacobian product at the float64 tier
(``scripts/parity_checks/_conformance_aten.py``). Each overload must be reached by at
least one sample (or be listed in ``UNSAMPLED`` with the test that holds it instead),
and each of torch's ``error_inputs`` must be rejected. A sample that writes its own input in
place (``inplace=True``), or reads a view's storage through ``as_strided``, is refused, as
``from_torch`` refuses such a forward, naming why.
"""

from collections import Counter

import pytest

from jaxgrad.nn import aten
from parity_checks import _conformance_aten as conformance

FAMILIES = ("_pointwise", "_reduce", "_shape", "_index", "_factory", "_nn", "_random")

# overloads no op_db sample reaches, and where each is held to torch instead
UNSAMPLED = {
    # make_fx records `x - 2`, `2 ** x`, `x // 2` as .Tensor overloads; no float64
    # OpInfo has bitwise ops; the OpInfos that reach the others are slow (linspace,
    # logspace: 1,000+ samples) or cost seconds for one trivial overload
    **dict.fromkeys(
        ("aten.sub.Scalar", "aten.div.Scalar", "aten.div.Scalar_mode", "aten.pow.Scalar",
         "aten.copy.default", "aten.lift_fresh_copy.default", "aten.bitwise_not.default",
         "aten.bitwise_and.Tensor", "aten.bitwise_and.Scalar", "aten.bitwise_or.Tensor",
         "aten.bitwise_or.Scalar", "aten.bitwise_xor.Tensor", "aten.bitwise_xor.Scalar"),
        "test_aten_pointwise.py::test_unsampled_pointwise_overloads_match_torch"),
    # random ops export keeps but make_fx decomposes (dropout -> bernoulli), or that no
    # OpInfo calls (rand_like's OpInfo calls randn_like): compared on torch's draws
    "aten.native_dropout.default": "test_capture.py::test_stochastic_depth_and_dropout_"
                                   "are_active_in_training_and_match_torchs_draws",
    **dict.fromkeys(("aten.rand.default", "aten.rand_like.default", "aten.randperm.default"),
                    "test_capture.py::test_uniform_normal_and_permutation_draws_match_torch"),
    # .item(): make_fx cannot trace it, so no sample reaches it; refused, named
    "aten._local_scalar_dense.default":
        "test_aten_indexing.py::test_item_is_refused_naming_the_op",
    # what only torch.export records: functionalised batch norm, the .vec upsampling
    # overloads, and _embedding_bag (make_fx on detached samples takes the forward-only one)
    "aten._native_batch_norm_legit_functional.default":
        "test_aten_nn.py::test_batch_norm_overloads_of_both_modes_match_torch",
    "aten._native_batch_norm_legit_no_training.default":
        "test_aten_nn.py::test_batch_norm_overloads_of_both_modes_match_torch",
    **dict.fromkeys(("aten.upsample_nearest2d.vec", "aten.upsample_bilinear2d.vec"),
                    "test_aten_nn.py::test_upsample_vec_overloads_match_torch"),
    "aten._embedding_bag.default": "test_aten_nn.py::test_embedding_bag_matches_torch",
    # their OpInfos (max_pool2d, max_pool3d: 1,440 and 576 samples) cost minutes: each
    # distinct configuration of them instead
    **dict.fromkeys(("aten.max_pool2d_with_indices.default",
                     "aten.max_pool3d_with_indices.default"),
                    "test_aten_nn.py::test_max_pool_matches_every_configuration_of_op_db"),
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
    bad = [o for o in outcomes if o.status not in ("pass", "rejected", "refused")]
    refusals = ("writes its input", "jaxgrad's arrays have no strides")  # by design, named
    assert all(any(r in o.detail for r in refusals) for o in outcomes if o.status == "refused")
    counts = Counter((o.source, o.status) for o in outcomes)
    assert not bad, f"{len(bad)} of {len(outcomes)} samples: " + "\n".join(
        f"{o.source} {o.name}[{o.index}] {o.status}: {o.detail[:600]}" for o in bad[:20])
    unreached = [name for name in overloads if name not in reached and name not in UNSAMPLED]
    assert not unreached, f"no op_db sample reaches {unreached} ({dict(counts)})"
