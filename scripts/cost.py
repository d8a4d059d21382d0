"""One backward for all parameters: what it costs, in PyTorch and JAX.

For lesson 000's 203,530-parameter network (784-256-10) and its "14.2-million-
parameter" network (our reading: 784-2048-2048-2048-2048-10 = 14,217,226 params),
the median time of a forward pass and of forward+backward in both frameworks (JAX
jitted), and their ratio (the lessons: backward ≈ 1–2 forwards).

Then the naive alternative: the gradient by finite differences, one parameter at a
time, two forward passes per parameter. It is run for real on small networks (every
parameter), giving its cost per parameter in units of that network's forward pass;
that measured cost is extrapolated to the big networks with their measured forward
time, and compared with one backward.

Examples:
  python scripts/cost.py                  # batch 1024, ~1 min on 2 cores
  python scripts/cost.py --quick --json cost.json
"""

from __future__ import annotations

import argparse
import json

import _cli
import numpy as np

NETWORKS = {"lesson 203,530": [784, 256, 10], "lesson 14.2M": [784, 2048, 2048, 2048, 2048, 10]}
FD_NETWORKS = {"fd small": [64, 8, 10], "fd larger": [64, 16, 10]}
QUICK_NETWORKS = {"quick 2-layer": [64, 32, 10], "quick 4-layer": [64, 64, 64, 64, 10]}
QUICK_FD_NETWORKS = {"fd small": [16, 4, 3], "fd larger": [16, 8, 3]}


def setup(sizes, batch, seed=0):
    import torch

    import jaxgrad.nn
    import torchref.models

    torch.manual_seed(seed)
    module = torchref.models.mlp(sizes, "relu")
    model, params = jaxgrad.nn.from_torch(module)
    rng = np.random.default_rng(seed)
    x = rng.random((batch, sizes[0]), dtype=np.float32)
    y = rng.integers(0, sizes[-1], batch)
    return module, model, params, x, y


def time_passes(sizes, batch, repeats) -> dict:
    """Median forward and forward+backward seconds in both frameworks."""
    import jax
    import jax.numpy as jnp
    import torch

    from jaxgrad import losses
    from jaxgrad.lessons.cost import median_seconds

    module, model, params, x, y = setup(sizes, batch)
    x_t, y_t = torch.from_numpy(x), torch.from_numpy(y)
    xj, yj = jnp.asarray(x), jnp.asarray(y)

    def torch_forward():
        with torch.no_grad():
            torch.nn.functional.cross_entropy(module(x_t), y_t)

    def torch_backward():
        module.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(module(x_t), y_t).backward()

    loss = lambda p: losses.cross_entropy(model.apply(p, xj), yj)  # noqa: E731
    jax_forward, jax_grad = jax.jit(loss), jax.jit(jax.grad(loss))
    row = {
        "sizes": sizes,
        "params": sum(p.numel() for p in module.parameters()),
        "torch_forward": median_seconds(torch_forward, repeats),
        "torch_forward_backward": median_seconds(torch_backward, repeats),
        "jax_forward": median_seconds(lambda: jax_forward(params).block_until_ready(), repeats),
        "jax_forward_backward": median_seconds(
            lambda: jax.block_until_ready(jax_grad(params)), repeats
        ),
    }
    for side in ("torch", "jax"):
        row[f"{side}_ratio"] = row[f"{side}_forward_backward"] / row[f"{side}_forward"]
        # the backward alone, in forwards: (forward+backward − forward) / forward
        row[f"{side}_backward_ratio"] = row[f"{side}_ratio"] - 1.0
    return row


def time_naive(sizes, batch, repeats) -> dict:
    """The finite-difference gradient of every parameter, timed once per framework."""
    import jax
    import jax.numpy as jnp
    import torch

    from jaxgrad import losses
    from jaxgrad.lessons.cost import median_seconds, naive_gradient_fn
    from torchref.cost import naive_gradient as torch_naive_gradient

    row = time_passes(sizes, batch, repeats)
    module, model, params, x, y = setup(sizes, batch)
    x_t, y_t = torch.from_numpy(x), torch.from_numpy(y)
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    loss = lambda p: losses.cross_entropy(model.apply(p, xj), yj)  # noqa: E731
    row["torch_naive"] = median_seconds(
        lambda: torch_naive_gradient(
            module, lambda: torch.nn.functional.cross_entropy(module(x_t), y_t)
        ),
        1,
        warmup=0,
    )
    naive = naive_gradient_fn(loss, params)
    naive()  # compile once; the timed run reuses it
    row["jax_naive"] = median_seconds(lambda: jax.block_until_ready(naive()), 1, warmup=0)
    for side in ("torch", "jax"):
        per_param = row[f"{side}_naive"] / row["params"]
        # per parameter: two forward passes plus a fixed overhead (Python loop, dispatch)
        row[f"{side}_seconds_per_param"] = per_param
        row[f"{side}_forwards_per_param"] = per_param / row[f"{side}_forward"]
        row[f"{side}_overhead_per_param"] = max(0.0, per_param - 2 * row[f"{side}_forward"])
    return row


def extrapolate(rows: dict, fd_rows: dict) -> None:
    """Per parameter: 2 forwards of the big network + the overhead measured on small ones."""
    for side in ("torch", "jax"):
        overhead = float(np.median([r[f"{side}_overhead_per_param"] for r in fd_rows.values()]))
        for row in rows.values():
            naive = row["params"] * (2 * row[f"{side}_forward"] + overhead)
            row[f"{side}_naive_extrapolated"] = naive
            row[f"{side}_naive_vs_backward"] = naive / row[f"{side}_forward_backward"]
            row[f"{side}_overhead_per_param_used"] = overhead


def human(seconds: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds * 1e3:.2f} ms"


def report(results: dict) -> None:
    batch = results["batch"]
    print(f"\nforward vs forward+backward, batch {batch}, float32, median of {results['repeats']}")
    print("  (ratio = forward+backward / forward; bwd = the backward alone, in forwards)")
    print(
        f"  {'network':<16}{'params':>12}{'torch fwd':>11}{'fwd+bwd':>10}{'ratio':>7}{'bwd':>6}"
        f"{'JAX fwd':>10}{'fwd+bwd':>10}{'ratio':>7}{'bwd':>6}"
    )
    for name, r in results["networks"].items():
        print(
            f"  {name:<16}{r['params']:>12,}{human(r['torch_forward']):>11}"
            f"{human(r['torch_forward_backward']):>10}{r['torch_ratio']:>7.2f}{r['torch_backward_ratio']:>6.2f}"
            f"{human(r['jax_forward']):>10}{human(r['jax_forward_backward']):>10}{r['jax_ratio']:>7.2f}"
            f"{r['jax_backward_ratio']:>6.2f}"
        )
    print(f"\nfinite differences of every parameter, measured (batch {results['fd_batch']})")
    for name, r in results["finite_difference"].items():
        print(
            f"  {name:<16}{r['params']:>6,} params, forward torch {human(r['torch_forward'])} / JAX "
            f"{human(r['jax_forward'])}"
        )
        print(
            f"  {'':<16}all-parameter finite differences: torch {human(r['torch_naive'])} "
            f"({r['torch_forwards_per_param']:.2f} forwards/param, overhead "
            f"{human(r['torch_overhead_per_param'])}/param), JAX {human(r['jax_naive'])} "
            f"({r['jax_forwards_per_param']:.2f} forwards/param, overhead "
            f"{human(r['jax_overhead_per_param'])}/param)"
        )
    print("\nextrapolated to the lessons' networks: params x (2 forwards + measured overhead)")
    for name, r in results["networks"].items():
        print(
            f"  {name:<16} torch {human(r['torch_naive_extrapolated'])} = "
            f"{r['torch_naive_vs_backward']:,.0f}x one forward+backward; JAX "
            f"{human(r['jax_naive_extrapolated'])} = {r['jax_naive_vs_backward']:,.0f}x"
        )


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="small networks, batch 64 (seconds; for tests)"
    )
    parser.add_argument(
        "--batch", type=int, default=1024, help="batch of the timed passes (default 1024)"
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="timing samples per median (default 5)"
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: a shared machine makes more noisy)",
    )
    parser.add_argument("--json", metavar="PATH", help="write every number as JSON")
    args = parser.parse_args(argv)
    _cli.at_least(parser, args, 1, "batch", "repeats", "torch_threads")
    _cli.output_file(parser, "--json", args.json)
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    import jax
    import torch

    torch.set_num_threads(args.torch_threads)
    networks, fd_networks = (
        (QUICK_NETWORKS, QUICK_FD_NETWORKS) if args.quick else (NETWORKS, FD_NETWORKS)
    )
    batch = 64 if args.quick else args.batch
    fd_batch = 16 if args.quick else 64
    results = {
        "batch": batch,
        "fd_batch": fd_batch,
        "repeats": args.repeats,
        "networks": {},
        "finite_difference": {},
    }
    with jax.default_matmul_precision("highest"):
        for name, sizes in networks.items():
            print(f"timing {name} {'-'.join(map(str, sizes))} ...", flush=True)
            results["networks"][name] = time_passes(sizes, batch, args.repeats)
        for name, sizes in fd_networks.items():
            print(f"finite differences on {name} {'-'.join(map(str, sizes))} ...", flush=True)
            results["finite_difference"][name] = time_naive(sizes, fd_batch, args.repeats)
    extrapolate(results["networks"], results["finite_difference"])
    report(results)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
        print(f"\nJSON written to {args.json}")
    return results


if __name__ == "__main__":
    main()
