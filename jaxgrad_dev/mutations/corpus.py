"""Read and check the mutation corpus (the format: this package's docstring).

``load_corpus`` validates every entry and reports all problems at once;
``stale_reason`` says why an entry no longer fits the code (its ``original`` does not
occur exactly once, a test it names is gone, or a report row it names no longer
exists: ``report_check_names`` lists them); ``select`` picks ``--only`` ids or a fixed
sample.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml

CORPUS_DIR = Path(__file__).resolve().parent
REPO_ROOT = CORPUS_DIR.parent.parent
REQUIRED = ("id", "file", "original", "replacement", "tests", "why")
OPTIONAL = ("parity", "equivalent")
_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


class CorpusError(ValueError):
    """A corpus file that cannot be read, or entries with missing/unknown/bad fields."""


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One corpus entry (see the package docstring for the fields)."""

    id: str
    file: str
    original: str
    replacement: str
    tests: tuple
    why: str
    parity: tuple = ()
    equivalent: str | None = None
    source: str = ""  # the corpus file it came from


def _check_entry(entry, where: str) -> list[str]:
    if not isinstance(entry, dict):
        return [f"{where}: an entry must be a mapping, got {type(entry).__name__}"]
    problems = []
    missing = [k for k in REQUIRED if k not in entry]
    unknown = [k for k in entry if k not in REQUIRED + OPTIONAL]
    if missing:
        problems.append(f"{where}: missing {', '.join(missing)}")
    if unknown:
        problems.append(
            f"{where}: unknown keys {', '.join(map(str, unknown))} "
            f"(allowed: {', '.join(REQUIRED + OPTIONAL)})"
        )
    for key in ("id", "file", "original", "why"):
        if key in entry and (not isinstance(entry[key], str) or not entry[key].strip()):
            problems.append(f"{where}: `{key}` must be a non-empty string")
    if "id" in entry and isinstance(entry["id"], str) and not _ID.match(entry["id"]):
        problems.append(f"{where}: `id` {entry['id']!r} must be kebab-case (a-z, 0-9, -)")
    if "replacement" in entry:
        if not isinstance(entry["replacement"], str):
            problems.append(f"{where}: `replacement` must be a string")
        elif entry["replacement"] == entry.get("original"):
            problems.append(f"{where}: `replacement` equals `original`; nothing is mutated")
    for key, required in (("tests", True), ("parity", False)):
        value = entry.get(key, [] if not required else None)
        if key in entry or required:
            if (
                not isinstance(value, list)
                or not all(isinstance(t, str) and t for t in value)
                or (required and not value)
            ):
                problems.append(
                    f"{where}: `{key}` must be a {'non-empty ' if required else ''}list of strings"
                )
    if "equivalent" in entry and (
        not isinstance(entry["equivalent"], str) or not entry["equivalent"].strip()
    ):
        problems.append(f"{where}: `equivalent` must be the argument, a non-empty string")
    return problems


def load_corpus(directory: Path | str = CORPUS_DIR) -> list[Mutant]:
    """Every entry of every ``*.yaml`` file in ``directory``, files in name order.

    Raises:
      CorpusError: listing every unreadable file, bad entry and duplicate id at once.
    """
    directory = Path(directory)
    mutants, problems, seen = [], [], {}
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise CorpusError(f"no *.yaml corpus files in {directory}")
    for path in files:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            problems.append(f"{path.name}: cannot read ({exc})")
            continue
        if data is None:
            continue
        if not isinstance(data, list):
            problems.append(f"{path.name}: must hold a list of entries, got {type(data).__name__}")
            continue
        for index, entry in enumerate(data):
            label = entry.get("id", f"#{index + 1}") if isinstance(entry, dict) else f"#{index + 1}"
            entry_problems = _check_entry(entry, f"{path.name} entry {label}")
            if entry_problems:
                problems.extend(entry_problems)
                continue
            if entry["id"] in seen:
                problems.append(
                    f"{path.name}: id {entry['id']!r} is also used in {seen[entry['id']]}"
                )
                continue
            seen[entry["id"]] = path.name
            mutants.append(
                Mutant(
                    id=entry["id"],
                    file=entry["file"],
                    original=entry["original"],
                    replacement=entry["replacement"],
                    tests=tuple(entry["tests"]),
                    why=entry["why"],
                    parity=tuple(entry.get("parity", ())),
                    equivalent=entry.get("equivalent"),
                    source=path.name,
                )
            )
    if problems:
        raise CorpusError("mutation corpus errors:\n  " + "\n  ".join(problems))
    return mutants


def _test_exists(node: str, root: Path) -> str | None:
    """None when the test file exists and defines every name in the node id."""
    file, *names = node.split("::")
    path = root / file
    if not path.is_file():
        return f"test file {file} does not exist"
    text = path.read_text(encoding="utf-8")
    for name in names:
        bare = name.split("[", 1)[0]
        if not re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(bare)}\b", text, re.M):
            return f"test {bare} is not defined in {file}"
    return None


def report_check_names(root: Path | str = REPO_ROOT) -> list[str]:
    """The names of the parity report's checks at ``root`` (``scripts/parity.py --list``,
    run there, so a ``--root`` elsewhere is read as it is)."""
    if not (Path(root) / "scripts" / "parity.py").is_file():
        return []  # no report there: an entry naming a row is then stale
    run = subprocess.run(
        [sys.executable, "scripts/parity.py", "--list"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0:
        raise CorpusError(f"scripts/parity.py --list failed in {root}:\n{run.stderr[-2000:]}")
    # each line is the name padded to 44 columns, then the dtype
    return [line.rsplit(None, 1)[0].rstrip() for line in run.stdout.splitlines() if line.strip()]


def stale_reason(
    mutant: Mutant, root: Path | str = REPO_ROOT, check_names: Sequence[str] | None = None
) -> str | None:
    """Why ``mutant`` no longer fits the code at ``root``, or None when it applies.

    ``check_names`` (``report_check_names(root)``): when given, every report row the
    entry names must still match a check (``--filter`` is a substring match)."""
    root = Path(root)
    path = root / mutant.file
    if not path.is_file():
        return f"{mutant.file} does not exist"
    count = path.read_bytes().count(mutant.original.encode("utf-8"))
    if count != 1:
        where = "no longer occurs" if count == 0 else f"occurs {count} times"
        return f"`original` {where} in {mutant.file} (it must occur exactly once)"
    for node in mutant.tests:
        reason = _test_exists(node, root)
        if reason:
            return reason
    for row in mutant.parity if check_names is not None else ():
        if not any(row in name for name in check_names):
            return f"report row {row!r} matches no check of scripts/parity.py --list"
    return None


def select(
    mutants: Sequence[Mutant], *, only: Iterable[str] = (), sample: int | None = None
) -> list[Mutant]:
    """The mutants named by ``only``, or a fixed sample of ``sample``, in corpus order.

    The sample is the ``sample`` ids with the smallest sha256: the same every run,
    and adding an entry changes it by at most one member.

    Raises:
      ValueError: an ``only`` id not in the corpus, or a bad ``sample``.
    """
    only = list(only)
    ids = [m.id for m in mutants]
    if only:
        unknown = [i for i in only if i not in ids]
        if unknown:
            raise ValueError(f"`--only` ids {unknown} are not in the corpus (see --list).")
        return [m for m in mutants if m.id in only]
    if sample is None:
        return list(mutants)
    if not isinstance(sample, int) or sample < 1:
        raise ValueError(f"`sample` (={sample!r}) must be a positive int.")
    chosen = set(sorted(ids, key=lambda i: hashlib.sha256(i.encode()).hexdigest())[:sample])
    return [m for m in mutants if m.id in chosen]


def stale_entries(
    mutants: Sequence[Mutant],
    root: Path | str = REPO_ROOT,
    check_names: Sequence[str] | None = None,
) -> dict[str, str]:
    """``{id: reason}`` for every entry that no longer fits the code at ``root``."""
    return {m.id: r for m in mutants if (r := stale_reason(m, root, check_names))}
