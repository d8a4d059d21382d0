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

Columns: samples; pass; rejected (an error input, rejected); fail (a wrong value or
gradient, an error, or an input torch rejects accepted).

Exit status: 0 when nothing fails, 1 otherwise, 2 for bad arguments.

Examples:
  python scripts/conformance_aten.py
  python scripts/conformance_aten.py --family _nn --verbose
  python scripts/conformance_aten.py --coverage-only
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
    parser.add_argument("--coverage-only", action="store_true",
                        help="print the coverage of torch's core ATen opset, run no samples")
    parser.add_argument("--verbose", action="store_true", help="print every failing sample")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
    from jaxgrad.nn import aten
    from parity_checks import _conformance_aten as conformance

    mapped = set(aten.supported())
    cover = conformance.coverage()
    print(f"ATen table: {len(mapped)} overloads. torch's core ATen opset has "
          f"{len(cover['core'])}: {len(cover['backward'])} backward ops (JAX differentiates "
          f"the forward), {len(cover['symbolic'])} symbolic-size ops (static shapes), "
          f"{len(cover['out'])} out= variant, {len(cover['decomposed'])} that export "
          f"decomposes further; of the {len(cover['reachable'])} an exported forward can "
          f"hold, {len(cover['mapped'])} are mapped "
          f"({100 * len(cover['mapped']) / len(cover['reachable']):.0f} %). Unmapped: "
          f"{', '.join(sorted(cover['unmapped'])) or 'none'}. Beyond the core set: "
          f"{len(cover['beyond'])} more overloads export leaves undecomposed "
          f"({', '.join(sorted(cover['beyond'])[:4])}, …).")
    if args.coverage_only:
        return 0
    start = time.perf_counter()
    header = f"{'family':<11} {'overloads':>9} {'samples':>8} {'pass':>6} {'rejected':>9} {'fail':>5}"
    print()
    print(header)
    print("-" * len(header))
    failed_total = samples_total = passed_total = 0
    for family in FAMILIES if args.family is None else (args.family,):
        overloads = [n for n in sorted(mapped)
                     if aten.lookup(n).fn.__module__.rsplit(".", 1)[-1] == family]
        if not overloads or family == "_random":
            continue
        print(f"  {family}: running {len(overloads)} overloads' samples...", file=sys.stderr,
              flush=True)
        outcomes, _ = conformance.op_outcomes(overloads)
        passed = sum(o.status == "pass" for o in outcomes)
        rejected = sum(o.status == "rejected" for o in outcomes)
        failed = len(outcomes) - passed - rejected
        print(f"{family.lstrip('_'):<11} {len(overloads):>9} {len(outcomes):>8} {passed:>6} "
              f"{rejected:>9} {failed:>5}")
        failed_total += failed
        samples_total += len(outcomes)
        passed_total += passed
        if args.verbose:
            for o in outcomes:
                if o.status not in ("pass", "rejected"):
                    print(f"    {o.source} {o.name}[{o.index}] {o.status}: {o.detail[:300]}")
    print()
    print(f"{samples_total} op_db samples and error inputs, {passed_total} samples passed, "
          f"{failed_total} failed ({time.perf_counter() - start:.1f} s).")
    return 1 if failed_total else 0


if __name__ == "__main__":
    sys.exit(main())
