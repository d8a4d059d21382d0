"""scripts/train.py --model MODULE:NAME: any torch model, converted with from_torch and
trained in both frameworks; torch's own training loop is the reference."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
import torch
import train

from jaxgrad.parity import assert_parity
from parity_tests._zoo_extra import requires, skip_unless_installed

torch.set_num_threads(1)

# A user's own model file: convolution, BatchNorm (buffers updated in training mode), a
# pooling and a classifier; its forward takes the digits as `(n, 1, 8, 8)` images. The
# convolution has no bias, as before every BatchNorm of torchvision's ResNets: BatchNorm
# subtracts the batch mean, so such a bias's gradient is zero in exact arithmetic and
# rounding noise in floats (~1e-17), which Adam divides by its own root mean square and
# turns into steps of size lr in directions each framework's rounding picks (measured:
# that bias and the running mean it feeds 1.4e-10 apart after 88 float64 AdamW steps,
# every other leaf within 4e-14).
MODEL_FILE = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self, num_classes=10, width=6):
            super().__init__()
            self.conv = nn.Conv2d(1, width, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(width)
            self.fc = nn.Linear(width * 4 * 4, num_classes)

        def forward(self, x):
            x = torch.relu(self.bn(self.conv(x)))
            x = nn.functional.avg_pool2d(x, 2)
            return self.fc(x.flatten(1))


    class Flat(nn.Module):  # returns one number per example: no logits
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 1)

        def forward(self, x):
            return self.fc(x.flatten(1)).squeeze(1)
    """
)


@pytest.fixture
def model_file(tmp_path) -> str:
    path = tmp_path / "usernet.py"
    path.write_text(MODEL_FILE)
    return str(path)


def _run(argv, timeout=300):
    """train.py in a subprocess (float64 turns on jax's x64 flag for the whole process)."""
    done = subprocess.run(
        [sys.executable, str(Path(train.__file__)), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


# long (~15 s: a float64 run of both frameworks in a subprocess): CI's long run
@pytest.mark.long
def test_file_model_trains_in_both_frameworks_at_the_float64_tier(model_file, tmp_path):
    """A user's model with BatchNorm, AdamW with a cosine schedule and clipping, two epochs
    in float64: jax's parameters and running statistics against torch's own loop's, read
    back from torch's saved file, at the float64 tier; the per-epoch drift likewise."""
    save, report = tmp_path / "p.safetensors", tmp_path / "h.json"
    argv = [
        "--model", f"{model_file}:Net", "--kwargs", '{"width": 4}', "--framework", "both",
        "--precision", "float64", "--epochs", "2", "--optimizer", "adamw",
        "--scheduler", "CosineAnnealingLR", "--clip", "0.5", "--no-progress",
        "--save", str(save), "--json", str(report),
    ]  # fmt: skip
    out = _run(argv)
    assert "model: " in out and "usernet.py:Net" in out
    jax_state = safetensors.numpy.load_file(str(save))
    torch_state = safetensors.numpy.load_file(str(tmp_path / "p.torch.safetensors"))
    # the state_dict's keys: parameters and BatchNorm's buffers, as torch names them
    assert set(jax_state) == set(torch_state) >= {"bn.running_mean", "bn.num_batches_tracked"}
    assert jax_state["bn.num_batches_tracked"] == torch_state["bn.num_batches_tracked"] == 88
    assert jax_state["conv.weight"].dtype == np.float64
    assert_parity(torch_state, jax_state)  # float64 arrays: the float64 tier
    history = json.load(open(report))
    assert [d["epoch"] for d in history["drift"]] == [1, 2]
    assert all(d["max_rel"] <= 1e-10 for d in history["drift"]), history["drift"]
    np.testing.assert_allclose(
        history["losses"]["jax"], history["losses"]["torch"], rtol=1e-10, atol=1e-12
    )


def test_float64_comparison_should_fail_on_one_changed_weight(model_file, tmp_path):
    """_should_fail: the comparison behind the test above flags a 1e-9 relative change of
    one weight (the float64 tier's rtol is 1e-10)."""
    sys.path.insert(0, str(Path(model_file).parent))
    try:
        import usernet
    finally:
        sys.path.pop(0)
    state = {k: v.double().numpy() for k, v in usernet.Net(width=4).state_dict().items()}
    nudged = dict(state, **{"fc.bias": state["fc.bias"] * (1 + 1e-9)})
    with pytest.raises(AssertionError):
        assert_parity(state, nudged)


@pytest.mark.parametrize(
    "spec, extra, message",
    [
        pytest.param(
            "torchvision:resnet18",
            [],
            "--model torchvision:resnet18: its forward fails on the data's inputs "
            "(2, 1, 8, 8) torch.float32 (digits): RuntimeError: Given groups=1",
            marks=requires("torchvision"),
        ),
        pytest.param(
            "torchvision:resnet18",
            ["--kwargs", '{"num_classes": 4}'],
            "its forward fails on the data's inputs",  # the channels fail first
            marks=requires("torchvision"),
        ),
        ("{file}:Flat", [], "its forward returns Tensor of shape (2,); train.py trains"),
        (
            "{file}:Net",
            ["--kwargs", '{"num_classes": 4}'],
            "returns 4 logits, the data has 10 classes; build it with more, e.g. --kwargs '{\"num_classes\": 10}'",
        ),
    ],
)
def test_models_that_do_not_fit_the_data_are_refused_with_one_line(
    spec, extra, message, model_file, capsys
):
    argv = ["--model", spec.format(file=model_file), *extra, "--epochs", "1", "--no-progress"]
    assert train.main(argv) == 2
    assert message in capsys.readouterr().err


def test_what_converted_models_cannot_do_yet_is_refused_at_start(model_file, capsys):
    for flags, named in (
        (["--precision", "bfloat16"], "--precision bfloat16"),
        (["--activation", "tanh"], "--activation"),
    ):
        with pytest.raises(SystemExit) as info:
            train.parse_args(["--model", f"{model_file}:Net", *flags])
        assert info.value.code == 2
        assert f"does not support {named}" in capsys.readouterr().err


def _image_folder(root: Path, classes=("cat", "dog", "fox"), per_class=10, side=20) -> Path:
    """A small ImageFolder written here: PNG and JPEG files, one directory per class."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for c, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            tint = np.zeros((side, side, 3))
            tint[..., c] = 160
            pixels = np.clip(tint + rng.normal(0, 50, tint.shape), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.{'png' if i % 2 else 'jpg'}")
    return root


# long (~50 s: torchvision's resnet18 converted, compiled and trained in float64 beside
# torch's loop, in a subprocess): CI's long run
@pytest.mark.long
def test_resnet18_trains_on_an_image_folder_in_both_frameworks_in_float64(tmp_path):
    """Issue 41's bar: a converted torchvision resnet18 on an image folder, both frameworks
    in float64, drift <= 1e-8 of max |param| after every epoch; jax's params and buffers
    against torch's own loop's, read back from torch's saved file."""
    skip_unless_installed("torchvision")
    folder = _image_folder(tmp_path / "images")
    save, report = tmp_path / "rn.safetensors", tmp_path / "rn.json"
    argv = [
        "--model", "torchvision:resnet18", "--kwargs", '{"num_classes": 3}',
        "--data-dir", str(folder), "--image-size", "32", "--batch-size", "8",
        "--epochs", "2", "--framework", "both", "--precision", "float64",
        "--optimizer", "sgd", "--lr", "0.01", "--no-progress",
        "--save", str(save), "--json", str(report),
    ]  # fmt: skip
    _run(argv, timeout=600)
    history = json.load(open(report))
    assert [d["epoch"] for d in history["drift"]] == [1, 2]
    assert all(d["max_rel"] <= 1e-8 for d in history["drift"]), history["drift"]
    jax_state = safetensors.numpy.load_file(str(save))
    torch_state = safetensors.numpy.load_file(str(tmp_path / "rn.torch.safetensors"))
    assert len(jax_state) == len(torch_state) == 122  # resnet18's state_dict, buffers too
    assert jax_state["layer4.1.bn2.running_var"].dtype == np.float64
    worst = max(
        float(np.max(np.abs(jax_state[k] - torch_state[k]))) / max(np.abs(torch_state[k]).max(), 1)
        for k in torch_state
        if torch_state[k].dtype.kind == "f"
    )
    assert worst <= 1e-8, worst


TOKEN_MODEL = textwrap.dedent(
    """
    from torch import nn


    class Bag(nn.Module):  # token ids `(n, length)` -> logits `(n, classes)`
        def __init__(self, vocab=12, classes=3):
            super().__init__()
            self.embed = nn.Embedding(vocab, 6)
            self.norm = nn.LayerNorm(6)
            self.head = nn.Linear(6, classes)

        def forward(self, tokens):
            return self.head(self.norm(self.embed(tokens)).mean(1))
    """
)


def test_a_token_npz_trains_a_sequence_classifier_in_both_frameworks(tmp_path):
    """A .npz of token ids (the documented format) trains a user's Embedding model in both
    frameworks from the same weights and batches; float32, a handful of steps: the
    float32 tier for short trajectories."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 96)
    tokens = (rng.integers(0, 4, (96, 7)) + 4 * labels[:, None]).astype(np.int64)
    np.savez(tmp_path / "text.npz", tokens=tokens, labels=labels)
    (tmp_path / "bag.py").write_text(TOKEN_MODEL)
    save = tmp_path / "bag.safetensors"
    argv = [
        "--model", f"{tmp_path / 'bag.py'}:Bag", "--data-dir", str(tmp_path / "text.npz"),
        "--batch-size", "16", "--epochs", "2", "--framework", "both", "--optimizer", "adam",
        "--no-progress", "--save", str(save),
    ]  # fmt: skip
    assert train.main(argv) == 0
    jax_state = safetensors.numpy.load_file(str(save))
    torch_state = safetensors.numpy.load_file(str(tmp_path / "bag.torch.safetensors"))
    assert set(jax_state) == {
        "embed.weight",
        "norm.weight",
        "norm.bias",
        "head.weight",
        "head.bias",
    }
    assert_parity(torch_state, jax_state)  # float32 arrays: the float32 tier, 8 steps


# long (~30 s: three float64 runs of both frameworks in subprocesses): CI's long run
@pytest.mark.long
def test_file_model_checkpoints_and_resumes_bit_exactly_with_adamw_and_a_scheduler(
    model_file, tmp_path
):
    """Issue 41's bar: a user's own model (BatchNorm buffers) with AdamW and a cosine
    schedule, checkpointed every 40 steps and resumed from step 80 (mid-epoch: 44 steps
    an epoch):
    the final parameters and running statistics are bit-identical to the uninterrupted
    run's in both frameworks; and with --accumulate 2, jax's against torch's at the
    float64 tier (BatchNorm's statistics move once per micro-batch in both)."""
    argv = [
        "--model", f"{model_file}:Net", "--framework", "both", "--precision", "float64",
        "--epochs", "2", "--optimizer", "adamw", "--scheduler", "CosineAnnealingLR",
        "--strategy", "epoch", "--no-progress",
        "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "40",
    ]  # fmt: skip
    _run([*argv, "--save", str(tmp_path / "full.safetensors")])
    out = _run(
        [*argv, "--resume-from", "ckpt-00000080", "--save", str(tmp_path / "res.safetensors")]
    )
    assert "jax resumed from step 80" in out and "torch resumed from step 80" in out
    for suffix in ("", ".torch"):
        full = safetensors.numpy.load_file(str(tmp_path / f"full{suffix}.safetensors"))
        resumed = safetensors.numpy.load_file(str(tmp_path / f"res{suffix}.safetensors"))
        assert "bn.running_var" in full and full["conv.weight"].dtype == np.float64
        assert_parity(full, resumed, rtol=0, atol=0)  # bit-identical
    # the checkpoint holds the whole state_dict: torch's load_state_dict takes it
    checkpoint = tmp_path / "ck" / "jax" / "ckpt-00000080" / "params.safetensors"
    assert "bn.running_mean" in safetensors.numpy.load_file(str(checkpoint))

    accumulated = [*argv[: argv.index("--checkpoint-dir")], "--accumulate", "2"]
    _run([*accumulated, "--batch-size", "16", "--save", str(tmp_path / "acc.safetensors")])
    assert_parity(
        safetensors.numpy.load_file(str(tmp_path / "acc.torch.safetensors")),
        safetensors.numpy.load_file(str(tmp_path / "acc.safetensors")),
    )


DROPOUT_MODEL = textwrap.dedent(
    """
    from torch import nn


    def net():
        return nn.Sequential(
            nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 10)
        )
    """
)


def test_dropout_model_resumes_to_the_same_bits_in_jax(tmp_path):
    """A model that draws random numbers in training: step i of epoch e draws with
    fold_in(fold_in(key(seed), e), i) under every strategy, so a run resumed mid-epoch
    ends bit-identical to the uninterrupted run, per-step and fused alike."""
    (tmp_path / "drop.py").write_text(DROPOUT_MODEL)
    sys.path.insert(0, str(tmp_path))
    try:
        import drop
    finally:
        sys.path.pop(0)
    assert train.draws_randomness(drop.net(), torch.ones(4, 1, 8, 8))  # masks to resume
    argv = ["--model", f"{tmp_path / 'drop.py'}:net", "--epochs", "2", "--no-progress"]
    for strategy in ("step", "epoch"):
        # steps 60 (mid-epoch 2) and the final 88 are the two checkpoints kept
        ck = ["--checkpoint-dir", str(tmp_path / strategy), "--checkpoint-every", "60"]
        saved = {}
        for name, extra in (("full", []), ("resumed", ["--resume-from", "ckpt-00000060"])):
            path = tmp_path / f"{strategy}-{name}.safetensors"
            command = [*argv, *ck, "--strategy", strategy, *extra, "--save", str(path)]
            assert train.main(command) == 0
            saved[name] = safetensors.numpy.load_file(str(path))
        assert_parity(saved["full"], saved["resumed"], rtol=0, atol=0)


# long (~40 s: three float64 runs of both frameworks in subprocesses): CI's long run
@pytest.mark.long
def test_the_last_short_batch_trains_in_both_frameworks_and_resumes(model_file, tmp_path):
    """--keep-last-batch: 1438 digits in batches of 32 are 44 full batches and one of 30,
    trained as a step of its own shape in both frameworks (the fused strategy runs it
    after its stretches): torch's own loop is the reference at the float64 tier, and a
    run resumed from step 44 (just before the short batch) ends on the same bits."""
    argv = [
        "--model", f"{model_file}:Net", "--framework", "both", "--precision", "float64",
        "--epochs", "1", "--optimizer", "adam", "--keep-last-batch", "--strategy", "epoch",
        "--no-progress", "--checkpoint-dir", str(tmp_path / "ck"), "--checkpoint-every", "44",
    ]  # fmt: skip
    _run([*argv, "--save", str(tmp_path / "full.safetensors"), "--json", str(tmp_path / "h.json")])
    history = json.load(open(tmp_path / "h.json"))
    assert len(history["losses"]["jax"]) == len(history["losses"]["torch"]) == 45
    full = safetensors.numpy.load_file(str(tmp_path / "full.safetensors"))
    assert full["bn.num_batches_tracked"] == 45
    assert_parity(safetensors.numpy.load_file(str(tmp_path / "full.torch.safetensors")), full)
    out = _run([*argv, "--resume-from", "ckpt-00000044", "--save", str(tmp_path / "r.safetensors")])
    assert "jax resumed from step 44 (epoch 1, batch 44)" in out
    for suffix in ("", ".torch"):
        assert_parity(
            safetensors.numpy.load_file(str(tmp_path / f"full{suffix}.safetensors")),
            safetensors.numpy.load_file(str(tmp_path / f"r{suffix}.safetensors")),
            rtol=0,
            atol=0,
        )


def test_keep_last_batch_is_refused_where_it_cannot_hold(model_file, capsys):
    """A last batch of one example (BatchNorm, and a capture from batch 2 up), and
    --accumulate (no equal micro-batches): one line each."""
    argv = ["--model", f"{model_file}:Net", "--keep-last-batch", "--no-progress"]
    assert train.main([*argv, "--batch-size", "1437"]) == 2
    assert "would hold one example" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.main([*argv, "--accumulate", "2"])
    assert "--keep-last-batch with --accumulate" in capsys.readouterr().err


# long (~25 s: a Hugging Face model captured and trained in both frameworks in float64)
@pytest.mark.long
def test_a_hugging_face_classifier_trains_on_a_token_npz_at_the_float64_tier(tmp_path):
    """transformers' BertForSequenceClassification (a tiny config) returns a ModelOutput:
    both frameworks train its logits (torch.export captures the forward that returns
    them), on a token .npz, in float64: jax's state against torch's own loop's."""
    skip_unless_installed("transformers")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 96)
    tokens = (rng.integers(0, 10, (96, 9)) + 10 * labels[:, None]).astype(np.int64)
    np.savez(tmp_path / "text.npz", tokens=tokens, labels=labels)
    config = {
        "vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
        "intermediate_size": 32, "num_labels": 3, "max_position_embeddings": 16,
        "hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0,
    }  # fmt: skip
    save, report = tmp_path / "bert.safetensors", tmp_path / "h.json"
    _run(
        [
            "--model",
            "transformers:BertForSequenceClassification",
            "--config",
            json.dumps(config),
            "--data-dir",
            str(tmp_path / "text.npz"),
            "--batch-size",
            "16",
            "--epochs",
            "2",
            "--framework",
            "both",
            "--precision",
            "float64",
            "--optimizer",
            "adamw",
            "--no-progress",
            "--save",
            str(save),
            "--json",
            str(report),
        ]  # fmt: skip
    )
    jax_state = safetensors.numpy.load_file(str(save))
    torch_state = safetensors.numpy.load_file(str(tmp_path / "bert.torch.safetensors"))
    assert "classifier.weight" in jax_state and jax_state["classifier.weight"].shape == (3, 16)
    assert_parity(torch_state, jax_state)
    assert all(d["max_rel"] <= 1e-10 for d in json.load(open(report))["drift"])
