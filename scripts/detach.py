"""detach() / no_grad() in PyTorch and jax.lax.stop_gradient in jaxgrad, side by side.

1. lesson 002's target network: loss = mse(online(x), target_net(x).detach()) —
   online gradients equal in both frameworks; torch leaves target_net's .grad as
   None, JAX returns exact zeros; the running-loss total (loss.detach().item()) is
   a plain number in both;
2. retain_grad() vs jaxgrad.autodiff.intermediate_grads, and torch.autograd.grad vs
   jaxgrad.autodiff.grad_wrt, on a small two-layer network;
3. .item() / float() mid-graph: torch silently cuts the graph; JAX raises
   ConcretizationTypeError under jit (and for float() under grad).
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np


def _fmt(array) -> str:
    return np.array2string(np.asarray(array).ravel(), precision=6, suppress_small=True)


def target_network(dtype: str) -> None:
    from parity_checks.autograd import target_network_twins

    print(f"1. Target network (lesson 002), two batches of 8, {dtype}")
    reference, candidate = target_network_twins(dtype)
    print(f"  {'':<22}{'torch':<44}jaxgrad")
    for name in reference["online"]:
        print(
            f"  online {name:<14} {_fmt(reference['online'][name].numpy()):<44}"
            f"{_fmt(candidate['online'][name])}"
        )
    for name in reference["target"]:
        print(
            f"  target {name:<14} {str(reference['target'][name]):<44}"
            f"{_fmt(candidate['target'][name])}"
        )
    print(
        f"  target.requires_grad  {str(reference['target_requires_grad']):<44}"
        f"(stop_gradient: no flag, the gradient is zero)"
    )
    print(f"  running loss total    {reference['running']:<44.10f}{candidate['running']:.10f}\n")


def intermediates(dtype: str) -> None:
    from parity_checks.autograd import TAPS, grad_wrt_parity, intermediate_parity

    print(f"2. Intermediate gradients and gradients on demand, {dtype}")
    report = intermediate_parity(dtype)
    print(f"  retain_grad() on {', '.join(TAPS)}  vs  intermediate_grads(fn, args, names)")
    for leaf in report.leaves:
        print(
            f"    {leaf.path:<20} max abs err {leaf.max_abs_err:.1e}  "
            f"{'PASS' if leaf.passed else 'FAIL ' + str(leaf.problem)}"
        )
    report = grad_wrt_parity(dtype)
    print("  torch.autograd.grad(loss, [w1, w2])  vs  grad_wrt(loss_fn, params, ['w1', 'w2'])")
    for leaf in report.leaves:
        print(
            f"    {leaf.path:<20} max abs err {leaf.max_abs_err:.1e}  "
            f"{'PASS' if leaf.passed else 'FAIL ' + str(leaf.problem)}"
        )
    print()


def item_cuts_graph() -> None:
    import jax
    import jax.numpy as jnp
    import torch

    from jaxgrad import autodiff as jautodiff

    print("3. .item() / float() in the middle of a computation")
    x = torch.tensor(2.0, requires_grad=True)
    broken = torch.tensor([float((x * 3).item())], requires_grad=True)
    print(
        f"  torch: torch.tensor([float((x * 3).item())]).grad_fn = {broken.grad_fn}"
        "   <- silent: upstream gets no gradient"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = x * float(x * 3)
    y.backward()
    print(f"  torch: d/dx [x * float(3x)] at x=2 = {x.grad.item()}   (true derivative 12.0)")
    for warning in caught:
        print(
            f"         (torch {torch.__version__} warns for float(): {warning.category.__name__}: "
            f"{str(warning.message).splitlines()[0]})"
        )
    for label, fn in (
        (
            "jax.grad(lambda v: v * float(v * 3))(2.0)",
            lambda: jax.grad(lambda v: v * float(v * 3))(2.0),
        ),
        (
            "jax.jit(jax.grad(lambda v: v * (v * 3).item()))(2.0)",
            lambda: jax.jit(jax.grad(lambda v: v * (v * 3).item()))(jnp.asarray(2.0)),
        ),
        (
            "jax.grad(lambda v: v * (v * 3).item())(2.0)",
            lambda: jax.grad(lambda v: v * (v * 3).item())(jnp.asarray(2.0)),
        ),
    ):
        try:
            value = fn()
            print(f"  JAX:   {label} = {float(value)}   <- silent without jit, like torch")
        except jax.errors.ConcretizationTypeError as error:
            print(
                f"  JAX:   {label}\n         raises {type(error).__name__}: "
                f"{str(error).splitlines()[0]}"
            )
    print(
        f"  jaxgrad.autodiff.detach is jax.lax.stop_gradient: "
        f"{jautodiff.detach is jax.lax.stop_gradient}"
    )
    print(f"  (jax {jax.__version__}: outside jit, .item() on a grad tracer is a silent constant)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dtype",
        choices=("float64", "float32"),
        default="float64",
        help="precision of the side-by-side comparisons (default float64)",
    )
    args = parser.parse_args(argv)
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
    target_network(args.dtype)
    intermediates(args.dtype)
    item_cuts_graph()


if __name__ == "__main__":
    main()
