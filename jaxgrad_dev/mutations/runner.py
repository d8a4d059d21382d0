"""Apply each corpus entry in a scratch copy of the repository and run the tests it names.

Nothing here edits the real tree: ``make_scratch`` copies the repository's files
(``git ls-files``: tracked and untracked-but-not-ignored, no ``__pycache__``) into a
temporary directory, ``applied`` swaps one snippet there and restores the file
afterwards, and tests run in that copy with ``PYTHONPATH`` pointing at it and
bytecode writing off (a stale ``.pyc`` of a same-size edit made within the same
second would otherwise hide the mutant). An entry is:

- **killed** when its tests fail (pytest exit 1, or 2 for a collection error);
- **survived** when they pass (the suite has a hole, or the entry argues
  ``equivalent``);
- **stale** when its ``original`` does not occur exactly once, or a test it names
  no longer exists — a corpus error, never skipped;
- **bad tests** when pytest collects nothing (exit 4/5), **timeout** when the run
  exceeds the per-mutant limit.

With ``report=True`` each entry that names ``parity`` rows also runs
``scripts/parity.py --filter ROW…`` on the mutant, which must exit 1.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from jaxgrad_dev.mutations.corpus import (
    REPO_ROOT,
    CorpusError,
    Mutant,
    report_check_names,
    stale_reason,
)

KILLED, SURVIVED, EQUIVALENT = "killed", "SURVIVED", "equivalent"
STALE, TIMEOUT, BAD_TESTS, ERROR = "STALE", "TIMEOUT", "BAD TESTS", "ERROR"
NOT_EQUIVALENT = "KILLED (argued equivalent)"
NO_ROWS, NOT_RUN = "-", "not run"


@dataclasses.dataclass
class Result:
    """What happened to one mutant. ``tests`` and ``report`` are status strings."""

    mutant: Mutant
    tests: str
    report: str = NOT_RUN
    seconds: float = 0.0
    detail: str = ""  # why it is stale / the tail of a failing run's output

    @property
    def ok(self) -> bool:
        tests_ok = self.tests in (KILLED, EQUIVALENT)
        report_ok = self.report in (KILLED, NO_ROWS, NOT_RUN)
        return tests_ok and report_ok


# ------------------------------------------------------------------ scratch copy


def repo_files(root: Path | str = REPO_ROOT) -> list[str]:
    """The repository's files: tracked plus untracked-but-not-ignored, no bytecode."""
    root = Path(root)
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout.decode()
        names = [n for n in listing.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk it
        names = [
            str(p.relative_to(root))
            for p in root.rglob("*")
            if p.is_file() and not {".git", ".venv"} & set(p.relative_to(root).parts)
        ]
    return sorted(
        n
        for n in names
        if "__pycache__" not in Path(n).parts and not n.endswith(".pyc") and (root / n).is_file()
    )


def make_scratch(root: Path | str, dest: Path | str) -> Path:
    """Copy the repository at ``root`` into ``dest`` (created) and return ``dest``."""
    root, dest = Path(root), Path(dest)
    for name in repo_files(root):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)
    dest.mkdir(parents=True, exist_ok=True)
    return dest


@contextlib.contextmanager
def applied(mutant: Mutant, scratch: Path | str):
    """Apply ``mutant`` to the copy at ``scratch`` for the ``with`` block, then restore it."""
    path = Path(scratch) / mutant.file
    before = path.read_bytes()
    original = mutant.original.encode("utf-8")
    count = before.count(original)
    if count != 1:
        raise CorpusError(f"{mutant.id}: `original` occurs {count} times in {mutant.file}")
    path.write_bytes(before.replace(original, mutant.replacement.encode("utf-8"), 1))
    try:
        yield path
    finally:
        path.write_bytes(before)


def scratch_env(scratch: Path | str) -> dict:
    """The environment for a run in ``scratch``: its own code first, no bytecode written."""
    scratch = Path(scratch)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(scratch), str(scratch / "scripts")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def imports_from(scratch: Path | str, package: str) -> str | None:
    """Where ``package`` is imported from inside ``scratch`` (None if not importable)."""
    code = f"import importlib.util as u; s = u.find_spec({package!r}); print(s.origin if s else '')"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=scratch,
        env=scratch_env(scratch),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return out or None


@dataclasses.dataclass
class Run:
    returncode: int | None  # None when the run timed out
    seconds: float
    output: str


def run_command(argv: Sequence[str], scratch: Path | str, timeout: float) -> Run:
    """Run ``argv`` in ``scratch``; on timeout kill its whole process group."""
    start = time.perf_counter()
    process = subprocess.Popen(
        list(argv),
        cwd=scratch,
        env=scratch_env(scratch),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
        code = process.returncode
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        code = None
    return Run(code, time.perf_counter() - start, output or "")


def pytest_argv(tests: Sequence[str]) -> list[str]:
    # one process (``-p no:xdist``: parity_tests/conftest.py adds ``-n auto`` otherwise),
    # since a mutant's few tests do not repay starting the suite's workers and ``--jobs``
    # already runs mutants side by side; without the project's addopts
    return [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "--no-header",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-o",
        "addopts=",
        *tests,
    ]


def report_argv(rows: Sequence[str]) -> list[str]:
    argv = [sys.executable, "scripts/parity.py"]
    for row in rows:
        argv += ["--filter", row]
    return argv


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _tests_status(mutant: Mutant, run: Run) -> str:
    if run.returncode is None:
        return TIMEOUT
    if run.returncode in (1, 2):  # failures, or a collection error the edit caused
        return NOT_EQUIVALENT if mutant.equivalent else KILLED
    if run.returncode == 0:
        return EQUIVALENT if mutant.equivalent else SURVIVED
    if run.returncode in (4, 5):  # usage error / nothing collected: the entry is wrong
        return BAD_TESTS
    return ERROR


def _report_status(run: Run) -> str:
    if run.returncode is None:
        return TIMEOUT
    return {1: KILLED, 0: SURVIVED, 2: BAD_TESTS}.get(run.returncode, ERROR)


def evaluate(mutant: Mutant, scratch: Path | str, *, timeout: float, report: bool) -> Result:
    """Apply ``mutant`` in ``scratch``, run its tests (and report rows), restore the file."""
    start = time.perf_counter()
    with applied(mutant, scratch):
        run = run_command(pytest_argv(mutant.tests), scratch, timeout)
        result = Result(mutant, _tests_status(mutant, run))
        if result.tests not in (KILLED, EQUIVALENT):
            result.detail = _tail(run.output)
        if report and mutant.parity:
            run = run_command(report_argv(mutant.parity), scratch, timeout)
            result.report = _report_status(run)
            if result.report != KILLED:
                result.detail = (result.detail + "\n" + _tail(run.output)).strip()
        elif report:
            result.report = NO_ROWS
    result.seconds = time.perf_counter() - start
    return result


def baseline(
    mutants: Sequence[Mutant], scratch: Path | str, *, timeout: float, report: bool
) -> list[str]:
    """Run every named test (and report row) on the unmutated copy; the problems found.

    A mutant only counts as killed if its tests pass without it.
    """
    problems = []
    tests = sorted({t for m in mutants for t in m.tests})
    if tests:
        run = run_command(pytest_argv(tests), scratch, timeout)
        if run.returncode != 0:
            problems.append(
                "the named tests do not pass on the unmutated code "
                f"(exit {run.returncode}):\n{_tail(run.output, 30)}"
            )
    rows = sorted({r for m in mutants for r in m.parity})
    if report and rows:
        run = run_command(report_argv(rows), scratch, timeout)
        if run.returncode != 0:
            problems.append(
                "the named parity rows do not pass on the unmutated code "
                f"(exit {run.returncode}):\n{_tail(run.output, 30)}"
            )
    return problems


def run_corpus(
    mutants: Sequence[Mutant],
    *,
    root: Path | str = REPO_ROOT,
    jobs: int = 1,
    timeout: float = 600.0,
    report: bool = False,
    check_baseline: bool = True,
    on_result: Callable[[Result], None] | None = None,
    check_names: Sequence[str] | None = None,
) -> tuple[list[Result], list[str]]:
    """Evaluate ``mutants`` in ``jobs`` scratch copies of ``root``.

    Returns:
      ``(results, problems)``: one ``Result`` per mutant in corpus order (stale ones
      with status ``STALE`` and the reason), and run-level problems (a failing
      baseline, imports resolving outside the copy). Results are empty when the
      baseline fails.
    """
    root = Path(root)
    results: dict[str, Result] = {}
    runnable = []
    names = report_check_names(root) if check_names is None else check_names
    for mutant in mutants:
        reason = stale_reason(mutant, root, names)
        if reason:
            results[mutant.id] = Result(mutant, STALE, report=NOT_RUN, detail=reason)
            if on_result:
                on_result(results[mutant.id])
        else:
            runnable.append(mutant)
    problems: list[str] = []
    if runnable:
        with tempfile.TemporaryDirectory(prefix="jaxgrad-mutants-") as tmp:
            copies: queue.Queue = queue.Queue()
            for index in range(max(1, min(jobs, len(runnable)))):
                copies.put(make_scratch(root, Path(tmp) / f"copy{index}"))
            first = copies.queue[0]
            for package in ("jaxgrad", "torchref"):
                if (root / package).is_dir():
                    origin = imports_from(first, package) or ""
                    if not Path(origin).resolve().is_relative_to(Path(first).resolve()):
                        problems.append(
                            f"`import {package}` resolves to {origin!r}, outside the "
                            "scratch copy; mutants would not be seen"
                        )
            if not problems and check_baseline:
                problems += baseline(runnable, first, timeout=timeout, report=report)
            if not problems:

                def work(mutant):
                    scratch = copies.get()
                    try:
                        return evaluate(mutant, scratch, timeout=timeout, report=report)
                    finally:
                        copies.put(scratch)

                with concurrent.futures.ThreadPoolExecutor(copies.qsize()) as pool:
                    for result in pool.map(work, runnable):
                        results[result.mutant.id] = result
                        if on_result:
                            on_result(result)
    ordered = [results[m.id] for m in mutants if m.id in results]
    return ordered, problems


# ---------------------------------------------------------------------- printing


def format_row(result: Result, *, report: bool) -> str:
    line = f"{result.mutant.id:<44} {result.tests:<10}"
    if report:
        line += f" {result.report:<10}"
    return line + f" {result.seconds:6.1f} s  {result.mutant.file}"


def header(*, report: bool) -> str:
    line = f"{'mutant':<44} {'tests':<10}"
    if report:
        line += f" {'report':<10}"
    return line + f" {'time':>8}  file"


def summary(results: Sequence[Result], *, report: bool) -> list[str]:
    """The kill rate of the suite (and of the parity report) as printed lines."""
    counted = [r for r in results if r.tests not in (STALE, EQUIVALENT)]
    killed = sum(r.tests == KILLED for r in counted)
    rate = 100.0 * killed / len(counted) if counted else 0.0
    lines = [f"suite killed {killed}/{len(counted)} mutants ({rate:.1f} %)"]
    extra = [
        f"{sum(r.tests == s for r in results)} {s.lower()}"
        for s in (EQUIVALENT, SURVIVED, STALE, TIMEOUT, BAD_TESTS, ERROR, NOT_EQUIVALENT)
        if any(r.tests == s for r in results)
    ]
    if extra:
        lines[0] += "; " + ", ".join(extra)
    if report:
        with_rows = [r for r in results if r.report not in (NO_ROWS, NOT_RUN)]
        report_killed = sum(r.report == KILLED for r in with_rows)
        lines.append(
            f"parity report killed {report_killed}/{len(with_rows)} mutants that "
            f"change a number it reports "
            f"({sum(r.report == NO_ROWS for r in results)} change none)"
        )
    return lines
