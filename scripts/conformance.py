#!/usr/bin/env python
"""Conformance with PyTorch's own module tests: module_db samples, per class.

For every class jaxgrad supports that PyTorch's ``module_db`` describes, runs each of
its samples (float64; training mode, and evaluation mode too where module_db marks
the class ``train_and_eval_differ``, as torch's own suite runs them; ``--all-modes``
runs both everywhere) in both frameworks and compares
outputs, input and parameter gradients and new buffers at the float64 tier (rtol
1e-10, atol 1e-12). An evaluation-mode sample on which jaxgrad's twin runs the same
program as on a training-mode sample that passed (its traced jaxpr), and on which
torch's evaluation and training results agree, is checked on torch's side only
(``--no-reuse`` runs it in full too). Prints per class the samples, how many pass, how many jaxgrad
refuses (naming the argument) or skips (with the reason), how many of torch's error
samples (``module_error_inputs_func``: inputs torch rejects) jaxgrad rejects too, then
the totals, and the supported classes module_db has no entry for.

``--dtype float32`` runs every sample in float32 on both sides instead (the module
``.float()``, floating inputs cast, jaxgrad with x64 off) and judges it with the
calibrated float32 verdict: torch's float64 run of the same sample (a ``.double()``
copy of the module on the same values, the same cotangent) is the float64 answer, and
``jaxgrad.parity.compare(..., reference64=...)`` passes a leaf outside the float32 tier
when jaxgrad is within the tier of that answer or within 5x torch float32's own distance
from it. Each class's row then says how many leaves of its passed samples passed by
which rule; a failing sample is listed with its leaves and headrooms. Every
evaluation-mode sample runs in full in this mode (float32 rounding depends on the values).

Exit status: 0 when no sample fails, 1 otherwise, 2 for bad arguments.

Examples:
  python scripts/conformance.py
  python scripts/conformance.py --class Conv2d --verbose
  python scripts/conformance.py --dtype float32
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--class",
        dest="classes",
        metavar="NAME",
        action="append",
        default=[],
        help="run only this class (repeatable)",
    )
    parser.add_argument(
        "--all-modes",
        action="store_true",
        help="run evaluation mode for every class, not only where module_db "
        "says training and evaluation differ",
    )
    parser.add_argument(
        "--no-reuse",
        action="store_true",
        help="run every evaluation-mode sample in both frameworks, also "
        "where the twin's program was already held to torch in training mode",
    )
    parser.add_argument(
        "--dtype",
        choices=("float64", "float32"),
        default="float64",
        help="float64 (the default, at the float64 tier) or float32 on both "
        "sides, judged against torch's float64 run of each sample",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="print every sample's outcome, not only failures"
    )
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from jaxgrad.nn import SUPPORTED
    from jaxgrad_dev import module_db as harness

    float32 = args.dtype == "float32"

    names = sorted(harness.REGISTRY)
    unknown = [n for n in args.classes if n not in harness.REGISTRY]
    if unknown:
        parser.error(
            f"--class {', '.join(unknown)}: not registered; registered classes: {', '.join(names)}"
        )
    if args.classes:
        names = [n for n in names if n in args.classes]

    start = time.perf_counter()
    infos = harness.module_infos()
    header = (
        f"{'class':<20} {'modes':<10} {'samples':>7} {'passed':>6} {'refused':>7} "
        f"{'skipped':>7} {'failed':>6} {'errors':>7}  refused / skipped for"
    )
    print(header)
    print("-" * len(header))
    totals = dict.fromkeys((*harness.STATUSES, "errors", "samples"), 0)
    rule_totals: dict[str, int] = {}
    for name in names:
        # torch's error inputs are dtype-independent: run once, in the float64 mode
        errors = [] if float32 else harness.run_error_samples(name)
        results = harness.run_class(name, args.all_modes, reuse=not args.no_reuse, dtype=args.dtype)
        counts = harness.summary(results)
        rejected = sum(r.status == "rejected" for r in errors)
        error_failures = [r for r in errors if r.status != "rejected"]
        totals["rejected"] += rejected
        totals["errors"] += len(errors)
        totals["samples"] += len(results)
        totals["failed"] += len(error_failures)
        for status, count in counts.items():
            totals[status] += count
        reasons = sorted(
            {
                f"`{r.detail}`" if r.status == "refused" else r.detail
                for r in results
                if r.status in ("refused", "skipped")
            }
        )
        modes = "+".join(
            "train" if m else "eval" for m in harness.modes(infos[name], args.all_modes)
        )
        print(
            f"{name:<20} {modes:<10} {len(results):>7} {counts['passed']:>6} {counts['refused']:>7} "
            f"{counts['skipped']:>7} {counts['failed'] + len(error_failures):>6} "
            f"{f'{rejected}/{len(errors)}' if errors else '-':>7}  {', '.join(reasons)}".rstrip(),
            flush=True,
        )
        if float32:
            by_rule = harness.rules(results)
            for rule, count in by_rule.items():
                rule_totals[rule] = rule_totals.get(rule, 0) + count
            print(
                "    leaves of passed samples by rule: "
                + ", ".join(
                    f"{rule} {count}"
                    for rule, count in sorted(by_rule.items(), key=lambda kv: -kv[1])
                ),
                flush=True,
            )
        for r in [*results, *error_failures]:
            if r.status == "failed" or args.verbose:
                detail = r.detail
                if float32 and r.status == "failed" and r.report is not None:
                    # the failing leaves only, each with its headrooms against float64
                    detail = "\n".join(
                        [
                            *r.report.structure_problems,
                            *(
                                f"{leaf.path} {leaf.shape} {leaf.dtype}: {leaf.problem}"
                                for leaf in r.report.failures()
                            ),
                        ]
                    )
                detail = detail.replace("\n", "\n      ")
                print(
                    f"    {r.label}: {r.status.upper()}" + (f"\n      {detail}" if detail else "")
                )
    print("-" * len(header))
    errors_total = f"{totals['rejected']}/{totals['errors']}"
    print(
        f"{'total':<20} {'':<10} {totals['samples']:>7} {totals['passed']:>6} "
        f"{totals['refused']:>7} {totals['skipped']:>7} {totals['failed']:>6} "
        f"{errors_total:>7}"
    )
    if float32:
        print(
            "float32, judged against torch's float64 run; leaves of passed samples by rule: "
            + ", ".join(
                f"{rule} {count}"
                for rule, count in sorted(rule_totals.items(), key=lambda kv: -kv[1])
            )
        )
    print(
        f"\n{len(names)} classes of module_db's {len(infos)} run "
        f"({time.perf_counter() - start:.1f} s)."
    )
    if not args.classes:
        absent = sorted(set(SUPPORTED) - set(infos))
        print(f"Supported by from_torch, no module_db entry: {', '.join(absent)}.")
    return 1 if totals["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
