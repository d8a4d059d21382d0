"""Artifacts of token-id models, and damaged artifacts (issue 55).

A token-id model (``nn.Embedding`` + ``nn.Linear``, captured with an int64 example) is
saved by ``save_exported`` with ``jax_enable_x64`` off (its program takes int32 ids) and
with it on (int64 ids); each file is loaded with x64 in the other state (and the same)
and called with int32 and int64 ids, as numpy arrays, jax arrays and lists: every call
equals torch's own output at the float32 tier. Ids outside the program's integer dtype
are refused in one line naming the input, the value and the range; a float input of
another dtype is refused naming both dtypes. ``scripts/port.py --export`` files (saved
by a process with x64 on) run in a fresh process with x64 off, torch never imported.

A damaged file (cut short, or 8 bytes flipped inside any member) is a ``ValueError``
from ``load_exported`` naming the file and the member, before any call. Where each
member's bytes lie is read from the zip's own headers (``zipfile``), not from
jaxgrad's code.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import textwrap
import zipfile
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch import nn as tnn

from jaxgrad import nn
from jaxgrad.parity import assert_parity

VOCAB = 50


class Tagger(tnn.Module):
    """Token ids `(batch, length)` -> scores `(batch, length, 3)`."""

    def __init__(self):
        super().__init__()
        self.embedding = tnn.Embedding(VOCAB, 8)
        self.head = tnn.Linear(8, 3)

    def forward(self, ids):
        return self.head(self.embedding(ids))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The torch model and its two artifacts: ``{"x64 off": path, "x64 on": path}``."""
    torch.manual_seed(zlib.crc32(__name__.encode()))
    module = Tagger().eval()
    example = torch.randint(0, VOCAB, (2, 5))
    folder = tmp_path_factory.mktemp("artifacts")
    paths = {}
    with jax.enable_x64(False):
        model, params = nn.from_torch(module, (example,), capture="export")
    for mode, on in (("x64 off", False), ("x64 on", True)):
        paths[mode] = folder / f"tagger-{mode.replace(' ', '-')}.jaxgrad"
        with jax.enable_x64(on):
            nn.save_exported(paths[mode], model, params)
    return module, paths


def _program_ids_dtype(path) -> str:
    """The dtype of the ids the file's program takes, read with jax.export itself."""
    with zipfile.ZipFile(path) as archive:
        exported = jax.export.deserialize(bytearray(archive.read("program0.jaxexport")))
    return str(exported.in_avals[-1].dtype)


def _torch_scores(module, ids) -> np.ndarray:
    with torch.no_grad():
        return module(torch.from_numpy(np.asarray(ids, np.int64))).numpy()


@pytest.mark.parametrize("loaded_with", ["x64 off", "x64 on"])
@pytest.mark.parametrize("saved_with", ["x64 off", "x64 on"])
def test_token_ids_of_either_dtype_run_with_x64_on_or_off(saved, saved_with, loaded_with, rng):
    module, paths = saved
    ids = rng.integers(0, VOCAB, (3, 7))  # not the example's shape: sizes are symbolic
    expected = _torch_scores(module, ids)
    with jax.enable_x64(loaded_with == "x64 on"):
        artifact = nn.load_exported(paths[saved_with])
        calls = {
            "numpy int32": ids.astype(np.int32),
            "numpy int64": ids.astype(np.int64),
            "numpy uint8": ids.astype(np.uint8),
            "jax array": jnp.asarray(ids.astype(np.int32)),
            "list": ids.tolist(),
        }
        for name, value in calls.items():
            got = artifact(value)
            assert got.dtype == jnp.float32, name
            assert_parity(expected, np.asarray(got), name=f"{saved_with} -> {loaded_with}: {name}")


@pytest.mark.parametrize("loaded_with", ["x64 off", "x64 on"])
def test_ids_outside_an_int32_artifact_are_refused_in_one_line(saved, loaded_with):
    _, paths = saved
    assert _program_ids_dtype(paths["x64 off"]) == "int32"  # x64 off lowers int64 ids
    with jax.enable_x64(loaded_with == "x64 on"):
        artifact = nn.load_exported(paths["x64 off"])
        for value in (2**40, -(2**31) - 1, 2**31):
            ids = np.array([[1, value, 3], [4, 5, 6]], np.int64)
            with pytest.raises(ValueError) as refused:
                artifact(ids)
            message = str(refused.value)
            assert "\n" not in message
            assert re.search(
                rf"input 0 holds {value}, outside the artifact's int32 range "
                r"\[-2147483648, 2147483647\]",
                message,
            ), message
        # the edges of the range are ids the program takes
        edges = np.array([[0, 2**31 - 1, 3], [-(2**31), 5, 6]], np.int64)
        assert artifact(edges).shape == (2, 3, 3)


def test_ids_outside_an_int64_artifact_are_refused_in_one_line(saved):
    _, paths = saved
    assert _program_ids_dtype(paths["x64 on"]) == "int64"
    with jax.enable_x64(False):
        artifact = nn.load_exported(paths["x64 on"])
        ids = np.array([[1, 2**64 - 1, 3], [4, 5, 6]], np.uint64)
        with pytest.raises(ValueError) as refused:
            artifact(ids)
    message = str(refused.value)
    assert "\n" not in message
    assert (
        f"input 0 holds {2**64 - 1}, outside the artifact's int64 range "
        f"[{-(2**63)}, {2**63 - 1}]" in message
    ), message


@pytest.fixture(scope="module")
def float_saved(tmp_path_factory):
    """A float32 ``Linear(4, 2)`` + ``BatchNorm1d(2)`` (running statistics drawn) and its
    artifact, saved with x64 on as ``port.py`` saves: ``num_batches_tracked`` is int64."""
    torch.manual_seed(zlib.crc32(b"float32 model"))
    module = tnn.Sequential(tnn.Linear(4, 2), tnn.BatchNorm1d(2)).eval()
    with torch.no_grad():
        module[1].running_mean.uniform_(-1, 1)
        module[1].running_var.uniform_(0.5, 2)
    path = tmp_path_factory.mktemp("float") / "linear.jaxgrad"
    with jax.enable_x64(True):
        model, params, buffers = nn.from_torch(
            module, (torch.zeros(2, 4),), capture="export", with_buffers=True
        )
        assert buffers["1.num_batches_tracked"].dtype == np.int64
        nn.save_exported(path, model, params, buffers)
    return module, path


def _refused_dtype(artifact, value) -> str:
    with pytest.raises(TypeError) as refused:
        artifact(value)
    message = str(refused.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("loaded_with", ["x64 off", "x64 on"])
def test_an_input_of_another_dtype_is_refused_naming_the_dtype_the_program_takes(
    saved, float_saved, loaded_with, rng
):
    """Float (or bool) ids name the integer dtype each token file's program takes
    (int32 with x64 off at save, int64 with it on); a float32 model's artifact takes
    float32 inputs (torch's answer at the float32 tier; its int64 buffer no bar to x64
    off) and refuses float64 and float16 ones naming float32, as before issue 55."""
    _, paths = saved
    module, path = float_saved
    x = rng.standard_normal((3, 4)).astype(np.float32)
    with jax.enable_x64(loaded_with == "x64 on"):
        for saved_with, takes in (("x64 off", "int32"), ("x64 on", "int64")):
            artifact = nn.load_exported(paths[saved_with])
            for given in ("float32", "float64", "bool"):
                message = _refused_dtype(artifact, np.ones((2, 3), given))
                assert f"input 0 has dtype {given}, the artifact takes {takes}" in message
        artifact = nn.load_exported(path)
        got = artifact(x)
        for given in ("float64", "float16"):
            message = _refused_dtype(artifact, x.astype(given))
            assert f"input 0 has dtype {given}, the artifact takes float32." in message
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    assert_parity(expected, np.asarray(got), name="float32 input")


# ------------------------------------------------------------ a fresh process
RUN_WITHOUT_TORCH = textwrap.dedent("""
    import json, sys
    import jax
    import numpy as np
    jax.config.update("jax_enable_x64", sys.argv[1] == "on")
    from jaxgrad.nn import load_exported

    ids = np.load(sys.argv[2])
    result = {}
    for path in sys.argv[3:]:
        artifact = load_exported(path)
        for dtype in ("int32", "int64"):
            result[f"{path} {dtype}"] = np.asarray(artifact(ids.astype(dtype))).tolist()
    result["torch imported"] = "torch" in sys.modules
    print("RESULT" + json.dumps(result))
""")


def _run_without_torch(x64: str, ids, paths, tmp_path) -> dict:
    np.save(tmp_path / "ids.npy", ids)
    done = subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT_TORCH, x64, str(tmp_path / "ids.npy"), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


@pytest.mark.slow  # a fresh process with jax (~10 s); x64 on: CI's long run
@pytest.mark.parametrize("x64", ["off", pytest.param("on", marks=pytest.mark.long)])
def test_both_files_run_in_a_fresh_process_without_torch(saved, x64, tmp_path, rng):
    module, paths = saved
    ids = rng.integers(0, VOCAB, (4, 6))
    result = _run_without_torch(x64, ids, paths.values(), tmp_path)
    assert result.pop("torch imported") is False
    expected = _torch_scores(module, ids)
    assert len(result) == 4
    for name, scores in result.items():
        assert_parity(expected, np.asarray(scores, np.float32), name=f"x64 {x64}: {name}")


TAGGER_FILE = textwrap.dedent("""
    from torch import nn


    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(50, 8)
            self.head = nn.Linear(8, 3)

        def forward(self, ids):
            return self.head(self.embedding(ids))
""")


@pytest.mark.long  # CI: pytest -m "exhaustive or long" (a whole port, then a fresh process)
def test_port_export_of_a_token_model_runs_with_x64_off(tmp_path, capsys, monkeypatch, rng):
    """port.py (a process with x64 on) writes int64 ids into its artifact; it checks the
    file with int32 ids too, and a fresh process with x64 off runs it on int32 and
    int64 ids, equal to torch's output (weights read back from the artifact)."""
    import port

    (tmp_path / "tokens.py").write_text(TAGGER_FILE)
    monkeypatch.chdir(tmp_path)
    artifact = tmp_path / "tagger.jaxgrad"
    code = port.main(
        [
            "tokens.py:Tagger",
            "--input-shape",
            "2,5",
            "--int-input",
            "50",
            "--out",
            str(tmp_path / "tagger.safetensors"),
            "--export",
            str(artifact),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    for batch in (2, 3):
        assert f"batch {batch}: int32 ids give the int64 ids' output bit for bit: PASS" in printed
    assert _program_ids_dtype(artifact) == "int64"
    module = Tagger().eval()
    with zipfile.ZipFile(artifact) as archive:
        names = json.loads(archive.read("meta.json"))["weights"]
        module.load_state_dict(
            {
                name: torch.from_numpy(np.load(archive.open(f"weights/{number}.npy")))
                for number, name in enumerate(names)
            }
        )
    ids = rng.integers(0, VOCAB, (5, 4))
    result = _run_without_torch("off", ids, [artifact], tmp_path)
    assert result.pop("torch imported") is False
    expected = _torch_scores(module, ids)
    for name, scores in result.items():
        assert_parity(expected, np.asarray(scores, np.float32), name=name)


# ------------------------------------------------------------ damaged files
def _member_data(path) -> dict:
    """``{member: (start, length)}`` of each member's stored bytes, from the zip's own
    headers (the local header's name and extra lengths, the directory's size)."""
    spans = {}
    with zipfile.ZipFile(path) as archive, open(path, "rb") as handle:
        for info in archive.infolist():
            handle.seek(info.header_offset + 26)
            name_length, extra_length = struct.unpack("<HH", handle.read(4))
            start = info.header_offset + 30 + name_length + extra_length
            spans[info.filename] = (start, info.compress_size)
    return spans


def _refusal(path) -> str:
    with pytest.raises(ValueError) as refused:
        nn.load_exported(path)
    message = str(refused.value)
    assert "\n" not in message
    assert str(path) in message, message
    return message


def test_every_member_is_read_and_checked_at_load(saved, tmp_path):
    """8 bytes flipped in the middle of each member in turn (the metadata, the
    program, every weight): ``load_exported`` refuses the file naming it and the
    member."""
    _, paths = saved
    data = paths["x64 off"].read_bytes()
    spans = _member_data(paths["x64 off"])
    assert {"meta.json", "program0.jaxexport", "weights/0.npy", "weights/1.npy"} <= set(spans)
    for member, (start, length) in spans.items():
        assert length >= 16, member
        at = start + length // 2 - 4
        damaged = bytearray(data)
        damaged[at : at + 8] = bytes(b ^ 0xFF for b in damaged[at : at + 8])
        path = tmp_path / f"flipped-{member.replace('/', '-')}.jaxgrad"
        path.write_bytes(bytes(damaged))
        message = _refusal(path)
        assert f"is damaged: member {member} " in message, message


def test_a_truncated_file_names_the_member_it_cuts(saved, tmp_path):
    _, paths = saved
    data = paths["x64 off"].read_bytes()
    spans = _member_data(paths["x64 off"])
    for member, (start, length) in spans.items():
        path = tmp_path / f"cut-in-{member.replace('/', '-')}.jaxgrad"
        path.write_bytes(data[: start + length // 2])
        message = _refusal(path)
        assert f"is damaged: member {member} is cut off" in message, message
    # cut where a member ends: the members after it are gone
    start, length = spans["meta.json"]
    path = tmp_path / "cut-after-meta.jaxgrad"
    path.write_bytes(data[: start + length])
    assert "is damaged: everything after member meta.json is cut off" in _refusal(path)
    # every member whole, the zip's directory (written last) cut
    end = max(start + length for start, length in spans.values())
    path = tmp_path / "cut-in-directory.jaxgrad"
    path.write_bytes(data[: end + 10])
    assert "is damaged: the zip directory" in _refusal(path)
    # a file that never was a zip is still no artifact, not a damaged one
    path = tmp_path / "notes.jaxgrad"
    path.write_bytes(b"not an artifact at all")
    assert "is not a jaxgrad exported artifact" in _refusal(path)
