"""Argument checks shared by every script, run before anything heavy is imported.

The contract of every ``scripts/*.py``: parse and validate the command line first
(``--help`` answers in well under a second because jax and torch are imported only
inside ``main()`` afterwards), and reject a bad argument with exit status 2 and one
``error: ...`` line (``argparse``'s ``parser.error``), never a traceback after
minutes of work. Each check here takes the parser so that its failure is exactly
``parser.error``'s: usage line, ``PROG: error: MESSAGE``, exit 2.

Also here: ``StopOnSignal``, which turns SIGINT/SIGTERM into a stop request for
training loops (``scripts/train.py``). This module imports only the standard library.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import tempfile
from typing import NamedTuple


def flag(name: str) -> str:
    """``"checkpoint_dir"`` -> ``"--checkpoint-dir"``."""
    return "--" + name.replace("_", "-")


def add_xla_flag(parser: argparse.ArgumentParser, help_suffix: str = "") -> None:
    """``--xla-flag --xla_...`` (repeatable), appended to ``XLA_FLAGS`` before jax starts
    (``apply_xla_flags``); checked by ``check_xla_flags``."""
    parser.add_argument(
        "--xla-flag",
        action="append",
        default=[],
        metavar="--xla_...",
        help="append one flag to XLA_FLAGS before jax starts (repeatable"
        + (f"; {help_suffix}" if help_suffix else "")
        + ")",
    )


def check_xla_flags(parser: argparse.ArgumentParser, flags) -> None:
    for flag in flags:
        if not flag.startswith("--xla_") or any(c.isspace() for c in flag):
            parser.error(
                f"--xla-flag must be one XLA flag like --xla_cpu_use_xnnpack=true (got {flag!r})"
            )


def apply_xla_flags(flags) -> None:
    """Append ``flags`` to ``$XLA_FLAGS`` (call before importing jax)."""
    if flags:
        os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), *flags]).strip()


def add_keep_host_memory(parser) -> None:
    """``--keep-host-memory`` / ``--no-keep-host-memory`` (default on): see
    ``jaxgrad.train.host_memory``."""
    parser.add_argument(
        "--keep-host-memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep freed host memory for reuse (glibc's malloc: no mmap per "
        "large block, no trimming), so XLA:CPU's per-call buffers are not "
        "page-faulted in every step; process-wide, torch included "
        "(default: on)",
    )


def apply_keep_host_memory(args: argparse.Namespace) -> str:
    """Apply ``--keep-host-memory`` in this process (imports jaxgrad) and return the
    header's line."""
    if not args.keep_host_memory:
        return "default (--no-keep-host-memory)"
    from jaxgrad.train import keep_freed_host_memory

    result = keep_freed_host_memory()
    return result.detail if result.applied else f"default ({result.detail})"


def at_least(
    parser: argparse.ArgumentParser, args: argparse.Namespace, minimum: int, *names: str
) -> None:
    """Each of ``names`` (argparse dests) that is set must be ``>= minimum``."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value < minimum:
            parser.error(f"{flag(name)} must be >= {minimum} (got {value})")


def positive_float(parser: argparse.ArgumentParser, args: argparse.Namespace, *names: str) -> None:
    """Each of ``names`` that is set must be a finite number ``> 0``."""
    for name in names:
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            parser.error(f"{flag(name)} must be a positive finite number (got {value})")


def non_negative_float(
    parser: argparse.ArgumentParser, args: argparse.Namespace, *names: str
) -> None:
    """Each of ``names`` that is set must be a finite number ``>= 0``."""
    for name in names:
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            parser.error(f"{flag(name)} must be a finite number >= 0 (got {value})")


def _probe_writable(directory: str) -> str | None:
    """None when a file can be created in the existing ``directory``, else why not.

    Creating (and deleting) a probe file is the only reliable test: ``os.access``
    answers yes to root for a read-only mount or a ``chmod 500`` directory.
    """
    try:
        handle, probe = tempfile.mkstemp(prefix=".jaxgrad-write-probe-", dir=directory)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(handle)
    os.remove(probe)
    return None


def _nearest_existing(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def writable_dir(parser: argparse.ArgumentParser, option: str, path: str | None) -> None:
    """``path`` is a writable directory, or one that can be created (nothing is created).

    Fails when ``path`` is a file, when a component of it is a file, or when the
    nearest existing ancestor does not accept new files.
    """
    if path is None:
        return
    if os.path.exists(path) and not os.path.isdir(path):
        parser.error(f"{option} {path}: exists and is not a directory")
    existing = _nearest_existing(path)
    if not os.path.isdir(existing):
        parser.error(f"{option} {path}: {existing} is a file, not a directory")
    why = _probe_writable(existing)
    if why is not None:
        where = "" if os.path.abspath(path) == existing else f" (cannot create it in {existing})"
        parser.error(f"{option} {path}: not writable{where}: {why}")


def output_file(parser: argparse.ArgumentParser, option: str, path: str | None) -> None:
    """``path`` can be written as a file: its directory exists and accepts files.

    A missing directory is an error rather than created silently: a typo in it would
    otherwise scatter outputs.
    """
    if path is None:
        return
    if os.path.isdir(path):
        parser.error(f"{option} {path}: is a directory; give a file name")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        parent = os.path.dirname(path) or "."
        parser.error(f"{option} {path}: directory {parent} does not exist")
    why = _probe_writable(directory)
    if why is not None:
        parser.error(f"{option} {path}: cannot write in {os.path.dirname(path) or '.'}: {why}")


def output_files(parser: argparse.ArgumentParser, args: argparse.Namespace, *names: str) -> None:
    """``output_file`` for each of ``names`` (argparse dests)."""
    for name in names:
        output_file(parser, flag(name), getattr(args, name))


def widths(
    parser: argparse.ArgumentParser,
    option: str,
    text: str,
    presets: dict[str, tuple[int, ...]] | None = None,
) -> tuple[int, ...]:
    """A preset name or a comma list of positive layer widths, e.g. ``256,128``."""
    if presets and text in presets:
        return tuple(presets[text])
    hint = f"a preset ({', '.join(presets)}) or " if presets else ""
    try:
        values = tuple(int(w) for w in text.split(","))
    except ValueError:
        parser.error(f"{option} {text!r}: expected {hint}positive widths like 256,128")
    bad = [w for w in values if w < 1]
    if bad:
        parser.error(
            f"{option} {text!r}: every width must be >= 1 (got {bad[0]}); "
            f"expected {hint}positive widths like 256,128"
        )
    return values


def existing_dir(parser: argparse.ArgumentParser, option: str, path: str | None) -> None:
    """``path`` (an input directory) exists and is a directory."""
    if path is not None and not os.path.isdir(path):
        what = "is not a directory" if os.path.exists(path) else "does not exist"
        parser.error(f"{option} {path}: {what}")


class StopOnSignal:
    """While active, SIGINT and SIGTERM ask ``targets`` to stop instead of killing.

    The first signal calls ``request_stop()`` on every target (training loops that
    finish their current step and return) and records it in ``signum``; a second one
    restores the default handlers and re-delivers itself, for a user who will not
    wait. The handler only sets flags: printing from it could collide with a
    progress bar writing to the same stream.
    """

    SIGNALS = ("SIGINT", "SIGTERM")

    def __init__(self, targets):
        self.targets = list(targets)
        self.signum: int | None = None
        self._previous: dict = {}

    def _handle(self, signum, frame):
        if self.signum is not None:  # second signal: stop waiting
            self.__exit__()
            signal.raise_signal(signum)
            return
        self.signum = signum
        for target in self.targets:
            target.request_stop()

    @property
    def name(self) -> str | None:
        return None if self.signum is None else signal.Signals(self.signum).name

    @property
    def exit_status(self) -> int:
        """128 + the signal number: 130 for SIGINT, 143 for SIGTERM (shell convention)."""
        return 128 + self.signum

    def __enter__(self) -> StopOnSignal:
        for name in self.SIGNALS:
            number = getattr(signal, name)
            self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}


def shape(text: str) -> tuple[int, ...]:
    """argparse ``type=``: ``"2,1,8,8"`` -> ``(2, 1, 8, 8)``, every dimension positive."""
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated ints like 2,1,8,8, got {text!r}"
        ) from None
    if not shape or any(s <= 0 for s in shape):
        raise argparse.ArgumentTypeError(f"every dimension must be positive, got {text!r}")
    return shape


class Target(NamedTuple):
    """A ``where:name`` command-line target: ``where`` is a ``.py`` file or a dotted
    module (importable from the current directory), ``name`` an attribute of it
    (dotted for a nested one: ``Outer.Inner``)."""

    where: str
    name: str

    @property
    def is_file(self) -> bool:
        return self.where.endswith(".py")


def parse_target(parser: argparse.ArgumentParser, option: str, text: str) -> Target:
    """``"pkg.module:Name"`` or ``"path/file.py:Name"`` -> ``Target``; a usage error
    naming ``option`` otherwise."""
    where, sep, name = text.rpartition(":")
    if not sep or not where or not name or not all(p.isidentifier() for p in name.split(".")):
        parser.error(f"{option} {text!r} must be module:name or path/file.py:name")
    if not where.endswith(".py") and not all(p.isidentifier() for p in where.split(".")):
        parser.error(f"{option} {text!r}: {where!r} is neither a dotted module name nor a .py file")
    return Target(where, name)


def _module_source(dotted: str) -> tuple[str | None, str | None]:
    """Where ``dotted`` would be imported from, found without running any of its code:
    ``(source path or None, problem or None)``. The source is None (and so is the
    problem) when it cannot be told without importing: a compiled module, or a
    submodule of a plain module (``os.path``)."""
    import importlib.machinery
    import importlib.util

    parts = dotted.split(".")
    importlib.invalidate_caches()  # a file written a moment ago (a test's model) is seen
    try:
        spec = importlib.util.find_spec(parts[0])  # a top-level name runs no code
    except (ImportError, ValueError) as exc:
        return None, str(exc)
    if spec is None:
        return None, f"no module named {parts[0]!r}"
    for depth, part in enumerate(parts[1:], start=1):
        locations = spec.submodule_search_locations
        if locations is None:  # a plain module: `part` can only be a name it binds
            names = _source_names(spec)
            if names is not None and part not in names:
                return None, (
                    f"{'.'.join(parts[:depth])!r} is a module, not a package, and binds no {part!r}"
                )
            return None, None
        spec = importlib.machinery.PathFinder.find_spec(part, list(locations))
        if spec is None:
            package = ".".join(parts[:depth])
            return None, f"package {package!r} has no module {part!r}"
    origin = spec.origin if spec.has_location else None
    return (origin if origin and origin.endswith(".py") else None), None


def _source_names(spec) -> set | None:
    """``_top_level_names`` of a found module's source; None when it has no readable,
    parsable Python source."""
    origin = spec.origin if spec.has_location else None
    if not origin or not origin.endswith(".py"):
        return None
    try:
        with open(origin, "rb") as handle:
            return _top_level_names(handle.read().decode("utf-8"), origin)
    except (OSError, UnicodeDecodeError, SyntaxError):
        return None


def _top_level_names(source: str, path: str | None = None, _seen: set | None = None) -> set | None:
    """The names a module's top-level statements bind, or None when they cannot be
    known without running it (a module ``__getattr__``, ``globals()``, ``exec``, or a
    star import it cannot follow). With the module's ``path``, a relative star import
    (``from .resnet import *``, as ``torchvision.models`` builds its namespace) is
    followed into the sibling's source (``_exported_names``)."""
    import ast

    tree = ast.parse(source)
    names: set = set()
    seen = set() if _seen is None else _seen

    def bind(target):
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.add(node.id)

    def visit(statements):
        for node in statements:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        starred = (
                            _star_names(path, node.level, node.module, seen)
                            if path and isinstance(node, ast.ImportFrom)
                            else None
                        )
                        if starred is None:
                            raise LookupError
                        names.update(starred)
                        continue
                    names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    bind(target)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                bind(node.target)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                bind(node.target)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        bind(item.optional_vars)
            for field in ("body", "orelse", "finalbody", "handlers"):
                if not isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    visit(getattr(node, field, []))
            if isinstance(node, ast.ExceptHandler) and node.name:
                names.add(node.name)
            if isinstance(node, ast.Match):
                for case in node.cases:
                    visit(case.body)

    # what binds module names at run time: globals()/exec/eval/sys.modules anywhere,
    # vars()/locals() without arguments, `global` in a function, setattr at the top
    # level (`self.modules()`, a torch model's own method, is not sys.modules)
    sys_names, modules_names = {"sys"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            sys_names |= {a.asname for a in node.names if a.name == "sys" and a.asname}
        elif isinstance(node, ast.ImportFrom) and node.module == "sys" and not node.level:
            modules_names |= {a.asname or a.name for a in node.names if a.name == "modules"}
    dynamic = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and (
            node.id in ("globals", "exec", "eval") or node.id in modules_names
        ):
            dynamic = True
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("vars", "locals")
            and not node.args
        ):
            dynamic = True
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "modules"
            and isinstance(node.value, ast.Name)
            and node.value.id in sys_names
        ):
            dynamic = True
        elif isinstance(node, ast.Global):
            dynamic = True
        elif isinstance(node, ast.NamedExpr):
            bind(node.target)
    for statement in tree.body:
        if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            dynamic |= any(
                isinstance(node, ast.Name) and node.id == "setattr" for node in ast.walk(statement)
            )
    try:
        visit(tree.body)
    except LookupError:
        return None
    if path and os.path.basename(path) == "__init__.py":
        # a package's submodules become its attributes once anything imports them
        # (``from .resnet import *`` binds ``resnet``): every one counts as bound
        for entry in os.listdir(os.path.dirname(os.path.abspath(path))):
            stem, ext = os.path.splitext(entry)
            if stem.startswith("__"):
                continue
            if (ext == ".py" and stem.isidentifier()) or (not ext and entry.isidentifier()):
                names.add(stem)
    if dynamic or "__getattr__" in names:
        return None
    return names


def _star_names(path: str, level: int, module: str | None, seen: set) -> set | None:
    """The names ``from <level dots><module> import *`` binds in the module at
    ``path``, or None when that cannot be told from source (an absolute import, a
    compiled or missing module, more than 64 modules deep)."""
    if level == 0:
        return None
    base = os.path.dirname(os.path.abspath(path))
    for _ in range(level - 1):
        base = os.path.dirname(base)
    stem = os.path.join(base, *(module.split(".") if module else []))
    for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
        if os.path.isfile(candidate):
            return _exported_names(candidate, seen)
    return None


def _exported_names(path: str, seen: set) -> set | None:
    """What a star import of the module at ``path`` binds: its ``__all__`` when that is
    a literal list or tuple of strings, else every public name it binds (a superset:
    a check built on it never refuses a name the import would bind)."""
    import ast

    if path in seen or len(seen) > 64:  # a cycle, or too deep to be worth it
        return None
    seen.add(path)
    try:
        with open(path, "rb") as handle:
            source = handle.read().decode("utf-8")
        names = _top_level_names(source, path, seen)
        tree = ast.parse(source)
    except (OSError, UnicodeDecodeError, SyntaxError):
        return None
    if names is None:
        return None
    exported: set | None = set()
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AugAssign, ast.AnnAssign))
            else []
        )
        if not any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        value = node.value
        if (
            exported is not None
            and isinstance(value, (ast.List, ast.Tuple))
            and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts)
        ):
            exported |= {e.value for e in value.elts}
        else:
            exported = None  # built at run time (``mv2_all + mv3_all``)
    if exported and "__all__" in names:
        return exported
    return {n for n in names if not n.startswith("_")}


def check_target(parser: argparse.ArgumentParser, option: str, target: Target) -> None:
    """What can be told about ``target`` without running any of its code, in well
    under a second: the file exists, the module can be found (from the current
    directory too), the source parses and binds ``name``. Each failure is a usage
    error (exit 2); what only an import can tell is left to ``load_object``."""
    if target.is_file:
        if not os.path.isfile(target.where):
            what = "is a directory" if os.path.isdir(target.where) else "does not exist"
            parser.error(f"{option}: {target.where!r} {what}")
        source_path = target.where
    else:
        with _current_directory_on_path():
            source_path, problem = _module_source(target.where)
        if problem is not None:
            parser.error(
                f"{option}: cannot import {target.where!r}: {problem} (looked in the "
                "current directory and the installed packages)"
            )
        if source_path is None:
            return
    try:
        with open(source_path, "rb") as handle:
            source = handle.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        parser.error(f"{option}: cannot read {source_path!r}: {exc}")
    try:
        names = _top_level_names(source, source_path)
    except SyntaxError as exc:
        parser.error(f"{option}: {source_path!r} does not parse: {exc.msg} (line {exc.lineno})")
    first = target.name.split(".")[0]
    if names is not None and first not in names:
        parser.error(f"{option}: {target.where!r} has no {first!r} ({_names_hint(names, first)})")


def _names_hint(names: set, wanted: str | None = None) -> str:
    """``"did you mean a, b?"`` when some of ``names`` are close to ``wanted``, else
    the first few public names."""
    import difflib

    close = difflib.get_close_matches(wanted, sorted(names), n=4) if wanted else []
    if close:
        return "did you mean " + ", ".join(close) + "?"
    public = sorted(n for n in names if not n.startswith("_"))
    if not public:
        return "it defines no public names"
    return "it defines " + ", ".join(public[:8]) + (", ..." if len(public) > 8 else "")


class _current_directory_on_path:
    """``sys.path`` with the current directory first, as ``python -c`` has it."""

    def __enter__(self):
        self.added = os.getcwd() not in sys.path
        if self.added:
            sys.path.insert(0, os.getcwd())

    def __exit__(self, *exc):
        if self.added and os.getcwd() in sys.path:
            sys.path.remove(os.getcwd())


def load_object(parser: argparse.ArgumentParser, target, option: str = "target"):
    """``module:name`` (importable from the current directory) or ``path/file.py:name``
    -> that object (``name`` may be dotted: ``Outer.Inner``). Every failure — a
    missing file or module, an exception while importing it, a missing name — is a
    usage error (exit 2) naming it, never a traceback."""
    import importlib
    import importlib.util

    if isinstance(target, str):
        target = parse_target(parser, option, target)
    where = target.where
    try:
        if target.is_file:
            if not os.path.isfile(where):
                parser.error(f"{option}: {where!r} does not exist")
            name = "_target_" + os.path.splitext(os.path.basename(where))[0].replace("-", "_")
            spec = importlib.util.spec_from_file_location(name, where)
            module = importlib.util.module_from_spec(spec)
            # as `python file.py` would: its siblings importable, the module registered
            # (dataclasses and pickling look it up in sys.modules)
            sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
            sys.modules[name] = module
            spec.loader.exec_module(module)
        else:
            # the current directory stays on the path: the module may import its siblings later
            sys.path.insert(0, os.getcwd())
            module = importlib.import_module(where)
    except Exception as exc:  # the user's module failed: say so in one line
        parser.error(f"{option}: cannot import {where!r}: {type(exc).__name__}: {_first_line(exc)}")
    obj = module
    for part in target.name.split("."):
        if not hasattr(obj, part):
            parser.error(f"{option}: {where!r} has no {target.name!r}")
        obj = getattr(obj, part)
    return obj


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def state_dict_file(parser: argparse.ArgumentParser, option: str, path: str | None) -> None:
    """``path`` looks like a weights file, checked with the standard library only (no
    torch, a fraction of a second): a ``.safetensors`` file whose header parses and
    whose data fills the file exactly, or a ``torch.save`` archive (a zip holding
    ``data.pkl``, every member's checksum intact). torch's legacy (pre-1.6, non-zip)
    format is left to ``torch.load``."""
    import json
    import struct
    import zipfile

    if path is None:
        return
    if not os.path.isfile(path):
        parser.error(
            f"{option} {path!r}: " + ("is a directory" if os.path.isdir(path) else "does not exist")
        )
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            head = handle.read(8)
            if path.endswith(".safetensors"):
                if len(head) < 8:
                    raise ValueError(f"{size} bytes is too short for a safetensors file")
                (length,) = struct.unpack("<Q", head)
                if length > size - 8:
                    raise ValueError(f"its header claims {length} bytes; the file has {size}")
                header = json.loads(handle.read(length).decode("utf-8"))
                ends = [
                    entry["data_offsets"][1]
                    for key, entry in header.items()
                    if key != "__metadata__"
                ]
                if 8 + length + max(ends, default=0) != size:
                    raise ValueError(
                        f"its tensors end at byte {8 + length + max(ends, default=0)}"
                        f"; the file has {size} (truncated or padded)"
                    )
                return
    except OSError as exc:
        parser.error(f"{option} {path!r}: cannot be read: {exc.strerror or exc}")
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        parser.error(f"{option} {path!r}: not a valid safetensors file: {exc}")
    if head.startswith(b"\x80"):  # a pickle: torch's legacy format, torch.load decides
        return
    why = "not a torch.save archive (a zip) nor a .safetensors file"
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                if not any(n == "data.pkl" or n.endswith("/data.pkl") for n in archive.namelist()):
                    why = "a zip archive without data.pkl, so not written by torch.save"
                else:
                    bad = archive.testzip()
                    if bad is None:
                        return
                    why = f"a torch.save archive whose member {bad!r} is corrupt"
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        why = f"a damaged zip archive ({exc})"
    parser.error(f"{option} {path!r}: {why}")
