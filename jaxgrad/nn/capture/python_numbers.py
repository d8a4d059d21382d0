"""A Python number read from a tensor in a forward, named with the user's line.

``float(t)``, ``int(t)``, ``bool(t)`` (``if t > 0:``, ``while``, ``assert``),
``t.item()`` and ``t.tolist()`` turn a tensor's *value* into a Python number. Neither
front end can hold what is then computed from it: ``torch.fx`` traces proxies, which
have no value, and ``torch.export`` gives the number a symbol without a value (``zuf0``,
``u0``) and fails where the forward needs it (a guard on a "data-dependent
expression", or a symbol "not in returned outputs"), far from the construct, after
printing its partial graph on stderr. This module lets both front ends name the
construct and the user's line instead:

- ``recorded(torch, numbers)``: while ``torch.export`` runs the forward, each such
  call made by code outside torch and jaxgrad (a custom ``autograd.Function``'s forward
  included) is appended to ``numbers`` as a ``PythonNumber``: the construct, the
  caller's file, line, text and function, and the symbols torch made for the number;
  ``explained(error, numbers)`` is the one torch's error is about (its call raised it,
  or its symbols are in the message, or its line is the failing one), else ``None``;
- ``refused_on_proxies(torch)``: while ``torch.fx`` traces, the same constructs on a
  proxy of a tensor raise ``PythonNumberError`` at the call (a proxy of a size, as in
  ``if x.size(0) > 1:``, keeps torch.fx's own error);
- ``quiet(torch)``: torch's loggers and its partial-graph print kept off stderr for the
  capture, the user's logging levels put back afterwards (left alone when
  ``TORCH_LOGS`` asks for torch's logs);
- ``from_stack_trace(text)``: the user's frame of an exported node's ``stack_trace``.

No ``import torch`` here: the front ends pass torch in (they import it lazily, and
``import jaxgrad`` never does), and the two torch submodules this needs are loaded
through it. The module sits below both front ends and imports only ``export_autograd``
(for ``patched``).
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import importlib
import linecache
import logging
import os
import re
import sys
import traceback

from jaxgrad.nn.capture.export_autograd import patched

# the tensor methods that read a value as a Python number, as the user writes them
CONSTRUCTS = {
    "__float__": "`float(t)`",
    "__int__": "`int(t)`",
    "__index__": "a tensor used as a Python int (`range(t)`, an index or a size)",
    "__bool__": "`bool(t)` (an `if`, `while`, `assert`, `and`/`or` or `not` on a tensor)",
    "item": "`.item()`",
    "tolist": "`.tolist()`",
}
_JAXGRAD = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass
class PythonNumber:
    """One construct that read a tensor's value as a Python number, where the user
    wrote it. ``symbols``: the names torch gave the number (export only); ``raised``:
    the call itself failed (torch needed the value at once)."""

    construct: str
    filename: str
    lineno: int
    text: str
    function: str = ""
    symbols: frozenset = frozenset()
    raised: bool = False

    def __str__(self) -> str:
        where = f" in {self.function}" if self.function else ""
        return f"{self.construct}{where} at {self.filename}:{self.lineno}: `{self.text}`"


class PythonNumberError(ValueError):
    """A construct of ``CONSTRUCTS`` on a traced value, raised at the call (torch.fx)."""

    def __init__(self, number: PythonNumber):
        super().__init__(f"reads a tensor's value as a Python number: {number}")
        self.number = number


def refusal(subject: str, number: PythonNumber, mode: str = "") -> str:
    """The one-paragraph refusal: ``subject`` (the model and its path) reads a Python
    number from a tensor at the user's line, and what to write instead."""
    in_mode = f" (in {mode} mode)" if mode else ""
    return (
        f"from_torch: {subject} reads a tensor's value as a Python number in its "
        f"forward{in_mode}: {number}. A captured program holds tensors, not the numbers "
        "read from them, so neither torch.fx nor torch.export can capture a value or a "
        "branch computed from it. Keep the computation in tensors (`y * t` for "
        "`y * float(t)`, `torch.where(t > 0, a, b)` for `if t > 0:`), or compute the "
        "number outside the forward and pass it in."
    )


def _outside(filename: str, torch_dir: str) -> bool:
    """Whether code in ``filename`` is the user's (neither torch's nor jaxgrad's)."""
    return not (filename.startswith(torch_dir) or filename.startswith(_JAXGRAD))


def _number_at(construct: str, frame) -> PythonNumber:
    code = frame.f_code
    return PythonNumber(
        construct,
        code.co_filename,
        frame.f_lineno,
        linecache.getline(code.co_filename, frame.f_lineno).strip(),
        getattr(code, "co_qualname", code.co_name),
    )


def _symbols(value) -> frozenset:
    """The names of the symbols in a SymInt / SymFloat / SymBool (or a list of them)."""
    if isinstance(value, (list, tuple)):
        return frozenset().union(*(_symbols(v) for v in value))
    expr = getattr(getattr(value, "node", None), "expr", None)
    return frozenset(str(s) for s in getattr(expr, "free_symbols", ()))


def _submodule(torch, name: str):
    """``torch.<name>``, imported if torch has not yet (``torch.export`` loads its
    ``_trace`` on the first export)."""
    return importlib.import_module(f"{torch.__name__}.{name}")


def _torch_dir(torch) -> str:
    return os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


@contextlib.contextmanager
def recorded(torch, numbers: list):
    """Append to ``numbers`` each ``CONSTRUCTS`` call the user's code makes while
    inside (every tensor class torch hands a forward: ``Tensor``, fake and functional
    tensors). Nothing else changes: the original method runs and returns as before."""
    fake = _submodule(torch, "_subclasses.fake_tensor").FakeTensor
    functional = _submodule(torch, "_subclasses.functional_tensor").FunctionalTensor
    torch_dir = _torch_dir(torch)

    def recording(original, construct):
        def method(self, *args, **kwargs):
            frame = sys._getframe(1)
            if not _outside(frame.f_code.co_filename, torch_dir):
                return original(self, *args, **kwargs)
            number = _number_at(construct, frame)
            try:
                result = original(self, *args, **kwargs)
            except Exception:
                numbers.append(dataclasses.replace(number, raised=True))
                raise
            numbers.append(dataclasses.replace(number, symbols=_symbols(result)))
            return result

        return method

    replacements = [
        (cls, name, recording(cls.__dict__.get(name, getattr(cls, name)), construct))
        for name, construct in CONSTRUCTS.items()
        for cls in (torch.Tensor, fake, functional)
        if cls is torch.Tensor or name in cls.__dict__
    ]
    with patched(*replacements):
        yield


def _user_frames(error, torch_dir: str) -> list:
    """``(filename, lineno)`` of the traceback's frames outside torch and jaxgrad,
    innermost last."""
    return [
        (frame.filename, frame.lineno)
        for frame in traceback.extract_tb(error.__traceback__)
        if _outside(frame.filename, torch_dir)
    ]


def explained(torch, error, numbers: list) -> PythonNumber | None:
    """The recorded number torch's ``error`` is about: the call that raised it (still
    on the failing stack), else one whose symbol the message names, else one on the
    failing user line; ``None`` when the error is about something else."""
    if not numbers:
        return None
    frames = _user_frames(error, _torch_dir(torch))
    for number in reversed(numbers):
        if number.raised and (number.filename, number.lineno) in frames:
            return number
    message = str(error)
    for number in numbers:
        if any(re.search(rf"\b{re.escape(s)}\b", message) for s in number.symbols):
            return number
    for number in numbers:
        if frames and (number.filename, number.lineno) == frames[-1]:
            return number
    return None


def failing_lines(torch, error) -> list[str]:
    """The text of the user's lines on the failing stack (for what torch reports)."""
    return [
        linecache.getline(filename, lineno).strip()
        for filename, lineno in _user_frames(error, _torch_dir(torch))
    ]


def _from_sizes(node, seen=None) -> bool:
    """Whether an fx node's value is computed from sizes only (``x.size(0) > 1``):
    every path back to a tensor goes through ``size``, ``dim``, ``numel``, ``.shape``
    / ``.ndim`` or ``len``."""
    seen = set() if seen is None else seen
    if node in seen:
        return True
    seen.add(node)
    if node.op == "call_method" and node.target in ("size", "dim", "numel"):
        return True
    if node.op == "call_function" and (
        getattr(node.target, "__name__", "") == "len"
        or (
            getattr(node.target, "__name__", "") == "getattr"
            and len(node.args) > 1
            and node.args[1] in ("shape", "ndim")
        )
    ):
        return True
    if node.op not in ("call_function", "call_method"):
        return False  # a placeholder, a module's output, a parameter: a tensor
    inputs = [a for a in (*node.args, *node.kwargs.values()) if hasattr(a, "op")]
    return all(_from_sizes(a, seen) for a in inputs)


@contextlib.contextmanager
def refused_on_proxies(torch):
    """While ``torch.fx`` traces: ``CONSTRUCTS`` (but ``__index__``) on a proxy of a
    tensor raise ``PythonNumberError`` naming the construct and the caller's line."""
    proxy = torch.fx.Proxy
    torch_dir = _torch_dir(torch)

    def refusing(name, construct):
        original = proxy.__dict__.get(name)

        def method(self, *args, **kwargs):
            frame = sys._getframe(1)
            if _from_sizes(self.node) or not _outside(frame.f_code.co_filename, torch_dir):
                if original is not None:
                    return original(self, *args, **kwargs)
                if name.startswith("__"):  # as Python says it without the patch
                    raise TypeError(f"{name[2:-2]}() argument must be a number, not 'Proxy'")
                return proxy.__getattr__(self, name)(*args, **kwargs)
            raise PythonNumberError(_number_at(construct, frame))

        return method

    replacements = [
        (proxy, name, refusing(name, construct))
        for name, construct in CONSTRUCTS.items()
        if name != "__index__"
    ]
    with patched(*replacements):
        yield


def _silent_print(*args, file=None, **kwargs):
    """``print`` for ``torch.export._trace``: its partial graph of a failed export goes
    to ``sys.stderr``; anything else prints as usual."""
    if file is None or file is not sys.stderr:
        builtins.print(*args, file=file, **kwargs)


@contextlib.contextmanager
def quiet(torch):
    """torch's logging (every ``torch.*`` logger, its structured-trace loggers aside)
    and ``torch.export``'s partial-graph print silenced while inside; the levels the
    user had are put back afterwards. With ``TORCH_LOGS`` set, nothing is silenced."""
    if os.environ.get("TORCH_LOGS"):
        yield
        return
    trace = _submodule(torch, "export._trace")
    loggers = [logging.getLogger("torch")] + [
        logger
        for name, logger in list(logging.root.manager.loggerDict.items())
        if name.startswith("torch.")
        and ".__" not in name
        and isinstance(logger, logging.Logger)
        and logger.level != logging.NOTSET
    ]
    levels = [(logger, logger.level) for logger in loggers]
    replacements = [(trace, "print", _silent_print)]
    try:
        for logger, _ in levels:
            logger.setLevel(logging.CRITICAL + 1)
        with patched(*replacements):
            yield
    finally:
        for logger, level in levels:
            logger.setLevel(level)


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def from_stack_trace(torch, stack_trace: str | None) -> PythonNumber | None:
    """The innermost user frame of an exported node's ``stack_trace`` (construct left
    to the caller: ``.item()`` or ``.tolist()``, by the line's text), or ``None``."""
    frames = [
        m for m in _FRAME.finditer(stack_trace or "") if _outside(m.group(1), _torch_dir(torch))
    ]
    if not frames:
        return None
    filename, lineno, function, text = frames[-1].groups()
    construct = CONSTRUCTS["tolist" if ".tolist(" in text and ".item(" not in text else "item"]
    return PythonNumber(construct, filename, int(lineno), text.strip(), function)


def names_experts(module) -> bool:
    """Whether ``module`` holds a mixture-of-experts layer: a submodule whose path or
    class names experts."""
    return any(
        "expert" in name.lower() or "expert" in type(child).__name__.lower()
        for name, child in module.named_modules()
    )
