"""Issue 55: what a new user met on their own models and data.

- A forward returning a dict (or a Hugging Face ``ModelOutput``): ``scripts/train.py``
  trains and ``scripts/port.py`` compares its one tensor (``logits`` where present, the
  only tensor, or ``--output-key KEY``), or both exit 2 with one line naming the keys.
  The expected values are torch's: a hand-written twin whose forward returns that tensor
  alone (``Plain``, ``Hidden``), trained by torch's loop or run by torch's autograd.
- An image folder of one class is refused (``load_image_folder``, and train.py's one
  ``error:`` line).
- Two processes joined by ``jax.distributed`` on localhost: process 1 prints no
  progress bar (docs/training.md, multi-process section).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import port
import pytest
import safetensors.numpy
import torch
import train

from jaxgrad import data
from jaxgrad.parity import assert_parity

_MODELS = '''
import torch
from torch import nn


class DictNet(nn.Module):
    """Its hidden features and its logits, in a dict (logits not first)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.body = nn.Linear(64, 16)
        self.head = nn.Linear(16, num_classes)

    def features(self, x):
        return torch.tanh(self.body(x.flatten(1)))

    def forward(self, x):
        h = self.features(x)
        return {"hidden": h, "logits": self.head(h)}


class TwoNet(DictNet):
    """Two tensors, neither called logits: 16 hidden features fit 10 classes too."""

    def forward(self, x):
        h = self.features(x)
        return {"scores": self.head(h), "hidden": h}


class Plain(DictNet):
    """The reference: the same weights, the logits alone."""

    def forward(self, x):
        return self.head(self.features(x))


class Hidden(DictNet):
    """The reference for --output-key hidden (the head computed and dropped, as
    TwoNet's forward computes it)."""

    def forward(self, x):
        h = self.features(x)
        self.head(h)
        return h
'''

# 1437 digits // 256: 5 SGD steps with momentum, float64, standardized inputs
_RUN = ["--epochs", "1", "--batch-size", "256", "--precision", "float64", "--no-progress"]
_RUN += ["--strategy", "step"]  # no probing of strategies: one compiled step


@pytest.fixture
def models(tmp_path) -> Path:
    path = tmp_path / "nets.py"
    path.write_text(_MODELS)
    return path


def _train(models, name, framework, save, *extra) -> int:
    return train.main(
        ["--model", f"{models}:{name}", "--framework", framework, "--save", str(save)]
        + _RUN
        + list(extra)
    )


def _one_error_line(text: str) -> str:
    errors = [line for line in text.splitlines() if "error:" in line]
    assert len(errors) == 1, text[-3000:]
    return errors[0]


@pytest.mark.slow  # three short float64 trainings in-process (~15 s)
def test_train_py_trains_a_dict_forward_on_its_logits_or_the_chosen_key(models, tmp_path, capsys):
    """jax's parameters after training ``DictNet`` (its ``logits``, by default) and
    ``TwoNet --output-key scores`` equal torch's loop training ``Plain`` (the logits
    alone, the same initial weights) at the float64 tier: the tensor trained on is the
    logits, not the first value nor the hidden features."""
    reference = tmp_path / "plain.safetensors"
    assert _train(models, "Plain", "torch", reference) == 0
    torch_params = safetensors.numpy.load_file(str(reference))
    for name, extra in (("DictNet", ()), ("TwoNet", ("--output-key", "scores"))):
        save = tmp_path / f"{name}.safetensors"
        assert _train(models, name, "jax", save, *extra) == 0, capsys.readouterr().err[-3000:]
        assert "jax test accuracy" in capsys.readouterr().out
        jax_params = safetensors.numpy.load_file(str(save))
        assert {v.dtype for v in jax_params.values()} == {np.dtype("float64")}
        assert_parity(torch_params, jax_params)  # float64 arrays: the float64 tier


def _torch_net(models, name):
    """``name`` from the model file, built as the scripts build it (seed 0)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_issue55_nets", models)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    return getattr(module, name)()


@pytest.mark.parametrize(
    "name,extra,key,reference",
    [
        ("DictNet", (), "logits", "Plain"),
        ("TwoNet", ("--output-key", "hidden"), "hidden", "Hidden"),
    ],
)
def test_port_py_compares_the_chosen_tensor_of_a_dict_forward(
    models, tmp_path, capsys, name, extra, key, reference
):
    """port.py proves and saves the twin of ``outputs[key]``: the saved nnx state,
    loaded into the twin of a model returning that tensor alone, gives torch's
    ``outputs[key]`` and torch's gradients of it (float32 tier)."""
    import jax.numpy as jnp
    from flax import nnx

    from jaxgrad.flax import grads_to_torch, load_nnx, to_nnx
    from jaxgrad.parity import compare

    out = tmp_path / "net.safetensors"
    code = port.main([f"{models}:{name}", "--input-shape", "2,64", "--out", str(out), *extra])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert f"output: its forward's {key!r} alone" in printed
    assert printed.count(": PASS") == 3 and "FAIL" not in printed

    twin = to_nnx(_torch_net(models, reference).eval())  # other weights until loaded
    load_nnx(twin, str(out))
    net = _torch_net(models, name).eval()  # the weights port.py built and saved
    x = np.random.default_rng(3).standard_normal((3, 64)).astype(np.float32)
    value = net(torch.from_numpy(x))[key]
    cotangent = np.linspace(-1.0, 1.0, value.numel(), dtype=np.float32).reshape(value.shape)
    (value * torch.from_numpy(cotangent)).sum().backward()
    expected = {
        "output": value.detach().numpy(),
        # the head takes no part in "hidden": torch leaves its .grad None
        "grads": {n: p.grad.numpy() for n, p in net.named_parameters() if p.grad is not None},
    }
    assert len(expected["grads"]) == (4 if key == "logits" else 2)

    def objective(module):
        y = module(jnp.asarray(x))
        return jnp.sum(y * cotangent), y

    (_, y), grads = nnx.value_and_grad(objective, has_aux=True)(twin)
    got = {"output": np.asarray(y), "grads": grads_to_torch(twin, grads)}
    got["grads"] = {n: g for n, g in got["grads"].items() if n in expected["grads"]}
    report = compare(expected, got)  # float32 arrays: the float32 tier
    assert report.passed, report.table()


def test_two_tensors_and_no_logits_are_refused_naming_the_keys(models, tmp_path, capsys):
    """``TwoNet`` without --output-key: exit 2 and one line naming both keys and the
    option, from either script (no traceback, no training)."""
    assert _train(models, "TwoNet", "jax", tmp_path / "p.safetensors") == 2
    captured = capsys.readouterr()
    line = _one_error_line(captured.err)
    assert "Traceback" not in captured.err and "epoch" not in captured.out
    assert "'scores', 'hidden'" in line and "none is 'logits'" in line
    assert "--output-key KEY" in line and "train on" in line

    with pytest.raises(SystemExit) as info:
        port.main([f"{models}:TwoNet", "--input-shape", "2,64", "--out", str(tmp_path / "o")])
    assert info.value.code == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "'scores', 'hidden'" in line and "--output-key KEY" in line and "compare" in line


@pytest.mark.parametrize(
    "name,key,message",
    [
        ("TwoNet", "nope", "--output-key nope: {spec}'s forward returns a dict without 'nope'"),
        ("Plain", "logits", "--output-key logits: {spec}'s forward returns a Tensor, not a dict"),
    ],
)
def test_an_output_key_that_does_not_fit_is_refused(models, tmp_path, capsys, name, key, message):
    """A key the dict lacks, or a key for a forward that returns a tensor: one line,
    exit 2, in both scripts."""
    spec = f"{models}:{name}"
    assert _train(models, name, "jax", tmp_path / "p.safetensors", "--output-key", key) == 2
    assert message.format(spec=f"--model {spec}") in _one_error_line(capsys.readouterr().err)
    with pytest.raises(SystemExit) as info:
        port.main(
            [spec, "--input-shape", "2,64", "--out", str(tmp_path / "o"), "--output-key", key]
        )
    assert info.value.code == 2
    assert message.format(spec=spec) in _one_error_line(capsys.readouterr().err)


def test_output_key_with_a_preset_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        train.parse_args(["--model", "small", "--output-key", "logits"])
    assert info.value.code == 2
    assert "--output-key chooses among the outputs of a --model MODULE:NAME" in (
        capsys.readouterr().err
    )


def test_both_scripts_explain_output_key_in_their_help(capsys):
    for main in (train.main, port.main):
        with pytest.raises(SystemExit):
            main(["--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--output-key KEY" in text and "ModelOutput" in text and "'logits'" in text


# -- an image folder of one class ------------------------------------------------------


def _one_class_folder(root: Path) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(4):
        (root / "cat").mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
            root / "cat" / f"{i}.png"
        )
    return root


def test_an_image_folder_of_one_class_is_refused(tmp_path):
    """torchvision's ImageFolder reads it (one label, 0); a classifier trained on it is
    100 % right without learning anything, so jaxgrad refuses it naming the folder and
    the class; with train/ and val/, the train/ folder is named."""
    root = _one_class_folder(tmp_path / "pets")
    with pytest.raises(ValueError, match="at least two classes") as info:
        data.load_image_folder(root)
    assert str(root) in str(info.value) and "'cat'" in str(info.value)
    split = tmp_path / "split"
    for part in ("train", "val"):
        _one_class_folder(split / part)
    with pytest.raises(ValueError, match="at least two classes") as info:
        data.load_image_folder(split)
    assert str(split / "train") in str(info.value) and "'cat'" in str(info.value)


def test_train_py_refuses_a_one_class_folder_with_one_line(tmp_path, capsys):
    root = _one_class_folder(tmp_path / "pets")
    argv = ["--data-dir", str(root), "--model", "small", "--batch-size", "2", "--epochs", "1"]
    assert train.main([*argv, "--no-progress"]) == 2  # not a run "100 %" right
    captured = capsys.readouterr()
    line = _one_error_line(captured.err)
    assert line.startswith("error: ") and "at least two classes" in line and "'cat'" in line
    assert "accuracy" not in captured.out


# -- two processes: only process 0 prints progress ------------------------------------

TRAIN = Path(train.__file__).resolve()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


# long (two processes joining a coordinator, ~20 s on a quiet machine, as the other
# multi-process tests in test_train_distributed.py): CI's -m "exhaustive or long" run
@pytest.mark.long
def test_process_one_prints_no_progress_bar(tmp_path):
    """Two processes of one CPU device each, joined by jax.distributed on localhost,
    progress bars on (no --no-progress): process 0's stderr shows the epoch's bar,
    process 1's stdout and stderr show none (nor anything else but the runtime's own
    lines)."""
    port_number = _free_port()
    procs = []
    for process in (0, 1):
        env = dict(
            os.environ,
            XLA_FLAGS="--xla_force_host_platform_device_count=1",
            JAX_COORDINATOR_ADDRESS=f"localhost:{port_number}",
            JAX_NUM_PROCESSES="2",
            JAX_PROCESS_ID=str(process),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(TRAIN), "--epochs", "1", "--batch-size", "256"]
                + ["--model", "16", "--strategy", "step"],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        done = [p.communicate(timeout=240) + (p.returncode,) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    (out0, err0, rc0), (out1, err1, rc1) = done
    assert (rc0, rc1) == (0, 0), (err0[-2000:], err1[-2000:])
    assert "jax epoch 1" in err0 and "jax test accuracy" in out0  # the bar is there at all
    assert "epoch" not in err1 and "step/s" not in err1 and "ex_s" not in err1, err1[-2000:]
    assert out1 == ""
