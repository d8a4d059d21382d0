#!/usr/bin/env python
"""The mutation run: does the test suite catch realistic convention bugs?

Each entry of the corpus in jaxgrad_dev/mutations/*.yaml is one small, exact edit
of a convention-critical line (Adam's eps inside the square root, a flipped freeze
mask, ...) and the tests that must catch it. Every entry is applied in a scratch
copy of the repository (the real tree is never edited), its tests run there with a
per-mutant timeout, the file is restored, and a kill table and rate are printed.
An entry whose snippet no longer occurs exactly once in the code is STALE: it is
named and fails the run, even when it is not among the sampled entries.

Exit status: 0 when every mutant run is killed (or survives with an argued
equivalence) and nothing is stale; 1 otherwise; 2 for bad arguments.

Examples:
  python scripts/mutants.py --list
  python scripts/mutants.py --only adam-eps-inside-sqrt
  python scripts/mutants.py --sample 3 --jobs 2
  python scripts/mutants.py --report            # also the parity report per mutant
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--only",
        metavar="ID",
        action="append",
        default=[],
        help="run only this entry (repeatable; comma-separated ids too)",
    )
    parser.add_argument(
        "--sample", metavar="N", type=int, help="run a fixed, deterministic sample of N entries"
    )
    parser.add_argument(
        "--jobs",
        metavar="N",
        type=int,
        default=1,
        help="scratch copies run in parallel (default 1)",
    )
    parser.add_argument(
        "--timeout",
        metavar="S",
        type=float,
        default=600.0,
        help="seconds per mutant run before it counts as TIMEOUT (default 600)",
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="also run the parity report rows an entry names; each must fail",
    )
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip running the named tests on the unmutated copy first",
    )
    parser.add_argument("--list", action="store_true", help="list the entries and exit")
    parser.add_argument(
        "--corpus", metavar="DIR", help="corpus directory (default jaxgrad_dev/mutations)"
    )
    parser.add_argument(
        "--root",
        metavar="DIR",
        default=str(ROOT),
        help="repository to mutate (default: this checkout)",
    )
    args = parser.parse_args(argv)
    only = [i for item in args.only for i in item.split(",") if i]
    if only and args.sample is not None:
        parser.error("--only and --sample exclude each other")
    if args.sample is not None and args.sample < 1:
        parser.error(f"--sample (={args.sample}) must be >= 1")
    if args.jobs < 1:
        parser.error(f"--jobs (={args.jobs}) must be >= 1")
    if not args.timeout > 0:
        parser.error(f"--timeout (={args.timeout}) must be > 0")
    root = Path(args.root)
    if not root.is_dir():
        parser.error(f"--root (={args.root!r}) is not a directory")
    if args.corpus is not None and not Path(args.corpus).is_dir():
        parser.error(f"--corpus (={args.corpus!r}) is not a directory")

    from jaxgrad_dev.mutations import corpus as mutation_corpus
    from jaxgrad_dev.mutations import runner

    try:
        entries = mutation_corpus.load_corpus(args.corpus or mutation_corpus.CORPUS_DIR)
        chosen = mutation_corpus.select(entries, only=only, sample=args.sample)
    except ValueError as exc:  # CorpusError is one
        print(f"mutants.py: {exc}", file=sys.stderr)
        return 2
    if args.list:
        for mutant in chosen:
            rows = f"  [report: {'; '.join(mutant.parity)}]" if mutant.parity else ""
            print(f"{mutant.id:<44} {mutant.file}{rows}\n    {mutant.why}")
        return 0

    # every entry is checked against the code, sampled or not: none goes stale silently
    names = mutation_corpus.report_check_names(root)
    stale = mutation_corpus.stale_entries([m for m in entries if m not in chosen], root, names)
    for mutant_id, reason in stale.items():
        print(f"STALE {mutant_id}: {reason}", flush=True)

    print(
        f"{len(chosen)} of {len(entries)} mutants, {args.jobs} job(s), "
        f"timeout {args.timeout:g} s{', with the parity report' if args.report else ''}",
        flush=True,
    )
    print(runner.header(report=args.report), flush=True)
    results, problems = runner.run_corpus(
        chosen,
        root=root,
        jobs=args.jobs,
        timeout=args.timeout,
        report=args.report,
        check_baseline=not args.no_baseline,
        check_names=names,
        on_result=lambda r: print(runner.format_row(r, report=args.report), flush=True),
    )
    for problem in problems:
        print(f"ERROR: {problem}", file=sys.stderr)
    if problems:
        return 1
    for result in results:
        if not result.ok:
            detail = result.detail.replace("\n", "\n    ")
            verdict = (
                f"tests {result.tests}, report {result.report}" if args.report else result.tests
            )
            print(
                f"\n{result.mutant.id} ({result.mutant.file}): {verdict}\n"
                f"    {result.mutant.why}\n    {detail}"
            )
    print()
    for line in runner.summary(results, report=args.report):
        print(line)
    if stale:
        print(
            f"{len(stale)} stale entr{'y' if len(stale) == 1 else 'ies'} outside the "
            f"selection: {', '.join(stale)}"
        )
    return 0 if all(r.ok for r in results) and not stale else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
