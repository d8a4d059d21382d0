"""The zoo's CI subset: real models through ``from_torch``, held to torch.

``scripts/zoo.py`` runs the whole development set (minutes per model); CI runs the
models of ``_zoo_models.QUICK`` here (marked ``long``: ``pytest -m "exhaustive or
long"``), chosen to cover what the export front end must get right on a real model at
the least cost:

- a BatchNorm CNN with dropout and stochastic depth (timm's own test-size EfficientNet,
  through ``torch.export``): 3 training-mode SGD-momentum steps in float64, the running
  statistics threaded as buffers and compared after every step, the random ops on
  torch's own draws;
- a transformer with dropout and constants (Hugging Face BERT, tiny): its
  non-persistent buffers (``position_ids``, ``token_type_ids``) are constants, not
  params; evaluation-mode forward and every parameter gradient, and 3 training steps
  with dropout active, in float64; the same conversion at batch 1, a larger batch and a
  longer sequence, and its ``save_exported`` artifact reloaded where torch is not.

Skipped, saying what to install, when the ``zoo`` extra is absent. Also: the CLI's
argument handling, and the torchvision import shim.
"""

from __future__ import annotations

import copy

import _zoo_models
import numpy as np
import pytest
import zoo as zoo_script

from parity_tests._zoo_extra import requires

pytestmark = requires(*_zoo_models.LIBRARIES)

from parity_checks import _zoo  # noqa: E402


def _assert_passed(result, column):
    cell = result.columns[column]
    detail = "\n".join(result.failures())
    assert result.error is None, result.error
    assert cell.status == "pass", detail + (
        "" if cell.report is None else "\n" + cell.report.table()
    )
    assert cell.report.leaves, "a comparison of nothing proves nothing"
    return cell.report


@pytest.mark.long  # CI: pytest -m "exhaustive or long"
def test_batchnorm_cnn_with_stochastic_depth_trains_like_torch():
    entry = _zoo_models.BY_NAME["timm:test_efficientnet"]
    result = _zoo.run_model(entry, columns=_zoo_models.QUICK[entry.name])
    # through torch.export: BatchNorm's buffer writes become the program's new buffers
    assert result.front_end == "export"
    report = _assert_passed(result, "train")
    paths = [leaf.path for leaf in report.leaves]
    for name in ("running_mean", "running_var", "num_batches_tracked", "momentum_buffer"):
        assert any(name in path for path in paths), f"no {name} compared"
    # stochastic depth and dropout were active, on torch's own draws
    assert result.random_ops > 0
    dropped, drawn = result.dropped
    assert 0 < dropped < drawn


@pytest.mark.long  # CI: pytest -m "exhaustive or long"
def test_transformer_with_dropout_and_constants_matches_torch():
    entry = _zoo_models.BY_NAME["transformers:BertModel"]
    result = _zoo.run_model(entry, columns=_zoo_models.QUICK[entry.name])
    assert result.front_end == "export"
    # non-persistent buffers are constants of the program, never params or buffers
    assert "embeddings.position_ids" in result.constants
    _assert_passed(result, "float64")
    report = _assert_passed(result, "train")
    assert not any("position_ids" in leaf.path for leaf in report.leaves)
    # one capture at batch 1, a larger batch and a longer sequence; the artifact reloaded
    # in a process without torch gives torch's output
    shapes = _assert_passed(result, "shapes")
    assert {leaf.path.split("'")[1] for leaf in shapes.leaves} == {
        "batch 1",
        "batch 4",
        "length 12",
    }
    _assert_passed(result, "artifact")
    # dropout was active in training, on torch's own draws
    assert result.random_ops > 0
    dropped, drawn = result.dropped
    assert 0 < dropped < drawn


# ---------------------------------------------------------------- the script
def test_list_names_every_model(capsys):
    assert zoo_script.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert all(entry.name in out for entry in _zoo_models.MODELS)


@pytest.mark.parametrize(
    "argv",
    [
        ["--models", "no_such_model"],
        ["--models", "efficientnet_b0"],  # two libraries have it
        ["--quick", "--models", "resnet18"],
    ],
)
def test_bad_model_selection_is_a_usage_error(argv):
    with pytest.raises(SystemExit) as info:
        zoo_script.main(argv)
    assert info.value.code == 2


def test_model_names_are_checked_before_torch_is_imported(tmp_path):
    from parity_tests.test_scripts_cli import _run_stubbed

    script = str(_zoo_models.__file__).replace("_zoo_models.py", "zoo.py")
    results = _run_stubbed(
        [(script, ["--models", "no_such_model"]), (script, ["--list"])], tmp_path
    )
    assert results[0]["code"] == 2 and "unknown model 'no_such_model'" in results[0]["stderr"]
    assert results[1]["code"] == 0 and "transformers:BertModel" in results[1]["stdout"]


def test_a_missing_library_is_skipped_with_the_install_command(monkeypatch, capsys):
    monkeypatch.setattr(_zoo_models, "installed", lambda name: name != "timm")
    assert zoo_script.main(["--models", "timm:test_efficientnet"]) == 0
    captured = capsys.readouterr()
    assert _zoo_models.INSTALL in captured.err
    assert "nothing ran" in captured.out and "SKIP" in captured.out


def test_a_failing_model_exits_one(monkeypatch, capsys):
    def failing(entry, **options):
        result = _zoo.ZooResult(entry.name, entry.library, entry.notes)
        result.error = "ValueError: from_torch: unmapped op aten.nothing.default"
        return result

    monkeypatch.setattr(_zoo, "run_model", failing)
    assert zoo_script.main(["--models", "resnet18"]) == 1
    out = capsys.readouterr().out
    assert "convert FAIL" in out and "aten.nothing.default" in out


def test_torchvision_imports_with_or_without_its_c_extension():
    torchvision = _zoo_models.import_torchvision()
    assert hasattr(torchvision.models, "resnet18")
    assert _zoo_models.import_torchvision() is torchvision  # a second call changes nothing


def test_bench_zoo_rows_are_opt_in_and_name_zoo_models():
    import bench

    assert not bench.parse_args([]).zoo
    assert bench.parse_args(["--only", "resnet18 b16"]).zoo  # a zoo row implies --zoo
    assert all(model in _zoo_models.BY_NAME for _, model, *_ in bench.ZOO_CONFIGS)
    assert all(bench.GOALS[name] == 1.0 for name, *_ in bench.ZOO_CONFIGS)  # the floor


@pytest.mark.long  # CI: pytest -m "exhaustive or long"
def test_bench_zoo_default_strategies_train_the_same_params():
    """The zoo rows' ``jax default`` may be any strategy: a fused epoch of the converted
    BERT must end where its per-step loop ends (float32 tier, as test_train_strategy)."""
    import copy

    import bench
    import jax
    import numpy as np

    import jaxgrad

    module, xs = bench.zoo_batches("transformers:BertModel", 2, 3)
    side = bench.ZooJaxSide(module, xs, "cpu")
    start = copy.deepcopy(jax.device_get((side.params, side.buffers, side.opt_state)))
    ends = {}
    for strategy in ("step", "epoch", "unroll:2"):
        side.params, side.buffers, side.opt_state = jax.device_put(copy.deepcopy(start))
        side.run_with(strategy)
        ends[strategy] = jax.device_get(side.params)
    assert ends["step"].keys() == ends["epoch"].keys()
    # a key projection's bias gets no gradient in exact arithmetic (softmax is unchanged
    # by adding q·b_k to a whole row of scores): it starts at 0 and holds only rounding
    # noise, which is compared by size, not against the float32 tier
    noise = [k for k in ends["step"] if k.endswith("attention.self.key.bias")]
    assert noise
    for strategy in ("epoch", "unroll:2"):
        for k in noise:
            assert np.abs(ends["step"][k]).max() < 1e-12 and np.abs(ends[strategy][k]).max() < 1e-12
        jaxgrad.assert_parity(
            {k: v for k, v in ends["step"].items() if k not in noise},
            {k: v for k, v in ends[strategy].items() if k not in noise},
        )


def _result_with(entry, failing_column):
    import numpy as np

    import jaxgrad

    result = _zoo.ZooResult(entry.name, entry.library, entry.notes)
    good = jaxgrad.parity.compare({"x": np.ones(3)}, {"x": np.ones(3)})
    bad = jaxgrad.parity.compare({"x": np.ones(3)}, {"x": np.array([1.0, 1.0, 1.1])})
    for column in _zoo.COLUMNS:
        report = bad if column == failing_column else good
        result.columns[column] = _zoo.Column(
            "fail" if column == failing_column else "pass", report=report
        )
    return result


@pytest.mark.parametrize(
    "column, verdict, code",
    [
        ("float32_grads", "PASS", 0),
        ("float32", "FAIL", 1),
        ("float64", "FAIL", 1),
        ("train", "FAIL", 1),
    ],
)
def test_the_verdict_holds_float64_the_float32_forward_and_training(
    monkeypatch, capsys, column, verdict, code
):
    """The float32 gradients are judged and shown in their own column, outside the
    verdict; a failing forward in float32 (or any float64 comparison) fails the model."""
    monkeypatch.setattr(_zoo, "run_model", lambda entry, **options: _result_with(entry, column))
    assert zoo_script.main(["--models", "resnet18"]) == code
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("torchvision:resnet18"))
    assert f" {verdict} " in row and "FAIL 1.0e-01" in row
    assert f"torchvision:resnet18: {column}: 1 leaves outside the tier" in out


def test_the_public_import_helper_imports_no_torch_until_called():
    """``jaxgrad.zoo_imports`` is what users of the zoo extra call (docs/zoo.md):
    ``import jaxgrad`` and importing the helper load no torch; the zoo's own
    ``import_torchvision`` is the same function's result."""
    import subprocess
    import sys

    probe = (
        "import sys, jaxgrad, jaxgrad.zoo_imports; "
        "print(sorted(m for m in ('torch', 'torchvision', 'timm', 'transformers') "
        "if m in sys.modules))"
    )
    printed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert printed == "[]"
    from jaxgrad.zoo_imports import import_library, import_torchvision

    assert import_torchvision() is _zoo_models.import_torchvision()
    with pytest.raises(ValueError, match=r"`name` \(='torch'\) must be one of torchvision, timm"):
        import_library("torch")


# ------------------------------------------- float64 training steps: torch's own noise
def _noisy_record(reference, scale, seed):
    """``reference`` with every float leaf moved by ``scale`` times its own magnitude
    (random signs): a stand-in for another run's rounding."""
    rng = np.random.default_rng(seed)
    return {
        name: value * (1 + scale * rng.choice([-1.0, 1.0], size=value.shape))
        for name, value in reference.items()
    }


def test_a_float64_step_outside_the_tier_passes_only_within_torchs_own_noise():
    """The train column's calibration: a leaf outside the float64 tier passes when
    jaxgrad lies within CALIBRATION_MULTIPLE times torch's distance from itself on that
    leaf (the largest over the noise runs); 10x beyond it, or a gradient 1e-6 off on a
    leaf where torch agrees with itself, still fails."""
    import jaxgrad

    rng = np.random.default_rng(0)
    reference = {name: rng.standard_normal(40) for name in ("noisy", "steady", "wrong")}
    # torch against itself: 3e-10 relative on "noisy" (3x the tier), 1e-14 elsewhere
    alternates = [
        {
            **_noisy_record(reference, 1e-14, 1),
            "noisy": _noisy_record(reference, 3e-10, 2)["noisy"],
        },
        _noisy_record(reference, 1e-14, 3),
    ]
    candidate = {
        "noisy": _noisy_record(reference, 1.2e-9, 4)["noisy"],  # 12x the tier: within 5 x 3
        "steady": _noisy_record(reference, 1.2e-9, 5)["steady"],  # 12x, torch at 1e-4x
        "wrong": reference["wrong"] * (1 + 1e-6),
    }
    report = jaxgrad.parity.compare(reference, candidate, computed_in="float64")
    assert sorted(leaf.path for leaf in report.failures()) == ["noisy", "steady", "wrong"]
    passed, torch_outside = _zoo.calibrate_by_torch_noise(report, reference, candidate, alternates)
    leaves = {leaf.path: leaf for leaf in report.leaves}
    assert (passed, torch_outside) == (1, 1)
    assert leaves["noisy"].passed and leaves["noisy"].rule == _zoo.RULE_TORCH_NOISE
    assert 2.5 < leaves["noisy"].reference_headroom < 3.5  # measured, not assumed
    assert not leaves["steady"].passed and "torch against itself" in leaves["steady"].problem
    assert not leaves["wrong"].passed and leaves["wrong"].headroom > 1e3
    assert not report.passed


def test_more_noise_runs_are_taken_only_while_a_leaf_still_fails():
    """torch's largest distance on a leaf is a sample's maximum: where a leaf fails after
    the first runs, ``more`` runs are taken one at a time until it passes (and no more),
    or they are spent."""
    import jaxgrad

    rng = np.random.default_rng(0)
    reference = {name: rng.standard_normal(40) for name in ("noisy", "steady")}
    quiet = [_noisy_record(reference, 1e-14, 1)]
    candidate = {**reference, "noisy": _noisy_record(reference, 1.2e-9, 4)["noisy"]}  # 12x
    taken = []

    def more(scales):
        for k, scale in enumerate(scales):
            taken.append(k)
            yield {**reference, "noisy": _noisy_record(reference, scale, 10 + k)["noisy"]}

    report = jaxgrad.parity.compare(reference, candidate, computed_in="float64")
    passed, _ = _zoo.calibrate_by_torch_noise(
        report, reference, candidate, quiet, more=more([1e-14, 3e-10, 3e-10, 3e-10])
    )
    assert passed == 1 and report.passed and taken == [0, 1]  # stopped once it passed
    taken.clear()
    report = jaxgrad.parity.compare(reference, candidate, computed_in="float64")
    passed, _ = _zoo.calibrate_by_torch_noise(
        report, reference, candidate, quiet, more=more([1e-14] * 3)
    )
    assert passed == 0 and not report.passed and taken == [0, 1, 2]  # spent, still fails
    assert "largest of 4 runs" in report.failures()[0].problem


def test_torchs_noise_runs_leave_the_module_and_its_random_state_alone():
    """``torch_noise_step`` runs torch's step again from the recorded state on a copy:
    the module's parameters and torch's random state (the next step's dropout draws)
    are as before; the one-ulp runs take the same draws and did perturb the step, by
    about rounding; the layouts and the batch reversed replay torch's dropout masks, so
    every run computes the same loss. Without dropout, the batch reversed, channels-last
    and BatchNorm's statistics by ``torch.mean`` are the same step summed in other
    orders."""
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.BatchNorm2d(4),
        torch.nn.Dropout(0.5),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 4 * 4, 2),
    ).double()
    args = (np.random.default_rng(1).standard_normal((4, 3, 6, 6)),)
    targets = _zoo._targets(module(torch.from_numpy(args[0])))
    optimizer = _zoo.toptim.make_optimizer("sgd", module.parameters(), **_zoo.SGD)
    start = _zoo._torch_state(module, optimizer)
    rng_state = torch.get_rng_state()
    reference, draws = _zoo.torch_step(module, optimizer, [torch.from_numpy(args[0])], {}, targets)
    after = {name: p.detach().clone() for name, p in module.named_parameters()}
    state_after = torch.get_rng_state()
    runs = {
        how: _zoo.torch_noise_step(module, start, rng_state, args, {}, targets, how, draws=draws)
        for how in _zoo.NOISE_RUNS
    }
    # torch's draws are replayed: channels-last takes the same mask at the same places
    # (torch's generator alone fills it in memory order), the batch reversed takes each
    # example's mask with it; every run is a measure
    assert all(record is not None for record in runs.values()), runs
    assert torch.equal(torch.get_rng_state(), state_after)
    for name, p in module.named_parameters():
        assert torch.equal(p, after[name]), name
    for how, record in runs.items():
        # the same dropout draws: without them the loss would differ at O(1)
        assert abs(record["loss"] - reference["loss"]) < 1e-12 * abs(reference["loss"]), how
        if how.startswith("one ulp"):
            assert not np.array_equal(record["params"]["0.weight"], reference["params"]["0.weight"])

    # a model computing in float32 in places: the one-ulp runs move by float32's unit
    run64, run32 = (
        _zoo.torch_noise_step(
            module, start, rng_state, args, {}, targets, "one ulp", draws=draws, unit=unit
        )
        for unit in ("float64", "float32")
    )
    moved = {
        unit: np.max(np.abs(run["params"]["0.weight"] - reference["params"]["0.weight"]))
        for unit, run in (("float64", run64), ("float32", run32))
    }
    assert moved["float32"] > 1e4 * moved["float64"] > 0, moved
    module[2].p = 0.0  # no dropout: no draws
    torch.manual_seed(0)
    start = _zoo._torch_state(module, optimizer)
    rng_state = torch.get_rng_state()
    reference, draws = _zoo.torch_step(module, optimizer, [torch.from_numpy(args[0])], {}, targets)
    for how in ("channels-last", "batch reversed", "BatchNorm by torch.mean"):
        record = _zoo.torch_noise_step(
            module, start, rng_state, args, {}, targets, how, draws=draws
        )
        assert record is not None, how
        report = _zoo.jaxgrad.parity.compare(reference, record, computed_in="float64")
        assert report.passed, (how, report.table())


def test_a_float64_leaf_of_rounding_noise_is_judged_as_float64_not_by_its_bits():
    """A key projection's bias gets a gradient that is zero in exact arithmetic; both
    frameworks return rounding noise of ~1e-19, values with few significant bits that
    detection would take for float32 arithmetic (and hold to 1e-6 of themselves).
    ``compare_float64`` judges it at the tier of the arithmetic: float64 declared, or,
    for a model computing in float32 inside, at its neighbours' scale. A bias gradient
    that is really wrong (beyond the tier at the weights' scale) still fails."""
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((4, 4))
    torch_noise = np.ldexp(rng.integers(-(2**14), 2**14, size=4).astype(np.float64), -77)
    jax_noise = np.ldexp(rng.integers(-(2**14), 2**14, size=4).astype(np.float64), -77)
    reference = {"weight": weights, "key_bias": torch_noise}
    candidate = {"weight": weights * (1 + 1e-14), "key_bias": jax_noise}
    # compare alone keeps it at the float64 tier too: at most ZERO_IN_EXACT of its
    # neighbour, it is noise around zero, not float32 arithmetic (jaxgrad.parity)
    detected = _zoo.jaxgrad.parity.compare(reference, candidate)
    assert detected.passed, detected.table()
    bias = next(leaf for leaf in detected.leaves if leaf.path == "key_bias")
    assert (bias.tier, bias.tier_reason) == ("float64", "zero in exact arithmetic")
    # wrong by far more than each tier allows at the weights' scale (~1)
    for computed_in, offset in (("float64", 1e-8), ("float32", 1e-4)):
        assert _zoo.compare_float64(reference, candidate, computed_in).passed, computed_in
        wrong = {**candidate, "key_bias": jax_noise + offset}
        report = _zoo.compare_float64(reference, wrong, computed_in)
        assert [leaf.path for leaf in report.failures()] == ["key_bias"], computed_in
    note = _zoo.compare_float64(reference, candidate, "float32").zoo_note
    assert note.startswith("1 leaves zero in exact arithmetic"), note
    # a leaf the float64 model keeps in float32 (ViTMAE's mask) keeps its own tier
    mask = (rng.random(4) < 0.5).astype(np.float32)
    for computed_in in ("float64", "float32"):
        report = _zoo.compare_float64(
            {"grads": reference, "mask": mask}, {"grads": candidate, "mask": mask}, computed_in
        )
        assert report.passed, (computed_in, report.table())
        tiers = {leaf.path: leaf.tier for leaf in report.leaves}
        assert tiers["['mask']"] == "float32", tiers


def test_a_module_caching_tensors_with_gradients_copies_for_the_noise_runs():
    """timm's EfficientViT caches attention biases computed in a forward (with their
    graph) in a dict; torch's deepcopy refuses non-leaf tensors, ``copy_module`` copies
    them detached and leaves the original as it was."""
    import torch

    class Caching(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(3))
            self.cache = {}

        def forward(self, x):
            self.cache["scaled"] = self.weight * 2  # a non-leaf tensor kept
            return x * self.cache["scaled"]

    module = Caching()
    module(torch.ones(3)).sum().backward()
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(module)
    twin = _zoo.copy_module(module)
    assert twin.cache["scaled"].is_leaf and torch.equal(twin.cache["scaled"], torch.full((3,), 2.0))
    assert not module.cache["scaled"].is_leaf  # the original's cache untouched
    assert twin.weight is not module.weight and torch.equal(twin.weight, module.weight)


def test_the_float64_column_measures_a_failing_gradient_against_torchs_other_orders():
    """``float64_report``: a gradient leaf outside the float64 tier is put beside torch's
    own gradients in channels-last and with the batch reversed; jaxgrad's distance there
    within 5x torch's passes, a gradient 1e-6 off still fails."""
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten()).double()
    args = (np.random.default_rng(1).standard_normal((4, 3, 6, 6)),)
    reference, cotangents = _zoo.torch_eval(module, args, {})
    runs = _zoo.torch_float32_runs(module, args, {}, cotangents)
    assert len(runs) == 2  # channels-last, the batch reversed
    # a weight gradient 1e-6 off: about 1e4 times the float64 tier
    weight = reference["grads"]["0.weight"]
    wrong = {**reference, "grads": {**reference["grads"], "0.weight": weight * (1 + 1e-6)}}
    report = _zoo.float64_report(module, reference, wrong, args, {}, cotangents, "float64")
    (leaf,) = report.failures()
    assert leaf.path == "['grads']['0.weight']" and leaf.headroom > 1e3
    # a wrong gradient spends every further one-ulp run (MORE_NOISE_RUNS) and still fails
    assert f"torch against itself ({5 + len(_zoo.MORE_NOISE_RUNS)} runs" in report.zoo_note
    same = _zoo.float64_report(module, reference, reference, args, {}, cotangents, "float64")
    assert same.passed and getattr(same, "zoo_note", None) is None


def test_the_float64_column_measures_a_failing_output_against_torchs_other_orders_too():
    """An output leaf outside the float64 tier is measured against torch's own outputs as
    a gradient leaf is (fcn_resnet101: 4 of 327,680 output elements 3e-10 relative off,
    and no run of torch to compare with); the batch-reversed run's output is put back
    in the examples' order, and an output 1e-6 off still fails."""
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten()).double()
    args = (np.random.default_rng(1).standard_normal((4, 3, 6, 6)),)
    reference, cotangents = _zoo.torch_eval(module, args, {})
    for run in _zoo.torch_float32_runs(module, args, {}, cotangents):
        # torch against itself in another order: within the float64 tier of the reference
        assert _zoo.jaxgrad.parity.compare(reference["output"], run["output"]).passed
    wrong = {**reference, "output": reference["output"] * (1 + 1e-6)}
    report = _zoo.float64_report(module, reference, wrong, args, {}, cotangents, "float64")
    (leaf,) = report.failures()
    assert leaf.path == "['output']" and leaf.headroom > 1e3
    assert "torch against itself (largest of" in leaf.problem  # measured, not skipped


def test_a_clip_model_is_run_again_channels_last_3d():
    """Video models sum in another order too: a clip batch (5-D) and the 3-D
    convolutions' weights go ``channels_last_3d`` (s3d at batch 1 had only the one-ulp
    runs, which measure conditioning, not the summation order of its BatchNorm sums)."""
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Conv3d(3, 4, (1, 3, 3)), torch.nn.BatchNorm3d(4), torch.nn.Flatten()
    ).double()
    clip = np.random.default_rng(1).standard_normal((1, 3, 4, 6, 6))
    (moved,), _ = _zoo._torch_inputs([clip], {}, channels_last=True)
    assert moved.is_contiguous(memory_format=torch.channels_last_3d)
    assert not torch.from_numpy(clip).is_contiguous(memory_format=torch.channels_last_3d)
    reference, cotangents = _zoo.torch_eval(module, (clip,), {})
    (run,) = _zoo.torch_float32_runs(module, (clip,), {}, cotangents)  # batch 1: no reversal
    assert _zoo.jaxgrad.parity.compare(reference, run).passed
    targets = _zoo._targets(module(torch.from_numpy(clip)))
    module.train()
    optimizer = _zoo.toptim.make_optimizer("sgd", module.parameters(), **_zoo.SGD)
    start = _zoo._torch_state(module, optimizer)
    rng_state = torch.get_rng_state()
    record, draws = _zoo.torch_step(module, optimizer, [torch.from_numpy(clip)], {}, targets)
    again = _zoo.torch_noise_step(
        module, start, rng_state, (clip,), {}, targets, "channels-last", draws=draws
    )
    assert again is not None  # measured, where it had been skipped for 5-D inputs
    assert _zoo.jaxgrad.parity.compare(record, again, computed_in="float64").passed


def test_one_ulp_runs_move_each_value_one_ulp_and_leave_exact_zeros():
    """Monte Carlo arithmetic moves each value by its own rounding; an exact zero (ReLU's)
    has none, and its ulp would be a subnormal number (measured: every convolution after
    it ~30x slower), so it stays, in the inputs and in every layer's output."""
    import torch

    values = np.array([0.0, 1.0, -3.5, 1e-300, 0.0])
    moved = _zoo.one_ulp(values, np.random.default_rng(0))
    assert moved[0] == 0.0 and moved[4] == 0.0
    ulps = np.abs(moved[1:4] - values[1:4]) / np.abs(np.spacing(values[1:4]))
    assert np.allclose(ulps, 1.0)
    layer = torch.nn.ReLU()
    _zoo.round_every_layer(layer, seed=0)
    x = torch.tensor([-1.0, 0.0, 2.5, 3.0], dtype=torch.float64)
    y = layer(x)
    assert y[0] == 0.0 and y[1] == 0.0  # ReLU's exact zeros stay
    ulp = np.abs(np.spacing(x[2:].numpy()))  # 2.5 and 3.0: one ulp either way
    assert np.array_equal(np.abs((y[2:] - x[2:]).numpy()), ulp)
