"""scripts/doctor.py: a user's model and port through the command line, bad arguments."""

from __future__ import annotations

import pytest


_USER = '''
import dataclasses

import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.body(x)))


def good(module):
    import jaxgrad.nn as jnn
    return jnn.from_torch(module)


def bad(module):
    import jaxgrad.nn as jnn
    model, params = jnn.from_torch(module)
    layers = dict(model.layers)
    layers["body.1"] = jnn.LayerNorm(4, eps=1e-6, dtype="float64")
    return dataclasses.replace(model, layers=tuple(layers.items())), params
'''


@pytest.mark.parametrize("builder, code, text", [
    ("good", 0, "clean bill"),
    ("bad", 1, "layer `body.1` (LayerNorm): eps is 1e-06, torch uses 1e-05"),
])
def test_user_session(tmp_path, capsys, monkeypatch, builder, code, text):
    import doctor

    (tmp_path / "user_doc.py").write_text(_USER)
    monkeypatch.chdir(tmp_path)
    got = doctor.main(["user_doc:Net", "--port", f"user_doc:{builder}", "--input-shape", "3,4"])
    printed = capsys.readouterr().out
    assert got == code, printed
    assert text in printed


def test_user_session_rejected_input(tmp_path, capsys, monkeypatch):
    import doctor

    (tmp_path / "user_doc.py").write_text(_USER)
    monkeypatch.chdir(tmp_path)
    assert doctor.main(["user_doc:Net", "--port", "user_doc:good", "--input-shape", "3,5"]) == 2
    assert "rejects the example input ((3, 5) float64)" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    ([], "give --demo NAME, or REFERENCE with --port and --input-shape"),
    (["--demo", "resnet", "a:B"], "--demo takes no REFERENCE"),
    (["a:B", "--port", "nocolon", "--input-shape", "2"], "--port 'nocolon' must be"),
    (["no_such_module_anywhere:B", "--port", "c:d", "--input-shape", "2"],
     "REFERENCE: cannot import 'no_such_module_anywhere'"),
    (["a:B", "--port", "c:d", "--input-shape", "2,0"], "every dimension must be positive"),
    (["--demo", "nope"], "invalid choice"),
])
def test_bad_arguments(capsys, argv, message):
    import doctor

    with pytest.raises(SystemExit) as exit_info:
        doctor.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
