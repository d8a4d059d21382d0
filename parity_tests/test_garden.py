"""The garden sweep (``scripts/zoo.py --garden``, ``scripts/_garden.py``): its list,
its records and resume, the classification of each outcome from real exceptions, and
the page generated from records.

The default run keeps what takes seconds: the classification of a real unmapped op
refused by ``from_torch``, a real library build error, a real torch forward error, a
real pass, a real timeout and a real crash of a child process, numbers that differ, the
records and ``--resume`` (with an in-process runner), the report, timm's smallest-model
rule on two families and the CLI's argument checks. Marked ``long``: the full
enumeration of the three libraries (timm's counts every family on the meta device,
minutes uncached; every Hugging Face config built in torch) and a sweep whose child is a
real subprocess converting a real model, resumed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import _garden
import _zoo_models
import numpy as np
import pytest

from parity_tests._zoo_extra import requires

pytestmark = requires(*_zoo_models.LIBRARIES)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = _garden.GardenModel("torchvision:test_model", "torchvision", "test", "classification")


def _entry_for(build):
    """An ``entry_for`` giving ``run_one`` a module built by ``build(library)``."""

    def entry_for(model, size):
        return _zoo_models.ZooModel(model.name, model.library, build)

    return entry_for


def _rows(n=4):
    return np.random.default_rng(0).standard_normal((n, 4)).astype(np.float32)


# ------------------------------------------------------------ classification
def test_an_unmapped_op_that_from_torch_refuses_is_refused_naming_the_op():
    import torch

    class Histogram(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.linear(x)
            return y * torch.histc(y, bins=4).sum()

    record = _garden.run_one(
        MODEL, ("float64",), entry_for=_entry_for(lambda lib: (Histogram(), (_rows(),), {}))
    )
    assert record["outcome"] == "REFUSED", record
    assert record["cause"] == "unmapped op aten.histc.default"
    assert record["detail"].startswith("ValueError: from_torch: unmapped op aten.histc.default")


def test_a_library_that_cannot_build_the_model_is_an_error_not_a_refusal():
    # transformers raises a ValueError of its own here: the stage, not the type, decides
    def build(transformers):
        config = transformers.BertConfig(hidden_size=30, num_attention_heads=4)
        return transformers.BertModel(config), (np.zeros((2, 8), np.int64),), {}

    model = _garden.GardenModel("transformers:BrokenBert", "transformers", "bert", "text")
    record = _garden.run_one(model, ("float64",), entry_for=_entry_for(build))
    assert record["outcome"] == "ERROR", record
    assert record["cause"] == "the library could not build it: ValueError"
    assert "not a multiple of the number of attention heads" in record["detail"]


def test_a_model_torch_cannot_run_is_an_error():
    import torch

    class Mismatched(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(3, 3))

        def forward(self, x):
            return x @ self.weight  # (4, 4) @ (3, 3)

    record = _garden.run_one(
        MODEL, ("float64",), entry_for=_entry_for(lambda lib: (Mismatched(), (_rows(),), {}))
    )
    assert record["outcome"] == "ERROR", record
    assert record["cause"] == "torch's own forward failed: RuntimeError"


def test_a_model_that_matches_passes_with_its_columns_recorded():
    import torch

    record = _garden.run_one(
        MODEL,
        ("float64",),
        entry_for=_entry_for(lambda lib: (torch.nn.Linear(4, 3), (_rows(),), {})),
    )
    assert record["outcome"] == "PASS", record
    assert record["columns"]["float64"]["status"] == "pass"
    assert record["columns"]["float64"]["max_abs_err"] < 1e-12
    assert record["columns_skipped"] == [c for c in _garden.COLUMNS if c != "float64"]
    assert record["parameters"] == 15 and record["front_end"] == "layers"
    assert record["inputs"] == "float32[4, 4]"


def test_numbers_that_differ_fail_and_a_crash_in_jaxgrad_fails():
    from parity_checks import _zoo

    import jaxgrad

    result = _zoo.ZooResult("m", "torchvision", "")
    for column in ("float64", "float32", "train"):
        result.columns[column] = _zoo.Column(
            "pass", report=jaxgrad.parity.compare({"y": np.ones(3)}, {"y": np.ones(3)})
        )
    wrong = jaxgrad.parity.compare({"y": np.ones(3)}, {"y": np.ones(3) * 1.001})
    result.columns["train"] = _zoo.Column("fail", report=wrong)
    outcome, cause, detail = _garden.classify_result(result, {}, ("float64", "float32", "train"))
    assert (outcome, cause) == ("FAIL", "numbers differ: train")
    assert "leaves outside the tier" in detail
    # an exception other than ValueError raised through jaxgrad is its crash
    try:
        jaxgrad.nn.from_torch(object())
    except TypeError as error:
        outcome, cause, _ = _garden.classify_exception(error, stage="convert")
    assert outcome == "FAIL" and cause.startswith("crash: TypeError at ")
    # raised inside torch (its Linear.forward the innermost frame), no jaxgrad frame
    import torch

    try:
        torch.nn.Linear(4, 3)(torch.ones(2, 5))
    except RuntimeError as error:
        outcome, cause, _ = _garden.classify_exception(error, stage="run")
    assert (outcome, cause) == ("ERROR", "torch or the library raised RuntimeError")
    # a library's own ValueError is no refusal of jaxgrad's (MNASNet's
    # _load_from_state_dict raised one in the zoo's torch-only training helper)
    try:
        torch.nn.BatchNorm1d(3).train()(torch.ones(1, 3))
    except ValueError as error:
        outcome, cause, _ = _garden.classify_exception(error, stage="run")
    assert (outcome, cause) == ("ERROR", "torch or the library raised ValueError")


@pytest.mark.parametrize(
    "message, cause",
    [
        (
            "from_torch: unmapped op aten.histc.default at node 'histc' (call_function "
            "aten.histc.default) in M at the top level; jaxgrad's ATen table maps 300",
            "unmapped op aten.histc.default",
        ),
        (
            "from_torch: torch.export cannot capture SSD at the top level in training mode "
            "(GuardOnDataDependentSymNode: Could not extract specialized integer). jaxgrad",
            "torch.export: GuardOnDataDependentSymNode (data-dependent)",
        ),
        (
            "from_torch: torch.export cannot capture FasterRCNN at the top level in training "
            "mode (GuardOnDataDependentSymNode: Could not extract specialized integer from "
            "data-dependent expression TruncToInt(zuf0) (unhinted: TruncToInt(zuf0)).",
            "torch.export: GuardOnDataDependentSymNode (data-dependent: TruncToInt(zuf))",
        ),
        (
            "from_torch: node 'item' (call_function aten._local_scalar_dense.default) in M "
            "at the top level reads a tensor's value as a Python number (`.item()`)",
            ".item() in the forward (aten._local_scalar_dense)",
        ),
        (
            "from_torch: the custom autograd.Function Round called at q in M cannot be reproduced",
            "custom autograd.Function Round",
        ),
    ],
)
def test_refusal_cause_names_the_op_or_construct(message, cause):
    assert _garden.refusal_cause(message) == cause


def test_torchs_own_run_leaves_the_module_as_it_was():
    # MNASNet's _load_from_state_dict needs the state_dict's metadata: the state is
    # copied back in place, BatchNorm's running statistics included
    import torch

    from jaxgrad.zoo_imports import import_torchvision

    torch.manual_seed(0)
    module = import_torchvision().models.mnasnet0_5(num_classes=10)
    before = {k: v.clone() for k, v in module.state_dict().items()}
    _garden._torch_runs(module, (np.ones((2, 3, 32, 32), np.float32),), {})
    after = module.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not module.training


# ------------------------------------------------------------ the child process
def test_a_child_past_its_timeout_is_killed_and_recorded_as_timeout():
    began = time.perf_counter()
    record = _garden.run_child(
        _garden.GardenModel("transformers:BertModel", "transformers", "bert", "text"),
        ("float64",),
        timeout=0.5,
    )
    assert record["outcome"] == "TIMEOUT" and record["cause"] == "over 0.5 s"
    assert time.perf_counter() - began < 10


def test_a_child_that_dies_without_a_record_is_a_crash():
    # 50 MB of address space: the interpreter dies importing, before any record
    record = _garden.run_child(
        _garden.GardenModel("transformers:BertModel", "transformers", "bert", "text"),
        ("float64",),
        timeout=60,
        memory_limit=0.05,
    )
    assert record["outcome"] == "CRASH", record
    assert record["cause"].startswith("the child died without a record")


# ------------------------------------------------------------ records and resume
def _fake_runner(calls):
    def runner(model, columns, **options):
        calls.append(model.name)
        return dict(model.to_dict(), outcome="PASS", cause="", columns={}, seconds=0.1)

    return runner


def test_records_are_appended_one_a_model_and_resume_skips_the_recorded(tmp_path):
    path = str(tmp_path / "records.jsonl")
    models = [
        _garden.GardenModel(f"torchvision:m{i}", "torchvision", "f", "classification")
        for i in range(3)
    ]
    calls = []
    _garden.sweep(models[:2], path, columns=("float64",), runner=_fake_runner(calls), log=print)
    assert calls == ["torchvision:m0", "torchvision:m1"]
    with open(path) as handle:
        assert [json.loads(line)["name"] for line in handle] == calls
    # a second sweep on the same records needs --resume
    with pytest.raises(ValueError, match="pass --resume"):
        _garden.sweep(models, path, columns=("float64",), runner=_fake_runner([]), log=print)
    # a killed writer's last line, cut short, is ignored (that model runs again)
    with open(path, "a") as handle:
        handle.write('{"name": "torchvision:m2", "outc')
    calls = []
    _garden.sweep(
        models, path, columns=("float64",), resume=True, runner=_fake_runner(calls), log=print
    )
    assert calls == ["torchvision:m2"]
    assert [r["name"] for r in _garden.read_records(path)] == [m.name for m in models]


# ------------------------------------------------------------ the report
RECORDS = [
    dict(
        name="torchvision:resnet18",
        library="torchvision",
        family="resnet",
        task="classification",
        parameters=11_689_512,
        outcome="PASS",
        cause="",
        front_end="layers",
        convert_seconds=0.3,
        first_call_seconds=4.9,
        seconds=40.0,
        columns={"float64": {"status": "pass", "max_abs_err": 3e-14}},
        columns_skipped=["shapes", "artifact"],
        enumerated={"torchvision": 109, "timm": 98, "transformers": 71},
        versions={"torch": "2.13.0+cpu"},
    ),
    dict(
        name="timm:test_a",
        library="timm",
        family="a",
        task="image",
        outcome="REFUSED",
        cause="unmapped op aten.histc.default",
        detail="ValueError: from_torch: unmapped op aten.histc.default at ...",
        columns={},
        seconds=9.0,
    ),
    dict(
        name="timm:test_b",
        library="timm",
        family="b",
        task="image",
        outcome="REFUSED",
        cause="unmapped op aten.histc.default",
        columns={},
        seconds=9.0,
    ),
    dict(
        name="transformers:X",
        library="transformers",
        family="x",
        task="text",
        outcome="FAIL",
        cause="numbers differ: train",
        detail="train: 1 leaves outside the tier",
        columns={"train": {"status": "fail", "max_abs_err": 2e-3}},
        seconds=30.0,
    ),
]


def test_the_report_counts_outcomes_and_causes_from_the_records_alone():
    page = _garden.report(RECORDS, source="r.jsonl")
    assert "**4 of 278 enumerated models have run**" in page
    assert "| timm | 0 | 0 | 2 | 0 | 0 | 0 | 2 | 98 |" in page
    assert "| all | 1 | 1 | 2 | 0 | 0 | 0 | 4 | 278 |" in page
    # model names escaped as Markdown prose (test\\_a), causes as code spans
    assert "| `unmapped op aten.histc.default` | timm:test\\_a, timm:test\\_b | 2 |" in page
    assert "| `numbers differ: train` | transformers:X | 1 |" in page
    row = next(line for line in page.splitlines() if line.startswith("| torchvision:resnet18"))
    assert "11.7M" in row and "PASS 3.0e-14" in row and "4.9 s" in row
    assert "shapes, artifact were skipped" in page
    line = _garden.coverage_line(RECORDS)
    assert line.startswith("The garden sweep (4 of 278 enumerated models")
    assert "1 PASS, 1 FAIL, 2 REFUSED" in line
    assert line in page


def test_the_bars_count_pass_over_the_enumerated_and_the_silent_wrong_answers():
    """Against the issue's bars: PASS over every enumerated model of the group (one
    torchvision PASS of 109 - 12 detection builders), and the FAILs whose numbers
    differ counted as silent wrong answers."""
    enumerated = {"torchvision": 109, "timm": 98, "transformers": 71, "torchvision:detection": 12}
    records = [dict(RECORDS[0], enumerated=enumerated), *RECORDS[1:]]
    lines = _garden.bars(records)
    assert (
        "| torchvision classification, segmentation, video, optical flow | 1 | 97 | 1% | 95% | no |"
        in lines
    )
    assert "| timm families | 0 | 98 | 0% | 90% | no |" in lines
    assert "| Hugging Face architectures | 0 | 71 | 0% | 90% | no |" in lines
    assert any("**1** (the bar is 0): transformers:X." in line for line in lines)
    page = _garden.report(records)
    assert "**4 of 278 enumerated models have run**" in page  # the task count is not a model


def test_rerun_runs_the_chosen_outcomes_again_and_the_page_counts_the_last(tmp_path):
    """After a fix, ``--rerun FAIL,TIMEOUT`` runs those models again; the new record is
    appended (the old one stays, the sweep's history) and the page and the README line
    count each model by its last record."""
    path = str(tmp_path / "records.jsonl")
    models = [
        _garden.GardenModel(f"torchvision:m{i}", "torchvision", "f", "classification")
        for i in range(3)
    ]
    for model, outcome in zip(models, ("PASS", "FAIL", "TIMEOUT")):
        _garden.append_record(path, dict(model.to_dict(), outcome=outcome, cause="c", seconds=1.0))
    calls = []
    _garden.sweep(
        models, path, columns=("float64",), resume=True, rerun=("FAIL",), runner=_fake_runner(calls)
    )
    assert calls == ["torchvision:m1"]
    records = _garden.read_records(path)
    assert len(records) == 4
    last = {r["name"]: r["outcome"] for r in _garden.latest(records)}
    assert last == {"torchvision:m0": "PASS", "torchvision:m1": "PASS", "torchvision:m2": "TIMEOUT"}
    assert "2 PASS, 1 TIMEOUT" in _garden.coverage_line(records)
    assert "FAIL" not in _garden.coverage_line(records)
    with pytest.raises(ValueError, match="no outcome"):
        _garden.sweep(models, path, columns=("float64",), resume=True, rerun=("FAILED",))


def test_the_report_command_writes_the_page(tmp_path):
    import zoo as zoo_script

    records = tmp_path / "r.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    out = tmp_path / "garden.md"
    assert zoo_script.main(["--garden-report", str(records), "--out", str(out)]) == 0
    assert out.read_text().startswith("# The garden")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--garden"], "--garden needs --records"),
        (["--garden-report", "r.jsonl"], "--garden-report needs --out"),
        (["--garden", "--records", "r", "--skip-columns", "speed"], "unknown column(s) speed"),
        (["--garden", "--models", "resnet18", "--records", "r"], "take none of"),
        (["--garden", "--records", "r", "--timeout", "0"], "--timeout must be positive"),
        (["--garden", "--records", "r", "--rerun", "FAILED"], "--rerun (='FAILED') takes"),
        (["--garden-report", "r", "--out", "o", "--rerun", "FAIL"], "--rerun (='FAIL') takes"),
    ],
)
def test_the_cli_refuses_bad_garden_arguments(argv, message, capsys):
    import zoo as zoo_script

    with pytest.raises(SystemExit) as exit_info:
        zoo_script.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


# ------------------------------------------------------------ the list
def test_timm_picks_the_fewest_parameters_per_family():
    chosen = _garden.timm_smallest(["resnet", "dla"], cache=False)
    assert {m.family: m.name for m in chosen} == {
        "resnet": "timm:test_resnet",  # the family's test-size model
        "dla": "timm:dla46x_c",  # counted over all twelve
    }
    assert all(m.parameters > 0 for m in chosen)


def test_select_takes_libraries_tasks_families_and_names():
    models = [
        _garden.GardenModel("torchvision:a", "torchvision", "resnet", "classification"),
        _garden.GardenModel("torchvision:b", "torchvision", "fcn", "segmentation"),
        _garden.GardenModel("timm:c", "timm", "resnet", "image"),
    ]
    assert [m.name for m in _garden.select(models, "torchvision:segmentation")] == ["torchvision:b"]
    assert [m.name for m in _garden.select(models, "timm:resnet,torchvision:a")] == [
        "timm:c",
        "torchvision:a",
    ]
    assert len(_garden.select(models, "torchvision")) == 2
    with pytest.raises(ValueError, match="names no garden model"):
        _garden.select(models, "keras")


@pytest.mark.long  # CI: pytest -m "exhaustive or long"
def test_the_enumeration_holds_every_builder_one_timm_model_a_family_and_forty_configs():
    from jaxgrad.zoo_imports import import_library, import_torchvision

    tv = import_torchvision()  # before timm, which imports torchvision itself
    timm = import_library("timm")
    models = _garden.enumerate_models()
    names = {m.name for m in models}
    for task, module in [
        ("classification", tv.models),
        ("segmentation", tv.models.segmentation),
        ("video", tv.models.video),
        ("optical_flow", tv.models.optical_flow),
        ("detection", tv.models.detection),
    ]:
        builders = tv.models.list_models(module=module)
        assert builders and {f"torchvision:{n}" for n in builders} <= names, task
    assert {"torchvision:resnet18", "torchvision:fcn_resnet50", "torchvision:r3d_18"} <= names
    assert "torchvision:raft_small" in names and "torchvision:quantized_resnet18" not in names
    timm_models = [m for m in models if m.library == "timm"]
    assert sorted(m.family for m in timm_models) == sorted(timm.list_modules())
    for model in timm_models:
        assert model.name.split(":", 1)[1] in timm.list_models(module=model.family)
    hf = [m for m in models if m.library == "transformers"]
    assert len(hf) >= 40 and len({m.family for m in hf}) >= 40


@pytest.mark.long  # CI: pytest -m "exhaustive or long"
def test_every_hugging_face_config_builds_and_runs_in_torch():
    failures = []
    for model in _garden.transformers_models():
        try:
            built = _zoo_models.build(_garden.zoo_entry(model))
            _garden._torch_runs(*built)
            assert sum(p.numel() for p in built[0].parameters()) < 500_000, model.name
        except Exception as error:  # noqa: BLE001 - all listed at once
            failures.append(f"{model.name}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures)


@pytest.mark.long  # CI: pytest -m "exhaustive or long"
def test_a_real_sweep_records_a_real_model_then_resume_skips_it(tmp_path):
    path = str(tmp_path / "records.jsonl")
    model = _garden.GardenModel(
        "torchvision:squeezenet1_1", "torchvision", "squeezenet", "classification"
    )
    calls = []

    def runner(model, columns, **options):
        calls.append(model.name)
        return _garden.run_child(model, columns, **options)

    _garden.sweep([model], path, columns=("float64",), timeout=300, runner=runner, log=print)
    _garden.sweep(
        [model], path, columns=("float64",), timeout=300, resume=True, runner=runner, log=print
    )
    assert calls == ["torchvision:squeezenet1_1"]
    (record,) = _garden.read_records(path)
    assert record["outcome"] == "PASS", record
    assert record["columns"]["float64"]["status"] == "pass"
    assert record["convert_seconds"] is not None and record["seconds"] > 0


@pytest.mark.long  # CI: pytest -m "exhaustive or long"
def test_the_ci_subset_passes_in_real_children(tmp_path):
    """The garden's fixed CI subset (``_garden.CI_SUBSET``), each model in its own child
    process as the sweep runs it: float64 forward and every gradient, the float32
    forward and 3 training steps, every one PASS."""
    path = str(tmp_path / "records.jsonl")
    models = [
        _garden.GardenModel(name, name.split(":")[0], family, task)
        for name, family, task in _garden.CI_SUBSET
    ]
    _garden.sweep(models, path, columns=("float64", "float32", "train"), timeout=600, log=print)
    records = {record["name"]: record for record in _garden.read_records(path)}
    assert sorted(records) == sorted(m.name for m in models)
    for name, record in records.items():
        assert record["outcome"] == "PASS", (name, record["cause"], record["detail"])
        assert set(record["columns"]) == {"float64", "float32", "train"}, name


def test_image_models_capture_with_only_the_batch_dynamic():
    """``shapes_for``: image inputs (every vision task) get ``dynamic_shapes="batch"``,
    the others keep what was asked; a zoo model keeps the zoo's own choice."""
    image = _garden.GardenModel("timm:x", "timm", "x", "image")
    text = _garden.GardenModel("transformers:X", "transformers", "x", "text")
    assert _garden.shapes_for(image, "auto") == "batch"
    assert _garden.shapes_for(image, None) is None
    assert _garden.shapes_for(text, "auto") == "auto"
    tv = _garden.GardenModel("torchvision:swin_t", "torchvision", "swin", "classification")
    assert _garden.zoo_entry(tv).dynamic_shapes == "batch"  # the zoo's, with its reason


def test_the_child_runs_as_a_script():
    # `python scripts/_garden.py --help`: the child's entry point parses its arguments
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "_garden.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "--child" in done.stdout


def test_xlas_out_of_memory_is_a_crash_not_a_defect():
    """XLA reports the child's memory limit as ``RESOURCE_EXHAUSTED`` (torchvision's
    mvit_v2_s: 9.9 GB for one float64 attention): CRASH, as a ``MemoryError`` is."""
    error = RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 9887404616 bytes.")
    outcome, cause, _ = _garden.classify_exception(error, stage="run")
    assert (outcome, cause) == ("CRASH", "out of memory (the child's --memory-limit)")
    torch_oom = RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 8388608")
    assert _garden.classify_exception(torch_oom, stage="run")[0] == "CRASH"
    outcome, _, _ = _garden.classify_exception(RuntimeError("shapes differ"), stage="run")
    assert outcome == "FAIL"
    # from_torch reports torch.export running out of memory as a ValueError raised from
    # it (timm's mobilenetv5_base): the memory limit still, not a refusal
    try:
        try:
            raise MemoryError("Unable to allocate 98.0 MiB")
        except MemoryError as inner:
            raise ValueError("from_torch: torch.export cannot capture X (MemoryError)") from inner
    except ValueError as wrapped:
        assert _garden.classify_exception(wrapped, stage="convert")[0] == "CRASH"


def test_raft_runs_in_float64_with_its_grid_in_the_models_dtype():
    """torchvision's RAFT makes its pixel grid with ``.float()``: torch itself cannot run
    the float64 model. The garden's RAFT makes it in the parameters' dtype; the float32
    model computes bit for bit as torchvision's own."""
    import torch
    from _zoo_models import import_torchvision

    tv = import_torchvision()
    torch.set_num_threads(1)
    model = _garden.GardenModel("torchvision:raft_small", "torchvision", "raft", "optical_flow")
    images = [torch.from_numpy(_garden._images(1, 128, seed=s)) for s in (0, 1)]
    torch.manual_seed(0)
    plain = tv.models.get_model("raft_small", weights=None).eval()
    with pytest.raises(RuntimeError, match="[Dd]ouble"):  # torchvision's own RAFT
        copy_of(plain).double()(*(i.double() for i in images), num_flow_updates=1)
    adapted, _, _ = _garden._tv_build(model)(tv)
    adapted.load_state_dict(plain.state_dict())
    adapted.eval()
    with torch.no_grad():
        flows32 = adapted(*images, num_flow_updates=1)
        expected32 = plain(*images, num_flow_updates=1)
        flows64 = copy_of(adapted).double()(*(i.double() for i in images), num_flow_updates=1)
    assert torch.equal(flows32[-1], expected32[-1])
    assert flows64[-1].dtype == torch.float64
    # the float64 run approximates the same flow as the float32 one
    assert torch.allclose(flows64[-1].float(), flows32[-1], rtol=1e-3, atol=1e-3)
    assert "make_coords_grid" in _garden.ADAPTED["raft_small"]
    with pytest.raises(RuntimeError, match="[Dd]ouble"):  # any other RAFT: torchvision's
        copy_of(plain).double()(*(i.double() for i in images), num_flow_updates=1)


def copy_of(module):
    import copy

    return copy.deepcopy(module)


def test_a_model_xla_fails_on_runs_with_its_xla_options_and_only_it(monkeypatch):
    """``XLA_OPTIONS``: the child of a model XLA itself crashes on (RAFT large: a
    segmentation fault in XLA:CPU's YNN fusions) gets the options in its environment;
    every other child gets the sweep's own."""
    seen = {}

    class Stop(Exception):
        pass

    def popen(command, **options):
        seen[json.loads(command[command.index("--child") + 1])["name"]] = options["env"]
        raise Stop

    monkeypatch.setattr(_garden.subprocess, "Popen", popen)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    raft = _garden.GardenModel("torchvision:raft_large", "torchvision", "raft", "optical_flow")
    for model in (raft, MODEL):
        with pytest.raises(Stop):
            _garden.run_child(model, ("float64",), timeout=10)
    flag, why = _garden.XLA_OPTIONS["torchvision:raft_large"]
    assert seen["torchvision:raft_large"]["XLA_FLAGS"] == flag and "segmentation fault" in why
    assert "XLA_FLAGS" not in seen[MODEL.name]


def test_a_column_out_of_memory_is_a_crash_never_a_pass():
    """A column that ran out of the child's memory proves nothing: the model is CRASH.
    (The classifier had ranked only FAIL, ERROR and REFUSED among the columns' errors, so
    a model whose training column ran out of memory was recorded PASS.) And PASS needs
    every verdict column passed, whatever a column's status."""
    from parity_checks import _zoo

    import jaxgrad

    def result_with(train):
        result = _zoo.ZooResult("m", "torchvision", "")
        same = jaxgrad.parity.compare({"y": np.ones(3)}, {"y": np.ones(3)})
        for column in ("float64", "float32"):
            result.columns[column] = _zoo.Column("pass", report=same)
        result.columns["train"] = train
        return result

    error = MemoryError("Unable to allocate 784. MiB for an array")
    text = f"{type(error).__name__}: {error}"
    columns = ("float64", "float32", "train")
    outcome, cause, detail = _garden.classify_result(
        result_with(_zoo.Column("error", error=text)), {text: error}, columns
    )
    assert (outcome, cause) == ("CRASH", "out of memory (the child's --memory-limit) [train]")
    assert detail.startswith("MemoryError")
    outcome, cause, _ = _garden.classify_result(result_with(_zoo.Column("skip")), {}, columns)
    assert (outcome, cause) == ("FAIL", "harness: train not passed")


def test_a_builder_given_an_image_size_gets_inputs_of_that_size():
    """A ViT builder takes ``image_size`` (``OPTIONS``) and asserts every input has it:
    the garden's input (``INPUTS``, else 64x64) must be that size. vit_h_14 (56) had
    been given 64x64 and recorded ERROR for torch's own assertion."""
    sized = {name: o["image_size"] for name, o in _garden.OPTIONS.items() if "image_size" in o}
    assert "vit_h_14" in sized
    for name, size in sized.items():
        assert _garden.INPUTS.get(name, (_garden.VISION_BATCH, 64))[-1] == size, name
