"""A Python number read from a tensor in a forward (issue 55), refused by name.

``float(t)``, ``int(t)``, ``bool(t)`` (``if t > 0:``), ``.item()`` and ``.tolist()``
in a forward, and ``.item()`` inside a custom ``autograd.Function``'s forward: every
front end (``capture="layers"``, ``"export"``, ``"auto"``) refuses the model with one
``ValueError`` naming the construct and the user's line (file:line and its text, read
here from this file, not from the code under test); the mixture-of-experts advice
appears only for a model with experts; torch's partial-graph dumps and log lines stay
off stderr, and the user's logging levels are put back.
"""

from __future__ import annotations

import logging
import pathlib

import pytest
import torch
from torch import nn as tnn

from jaxgrad import nn

HERE = pathlib.Path(__file__).resolve()
LINES = HERE.read_text().splitlines()


def _at(text: str) -> str:
    """``file:line`` of the one line of this file that is ``text`` (indent aside)."""
    found = [i + 1 for i, line in enumerate(LINES) if line.strip() == text]
    assert len(found) == 1, (text, found)
    return f"{HERE}:{found[0]}"


class Reads(tnn.Module):
    """A small model whose forward reads a Python number from a tensor, by ``kind``."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind, self.lin = kind, tnn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        if self.kind == "float":
            return y * float(x.std())
        if self.kind == "int":
            return y * int(x.sum())
        if self.kind == "bool":
            if x.sum() > 0:
                return y
            return -y
        if self.kind == "item":
            scale = x.abs().max().item()
            return y / scale
        if self.kind == "tolist":
            first = x[0].tolist()
            return y * first[0]
        raise AssertionError(self.kind)


# what each construct is called in the message, and the line that holds it
CASES = {
    "float": ("`float(t)`", "return y * float(x.std())"),
    "int": ("`int(t)`", "return y * int(x.sum())"),
    "bool": ("`bool(t)`", "if x.sum() > 0:"),
    "item": ("`.item()`", "scale = x.abs().max().item()"),
    "tolist": ("`.tolist()`", "first = x[0].tolist()"),
}


class Normalise(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        peak = x.abs().max().item()
        return x / peak

    @staticmethod
    def backward(ctx, grad):
        return grad


class CallsNormalise(tnn.Module):
    def __init__(self):
        super().__init__()
        self.lin = tnn.Linear(4, 4)

    def forward(self, x):
        return Normalise.apply(self.lin(x))


def _example():
    return (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),)


def _refusal(module, **options) -> str:
    with pytest.raises(ValueError) as raised:
        nn.from_torch(module, example=_example(), **options)
    return str(raised.value)


def _assert_names(message: str, construct: str, text: str) -> None:
    assert "reads a tensor's value as a Python number" in message, message
    assert construct in message, message
    assert f"{_at(text)}: `{text}`" in message, message
    assert "experts" not in message, message  # a plain model: no mixture-of-experts advice


@pytest.mark.parametrize("kind", list(CASES))
def test_the_layer_path_names_the_construct_and_the_line(kind):
    message = _refusal(Reads(kind), capture="layers")
    _assert_names(message, *CASES[kind])
    assert "\n" not in message  # one paragraph


@pytest.mark.parametrize("kind", list(CASES))
def test_torch_export_names_the_construct_and_the_line(kind, capfd):
    message = _refusal(Reads(kind), capture="export", dynamic_shapes=None)
    _assert_names(message, *CASES[kind])
    assert "\n" not in message
    err = capfd.readouterr().err
    assert "def forward(" not in err and "symbolic_shapes" not in err, err


def test_the_issues_float_of_std_is_named_by_auto_with_stderr_quiet(capfd):
    """Issue 55 as reported: ``float(x.std())`` with ``from_torch(module, example=(x,))``
    (auto, dynamic sizes): both front ends name it; torch printed ~42 lines before."""
    message = _refusal(Reads("float"))
    _assert_names(message, *CASES["float"])
    assert capfd.readouterr().err == ""


def test_item_in_a_custom_functions_forward_is_named(capfd):
    text = "peak = x.abs().max().item()"
    for options in ({"capture": "export", "dynamic_shapes": None}, {}):
        message = _refusal(CallsNormalise(), **options)
        _assert_names(message, "`.item()`", text)
        assert "Normalise.forward" in message, message
    assert capfd.readouterr().err == ""


def test_a_branch_on_a_tensor_is_named_and_a_branch_on_a_size_is_not():
    class OnSize(tnn.Module):
        def forward(self, x):
            if x.size(0) > 1:
                return x * 2
            return x

    message = _refusal(OnSize(), capture="layers")
    assert "Python number" not in message and "cannot trace OnSize" in message, message
    _assert_names(_refusal(Reads("bool"), capture="layers"), *CASES["bool"])


class ChosenExperts(tnn.Module):
    """Hugging Face's eager mixture of experts: a loop over the experts some token chose
    (``nonzero``), each on its tokens; ``experts`` names it."""

    def __init__(self):
        super().__init__()
        self.router = tnn.Linear(4, 3)
        self.experts = tnn.ModuleList(tnn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        choice = self.router(x).argmax(-1)
        out = torch.zeros_like(x)
        for expert in torch.nn.functional.one_hot(choice, 3).sum(0).nonzero():
            rows = torch.where(choice == expert[0])[0]
            out = out.index_add(0, rows, self.experts[0](x[rows]))
        return out


class ChosenBlocks(ChosenExperts):
    """The same loop in a model that names no experts: torch fails on the line that
    calls ``nonzero``, which is what it reports."""

    def __init__(self):
        super().__init__()
        self.blocks = self.experts
        del self.experts

    def forward(self, x):
        choice = self.router(x).argmax(-1)
        out = torch.zeros_like(x)
        for block in torch.nn.functional.one_hot(choice, 3).sum(0).nonzero():
            rows = torch.where(choice == block[0])[0]
            out = out.index_add(0, rows, self.blocks[0](x[rows]))
        return out


class ChosenRows(tnn.Module):
    """A branch on a data-dependent size, in a model without experts: the rows a mask
    chose."""

    def forward(self, x):
        rows = torch.where(x[:, 0] > 0)[0]
        if rows.shape[0] > 2:
            return x * 2
        return x


@pytest.mark.parametrize("model", [ChosenExperts, ChosenBlocks])
def test_the_experts_advice_stays_for_a_model_with_experts(model, capfd):
    message = _refusal(model(), capture="export", dynamic_shapes=None)
    assert "depend on tensor values" in message and "experts_implementation" in message
    assert "Python number" not in message
    assert "def forward(" not in capfd.readouterr().err


def test_no_experts_advice_for_a_data_dependent_size_elsewhere():
    message = _refusal(ChosenRows(), capture="export", dynamic_shapes=None)
    assert "depend on tensor values" in message, message
    assert "experts" not in message, message


def test_the_users_logging_is_put_back_after_capture(capfd):
    """Silenced for the capture only: the levels the user set on torch's loggers, and
    torch.export's own ``print``, are as they were afterwards."""
    loggers = [logging.getLogger(n) for n in ("torch", "torch.fx.experimental.symbolic_shapes")]
    before = [logger.level for logger in loggers]
    loggers[1].setLevel(logging.INFO)
    try:
        _refusal(Reads("float"), capture="export", dynamic_shapes=None)
        assert [logger.level for logger in loggers] == [before[0], logging.INFO]
        assert "print" not in vars(torch.export._trace)
        assert "Unable to find user code" not in capfd.readouterr().err
    finally:
        loggers[1].setLevel(before[1])
