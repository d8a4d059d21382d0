#!/usr/bin/env python
"""Regenerate (or check) every documented command output in README.md and docs/*.md.

A documented output is a fenced block preceded by a marker comment:

    <!-- jaxgrad:run python scripts/NAME.py ARGS -->
    ```
    $ python scripts/NAME.py ARGS
    ...the output...
    ```

The script runs each command from the repository root (``python``, or
``.venv/bin/python`` as the README writes it for a fresh shell, is this interpreter)
and replaces the block's body with its standard output, except for lines that differ
only in masked digits (below): those keep the documented text, so
timings measured on a quiet machine are not overwritten by a busy one's
(--refresh-masked rewrites them too). Options after a ``|`` in the marker,
comma-separated:

  excerpt    the block shows some of the output's lines, in order; a line `...`
             marks an omission. Regeneration refreshes each shown line (matched to
             the output with the masks below); a shown line the output no longer
             has is reported as drift, never dropped silently.
  rounding   compare at the tier of the arithmetic, not digit by digit (whose last
             digits depend on the CPU's vector width and on thread timing):
             - error sizes below 1e-4 in scientific notation, and a zero written
               that way (0.0e+00), are masked;
             - on a line that carries a PASS verdict, every error size in scientific
               notation is masked: the verdict, compared exactly, is the tier's
               judgement of them (a float32 row's largest relative error sits on
               its smallest element and moves with every ulp);
             - a number printed with more significant digits than a float32 holds
               (8 or more: a float32 loss at 10 digits) matches one within the
               float32 tier, relative 1e-5.
  measured   every number is a measurement of the machine that ran it, bounded by no
             tier: timings and speed ratios (bench.py), and float32 training runs of
             hundreds of steps, whose rounding differences the dynamics amplify until
             two CPUs end an epoch on different losses. Numbers are masked, and so is
             a goal's met / NOT met; the rows, columns, names and every other word
             must still match.

--check regenerates nothing: it exits 1 and prints a diff when a block differs from
what its command prints now, and first checks every command the pages write (in shell
code blocks and inline code, not only the marked ones) as a user runs it after the
README's install (scripts/_doc_commands.py): Python through .venv/bin/python, a script
that exists, arguments that script's own parser accepts (parsed, not run); a problem is
one line naming file, line, command and argparse's error, and exits 1. It leaves the
repository as it found it (a file inside the repository that a command names as an argument, such as `--plot docs/x.png` or
`--out explorer.html`, is put back as it was, or removed if the run created it). The comparison masks what no machine can reproduce:
durations and rates (a number followed by s, ms, µs, min, ex/s, GFLOP/s, GB/s),
the seconds and examples/s columns of train.py's epoch table, torch's thread
count, and the strategy train.py chose by timing each on the machine; runs of spaces count as one (column widths follow the numbers). Everything
else — names, verdicts, every value above the rounding level — must match.

Examples:
  python scripts/regen_docs.py                          # rewrite every block
  python scripts/regen_docs.py --check                  # exit 1 on drift
  python scripts/regen_docs.py --refresh-masked         # also new timings (quiet machine)
  python scripts/regen_docs.py --only hand_gradients    # blocks whose command matches
  python scripts/regen_docs.py --list

Exit status: 0 up to date (or rewritten), 1 drift (--check) or a command failed,
2 bad arguments or a malformed block.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import glob
import os
import re
import shlex
import subprocess
import sys

import _doc_commands

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(
    r"^<!-- jaxgrad:run (?P<command>(?:\.venv/bin/)?python scripts/[\w-]+\.py"
    r"[^|]*?)"
    r"(?:\s*\|\s*(?P<options>[\w ,-]*?))?\s*-->\s*$"
)
OPTIONS = ("excerpt", "rounding", "measured")
NUMBER = r"-?\d[\d,]*(?:\.\d+)?"
MASKS = [  # (what, pattern, replacement): applied before every comparison
    ("durations", re.compile(rf"{NUMBER}\s?(?:s|ms|µs|us|min)\b"), "<time>"),
    ("rates", re.compile(rf"{NUMBER}\s?(?:ex/s|GFLOP/s|GB/s)"), "<rate>"),
    (
        "train.py epoch table: seconds, ex/s",
        re.compile(rf"(%\s+){NUMBER}(\s+){NUMBER}$"),
        r"\1<time>\2<rate>",
    ),
    ("torch threads", re.compile(r"\b\d+ threads\b"), "<n> threads"),
    (
        "train.py's strategy, chosen by timing it on this machine",
        re.compile(r"(jax strategy: )\S+ \((?:probed|cached|forced).*$"),
        r"\1<measured>",
    ),
]
ROUNDING = re.compile(r"-?\d(?:\.\d+)?e-(?:0[5-9]|[1-9]\d)\b|\b0(?:\.0+)?e[+-]00\b")
ERROR_SIZE = re.compile(r"-?\d(?:\.\d+)?e-\d+\b")  # any error size, where a verdict judged it
VERDICT = re.compile(r"\bPASS\b")
LONG_DECIMAL = re.compile(r"-?\d+\.\d+")
FLOAT32_DIGITS, FLOAT32_RTOL = 8, 1e-5
MEASURED = [
    (re.compile(r"\bnan\b|\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"), "<n>"),
    (re.compile(r"\b(?:NOT )?met\b"), "<goal>"),
    (re.compile(r"%\*"), "%"),
]  # bench.py's mark on a noisy peak probe's column
ELLIPSIS = "..."


@dataclasses.dataclass
class Block:
    path: str
    marker_line: int  # 0-based index of the marker comment
    command: str
    options: tuple[str, ...]
    body: list[str]  # the lines after `$ command`, before the closing fence

    def key(self, line: str) -> Line:
        """``line`` as this block's options compare it."""
        return Line(line, "rounding" in self.options, "measured" in self.options)

    @property
    def where(self) -> str:
        return f"{os.path.relpath(self.path, ROOT)}:{self.marker_line + 1}"


class Malformed(ValueError):
    pass


def find_blocks(path: str, lines: list[str]) -> list[Block]:
    """Every marked block of a file (``lines`` without newlines)."""
    blocks = []
    for i, line in enumerate(lines):
        if not line.startswith("<!-- jaxgrad:run"):  # prose may quote the marker
            continue
        match = MARKER.match(line)
        if not match:
            raise Malformed(f"{path}:{i + 1}: unreadable marker {line!r}")
        command = match["command"].strip()
        options = tuple(o.strip() for o in (match["options"] or "").split(",") if o.strip())
        unknown = [o for o in options if o not in OPTIONS]
        if unknown:
            raise Malformed(
                f"{path}:{i + 1}: unknown option {unknown[0]!r} (known: {', '.join(OPTIONS)})"
            )
        if (
            i + 2 >= len(lines)
            or not lines[i + 1].startswith("```")
            or lines[i + 2] != f"$ {command}"
        ):
            raise Malformed(
                f"{path}:{i + 1}: the marker must be followed by a ``` fence "
                f"whose first line is '$ {command}'"
            )
        end = next((j for j in range(i + 3, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise Malformed(f"{path}:{i + 1}: the block is never closed")
        blocks.append(Block(path, i, command, options, lines[i + 3 : end]))
    return blocks


def mask(line: str, rounding: bool, measured: bool = False) -> str:
    for _, pattern, replacement in MASKS:
        line = pattern.sub(replacement, line)
    if measured:
        for pattern, replacement in MEASURED:
            line = pattern.sub(replacement, line)
    if rounding:
        line = ROUNDING.sub("<rounding>", line)
        if VERDICT.search(line):
            line = ERROR_SIZE.sub("<rounding>", line)
    return " ".join(line.split())


def _significant(number: str) -> int:
    return len(number.lstrip("-").replace(".", "").lstrip("0"))


class Line:
    """A line as the comparison sees it: masked, and in ``rounding`` blocks with the
    float32-precision numbers compared at the float32 tier (equal lines hash alike)."""

    def __init__(self, line: str, rounding: bool, measured: bool = False):
        masked = mask(line, rounding, measured)
        self.numbers: list[float] = []
        if rounding:

            def take(match):
                if _significant(match[0]) < FLOAT32_DIGITS:
                    return match[0]
                self.numbers.append(float(match[0]))
                return "<float32>"

            masked = LONG_DECIMAL.sub(take, masked)
        self.skeleton = masked

    def __hash__(self):
        return hash(self.skeleton)

    def __eq__(self, other):
        return (
            isinstance(other, Line)
            and self.skeleton == other.skeleton
            and all(
                abs(a - b) <= FLOAT32_RTOL * max(abs(a), abs(b))
                for a, b in zip(self.numbers, other.numbers)
            )
        )


def run(command: str) -> tuple[int, list[str], str]:
    """``(exit status, stdout lines, stderr)`` of a documented command, from the root."""
    argv = shlex.split(command)
    argv[0] = sys.executable
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    lines = [line.rstrip() for line in proc.stdout.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return proc.returncode, lines, proc.stderr


def named_files(command: str) -> list[str]:
    """Files inside the repository that ``command`` names as arguments (it may write them)."""
    paths = []
    for token in shlex.split(command)[2:]:
        if token.startswith("-") or not os.path.splitext(token)[1]:
            continue
        root = os.path.realpath(ROOT)
        path = os.path.realpath(os.path.join(root, token))
        if path.startswith(root + os.sep) and not os.path.isdir(path):
            paths.append(path)
    return paths


def run_leaving_files(command: str) -> tuple[int, list[str], str]:
    """``run(command)``, then every file it names put back as it was before (--check)."""
    saved = {}
    for path in named_files(command):
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                saved[path] = handle.read()
        else:
            saved[path] = None
    try:
        return run(command)
    finally:
        for path, content in saved.items():
            if content is None:
                if os.path.isfile(path):
                    os.remove(path)
            else:
                with open(path, "wb") as handle:
                    handle.write(content)


def regenerate(
    block: Block, output: list[str], *, refresh_masked: bool = False
) -> tuple[list[str], list[str]]:
    """``(new body, shown lines the output no longer has)``.

    A documented line equal to the output's line up to the masks is kept as it is
    unless ``refresh_masked``.
    """
    if "excerpt" not in block.options:
        if refresh_masked:
            return output, []
        old = [block.key(line) for line in block.body]
        new_masked = [block.key(line) for line in output]
        matcher = difflib.SequenceMatcher(a=old, b=new_masked, autojunk=False)
        new = []
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            new += block.body[i1:i2] if tag == "equal" else output[j1:j2]
        return new, []
    new, missing, at = [], [], 0
    wanted = [block.key(line) for line in output]
    for line in block.body:
        if line.strip() == ELLIPSIS:
            new.append(line)
            continue
        key = block.key(line)
        found = next((k for k in range(at, len(output)) if wanted[k] == key), None)
        if found is None:
            missing.append(line)
            new.append(line)
        else:
            new.append(output[found] if refresh_masked else line)
            at = found + 1
    return new, missing


def drift(block: Block, new: list[str], missing: list[str]) -> str:
    """A readable description of how ``block`` differs from ``new`` (empty: no drift)."""
    if "excerpt" in block.options:
        return "".join(f"  no longer printed: {line}\n" for line in missing)
    old_masked = [block.key(line) for line in block.body]
    new_masked = [block.key(line) for line in new]
    if old_masked == new_masked:
        return ""
    return (
        "\n".join(
            difflib.unified_diff(block.body, new, "documented", "printed now", lineterm="", n=1)
        )
        + "\n"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "files", nargs="*", metavar="FILE", help="Markdown files (default: README.md and docs/*.md)"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 with a diff when a block drifted",
    )
    parser.add_argument(
        "--only",
        metavar="PATTERN",
        action="append",
        default=[],
        help="only blocks whose command matches this regular expression (repeatable)",
    )
    parser.add_argument(
        "--refresh-masked",
        action="store_true",
        help="also rewrite lines that differ only in masked digits (timings, "
        "rounding): for a run on a quiet machine",
    )
    parser.add_argument("--list", action="store_true", help="list the blocks and exit")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    files = args.files or [
        os.path.join(ROOT, "README.md"),
        *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))),
    ]
    for path in files:
        if not os.path.isfile(path):
            parser.error(f"{path}: no such file")
    try:
        patterns = [re.compile(p) for p in args.only]
    except re.error as exc:
        parser.error(f"--only: not a regular expression ({exc})")
    contents, originals, blocks = {}, {}, []
    try:
        for path in files:
            with open(path, encoding="utf-8") as handle:
                originals[path] = handle.read()
            contents[path] = originals[path].split("\n")
            blocks += find_blocks(path, contents[path])
    except Malformed as exc:
        parser.error(str(exc))
    blocks = [b for b in blocks if not patterns or any(p.search(b.command) for p in patterns)]
    commands, wrong = 0, []
    if args.check and not args.list:  # every command as written, before the slow part
        commands, wrong = _doc_commands.check(
            files, only=(lambda text: any(p.search(text) for p in patterns)) if patterns else None
        )
        for problem in wrong:
            print(problem)
        print(
            f"{commands} documented commands checked: "
            + (f"{len(wrong)} problems" if wrong else "all run as written"),
            flush=True,
        )
    if not blocks and not commands:
        parser.error(
            "no documented command matches" + (f" --only {args.only}" if args.only else "")
        )
    if args.list:
        for block in blocks:
            print(
                f"{block.where:<28} {block.command}"
                + (f"   [{', '.join(block.options)}]" if block.options else "")
            )
        return 0

    outputs, failed, drifted = {}, False, 0
    for block in blocks:
        if block.command not in outputs:
            print(f"running {block.command}", file=sys.stderr, flush=True)
            outputs[block.command] = (run_leaving_files if args.check else run)(block.command)
        status, output, stderr = outputs[block.command]
        if status != 0:
            print(f"{block.where}: `{block.command}` exited {status}:\n{stderr[-2000:]}")
            failed = True
            continue
        new, missing = regenerate(block, output, refresh_masked=args.refresh_masked)
        difference = drift(block, new, missing)
        if args.check:
            if difference:
                drifted += 1
                print(f"{block.where}: `{block.command}` drifted:\n{difference}")
            continue
        if missing:
            print(
                f"{block.where}: `{block.command}` no longer prints (kept, fix by hand):\n"
                + difference
            )
            failed = True
        lines = contents[block.path]
        start = block.marker_line + 3
        lines[start : start + len(block.body)] = new
        offset = len(new) - len(block.body)
        for other in blocks:  # later blocks of the same file moved
            if other.path == block.path and other.marker_line > block.marker_line:
                other.marker_line += offset
    if args.check:
        print(
            f"{len(blocks) - drifted} of {len(blocks)} documented outputs up to date"
            + (f"; {drifted} drifted" if drifted else "")
        )
        return 1 if drifted or failed or wrong else 0
    for path in sorted({b.path for b in blocks}):
        with open(path, encoding="utf-8") as handle:
            if handle.read() != originals[path]:  # edited while the commands ran
                print(f"{path} changed while the commands ran; not overwritten, run again")
                failed = True
                continue
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("\n".join(contents[path]))
    print(f"regenerated {len(blocks)} documented outputs in {len({b.path for b in blocks})} files")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
