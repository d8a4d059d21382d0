"""Fingerprints of the bits each framework produced in parity rows.

``fingerprints(checks)`` runs each check inside ``jaxgrad.parity.recording()`` and
returns, per check, its verdict and a sha256 per leaf of every comparison it made,
reference (usually torch) and candidate (usually jaxgrad) apart. Two runs that give
the same fingerprints reproduced their bits exactly; the test under CPU load and the
instruction-set measurements of ``docs/parity.md`` are built on it.

Run as a module it writes the fingerprints of the selected rows as JSON:

    python -m parity_checks._determinism OUT.json --dtype float32 [--filter TEXT ...]

(from ``scripts/``, or with ``scripts`` on ``PYTHONPATH``). The environment chooses the
instruction sets: ``ATEN_CPU_CAPABILITY=default|avx2|avx512`` for torch,
``XLA_FLAGS=--xla_cpu_max_isa=SSE4_2|AVX|AVX2|AVX512F`` for XLA.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def fingerprints(checks) -> dict:
    """``{check name [dtype]: {"passed", "seconds", "comparisons": [...]}}``."""
    from jaxgrad.parity import leaf_digests, recording

    results = {}
    for check in checks:
        start = time.perf_counter()
        with recording() as calls:
            report = check.run()
        results[f"{check.name} [{check.dtype}]"] = {
            "passed": report.passed,
            "seconds": round(time.perf_counter() - start, 3),
            "comparisons": [
                {
                    "name": call["name"],
                    "reference": leaf_digests(call["reference"]),
                    "candidate": leaf_digests(call["candidate"]),
                }
                for call in calls
            ],
        }
    return results


def select(checks, dtype: str | None = None, filters=(), exclude=()) -> list:
    """The checks of ``dtype`` whose name contains any of ``filters`` and none of ``exclude``."""
    return [
        c
        for c in checks
        if (dtype is None or c.dtype == dtype)
        and (not filters or any(f in c.name for f in filters))
        and not any(e in c.name for e in exclude)
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="JSON file to write")
    parser.add_argument("--dtype", default=None, help="only rows of this dtype")
    parser.add_argument("--filter", action="append", default=[], help="substring of row names")
    parser.add_argument("--exclude", action="append", default=[], help="skip rows containing it")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from parity_checks import all_checks

    result = fingerprints(select(all_checks(), args.dtype, args.filter, args.exclude))
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0 if all(row["passed"] for row in result.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
