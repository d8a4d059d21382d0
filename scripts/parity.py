#!/usr/bin/env python
"""The parity report: every jaxgrad-vs-PyTorch check, one row each.

Each row builds the same computation in both frameworks on copied weights and
compares every output, loss, gradient (and, where the check says, optimizer state)
leaf by leaf at the tolerance tier of the parity policy (README, "Tolerances"): float64 at
rtol 1e-10 / atol 1e-12, float32 at rtol 1e-5 / atol 1e-6·max|reference|.

Exit status: 0 when every check passes, 1 when any fails (its per-leaf table is
printed), 2 for bad arguments.

Examples:
  python scripts/parity.py
  python scripts/parity.py --filter sigmoid --verbose
  python scripts/parity.py --json parity.json
  python scripts/parity.py --html parity.html
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import _cli


def all_checks() -> list:
    """Every check in ``scripts/parity_checks``, with torch pinned to one thread first
    (a loaded machine cannot then slow the report tenfold). Imported only here, after
    the arguments are parsed: ``--help`` needs neither torch nor jax."""
    import torch

    torch.set_num_threads(1)
    from parity_checks import all_checks as collect

    return collect()


def _fmt(value: float) -> str:
    return "-" if value != value else f"{value:.2e}"


def run(checks, *, verbose: bool = False, out=None) -> list[dict]:
    """Run ``checks``, print one row each as it finishes, return the rows as dicts."""
    out = sys.stdout if out is None else out
    header = f"{'check':<44} {'dtype':<8} {'max abs err':>11} {'max rel err':>11}  result"
    print(header, file=out)
    print("-" * len(header), file=out)
    rows = []
    for check in checks:
        start = time.perf_counter()
        try:
            report = check.run()
            error = None
        except Exception as exc:  # a crashing check is a failing row, not a crash
            report, error = None, f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - start
        passed = error is None and report.passed
        row = {
            "check": check.name,
            "area": check.area,
            "dtype": check.dtype,
            "max_abs_err": None if report is None else _none_if_nan(report.max_abs_err),
            "max_rel_err": None if report is None else _none_if_nan(report.max_rel_err),
            "passed": passed,
            "seconds": round(seconds, 3),
            "error": error,
            "leaves": None if report is None else report.to_dict()["leaves"],
        }
        rows.append(row)
        abs_err = "-" if report is None else _fmt(report.max_abs_err)
        rel_err = "-" if report is None else _fmt(report.max_rel_err)
        print(
            f"{check.name:<44} {check.dtype:<8} {abs_err:>11} {rel_err:>11}  "
            f"{'PASS' if passed else 'FAIL'}",
            file=out,
            flush=True,
        )
        if not passed or verbose:
            detail = error if report is None else report.table()
            print("    " + detail.replace("\n", "\n    "), file=out)
    return rows


def _none_if_nan(value):
    return None if value != value else value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write every row (with per-leaf errors) as JSON to PATH"
    )
    parser.add_argument(
        "--html",
        metavar="PATH",
        help="also write the report as one "
        "self-contained HTML page to PATH (failures first, per-leaf bars)",
    )
    parser.add_argument(
        "--filter",
        metavar="TEXT",
        action="append",
        default=[],
        help="run only checks whose name contains TEXT (repeatable)",
    )
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print the per-leaf table of every check, not only failures",
    )
    args = parser.parse_args(argv)
    _cli.output_file(parser, "--json", args.json)
    _cli.output_file(parser, "--html", args.html)
    checks = all_checks()
    if args.filter:
        checks = [c for c in checks if any(f in c.name for f in args.filter)]
        if not checks:
            parser.error(f"no check matches --filter {args.filter}; see --list")
    if args.list:
        for check in checks:
            print(f"{check.name:<44} {check.dtype}")
        return 0

    start = time.perf_counter()
    rows = run(checks, verbose=args.verbose)
    failed = [r for r in rows if not r["passed"]]
    elapsed = time.perf_counter() - start
    print(
        f"\n{len(rows) - len(failed)} passed, {len(failed)} failed "
        f"({len(rows)} checks, {elapsed:.1f} s)"
    )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"passed": not failed, "checks": rows}, handle, indent=2)
        print(f"wrote {args.json}")
    if args.html:
        import torch

        from jaxgrad.html.report import write_parity_report

        write_parity_report(args.html, rows, versions={"torch": torch.__version__}, seconds=elapsed)
        print(f"wrote {args.html}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
