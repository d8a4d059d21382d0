#!/usr/bin/env python
"""Where a matmul-bound training step's time goes: its dots, jax next to torch.

Two parts, both about the 14.2M-parameter MLP of scripts/bench.py
(784-2048-2048-2048-2048-10, batch 1024):

  kernels   what XLA:CPU compiled the jitted train step and the scan-fused epoch
            into (nothing runs): how many dots went to a kernel library (YNNPACK
            fusions) and how many stayed plain XLA dots, with their contracting
            dimensions; large copies; fusions.
  dots      the three matmuls of one hidden Linear layer, timed interleaved in one
            process: forward x @ W.T, input gradient g @ W, weight gradient g.T @ x,
            each in jax (jitted) and torch. Per round, torch's time over jax's for
            the same matmul gives a paired ratio; ratios taken within one round are
            less sensitive to a busy machine than absolute times, but on a loaded
            machine they are still not results: the same self-check as bench.py
            (load before and after, spread of rounds) says whether to believe them.

Examples:
  python scripts/bench_dots.py --kernels-only
  python scripts/bench_dots.py --rounds 9 --xla-flag=--xla_cpu_use_xnnpack=true
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import _cli
import numpy as np

SIZES = [784, 2048, 2048, 2048, 2048, 10]
BATCH = 1024


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument(
        "--size",
        type=int,
        default=2048,
        help="n of the hidden layer's (n, n) weight (default 2048)",
    )
    parser.add_argument("--batch", type=int, default=BATCH, help="batch (default 1024)")
    parser.add_argument(
        "--kernels-only", action="store_true", help="only the compiled step's kernels (no timing)"
    )
    _cli.add_xla_flag(parser)
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 3 when the timings cannot be trusted",
    )
    args = parser.parse_args(argv)
    _cli.at_least(parser, args, 1, "rounds", "size", "batch")
    _cli.check_xla_flags(parser, args.xla_flag)
    return args


def print_kernels(jax) -> None:
    import jax.numpy as jnp

    from jaxgrad import losses, nn, optim
    from jaxgrad.train import make_train_epoch, make_train_step, xla_cpu

    model, optimizer = nn.mlp(SIZES), optim.sgd(lr=0.01, momentum=0.9)
    params = jax.eval_shape(model.init, jax.random.key(0))
    state = jax.eval_shape(optimizer.init, params)
    x = jax.ShapeDtypeStruct((BATCH, SIZES[0]), jnp.float32)
    y = jax.ShapeDtypeStruct((BATCH,), jnp.int32)
    stacked = tuple(jax.ShapeDtypeStruct((2, *a.shape), a.dtype) for a in (x, y))
    compiled = {
        "jax step": xla_cpu.compiled_hlo(
            make_train_step(model, losses.cross_entropy, optimizer), params, state, (x, y)
        ),
        "jax epoch": xla_cpu.compiled_hlo(
            make_train_epoch(model, losses.cross_entropy, optimizer), params, state, stacked
        ),
    }
    print(
        f"kernels of the {'-'.join(map(str, SIZES))} train step at batch {BATCH} "
        f"(XLA_FLAGS={os.environ.get('XLA_FLAGS', '') or 'unset'}):"
    )
    for name, text in compiled.items():
        s = xla_cpu.hlo_summary(text)
        library = "; ".join(f"{kind}: {dims}" for kind, dims in s["library_dots"].items())
        print(
            f"  {name}: {s['dots']} dots; in a kernel library: {library or 'none'}; "
            f"plain XLA dots: {s['plain_dots'] or 'none'}"
        )
        print(f"    large copies: {s['copies'] or 'none'}; fusions: {s['fusions']}")
    print(
        "  (dims lhs{1} rhs{1}: x @ W.T with W (out, in); lhs{1} rhs{0}: g @ W; "
        "lhs{0} rhs{0}: the weight gradient g.T @ x)"
    )


def time_dots(args, jax):
    """Per-round seconds of each matmul, jax and torch interleaved."""
    import jax.numpy as jnp
    import torch

    rng = np.random.default_rng(0)
    n, b = args.size, args.batch
    x, g = (rng.standard_normal((b, n)).astype(np.float32) for _ in range(2))
    w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    jx, jg, jw = map(jnp.asarray, (x, g, w))
    tx, tg, tw = map(torch.from_numpy, (x, g, w))
    jitted = {
        "x @ W.T": (jax.jit(lambda x, w: x @ w.T), (jx, jw)),
        "g @ W": (jax.jit(lambda g, w: g @ w), (jg, jw)),
        "g.T @ x": (jax.jit(lambda g, x: g.T @ x), (jg, jx)),
    }
    eager = {
        "x @ W.T": lambda: torch.nn.functional.linear(tx, tw),
        "g @ W": lambda: tg @ tw,
        "g.T @ x": lambda: tg.t() @ tx,
    }
    runs = {}
    for op, (fn, fn_args) in jitted.items():
        runs[f"jax {op}"] = lambda fn=fn, fn_args=fn_args: fn(*fn_args).block_until_ready()
        runs[f"torch {op}"] = eager[op]  # CPU torch returns when the result is ready
    for run in runs.values():
        run()  # compile / warm caches
    seconds = {k: [] for k in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            began = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - began)
    return seconds, 2 * b * n * n


def main(argv=None) -> int:
    args = parse_args(argv)
    load_before = os.getloadavg()[0]
    _cli.apply_xla_flags(args.xla_flag)
    import jax

    from jaxgrad.train import benchmark

    print(f"cpu: {benchmark.describe_cpu()}; jax {jax.__version__}")
    print_kernels(jax)
    if args.kernels_only:
        return 0
    import torch

    seconds, flops = time_dots(args, jax)
    load_after = os.getloadavg()[0]
    spreads = {k: benchmark.spread(t) for k, t in seconds.items()}
    trust = benchmark.judge_timings(load_before, load_after, spreads)
    print(
        f"\n{args.rounds} interleaved rounds, ({args.batch}, {args.size}) x ({args.size}, "
        f"{args.size}) float32, torch {torch.__version__} with {torch.get_num_threads()} threads; "
        f"load average {load_before:.2f} before, {load_after:.2f} after"
    )
    print(
        f"{'matmul':<9} {'jax ms':>8} {'IQR':>5} {'torch ms':>9} {'IQR':>5} "
        f"{'torch/jax per round (median, min-max)':>38}"
    )
    for op in ("x @ W.T", "g @ W", "g.T @ x"):
        j, t = seconds[f"jax {op}"], seconds[f"torch {op}"]
        paired = [a / b for a, b in zip(t, j)]
        print(
            f"{op:<9} {1e3 * statistics.median(j):>8.2f} "
            f"{100 * spreads[f'jax {op}'].relative_iqr:>4.0f}% "
            f"{1e3 * statistics.median(t):>9.2f} {100 * spreads[f'torch {op}'].relative_iqr:>4.0f}% "
            f"{statistics.median(paired):>18.2f} ({min(paired):.2f}-{max(paired):.2f})"
        )
    best = {fw: flops / min(seconds[f"{fw} x @ W.T"]) / 1e9 for fw in ("jax", "torch")}
    print(f"best x @ W.T: jax {best['jax']:.1f} GFLOP/s, torch {best['torch']:.1f} GFLOP/s")
    print(f"verdict: {trust.describe()}")
    if args.strict and not trust.trusted:
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
