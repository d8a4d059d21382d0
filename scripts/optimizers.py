"""jaxgrad.optim vs torch.optim, step by step: parameters and optimizer state.

For every optimizer configuration of the parity report (SGD with/without momentum,
dampening, Nesterov, weight decay; Adam with coupled L2; AdamW with torch's default
decay; RMSprop plain and centered with momentum) both frameworks train a tanh MLP
[6, 8, 3] on one fixed batch from the same copied weights. A table per optimizer
prints, at selected steps, the loss and the largest |jaxgrad - torch| over all
parameters and over all state tensors (momentum_buffer, exp_avg, exp_avg_sq,
square_avg, grad_avg), and the verdict at the dtype's parity tier. In float32 each
step is judged by jaxgrad.parity.compare's calibrated rule against torch's float64 run
of the same starting values (a float32 leaf outside the tier passes within the tier of
the float64 answer, or within 5x torch's own float32 distance from it); the header
counts the leaves each rule passed.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import _cli
import numpy as np


def _max_abs(reference, candidate, step: int) -> float:
    import jax

    worst = 0.0
    for ref, cand in zip(jax.tree.leaves(reference), jax.tree.leaves(candidate)):
        worst = max(worst, float(np.max(np.abs(np.asarray(ref)[step] - np.asarray(cand)[step]))))
    return worst


def report_steps(steps: int) -> list[int]:
    marks = {1, 2, 3, 5, 10, 20, 50, 100, 200, 500, steps}
    return sorted(m for m in marks if m <= steps)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="steps per run (default: 100 for float64, 10 for float32, "
        "the parity policy's trajectory lengths)",
    )
    parser.add_argument(
        "--only",
        default=None,
        help="run only configurations whose label contains this text, e.g. 'adam'",
    )
    parser.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help="also write every run's per-step differences as JSON",
    )
    args = parser.parse_args(argv)
    _cli.at_least(parser, args, 1, "steps")
    _cli.output_file(parser, "--json", args.json)
    import jax
    from parity_checks.optimizers import CONFIGS, STEPS, config_label, trajectories

    from jaxgrad.optim.trajectory import compare_trajectory
    from jaxgrad.parity import compare

    steps = STEPS[args.dtype] if args.steps is None else args.steps
    if steps < 1:
        parser.error(f"--steps (={steps}) must be >= 1")
    configs = [(n, h) for n, h in CONFIGS if args.only is None or args.only in config_label(n, h)]
    if not configs:
        parser.error(
            f"--only {args.only!r} matches none of: "
            + "; ".join(config_label(n, h) for n, h in CONFIGS)
        )
    jax.config.update("jax_default_matmul_precision", "highest")
    jax.config.update("jax_enable_x64", args.dtype == "float64")
    results = []
    for name, hyper in configs:
        label = config_label(name, hyper)
        if args.dtype == "float32":  # judged by the calibrated rule, step by step
            reference, candidate, reference64 = trajectories(
                name, hyper, args.dtype, steps, with_float64=True
            )
            verdict = compare_trajectory(reference, candidate, reference64=reference64)
        else:
            reference, candidate = trajectories(name, hyper, args.dtype, steps)
            verdict = compare(reference, candidate)
        calibrated = Counter(
            leaf.rule for leaf in verdict.leaves if leaf.passed and leaf.rule not in ("tier", None)
        )
        print(
            f"{label}  [{args.dtype}, {steps} steps]  "
            f"{'PASS' if verdict.passed else 'FAIL'} at the {args.dtype} tier"
            + (
                " (calibrated: "
                + ", ".join(f"{n} by {rule}" for rule, n in sorted(calibrated.items()))
                + ")"
                if calibrated
                else ""
            )
        )
        print(
            f"  {'step':>5}  {'torch loss':>14}  {'jaxgrad loss':>14}  {'max|Δparams|':>12}  "
            f"{'max|Δstate|':>11}"
        )
        rows = []
        for step in report_steps(steps):
            i = step - 1
            row = {
                "step": step,
                "torch_loss": float(reference["loss"][i]),
                "jax_loss": float(candidate["loss"][i]),
                "params": _max_abs(reference["params"], candidate["params"], i),
                "state": _max_abs(reference["state"], candidate["state"], i)
                if reference["state"]
                else 0.0,
            }
            rows.append(row)
            print(
                f"  {step:>5}  {row['torch_loss']:>14.10f}  {row['jax_loss']:>14.10f}  "
                f"{row['params']:>12.1e}  {row['state']:>11.1e}"
            )
        state_fields = sorted({f for fields in candidate["state"].values() for f in fields})
        print(f"  state compared: {', '.join(state_fields) or 'none (plain SGD keeps none)'}\n")
        results.append(
            {
                "optimizer": label,
                "dtype": args.dtype,
                "steps": steps,
                "passed": verdict.passed,
                "max_rel_err": verdict.max_rel_err,
                "rows": rows,
            }
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
