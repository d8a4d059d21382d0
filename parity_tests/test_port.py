"""scripts/port.py on the models users have: torchvision, timm and transformers specs.

The spec parsing and the refusals are cheap (no model is built or converted); the
stubbed subprocess in ``test_scripts_cli.py`` holds the refusals that must happen
before torch is imported. Also the port's verdicts: float32 calibrated by torch's own
rounding against its float64 run, the per-layer table under in-place ops. One end-to-end port
of a tiny Hugging Face model, which only ``torch.export`` can capture, runs when
transformers is installed (``test_flax.py`` ports a user's own model file).
"""

from __future__ import annotations

import importlib.util
import json
import re

import _model_spec
import numpy as np
import port
import pytest
import torch

from parity_tests._zoo_extra import requires

_INSTALLED = {
    name: importlib.util.find_spec(name) is not None
    for name in ("torchvision", "timm", "transformers")
}


def _parse(argv, tmp_path):
    """``port.parse_args`` on ``argv`` plus a valid --input-shape and --out."""
    return port.parse_args(
        [*argv, "--input-shape", "2,8", "--out", str(tmp_path / "out.safetensors")]
    )[1]


def _refusal(argv, tmp_path, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        _parse(argv, tmp_path)
    assert info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1
    return errors[0]


def test_spec_forms_parse_to_their_kind(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # check_spec sets it for transformers specs
    (tmp_path / "net.py").write_text("def build():\n    pass\n")
    cases = {
        f"{tmp_path}/net.py:build": ("callable", f"{tmp_path}/net.py", "build"),
        "jaxgrad.nn:from_torch": ("callable", "jaxgrad.nn", "from_torch"),
    }
    if _INSTALLED["torchvision"]:
        cases["torchvision.models:resnet18"] = ("callable", "torchvision.models", "resnet18")
        cases["torchvision:resnet18"] = ("callable", "torchvision.models", "resnet18")
    if _INSTALLED["timm"]:
        cases["timm:convnext_atto"] = ("timm", "timm", "convnext_atto")
        cases["timm:convnext_atto.d2_in1k"] = ("timm", "timm", "convnext_atto.d2_in1k")
    if _INSTALLED["transformers"]:
        cases["transformers:BertModel"] = ("transformers", "transformers", "BertModel")
    for text, (kind, where, name) in cases.items():
        spec = _parse([text], tmp_path).spec
        assert (spec.kind, spec.target.where, spec.target.name, spec.config) == (
            kind,
            where,
            name,
            None,
        ), text
    if _INSTALLED["transformers"]:
        config = {"hidden_size": 16, "num_hidden_layers": 1}
        spec = _parse(["transformers:BertModel", "--config", json.dumps(config)], tmp_path).spec
        assert spec.config == config


@pytest.mark.parametrize("library", ["torchvision", "timm", "transformers"])
def test_a_missing_library_is_refused_saying_what_to_install(
    library, tmp_path, capsys, monkeypatch
):
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == library else found(name, *a)
    )
    spec = {
        "torchvision": "torchvision.models:resnet18",
        "timm": "timm:convnext_atto",
        "transformers": "transformers:BertModel",
    }[library]
    error = _refusal([spec], tmp_path, capsys)
    assert (
        f"{library} is not installed; install the zoo extra: "
        'pip install -c constraints.txt -e ".[zoo]"'
    ) in error


@requires("timm")
def test_timm_registry_read_from_source_is_timms_own():
    """The fast check reads timm's registry from its sources (``@register_model``
    functions, deprecation maps) without importing it: it must be timm's own list,
    or a valid model would be refused (or a typo let through) after an upgrade."""
    from _zoo_models import import_library

    timm = import_library("timm")
    from timm.models._registry import _deprecated_models

    assert _model_spec.timm_model_names() == set(timm.list_models()) | set(_deprecated_models)


@requires("transformers")
def test_transformers_config_refusals(tmp_path, capsys, monkeypatch):
    """A misspelt --config key (transformers would keep it as a stray attribute and
    build the default, 110M-parameter BERT), a model_type whose config the class does
    not take, and a name that is not a model class: exit 2, one line each."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cases = [
        (
            ["transformers:BertModel", "--config", '{"hiden_size": 16}'],
            "--config: BertConfig has no 'hiden_size' (did you mean hidden_size",
        ),
        (
            ["transformers:BertModel", "--config", '{"model_type": "gpt2"}'],
            "--config: model_type 'gpt2' gives a GPT2Config; transformers.BertModel takes a "
            "BertConfig",
        ),
        (["transformers:BertConfig"], "transformers.BertConfig is not a model class"),
    ]
    for argv, message in cases:
        parser, args = port.parse_args(
            [*argv, "--input-shape", "2,8", "--out", str(tmp_path / "out.safetensors")]
        )
        with pytest.raises(SystemExit) as info:
            _model_spec.factory(parser, "MODEL", args.spec, args.kwargs)
        assert info.value.code == 2
        assert message in capsys.readouterr().err, argv


# ------------------------------------------------------------ float32 verdicts
@pytest.mark.parametrize(
    "t64, t32, c32, rule",
    [
        # a gradient zero in exact arithmetic: torch's and the twin's float32 noise differ
        ([1e-17, -2e-17], [-3.5e-10, 1e-10], [2.2e-10, -1e-10], "reference rounding"),
        # ... but a twin 100x noisier than torch is not as accurate as torch
        ([1e-17, -2e-17], [-3.5e-10, 1e-10], [3.5e-8, 1e-10], ""),
        # torch uses 0.75 of the tier against float64, the twin 0.42 on the other side
        ([1.0, 2.0], [1.0 + 9e-6, 2.0], [1.0 - 5e-6, 2.0], "float64 answer"),
        # a well-conditioned leaf (torch within 0.1 of the tier): the disagreement is real
        ([1.0, 2.0], [1.0 + 1e-6, 2.0], [1.0 - 2e-5, 2.0], ""),
        # torch within 0.1 of the tier, the twin 0.93 of it on the other side (XLA's summation
        # order rounds further on this leaf): both within the tier of the exact answer
        ([1.0, 2.0], [1.0 + 1e-6, 2.0], [1.0 - 1.12e-5, 2.0], "float64 answer"),
        # ill-conditioned: torch 0.83 of the tier, the twin 2.75x (within 5x torch's) ...
        ([1.0, 2.0], [1.0 + 1e-5, 2.0], [1.0 - 3.3e-5, 2.0], "reference rounding"),
        # ... and 4.6x (beyond 5 x 0.83): real
        ([1.0, 2.0], [1.0 + 1e-5, 2.0], [1.0 - 5.5e-5, 2.0], ""),
        # torch itself 2x the tier away, the twin 5x: within the multiple
        ([1.0, 2.0], [1.0 + 2.4e-5, 2.0], [1.0 - 6e-5, 2.0], "reference rounding"),
    ],
)
def test_float32_leaves_port_py_calibrates_by_torchs_own_rounding(t64, t32, c32, rule):
    """port.py judges its float32 run with ``compare(..., reference64=...)``, the float64
    run of the same values: each case fails the tier against torch's float32, and passes
    (by the rule named) or fails against the float64 answer."""
    from jaxgrad.parity import compare

    reference32, candidate32 = {"g": np.float32(t32)}, {"g": np.float32(c32)}
    assert not compare(reference32, candidate32).passed
    report = compare(reference32, candidate32, reference64={"g": np.float64(t64)})
    assert report.passed == bool(rule) and report.leaves[0].rule == rule, report.table()


def test_port_prints_the_leaves_the_calibrated_rule_passed(capsys):
    from jaxgrad.parity import compare

    t64 = {"a.weight": np.array([1.0, 2.0]), "a.bias": np.array([1e-16, -1e-16])}
    reference32 = {"a.weight": np.float32([1.0 + 1e-5, 2.0]), "a.bias": np.float32([3e-7, 0])}
    candidate32 = {"a.weight": np.float32([1.0 - 3.3e-5, 2.0]), "a.bias": np.float32([-6e-7, 0])}
    port._print_calibrated(compare(reference32, candidate32, reference64=t64))
    printed = capsys.readouterr().out
    assert "2 float32 leaves outside the tier against torch's float32" in printed
    assert re.search(r"a\.weight +reference rounding +twin 2\.75, torch 0\.83", printed), printed
    assert re.search(r"a\.bias +zero in exact arithmetic +twin 0\.30, torch 0\.15", printed)


class _InPlace(torch.nn.Module):
    """torchvision's habits: a ReLU(inplace=True) after a BatchNorm, one ReLU module
    called twice, a residual ``+=`` on a layer's output."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = torch.nn.Conv2d(2, 3, 3, padding=1), torch.nn.Conv2d(3, 3, 1)
        self.bn = torch.nn.BatchNorm2d(3)
        self.relu = torch.nn.ReLU(inplace=True)
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, x):
        y = self.relu(self.bn(self.conv1(x)))
        out = self.conv2(y)
        out += y
        return self.fc(self.relu(out).mean((2, 3)))


def test_layer_table_records_torch_outputs_before_in_place_ops_rewrite_them(x64):
    from parity_checks.nnx_interop import layer_table, nnx_port

    torch.manual_seed(0)
    module = _InPlace().double().eval()
    with torch.no_grad():
        module.bn.running_mean.uniform_(-1, 1)  # a BatchNorm output unlike its input
    x = np.random.default_rng(0).standard_normal((2, 2, 5, 5))
    nnx_module, channels_last, _ = nnx_port(module, "NHWC")
    rows = layer_table(module, nnx_module, x, channels_last)
    assert [row["layer"] for row in rows] == ["conv1", "bn", "relu", "conv2", "fc"]
    assert all(row["passed"] for row in rows), rows


# --------------------------------------------------------------- end to end
# No encoder layer: embeddings (three tables, LayerNorm, dropout, the non-persistent
# position_ids and token_type_ids as constants) and the pooler. That is everything the
# port itself handles (the spec, the config, the ModelOutput's two fields, a program
# captured in two modes, the rebuild and reload); attention's ATen ops are the zoo's
# and the ATen tests' to prove, and each capture (three torch.export runs) costs
# seconds: one layer would add ~6 s of CPU to this test's ~20 s.
_TINY_BERT = {
    "vocab_size": 50,
    "hidden_size": 16,
    "num_hidden_layers": 0,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "max_position_embeddings": 16,
}


@pytest.mark.long  # CI: pytest -m "exhaustive or long"
@requires("transformers")
def test_port_of_a_tiny_bert_captured_with_torch_export(tmp_path, capsys, monkeypatch):
    """transformers:BertModel --config: only torch.export captures it; the port proves
    the ModelOutput's fields and every gradient in float64 and float32, runs its Linear,
    Embedding and LayerNorm layers as stock nnx layers (each in the per-layer table) and
    the rest as one TorchProgram, saves, rebuilds from the spec and reloads bit for bit."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "bert.safetensors"
    code = port.main(
        [
            "transformers:BertModel",
            "--config",
            json.dumps(_TINY_BERT),
            "--input-shape",
            "2,8",
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "token ids (2, 8) in [0, 50)" in printed  # the config's vocab_size by default
    assert "captured with torch.export" in printed and "use_cache=False" in printed
    assert "stock nnx layers (below), the rest one TorchProgram" in printed
    for layer, kind in [
        ("pooler.dense", "Linear"),
        ("embeddings.word_embeddings", "Embedding"),
        ("embeddings.LayerNorm", "LayerNorm"),
    ]:
        assert re.search(rf"^  {re.escape(layer)} +{kind} +\S+  PASS$", printed, re.M), printed
    assert "parity float64: output and 8 parameter gradients" in printed
    assert "FAIL" not in printed and printed.count(": PASS") == 3
    assert "bit-identical: PASS" in printed
    assert "to_nnx(transformers.BertModel(transformers.BertConfig(vocab_size=50" in printed
    from safetensors import safe_open

    with safe_open(str(out), "np") as handle:
        metadata = handle.metadata()
        keys = set(handle.keys())
    # flax's names and layouts for the stock layers, torch's for the program's own
    assert {"layers.embeddings.word_embeddings.embedding", "layers.pooler.dense.kernel"} <= keys, (
        sorted(keys)
    )
    assert metadata["capture"] == "export" and json.loads(metadata["config"]) == _TINY_BERT


@requires("transformers")
def test_a_transformers_config_value_the_config_or_model_refuses_is_a_usage_error(
    tmp_path, capsys, monkeypatch
):
    """A value of the wrong type (huggingface_hub's strict dataclasses raise their own
    error, not a TypeError) and a value the model cannot be built with: exit 2, one
    ``error:`` line naming the field, never "unexpected error" (exit 3)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    small = {
        "hidden_size": 16,
        "num_hidden_layers": 0,
        "num_attention_heads": 2,
        "intermediate_size": 32,
    }
    for config, message in [
        ({"no_such_key": 1}, "--config: BertConfig has no 'no_such_key'"),
        ({**small, "hidden_size": "big"}, "--config: BertConfig refuses it"),
        ({**small, "vocab_size": -1}, "cannot build transformers:BertModel with --config"),
    ]:
        argv = [
            "transformers:BertModel",
            "--config",
            json.dumps(config),
            "--input-shape",
            "2,8",
            "--out",
            str(tmp_path / "out.safetensors"),
        ]
        with pytest.raises(SystemExit) as info:
            port.main(argv)
        assert info.value.code == 2, config
        errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
        assert len(errors) == 1 and message in errors[0], (config, errors)
        field = next(iter(set(config) - set(small)), "hidden_size")
        assert field in errors[0] or "negative dimension -1" in errors[0], errors[0]


@pytest.mark.parametrize(
    "inputs, message",
    [
        ("[1, 2]", "--inputs must be a non-empty JSON object"),
        ("{nope", "--inputs must be a JSON object"),
        ('{"x": [2, 0]}', "'x': the shape must be a list of positive ints, got [2, 0]"),
        ('{"x": {"shape": [2], "dtype": "float16"}}', "'x': dtype must be one of float32, int64"),
        ('{"x": {"shape": [2], "size": 3}}', "'x': unknown key 'size'"),
        ('{"x": {"shape": [2], "dtype": "float32", "high": 3}}', "for int64 inputs only"),
        ('{"x": {"dtype": "int64"}}', "'x' must be a shape or an object with a \"shape\""),
        ('{"not a name": [2]}', "is not a keyword argument name"),
    ],
)
def test_bad_named_inputs_are_refused_before_torch_loads(inputs, message, tmp_path, capsys):
    error = _refusal(["jaxgrad.nn:from_torch", "--inputs", inputs], tmp_path, capsys)
    assert message in error, error


def test_no_input_at_all_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        port.parse_args(["jaxgrad.nn:from_torch", "--out", str(tmp_path / "o.safetensors")])
    assert info.value.code == 2
    assert "give the example input: --input-shape" in capsys.readouterr().err


# ----------------------------------------- models port.py used to fail or crash on
_MODELS = '''
import torch
from torch import nn


class Float32Inside(nn.Module):
    """Computes in float32 inside its float64 forward, as Mistral's RMSNorm casts to
    float32; `shift`'s gradient is zero in exact arithmetic (LayerNorm removes a
    constant shift), rounding noise in floating point."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)
        self.shift = nn.Parameter(torch.randn(()))
        self.norm = nn.LayerNorm(4)
        self.out = nn.Linear(4, 3)

    def forward(self, x):
        h = torch.tanh(self.fc(x).float()).to(x.dtype)
        return self.out(self.norm(h + self.shift))


class Cached(nn.Module):
    """timm LeViT's habit: in eval mode the forward keeps a tensor computed from a
    parameter for the next call; after a forward with autograd on, it is no graph
    leaf, and copy.deepcopy refuses the module."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.table = nn.Parameter(torch.randn(3))
        self.cache = {}

    def forward(self, x):
        if self.training:
            bias = self.table * 2
        else:
            if "bias" not in self.cache:
                self.cache["bias"] = self.table * 2
            bias = self.cache["bias"]
        return self.fc(x) + bias


class Fusion(nn.Module):
    """Two inputs: an image and a feature vector."""

    def __init__(self):
        super().__init__()
        self.image = nn.Conv2d(3, 4, 3, padding=1)
        self.text = nn.Linear(5, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, pixels, features):
        pooled = self.image(pixels).mean((2, 3))
        return self.head(torch.relu(pooled + self.text(features)))
'''


@pytest.fixture
def models(tmp_path, monkeypatch):
    """``models.py`` in the current directory, as a user's model file."""
    (tmp_path / "models.py").write_text(_MODELS)
    monkeypatch.chdir(tmp_path)
    import importlib
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("models")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("models", None)


def test_float32_inside_a_float64_model_and_a_gradient_zero_in_exact_arithmetic(
    models, tmp_path, capsys, x64
):
    """The zoo's rules: a float64 model whose own code computes in float32 is judged
    at the float32 tier and the output says where it casts; a gradient zero in exact
    arithmetic (torch's float64 value: noise far below its neighbours) is judged at
    its neighbours' scale, not at 1e-6 of its own noise; a real error there still fails."""
    from parity_checks.nnx_interop import float64_leaves, port_parity

    from jaxgrad.parity import compare

    torch.manual_seed(0)
    module = models.Float32Inside().eval()
    x = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32).astype(np.float64)
    run = port_parity(module, x, "NHWC", "float64")
    assert run.float32_regions == ("",)  # the cast is in the top-level forward
    assert run.report.passed, run.report.table()
    grads = run.reference["grads"]
    neighbours = max(np.abs(v).max() for k, v in grads.items() if k != "shift")
    assert np.abs(grads["shift"]).max() <= 1e-11 * neighbours  # torch: zero up to float64 noise
    # _should_fail: a twin off by 1e-3 on that gradient is a real error at any scale
    wrong = {
        "output": run.candidate["output"],
        "grads": {**run.candidate["grads"], "shift": run.candidate["grads"]["shift"] + 1e-3},
    }
    failed = compare(
        run.reference, wrong, computed_in="float32", reference64=float64_leaves(run.reference)
    )
    assert [leaf.path for leaf in failed.failures()] == ["['grads']['shift']"], failed.table()

    code = port.main(
        [
            "models:Float32Inside",
            "--input-shape",
            "5,6",
            "--out",
            str(tmp_path / "inside.safetensors"),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert (
        "the float64 model computes in float32 where its own code casts (at its top-level "
        "forward): its float64 leaves are judged at the float32 tier"
    ) in printed
    assert "parity float64: output and 7 parameter gradients" in printed
    assert "FAIL" not in printed
    if "zero in exact arithmetic (float64 noise" in printed:  # torch's and XLA's noise differ
        assert re.search(r"\['grads'\]\['shift'\] +twin \S+ of the tier", printed), printed


def test_a_forward_that_fills_a_cache(models, tmp_path, capsys, monkeypatch):
    """The model's own forward (here a gradient-carrying cache, as LeViT's attention
    biases) once broke port.py (deepcopy after a forward: exit 3) and could hand a
    later check a cached constant; every check now runs on its own copy of the model
    as built, and the cached parameter's gradient is proved, not zero on both sides."""
    import copy

    from parity_checks import nnx_interop

    probe = models.Cached().eval()
    probe(torch.randn(2, 4))
    with pytest.raises(RuntimeError, match="deepcopy"):  # the premise: as LeViT
        copy.deepcopy(probe)
    runs = []
    real = nnx_interop.port_parity
    monkeypatch.setattr(
        nnx_interop, "port_parity", lambda *a, **k: runs.append(real(*a, **k)) or runs[-1]
    )
    code = port.main(
        ["models:Cached", "--input-shape", "3,4", "--out", str(tmp_path / "cached.safetensors")]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "FAIL" not in printed and "bit-identical: PASS" in printed
    assert len(runs) == 2
    for run in runs:  # d/dtable of sum(c * (fc(x) + 2 table)) = 2 * sum_n c[n]: never 0
        assert np.abs(run.reference["grads"]["table"]).min() > 0, run.reference["grads"]
        assert run.report.passed, run.report.table()


def test_two_positional_inputs_and_named_inputs(models, tmp_path, capsys):
    """--input-shape once per positional input (the layer path, the image input
    channels-last in the NHWC twin); --inputs by name (captured with torch.export,
    whose twin takes keywords): both prove, save and reload."""
    code = port.main(
        [
            "models:Fusion",
            "--input-shape",
            "2,3,8,8",
            "--input-shape",
            "2,5",
            "--out",
            str(tmp_path / "fusion.safetensors"),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "inputs input 1 (2, 3, 8, 8), input 2 (2, 5), nnx layout NHWC" in printed
    assert "parity float64: output and 6 parameter gradients" in printed
    assert "FAIL" not in printed and "bit-identical: PASS" in printed
    out = tmp_path / "named.safetensors"
    code = port.main(
        [
            "models:Fusion",
            "--input-shape",
            "2,3,8,8",
            "--inputs",
            '{"features": {"shape": [2, 5], "dtype": "float32"}}',
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "inputs input 1 (2, 3, 8, 8), features (2, 5), captured with torch.export" in printed
    assert "FAIL" not in printed and "bit-identical: PASS" in printed
    assert "example=(x1,), example_kwargs={'features': features}" in printed
    from safetensors import safe_open

    with safe_open(str(out), "np") as handle:
        assert json.loads(handle.metadata()["inputs"]) == [
            {"name": None, "shape": [2, 3, 8, 8], "dtype": "float64"},
            {"name": "features", "shape": [2, 5], "dtype": "float64"},
        ]


def test_an_int64_input_without_a_vocabulary_is_refused(models, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        port.main(
            [
                "models:Fusion",
                "--input-shape",
                "2,3,8,8",
                "--inputs",
                '{"features": {"shape": [2, 5], "dtype": "int64"}}',
                "--out",
                str(tmp_path / "x.safetensors"),
            ]
        )
    assert info.value.code == 2
    assert "'features' is int64 and needs \"high\"" in capsys.readouterr().err


@pytest.mark.long  # CI: pytest -m "exhaustive or long" (~25 s)
@requires("transformers")
def test_port_of_a_tiny_t5_encoder_decoder_with_named_inputs(tmp_path, capsys, monkeypatch):
    """An encoder-decoder takes two inputs by name; T5's own code computes in float32
    (its layer norm and relative position buckets), so its float64 run is judged at the
    float32 tier, as the zoo judges T5EncoderModel."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = {
        "d_model": 16,
        "d_kv": 8,
        "d_ff": 32,
        "num_layers": 1,
        "num_heads": 2,
        "vocab_size": 50,
        "relative_attention_num_buckets": 8,
        "relative_attention_max_distance": 16,
    }
    code = port.main(
        [
            "transformers:T5Model",
            "--config",
            json.dumps(config),
            "--inputs",
            '{"input_ids": [2, 8], "decoder_input_ids": [2, 4]}',
            "--out",
            str(tmp_path / "t5.safetensors"),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert (
        "inputs input_ids: token ids (2, 8) in [0, 50), decoder_input_ids: token ids "
        "(2, 4) in [0, 50)"
    ) in printed
    assert "the float64 model computes in float32 where its own code casts" in printed
    assert "FAIL" not in printed and "bit-identical: PASS" in printed


@pytest.mark.long  # CI: pytest -m "exhaustive or long" (a second capture and a jax.export)
def test_export_writes_an_artifact_checked_at_two_batch_sizes(models, tmp_path, capsys):
    """--export: the float32 evaluation program saved with symbolic sizes, reloaded with
    load_exported and compared with torch at the example's batch and one more; the
    file then runs at a third batch size, row for row as at the first two."""
    artifact = tmp_path / "fusion.jaxgrad"
    code = port.main(
        [
            "models:Fusion",
            "--input-shape",
            "2,3,8,8",
            "--input-shape",
            "2,5",
            "--out",
            str(tmp_path / "fusion.safetensors"),
            "--export",
            str(artifact),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "every size torch kept dynamic symbolic; platforms cpu, cuda" in printed
    assert re.search(r"batch 2: output max abs err \S+ against torch float32: PASS", printed)
    assert re.search(r"batch 3: output max abs err \S+ against torch float32: PASS", printed)
    from jaxgrad.nn import load_exported

    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 3, 8, 8)).astype(np.float32)
    features = rng.standard_normal((5, 5)).astype(np.float32)
    loaded = load_exported(artifact)
    whole = np.asarray(loaded(x, features))  # a third batch size, from the same file
    # row by row (batches of 2 and 3) it computes the same rows
    parts = np.concatenate(
        [np.asarray(loaded(x[:2], features[:2])), np.asarray(loaded(x[2:], features[2:]))]
    )
    np.testing.assert_allclose(whole, parts, rtol=1e-5, atol=1e-6 * np.abs(whole).max())


def test_dynamic_without_export_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        port.main(
            [
                "models:Fusion",
                "--input-shape",
                "2,3,8,8",
                "--input-shape",
                "2,5",
                "--out",
                str(tmp_path / "fusion.safetensors"),
                "--dynamic",
                "batch",
            ]
        )
    assert stop.value.code == 2
    assert "--dynamic chooses the sizes of the --export artifact" in capsys.readouterr().err


@pytest.mark.long  # CI: pytest -m "exhaustive or long" (a second capture and a jax.export)
def test_export_with_a_dynamic_batch_only(models, tmp_path, capsys):
    """--dynamic batch: the artifact takes every batch size, the image sides only the
    example's, and says so when handed another."""
    artifact = tmp_path / "fusion.jaxgrad"
    code = port.main(
        [
            "models:Fusion",
            "--input-shape",
            "2,3,8,8",
            "--input-shape",
            "2,5",
            "--out",
            str(tmp_path / "fusion.safetensors"),
            "--export",
            str(artifact),
            "--dynamic",
            "batch",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "each input's first size symbolic, the others the example's" in printed
    assert re.search(r"batch 3: output max abs err \S+ against torch float32: PASS", printed)
    from jaxgrad.nn import load_exported

    loaded = load_exported(artifact)
    rng = np.random.default_rng(3)
    assert (
        np.asarray(
            loaded(
                rng.standard_normal((4, 3, 8, 8)).astype(np.float32),
                rng.standard_normal((4, 5)).astype(np.float32),
            )
        ).shape[0]
        == 4
    )
    with pytest.raises(
        ValueError,
        match=r"input 0 dim 2 must be 8, got 10 .*"
        r"dynamic_shapes='batch'",
    ):
        loaded(np.zeros((2, 3, 10, 10), np.float32), np.zeros((2, 5), np.float32))
