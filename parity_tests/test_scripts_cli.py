"""Every script: ``--help`` and bad arguments answered before jax or torch is imported.

One subprocess runs every script's ``--help`` and every bad command line below with
``jax``, ``torch`` and the other heavy packages replaced by stubs that raise on
import: a script that imports one before parsing (or before validating) fails here
whatever the machine's speed, so no timing is asserted. Bad arguments must exit 2
with exactly one ``error:`` line and no traceback.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(
    p
    for p in glob.glob(os.path.join(ROOT, "scripts", "*.py"))
    if not os.path.basename(p).startswith("_")
)
STUBBED = ("jax", "jaxlib", "torch", "optax", "flax", "sklearn", "matplotlib", "safetensors")

# Run inside the stubbed interpreter: each case as ``__main__``, exit status and stderr.
DRIVER = r"""
import contextlib, io, json, runpy, sys
results = []
for script, argv in json.loads(sys.argv[1]):
    sys.argv = [script, *argv]
    err, out = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # an import of a stub lands here
            code, err = "raised", io.StringIO(f"{type(exc).__name__}: {exc}")
    results.append({"code": code, "stderr": err.getvalue(), "stdout": out.getvalue()})
print(json.dumps(results))
"""


def _bad_cases(tmp):
    a_file = os.path.join(tmp, "a_file")
    open(a_file, "w").close()
    missing = os.path.join(tmp, "missing", "out")
    model = os.path.join(tmp, "user_model.py")
    with open(model, "w") as handle:
        handle.write("import torch\n\n\nclass Net(torch.nn.Module):\n    pass\n")
    broken = os.path.join(tmp, "broken.py")
    with open(broken, "w") as handle:
        handle.write("class Net(:\n")
    weights = {
        name: os.path.join(tmp, name)
        for name in ("garbage.pt", "short.safetensors", "cut.safetensors", "not_torch.pt")
    }
    with open(weights["garbage.pt"], "wb") as handle:
        handle.write(b"this is not a checkpoint")
    with open(weights["short.safetensors"], "wb") as handle:
        handle.write(b"\x10\x00")
    with open(weights["cut.safetensors"], "wb") as handle:  # header promises 8 data bytes
        header = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
        handle.write(len(header).to_bytes(8, "little") + header + b"\x00" * 4)
    import zipfile

    with zipfile.ZipFile(weights["not_torch.pt"], "w") as archive:
        archive.writestr("notes.txt", "a zip, but not from torch.save")
    port = ["--input-shape", "2,3", "--out", os.path.join(tmp, "out.safetensors")]
    star = os.path.join(tmp, "star_pkg")  # a package that builds its names by star imports
    os.makedirs(star)
    with open(os.path.join(star, "__init__.py"), "w") as handle:
        handle.write("from .nets import *\n")
    with open(os.path.join(star, "nets.py"), "w") as handle:
        handle.write(
            "__all__ = ['resnet']\n\n\ndef resnet():\n    pass\n\n\ndef helper():\n    pass\n"
        )
    return [
        ("port.py", ["/nonexistent/model.py:Net", *port], "'/nonexistent/model.py' does not exist"),
        (
            "port.py",
            ["no_such_module_anywhere:Net", *port],
            "cannot import 'no_such_module_anywhere': no module named",
        ),
        (
            "port.py",
            ["jaxgrad.no_such_submodule:Net", *port],
            "package 'jaxgrad' has no module 'no_such_submodule'",
        ),
        ("port.py", [f"{model}:Missing", *port], "has no 'Missing' (it defines Net, torch)"),
        ("port.py", [f"{broken}:Net", *port], "does not parse: invalid syntax (line 1)"),
        ("port.py", [f"{model}:Net:x", *port], "neither a dotted module name nor a .py file"),
        (
            "port.py",
            [f"{model}:Net", "--state-dict", weights["garbage.pt"], *port],
            "not a torch.save archive (a zip) nor a .safetensors file",
        ),
        (
            "port.py",
            [f"{model}:Net", "--state-dict", weights["short.safetensors"], *port],
            "not a valid safetensors file: 2 bytes is too short",
        ),
        (
            "port.py",
            [f"{model}:Net", "--state-dict", weights["cut.safetensors"], *port],
            "tensors end at byte",
        ),
        (
            "port.py",
            [f"{model}:Net", "--state-dict", weights["not_torch.pt"], *port],
            "a zip archive without data.pkl",
        ),
        ("port.py", [f"{model}:Net", "--state-dict", missing + ".pt", *port], "does not exist"),
        ("port.py", [f"{star}/__init__.py:resnt", *port], "has no 'resnt' (did you mean resnet?)"),
        ("port.py", [f"{star}/__init__.py:helper", *port], "has no 'helper'"),  # not in __all__
        (
            "port.py",
            [f"{model}:Net", "--config", "{}", *port],
            "--config is a Hugging Face config, for a transformers:CLASS spec only",
        ),
        (
            "port.py",
            ["transformers:BertModel", "--config", "[1]", *port],
            "--config must be a JSON object, got '[1]'",
        ),
        (
            "port.py",
            ["transformers:BertModel", "--config", "{hidden", *port],
            "--config must be a JSON object",
        ),
        ("port.py", ["timm:", *port], "expected timm:MODEL_NAME"),
        *_zoo_spec_cases(port),
        (
            "doctor.py",
            [f"{model}:Net", "--port", f"{model}:port", "--input-shape", "2,3"],
            "--port: ",
        ),
        (
            "explore.py",
            ["no_such_module_anywhere:f", "--out", os.path.join(tmp, "x.html")],
            "cannot import 'no_such_module_anywhere'",
        ),
        ("explore.py", [f"{model}:loss", "--out", os.path.join(tmp, "x.html")], "has no 'loss'"),
        ("train.py", ["--model", "0"], "--model '0': every width must be >= 1"),
        ("train.py", ["--model", "256,,128"], "--model '256,,128'"),
        ("train.py", ["--epochs", "0"], "--epochs must be >= 1"),
        ("train.py", ["--batch-size", "-3"], "--batch-size must be >= 1"),
        ("train.py", ["--lr", "0"], "--lr must be a positive finite number"),
        ("train.py", ["--clip", "nan"], "--clip must be a positive finite number"),
        (
            "train.py",
            ["--checkpoint-dir", os.path.join(a_file, "ckpt")],
            f"{a_file} is a file, not a directory",
        ),
        ("train.py", ["--checkpoint-dir", a_file], "exists and is not a directory"),
        ("train.py", ["--checkpoint-every", "5"], "--checkpoint-every needs --checkpoint-dir"),
        ("train.py", ["--resume-from", "ckpt-00000010"], "--resume needs --checkpoint-dir"),
        (
            "train.py",
            ["--checkpoint-dir", tmp, "--resume-from", "ckpt-00000010"],
            "--resume-from ckpt-00000010: no checkpoint",
        ),
        ("train.py", ["--plot", missing + ".png"], "does not exist"),
        ("train.py", ["--save", tmp], "is a directory"),
        ("train.py", ["--json", missing + ".json"], "does not exist"),
        ("train.py", ["--data-dir", missing], "--data-dir"),
        ("parity.py", ["--json", missing + ".json"], "does not exist"),
        ("vanishing.py", ["--plot", missing + ".png"], "does not exist"),
        ("vanishing.py", ["--batch-size", "0"], "--batch-size must be >= 1"),
        ("cost.py", ["--repeats", "0"], "--repeats must be >= 1"),
        ("memory.py", ["--json", missing + ".json"], "does not exist"),
        ("bench.py", ["--rounds", "0"], "--rounds must be >= 1"),
        ("bench.py", ["--warmup-rounds", "1"], "--warmup-rounds must be >= 2"),
        ("bench.py", ["--xla-flag=xla_cpu_use_xnnpack"], "--xla-flag must be one XLA flag"),
        ("bench.py", ["--json", missing + ".json"], "does not exist"),
        ("bench_dots.py", ["--rounds", "0"], "--rounds must be >= 1"),
        ("bench_dots.py", ["--xla-flag=--fast"], "--xla-flag must be one XLA flag"),
        ("bench_conv.py", ["--steps", "0"], "--steps must be >= 1"),
        ("bench_conv.py", ["--model", "vgg"], "invalid choice: 'vgg'"),
        ("batch_norm_sums.py", ["--shapes", "2x64xfoo"], "--shapes: '2x64xfoo' is not a shape"),
        ("batch_norm_sums.py", ["--shapes", "1x3x1"], "more than one value a channel"),
        ("manual_backward.py", ["--json", missing + ".json"], "does not exist"),
        ("optimizers.py", ["--steps", "0"], "--steps must be >= 1"),
        ("graph.py", ["--out", missing + ".md"], "does not exist"),
        ("accumulation.py", ["--steps", "0"], "--steps"),
        ("freeze.py", ["--steps", "0"], "--steps"),
        ("errors.py", ["--width", "5"], "--width"),
    ]


def _zoo_spec_cases(port):
    """Bad specs naming the zoo's libraries, where they are installed (the refusal of a
    missing one is in test_port_specs.py): each found from source, or from transformers'
    lazy namespace, which imports no torch."""
    from importlib.util import find_spec

    cases = []
    if find_spec("torchvision") is not None:
        cases += [
            (
                "port.py",
                ["torchvision.models:resnet99", *port],
                "'torchvision.models' has no 'resnet99' (did you mean resnet",
            ),
            ("port.py", ["torchvision:resnet99", *port], "'torchvision.models' has no 'resnet99'"),
            (
                "port.py",
                ["torchvision.models:resnet18", "--kwargs", '{"weights": "DEFAULT"}', *port],
                "port.py downloads nothing",
            ),
        ]
    if find_spec("timm") is not None:
        cases.append(
            (
                "port.py",
                ["timm:convnext_attto", *port],
                "timm has no model 'convnext_attto' (did you mean convnext_atto",
            )
        )
    if find_spec("transformers") is not None:
        cases += [
            (
                "port.py",
                ["transformers:BertModell", *port],
                "transformers has no 'BertModell' (did you mean BertModel",
            ),
            (
                "port.py",
                ["transformers:AutoModel", "--config", '{"hidden_size": 8}', *port],
                "picks its class from the config's model_type",
            ),
        ]
    return cases


def _run_stubbed(cases, tmp_path):
    stubs = tmp_path / "stubs"
    for name in STUBBED:
        (stubs / name).mkdir(parents=True)
        (stubs / name / "__init__.py").write_text(
            f"raise ImportError('{name} imported before the arguments were parsed')\n"
        )
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(stubs), ROOT, os.path.join(ROOT, "scripts")])
    )
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(cases)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_help_and_bad_arguments_need_no_jax_or_torch(tmp_path):
    bad = _bad_cases(str(tmp_path))
    cases = [(path, ["--help"]) for path in SCRIPTS]
    cases += [(os.path.join(ROOT, "scripts", name), argv) for name, argv, _ in bad]
    results = _run_stubbed(cases, tmp_path)
    for path, result in zip(SCRIPTS, results):
        assert result["code"] == 0, (os.path.basename(path), result["stderr"])
        assert "usage:" in result["stdout"]
    for (name, argv, message), result in zip(bad, results[len(SCRIPTS) :]):
        where = f"{name} {' '.join(argv)}"
        assert result["code"] == 2, (where, result)
        errors = [line for line in result["stderr"].splitlines() if "error:" in line]
        assert len(errors) == 1 and message in errors[0], (where, result["stderr"])
        assert "Traceback" not in result["stderr"], where


def test_graph_formats_match_the_library():
    import graph as graph_script

    from jaxgrad.graph import FORMATS

    assert graph_script.FORMATS == FORMATS


@pytest.mark.parametrize(
    "argv,message",
    [
        (
            ["--batch-size", "1000", "--accumulate", "2"],
            "a step of 2000 examples (batch size 1000 × accumulate 2) is larger than the 1438",
        ),
    ],
)
def test_train_checks_the_batch_against_the_data_before_building_anything(argv, message, capsys):
    import train

    assert train.main([*argv, "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == f"error: {message} training examples; no full batch fits."
    assert "devices" not in captured.out  # nothing was built


def test_check_batch_devices_and_examples():
    from jaxgrad.train import check_batch

    check_batch(8, 2, 4, 16)
    with pytest.raises(ValueError, match="a step of 18 examples .* does not divide over 4 devices"):
        check_batch(9, 2, 4)
    with pytest.raises(ValueError, match="larger than the 10 training examples"):
        check_batch(8, 2, 1, 10)
