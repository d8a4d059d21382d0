#!/usr/bin/env python
"""The backprop lessons' worked examples, by hand, with jax.grad and with torch backward().

For every worked example the script prints the chain rule written out one local
derivative at a time (each line is one multiplication), then a table with one row
per quantity: the number the lesson prints, the hand computation, jax.grad, PyTorch
backward(), and the largest difference between the three. Example 7 is the lessons'
two-layer numpy network: its hand-written backward checked against central
differences, jax.grad and torch, then trained for 400 steps in all three.

Exit status 1 if any value disagrees with a lesson's number at the digits it prints.

Examples:
  python scripts/hand_gradients.py
  python scripts/hand_gradients.py --only tiny_relu --dtype float64
  python scripts/hand_gradients.py --no-steps
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def print_scalar_example(example, dtype: str, show_steps: bool) -> bool:
    import jax
    import jax.numpy as jnp
    import torch

    import torchref
    from jaxgrad.lessons import agrees_to_printed_digits, hand_result, jax_result

    print(f"\n{example.number}. {example.title}")
    print(f"   source: lesson {example.source}")
    given = {**example.params, **example.data}
    print("   given: " + ", ".join(f"{k}={v:g}" for k, v in given.items()))
    hand, steps = hand_result(example)
    if show_steps:
        print("   by hand, one local derivative at a time:")
        for line in steps:
            print(f"     {line}")
    jax_dtype = jnp.float64 if dtype == "float64" else jnp.float32
    torch_dtype = torch.float64 if dtype == "float64" else torch.float32
    with jax.enable_x64(dtype == "float64"):
        jaxed = jax_result(example, jax_dtype)
    torch_fn = torchref.lessons.EXAMPLES[example.key]
    torched = torch_fn(example.params, example.data, dtype=torch_dtype)

    names = list(example.expected) + [
        k for k in jaxed if k not in example.expected and k in torched and k in hand
    ]
    print(
        f"   {'quantity':<14} {'lesson':>9} {'by hand':>12} {'jax.grad':>12} "
        f"{'backward()':>12} {'max diff':>9}  agrees"
    )
    ok = True
    for name in names:
        values = [hand.get(name), jaxed.get(name), torched.get(name)]
        present = [v for v in values if v is not None]
        diff = max(present) - min(present) if present else float("nan")
        lesson = example.expected.get(name)
        if lesson is not None:
            agrees = all(agrees_to_printed_digits(v, lesson[0], lesson[1]) for v in present)
            ok &= agrees
            lesson_text = f"{lesson[0]:.{min(lesson[1], 4)}f}"
            verdict = "yes" if agrees else "NO"
        else:
            lesson_text, verdict = "", ""
        cells = " ".join(f"{v:>12.6g}" if v is not None else f"{'-':>12}" for v in values)
        print(f"   {name:<14} {lesson_text:>9} {cells} {diff:>9.1e}  {verdict}")
    return ok


# The entries lesson 001 prints in its gradient-check table.
LESSON_SAMPLES = {
    ("W1", (0, 0)),
    ("W1", (2, 3)),
    ("b1", (0, 1)),
    ("W2", (1, 0)),
    ("W2", (3, 0)),
    ("b2", (0, 0)),
}


def print_two_layer() -> bool:
    import jax

    import torchref
    from jaxgrad import parity
    from jaxgrad.lessons import two_layer

    print("\n7. Two-layer network X(6×3) → tanh(4) → sigmoid(1), binary cross-entropy")
    print(
        '   source: lesson 001 "Backpropagation and the Computational Graph" (each gradient, '
        "by hand, checked numerically)"
    )
    data = two_layer.lesson_data()
    by_hand = two_layer.numpy_backward(
        data["X"], data["y"], data["W1"], data["b1"], data["W2"], data["b2"]
    )
    numeric = two_layer.numeric_gradients(data)
    with jax.enable_x64(True):
        jaxed = two_layer.from_torch_layout(two_layer.jax_gradients(data))
    torched = two_layer.from_torch_layout(
        torchref.lessons.two_layer_gradients(two_layer.torch_state_dict(data), data["X"], data["y"])
    )
    print(
        f"   {'param':<6} {'index':<7} {'hand (numpy)':>16} {'numeric':>16} "
        f"{'jax.grad':>16} {'backward()':>16} {'|hand−numeric|':>14}"
    )
    worst_numeric = 0.0
    for name in ("W1", "b1", "W2", "b2"):
        for index in np.ndindex(by_hand[name].shape):
            diff = abs(by_hand[name][index] - numeric[name][index])
            worst_numeric = max(worst_numeric, diff)
            if (name, index) not in LESSON_SAMPLES:
                continue  # print the entries the lesson prints; the worst covers all
            print(
                f"   {name:<6} {str(list(index)):<7} {by_hand[name][index]:>16.10f} "
                f"{numeric[name][index]:>16.10f} {jaxed[name][index]:>16.10f} "
                f"{torched[name][index]:>16.10f} {diff:>14.2e}"
            )
    vs_jax = parity.compare(by_hand, jaxed, name="hand vs jax.grad")
    vs_torch = parity.compare(by_hand, torched, name="hand vs torch")
    fd = parity.compare(numeric, by_hand, rtol=1e-6, atol=1e-8, name="hand vs numeric")
    print(
        f"   worst |hand − numeric| over all {sum(v.size for v in by_hand.values())} "
        f"elements: {worst_numeric:.2e}  (the lesson: ~1e-10, floating-point noise)"
    )
    print(
        f"   hand vs jax.grad: max abs {vs_jax.max_abs_err:.1e}; "
        f"hand vs torch: max abs {vs_torch.max_abs_err:.1e}"
    )

    print("\n   400 steps of plain gradient descent, lr 0.5:")
    numpy_history = two_layer.numpy_train(data)
    with jax.enable_x64(True):
        jax_history = two_layer.jax_train(data)
    torch_history = torchref.lessons.two_layer_train(
        two_layer.torch_state_dict(data), data["X"], data["y"]
    )
    print(
        f"   {'step':>4}  {'numpy loss':>12} {'jax loss':>12} {'torch loss':>12}  accuracy (np/jax/torch)"
    )
    for (step, nl, na), (_, jl, ja), (_, tl, ta) in zip(numpy_history, jax_history, torch_history):
        print(f"   {step:>4}  {nl:>12.6f} {jl:>12.6f} {tl:>12.6f}  {na:.4f} / {ja:.4f} / {ta:.4f}")
    drift = max(
        abs(a[1] - b[1]) for h in (jax_history, torch_history) for a, b in zip(numpy_history, h)
    )
    print(f"   largest loss difference between the three trajectories: {drift:.1e}")
    return vs_jax.passed and vs_torch.passed and fd.passed and drift < 1e-10


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--only",
        metavar="KEY",
        action="append",
        help="run only this example (repeatable): tiny_relu, two_layer, ... "
        "(an unknown key lists them all)",
    )
    parser.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        default="float32",
        help="precision of the jax and torch columns of examples 1–6 "
        "(default float32, as in the lessons); example 7 is float64",
    )
    parser.add_argument(
        "--no-steps",
        action="store_true",
        help="print only the tables, not the step-by-step chain rule",
    )
    args = parser.parse_args(argv)
    import torch

    from jaxgrad.lessons import EXAMPLES

    keys = [e.key for e in EXAMPLES] + ["two_layer"]
    unknown = [k for k in args.only or () if k not in keys]
    if unknown:
        parser.error(f"--only {unknown[0]!r}: not an example; choose from {', '.join(keys)}")
    torch.set_num_threads(1)

    ok = True
    for example in EXAMPLES:
        if args.only and example.key not in args.only:
            continue
        ok &= print_scalar_example(example, args.dtype, not args.no_steps)
    if not args.only or "two_layer" in args.only:
        ok &= print_two_layer()
    print("\nevery value agrees with the lessons" if ok else "\nSOME VALUES DISAGREE")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
