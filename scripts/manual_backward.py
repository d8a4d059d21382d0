#!/usr/bin/env python
"""Hand-written backward passes (jaxgrad.manual), each checked against three references.

For linear, relu, sigmoid, tanh, layer_norm, softmax_cross_entropy and
sigmoid_binary_cross_entropy — each a jax.custom_vjp whose backward was written by
hand — prints the largest absolute difference of the hand-written gradients from:

  jax.grad     autodiff of the same forward rule without the custom backward;
  gradcheck    central differences in float64 (eps 1e-6; passes at atol 1e-8, rtol 1e-6);
  torch        torch autograd on the same inputs (F.linear, torch.relu, F.layer_norm, ...).

A last row plants a bug — linear's backward scaled by 1.001 — to show the checks
catch a 0.1 % error. Everything runs in float64.

Examples:
  python scripts/manual_backward.py
  python scripts/manual_backward.py --seed 3 --json manual.json
"""

from __future__ import annotations

import argparse
import json
import sys

import _cli
import numpy as np


def _parse(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (0)")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON to PATH")
    args = parser.parse_args(argv)
    _cli.output_file(parser, "--json", args.json)
    return args


def check(name: str, hand, rng: np.random.Generator) -> dict:
    """The three differences for one hand-written function ``hand`` (twin of ``name``)."""
    import jax
    import jax.numpy as jnp

    from jaxgrad import manual
    from jaxgrad.gradcheck import gradcheck
    from jaxgrad.parity import compare
    from torchref.manual import forward_backward

    inputs = manual.example_inputs(name, rng)
    weights = rng.standard_normal(np.shape(manual.PLAIN[name](*map(jnp.asarray, inputs))))
    with jax.enable_x64(True):
        out, grads = manual.value_and_vjp(hand, inputs, jit=True)
        _, plain_grads = manual.value_and_vjp(manual.PLAIN[name], inputs, jit=True)
        versus_autodiff = compare(plain_grads, grads)
        torch = forward_backward(name, *inputs)
        versus_torch = compare([g for g in torch["grads"] if g is not None], grads)
        numeric = gradcheck(lambda *a: jnp.sum(weights * hand(*a)), *inputs)
    return {
        "function": name,
        "jax.grad": versus_autodiff.max_abs_err,
        "gradcheck": numeric.max_abs_err,
        "torch": versus_torch.max_abs_err,
        "passed": versus_autodiff.passed and numeric.passed and versus_torch.passed,
    }


def main(argv=None) -> int:
    args = _parse(argv)
    from jaxgrad import manual

    rows = []
    for name, fn in manual.FUNCTIONS.items():
        rows.append(check(name, fn, np.random.default_rng(args.seed)))
    planted = check(
        "linear", manual.scaled_backward(manual.linear, 1.001), np.random.default_rng(args.seed)
    )
    planted["function"] = "linear, backward × 1.001 (planted)"
    print("largest |hand-written gradient − reference|, float64")
    print(f"{'function':<36} {'jax.grad':>10} {'gradcheck':>10} {'torch':>10}  result")
    for row in rows + [planted]:
        print(
            f"{row['function']:<36} {row['jax.grad']:>10.2e} {row['gradcheck']:>10.2e} "
            f"{row['torch']:>10.2e}  {'PASS' if row['passed'] else 'FAIL'}"
        )
    print(
        "tolerances: jax.grad and torch at the float64 tier (rtol 1e-10, atol 1e-12); "
        "gradcheck at atol 1e-8, rtol 1e-6 (numeric vs analytic)."
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(rows + [planted], handle, indent=2)
    caught = not planted["passed"]
    print(f"the planted 0.1 % error is {'caught' if caught else 'NOT caught'}.")
    return 0 if all(r["passed"] for r in rows) and caught else 1


if __name__ == "__main__":
    sys.exit(main())
