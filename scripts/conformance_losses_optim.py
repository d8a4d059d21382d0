#!/usr/bin/env python
"""Conformance with PyTorch's own loss and optimizer tests: op_db, module_db, optim_db.

Losses: every float64 sample of the supported losses in ``op_db`` (functional) and
``module_db`` (loss modules, built from torch's constructor arguments and with
``losses.from_torch``), value and gradients at the float64 tier, and every error
input torch rejects. Optimizers: every ``optim_db`` configuration of the supported
optimizers for 30 float64 steps (parameters and every state tensor after every
step), and every ``optim_error_inputs_func`` case.

Columns: samples; pass; refused (jaxgrad refuses the sample with an error naming the
argument); rejected (an error input torch rejects, rejected by jaxgrad naming the
argument); n/a (error inputs about torch's ``params`` argument, which jaxgrad does not
have); fail (wrong value, vague error, or an input torch rejects accepted).

Exit status: 0 when nothing fails, 1 otherwise, 2 for bad arguments.

Examples:
  python scripts/conformance_losses_optim.py
  python scripts/conformance_losses_optim.py --only optim --verbose
"""

from __future__ import annotations

import argparse
import sys
import time

COLUMNS = ("pass", "refused", "rejected", "not applicable")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--only", choices=["losses", "optim"], help="run one half only")
    parser.add_argument(
        "--verbose", action="store_true", help="print every refusal and rejection with its message"
    )
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
    from parity_checks import _conformance_losses as losses
    from parity_checks import _conformance_optim as optim

    start = time.perf_counter()
    outcomes = []
    if args.only in (None, "losses"):
        outcomes += losses.op_outcomes() + losses.module_outcomes()
    if args.only in (None, "optim"):
        outcomes += optim.config_outcomes() + optim.error_outcomes()
    rows: dict = {}
    for o in outcomes:
        name = o.name.split("(")[0]
        row = rows.setdefault((o.source, name), {})
        row[o.status] = row.get(o.status, 0) + 1
    header = (
        f"{'source':<17} {'name':<33} {'samples':>7} {'pass':>5} {'refused':>8} "
        f"{'rejected':>8} {'n/a':>4} {'fail':>5}"
    )
    print(header)
    print("-" * len(header))
    totals: dict = {}
    for (source, name), row in sorted(
        rows.items(),
        key=lambda item: (item[0][0].split()[0], " errors" in item[0][0], item[0][1].lower()),
    ):
        count = sum(row.values())
        failed = count - sum(row.get(c, 0) for c in COLUMNS)
        print(
            f"{source:<17} {name:<33} {count:>7} {row.get('pass', 0):>5} "
            f"{row.get('refused', 0):>8} {row.get('rejected', 0):>8} "
            f"{row.get('not applicable', 0):>4} {failed:>5}"
        )
        total = totals.setdefault(source, {"samples": 0, "failed": 0})
        total["samples"] += count
        total["failed"] += failed
        for column in COLUMNS:
            total[column] = total.get(column, 0) + row.get(column, 0)
    print()
    for source, t in totals.items():
        if source.endswith("errors"):
            print(
                f"{source}: {t['samples']} inputs torch rejects, {t['rejected']} rejected "
                f"naming the argument, {t['not applicable']} not applicable, "
                f"{t['failed']} failed"
            )
        else:
            print(
                f"{source}: {t['samples']} samples, {t['pass']} pass, {t['refused']} "
                f"refused naming the argument, {t['failed']} failed"
            )
    bad = [o for o in outcomes if o.status not in COLUMNS]
    shown = bad + (
        [o for o in outcomes if o.status in ("refused", "rejected", "not applicable")]
        if args.verbose
        else []
    )
    for o in shown:
        print(f"\n{o.source} {o.name}[{o.index}] {o.status}:\n  {o.detail[:800]}")
    print(f"\n{len(outcomes)} outcomes, {len(bad)} failed ({time.perf_counter() - start:.1f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
