"""Measure what each torch-vs-flax convention costs when it is left unmapped.

For every convention ``jaxgrad.flax.to_nnx`` maps, build the torch layer and the
stock ``flax.nnx`` layer twice on the same weights and input, in float64: once
with the convention mapped (as ``to_nnx`` does) and once left at flax's default,
and print the max abs error of each against torch. The mapped column must be at
rounding level; the unmapped column is the size of the mistake.

    python scripts/flax_conventions.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_default_matmul_precision", "highest")
    import torch

    torch.set_num_threads(1)
    from parity_checks.nnx_interop import measure_conventions as measure_all

    rows = measure_all()
    width = max(len(r["convention"]) for r in rows)
    print(
        f"{'convention':<{width}}  {'torch':<34} {'flax default':<30} {'mapped':>9} {'unmapped':>9}"
    )
    print("-" * (width + 88))
    for row in rows:
        unmapped = row["unmapped"]
        if unmapped != unmapped:
            text = "shape"
        elif row["unit"] == "std ratio":
            text = f"x{unmapped:.2f} std"
        else:
            text = f"{unmapped:.1e}"
        print(
            f"{row['convention']:<{width}}  {row['torch']:<34} {row['flax']:<30} "
            f"{row['mapped']:>9.1e} {text:>9}"
        )
    print(
        "\nmapped: max |nnx - torch| with the convention mapped (as to_nnx does); "
        "unmapped: the same with flax's default left in place (float64)."
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    bad = [r["convention"] for r in rows if not r["mapped"] <= 1e-10]
    if bad:
        print(f"\nmapped error above 1e-10 for: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
