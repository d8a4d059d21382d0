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


def flag(name: str) -> str:
    """``"checkpoint_dir"`` -> ``"--checkpoint-dir"``."""
    return "--" + name.replace("_", "-")


def at_least(parser: argparse.ArgumentParser, args: argparse.Namespace, minimum: int,
             *names: str) -> None:
    """Each of ``names`` (argparse dests) that is set must be ``>= minimum``."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value < minimum:
            parser.error(f"{flag(name)} must be >= {minimum} (got {value})")


def positive_float(parser: argparse.ArgumentParser, args: argparse.Namespace,
                   *names: str) -> None:
    """Each of ``names`` that is set must be a finite number ``> 0``."""
    for name in names:
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            parser.error(f"{flag(name)} must be a positive finite number (got {value})")


def non_negative_float(parser: argparse.ArgumentParser, args: argparse.Namespace,
                       *names: str) -> None:
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


def output_files(parser: argparse.ArgumentParser, args: argparse.Namespace,
                 *names: str) -> None:
    """``output_file`` for each of ``names`` (argparse dests)."""
    for name in names:
        output_file(parser, flag(name), getattr(args, name))


def widths(parser: argparse.ArgumentParser, option: str, text: str,
           presets: dict[str, tuple[int, ...]] | None = None) -> tuple[int, ...]:
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
        parser.error(f"{option} {text!r}: every width must be >= 1 (got {bad[0]}); "
                     f"expected {hint}positive widths like 256,128")
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
        raise argparse.ArgumentTypeError(f"expected comma-separated ints like 2,1,8,8, got {text!r}")
    if not shape or any(s <= 0 for s in shape):
        raise argparse.ArgumentTypeError(f"every dimension must be positive, got {text!r}")
    return shape


def load_object(parser: argparse.ArgumentParser, target: str):
    """``module:name`` (importable from the current directory) or ``path/file.py:name``
    -> that object; a usage error (exit 2) naming what is missing otherwise."""
    import importlib
    import importlib.util

    where, _, name = target.rpartition(":")
    if where.endswith(".py"):
        if not os.path.isfile(where):
            parser.error(f"{where!r} does not exist")
        spec = importlib.util.spec_from_file_location("_port_target", where)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            parser.error(f"cannot import {where!r}: {exc}")
    if not hasattr(module, name):
        parser.error(f"{where!r} has no {name!r}")
    return getattr(module, name)
