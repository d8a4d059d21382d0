#!/usr/bin/env python
"""Regenerate (or check) every documented command output in README.md and docs/*.md.

A documented output is a fenced block preceded by a marker comment:

    <!-- jaxgrad:run python scripts/NAME.py ARGS -->
    ```
    $ python scripts/NAME.py ARGS
    ...the output...
    ```

The script runs each command from the repository root (``python`` is this
interpreter) and replaces the block's body with its standard output, except for
lines that differ only in masked digits (below): those keep the documented text, so
timings measured on a quiet machine are not overwritten by a busy one's
(--refresh-masked rewrites them too). Options after a ``|`` in the marker,
comma-separated:

  excerpt    the block shows some of the output's lines, in order; a line `...`
             marks an omission. Regeneration refreshes each shown line (matched to
             the output with the masks below); a shown line the output no longer
             has is reported as drift, never dropped silently.
  rounding   also mask rounding-level magnitudes: numbers in scientific notation
             below 1e-4 (float32 and float64 error sizes, whose digits depend on the
             CPU's vector width and on thread timing).

--check regenerates nothing: it exits 1 and prints a diff when a block differs from
what its command prints now. The comparison masks what no machine can reproduce:
durations and rates (a number followed by s, ms, µs, min, ex/s, GFLOP/s, GB/s),
the seconds and examples/s columns of train.py's epoch table, and torch's thread
count; runs of spaces count as one (column widths follow the numbers). Everything
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(r"^<!-- jaxgrad:run (?P<command>python scripts/[\w-]+\.py[^|]*?)"
                    r"(?:\s*\|\s*(?P<options>[\w ,-]*?))?\s*-->\s*$")
OPTIONS = ("excerpt", "rounding")
NUMBER = r"-?\d[\d,]*(?:\.\d+)?"
MASKS = [  # (what, pattern, replacement): applied before every comparison
    ("durations", re.compile(rf"{NUMBER}\s?(?:s|ms|µs|us|min)\b"), "<time>"),
    ("rates", re.compile(rf"{NUMBER}\s?(?:ex/s|GFLOP/s|GB/s)"), "<rate>"),
    ("train.py epoch table: seconds, ex/s", re.compile(rf"(%\s+){NUMBER}(\s+){NUMBER}$"),
     r"\1<time>\2<rate>"),
    ("torch threads", re.compile(r"\b\d+ threads\b"), "<n> threads"),
]
ROUNDING = re.compile(r"-?\d(?:\.\d+)?e-(?:0[5-9]|[1-9]\d)\b")
ELLIPSIS = "..."


@dataclasses.dataclass
class Block:
    path: str
    marker_line: int  # 0-based index of the marker comment
    command: str
    options: tuple[str, ...]
    body: list[str]  # the lines after `$ command`, before the closing fence

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
            raise Malformed(f"{path}:{i + 1}: unknown option {unknown[0]!r} "
                            f"(known: {', '.join(OPTIONS)})")
        if i + 2 >= len(lines) or not lines[i + 1].startswith("```") \
                or lines[i + 2] != f"$ {command}":
            raise Malformed(f"{path}:{i + 1}: the marker must be followed by a ``` fence "
                            f"whose first line is '$ {command}'")
        end = next((j for j in range(i + 3, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise Malformed(f"{path}:{i + 1}: the block is never closed")
        blocks.append(Block(path, i, command, options, lines[i + 3:end]))
    return blocks


def mask(line: str, rounding: bool) -> str:
    for _, pattern, replacement in MASKS:
        line = pattern.sub(replacement, line)
    if rounding:
        line = ROUNDING.sub("<rounding>", line)
    return " ".join(line.split())


def run(command: str) -> tuple[int, list[str], str]:
    """``(exit status, stdout lines, stderr)`` of a documented command, from the root."""
    argv = shlex.split(command)
    argv[0] = sys.executable
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    lines = [line.rstrip() for line in proc.stdout.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return proc.returncode, lines, proc.stderr


def regenerate(block: Block, output: list[str], *,
               refresh_masked: bool = False) -> tuple[list[str], list[str]]:
    """``(new body, shown lines the output no longer has)``.

    A documented line equal to the output's line up to the masks is kept as it is
    unless ``refresh_masked``.
    """
    rounding = "rounding" in block.options
    if "excerpt" not in block.options:
        if refresh_masked:
            return output, []
        old = [mask(line, rounding) for line in block.body]
        new_masked = [mask(line, rounding) for line in output]
        matcher = difflib.SequenceMatcher(a=old, b=new_masked, autojunk=False)
        new = []
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            new += block.body[i1:i2] if tag == "equal" else output[j1:j2]
        return new, []
    new, missing, at = [], [], 0
    wanted = [mask(line, rounding) for line in output]
    for line in block.body:
        if line.strip() == ELLIPSIS:
            new.append(line)
            continue
        key = mask(line, rounding)
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
    rounding = "rounding" in block.options
    old_masked = [mask(line, rounding) for line in block.body]
    new_masked = [mask(line, rounding) for line in new]
    if old_masked == new_masked:
        return ""
    return "\n".join(difflib.unified_diff(block.body, new, "documented", "printed now",
                                          lineterm="", n=1)) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", metavar="FILE",
                        help="Markdown files (default: README.md and docs/*.md)")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 with a diff when a block drifted")
    parser.add_argument("--only", metavar="PATTERN", action="append", default=[],
                        help="only blocks whose command matches this regular expression "
                             "(repeatable)")
    parser.add_argument("--refresh-masked", action="store_true",
                        help="also rewrite lines that differ only in masked digits (timings, "
                             "rounding): for a run on a quiet machine")
    parser.add_argument("--list", action="store_true", help="list the blocks and exit")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    files = args.files or [os.path.join(ROOT, "README.md"),
                           *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
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
    if not blocks:
        parser.error("no documented command matches" + (f" --only {args.only}" if args.only else ""))
    if args.list:
        for block in blocks:
            print(f"{block.where:<28} {block.command}"
                  + (f"   [{', '.join(block.options)}]" if block.options else ""))
        return 0

    outputs, failed, drifted = {}, False, 0
    for block in blocks:
        if block.command not in outputs:
            print(f"running {block.command}", file=sys.stderr, flush=True)
            outputs[block.command] = run(block.command)
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
            print(f"{block.where}: `{block.command}` no longer prints (kept, fix by hand):\n"
                  + difference)
            failed = True
        lines = contents[block.path]
        start = block.marker_line + 3
        lines[start:start + len(block.body)] = new
        offset = len(new) - len(block.body)
        for other in blocks:  # later blocks of the same file moved
            if other.path == block.path and other.marker_line > block.marker_line:
                other.marker_line += offset
    if args.check:
        print(f"{len(blocks) - drifted} of {len(blocks)} documented outputs up to date"
              + (f"; {drifted} drifted" if drifted else ""))
        return 1 if drifted or failed else 0
    for path in sorted({b.path for b in blocks}):
        with open(path, encoding="utf-8") as handle:
            if handle.read() != originals[path]:  # edited while the commands ran
                print(f"{path} changed while the commands ran; not overwritten, run again")
                failed = True
                continue
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("\n".join(contents[path]))
    print(f"regenerated {len(blocks)} documented outputs in "
          f"{len({b.path for b in blocks})} files")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
