#!/usr/bin/env python
"""Coverage of jaxgrad's ATen table, and its conformance with PyTorch's op samples.

``from_torch`` captures models ``torch.fx`` cannot trace with ``torch.export``, down to
core ATen ops, and maps each op to JAX through one table (``jaxgrad.nn.aten``). This
prints, per family of the table, the overloads mapped and every float64 ``op_db``
sample that exercises them: traced to core ATen, run through the table, and compared
with torch (outputs and the vector-Jacobian product, float64 tier); and each
``error_inputs`` case torch rejects (rejected by jaxgrad too: at capture, or while
running). The summary gives the coverage: mapped core ATen overloads / torch's core
ATen opset, and the overloads mapped beyond it.

Columns: samples; pass; rejected (an error input, rejected); refused (by design, as
from_torch refuses it: a sample that writes its own input, ``as_strided`` of a view);
fail (a wrong value or gradient, an error, or an input torch rejects accepted). Every
overload must be reached by a sample or be named in ``UNSAMPLED`` with the test that
holds it instead. The test suite runs the ``--quick`` selection; CI runs all of them.

Exit status: 0 when nothing fails, 1 otherwise, 2 for bad arguments.

Examples:
  python scripts/conformance_aten.py
  python scripts/conformance_aten.py --family _nn --verbose
  python scripts/conformance_aten.py --coverage-only
  python scripts/conformance_aten.py --quick
"""

from __future__ import annotations

import argparse
import sys
import time

FAMILIES = ("_pointwise", "_reduce", "_shape", "_index", "_factory", "_nn", "_random")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--family", choices=FAMILIES, help="run one family of the table")
    parser.add_argument(
        "--coverage-only",
        action="store_true",
        help="print the coverage of torch's core ATen opset, run no samples",
    )
    parser.add_argument("--verbose", action="store_true", help="print every failing sample")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the test suite's selection: each OpInfo's first samples and "
        "the first that reaches each overload, every error input",
    )
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
    from parity_checks import _conformance_aten as conformance

    from jaxgrad.nn import aten

    mapped = {name for name in aten.supported() if name.startswith("aten.")}
    cover = conformance.coverage()
    print(
        f"ATen table: {len(mapped)} overloads. torch's core ATen opset has "
        f"{len(cover['core'])}: {len(cover['backward'])} backward ops (JAX differentiates "
        f"the forward), {len(cover['symbolic'])} symbolic-size ops (static shapes), "
        f"{len(cover['out'])} out= variant, {len(cover['decomposed'])} that export "
        f"decomposes further; of the {len(cover['reachable'])} an exported forward can "
        f"hold, {len(cover['mapped'])} are mapped "
        f"({100 * len(cover['mapped']) / len(cover['reachable']):.0f} %). Unmapped: "
        f"{', '.join(sorted(cover['unmapped'])) or 'none'}. Beyond the core set: "
        f"{len(cover['beyond'])} more overloads export leaves undecomposed "
        f"({', '.join(sorted(cover['beyond'])[:4])}, …)."
    )
    if args.coverage_only:
        return 0
    start = time.perf_counter()
    header = (
        f"{'family':<11} {'overloads':>9} {'samples':>8} {'pass':>6} {'rejected':>9} "
        f"{'refused':>8} {'fail':>5} {'seconds':>8}"
    )
    print()
    print(header)
    print("-" * len(header))
    totals = {"samples": 0, "pass": 0, "fail": 0}
    unreached = []
    for family in FAMILIES if args.family is None else (args.family,):
        print(
            f"  {family}: running its overloads' samples"
            f"{' (quick selection)' if args.quick else ''}...",
            file=sys.stderr,
            flush=True,
        )
        began = time.perf_counter()
        verdict = conformance.family_verdict(family, quick=args.quick)
        count = {
            status: sum(o.status == status for o in verdict.outcomes)
            for status in ("pass", "rejected", "refused")
        }
        print(
            f"{family.lstrip('_'):<11} {len(verdict.overloads):>9} {len(verdict.outcomes):>8} "
            f"{count['pass']:>6} {count['rejected']:>9} {count['refused']:>8} "
            f"{len(verdict.bad):>5} {time.perf_counter() - began:>8.1f}",
            flush=True,
        )
        totals["samples"] += len(verdict.outcomes)
        totals["pass"] += count["pass"]
        totals["fail"] += len(verdict.bad)
        unreached += verdict.unreached
        shown = verdict.bad if args.verbose else verdict.bad[:5]
        for o in shown:
            print(f"    {o.source} {o.name}[{o.index}] {o.status}: {o.detail[:300]}")
        if len(shown) < len(verdict.bad):
            print(f"    ... {len(verdict.bad) - len(shown)} more (--verbose lists them)")
    print()
    print(
        f"{totals['samples']} op_db samples and error inputs, {totals['pass']} samples "
        f"passed, {totals['fail']} failed ({time.perf_counter() - start:.1f} s). Refused: "
        "by design, named (a sample that writes its own input, as_strided of a view)."
    )
    if unreached:
        print(
            f"No sample reached {len(unreached)} overloads, and no test is named for them "
            f"in UNSAMPLED: {', '.join(unreached)}"
        )
    return 1 if totals["fail"] or unreached else 0


if __name__ == "__main__":
    sys.exit(main())
