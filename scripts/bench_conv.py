#!/usr/bin/env python
"""Where a small CNN's training step loses time on XLA:CPU: its convolutions.

Two parts, on the CNNs of scripts/bench.py (torchref.models' LeNet-style ``cnn`` and
BatchNorm ``resnet`` on 1x8x8 digit images, batch 128, SGD with momentum):

  kernels   what XLA:CPU compiled the jitted step and the scan-fused epoch into
            (nothing runs): its convolutions, in the entry computation or inside the
            loop body, and whether each is in the one form XLA:CPU hands to Eigen's
            convolution (batch first, features last: dim_labels b01f_01io->b01f).
            XLA's ConvCanonicalization pass transposes every other convolution into
            that form, but it visits the entry computation only: in the loop body of
            a rolled lax.scan the convolutions keep torch's layout and are emitted as
            plain loop nests. Printed for both lowerings of jaxgrad.nn.conv_lowering:
            "xla" (XLA's convolution) and "patches" (slices and one matrix product).
  timing    torch eager beside the jitted step and the rolled epoch under each
            lowering, interleaved round by round in one process, with the same
            self-check as bench.py (load before and after, spread of rounds): a
            ratio from a run it does not trust is not a result.

What "auto" (the default) does with this: XLA's convolution outside loops, patches
inside jaxgrad's own rolled loops on the CPU (see jaxgrad.nn.conv_lowering).

Examples:
  python scripts/bench_conv.py --kernels-only
  python scripts/bench_conv.py --model resnet --rounds 9 --strict
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import _cli
import numpy as np

MODELS = ("cnn", "resnet")
LOWERINGS = ("xla", "patches")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        action="append",
        choices=MODELS,
        help="model to measure (repeatable; default both)",
    )
    parser.add_argument("--batch", type=int, default=128, help="batch (default 128)")
    parser.add_argument(
        "--steps",
        type=int,
        default=20,
        help="steps per round, the rolled epoch's length (default 20)",
    )
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument(
        "--kernels-only",
        action="store_true",
        help="only what the compiled step and epoch contain (no timing)",
    )
    _cli.add_xla_flag(parser)
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 3 when the timings cannot be trusted",
    )
    args = parser.parse_args(argv)
    _cli.at_least(parser, args, 1, "batch", "steps", "rounds")
    _cli.check_xla_flags(parser, args.xla_flag)
    args.model = args.model or list(MODELS)
    return args


class Setup:
    """One model's twins (same initial weights), its batches and its compiled programs:
    ``programs[(lowering, "step" | "epoch")]``."""

    def __init__(self, name, args):
        import jax
        import jax.numpy as jnp
        import torch

        import torchref
        from jaxgrad import losses, nn, optim
        from jaxgrad.train.stateful import make_stateful_train_epoch, make_stateful_train_step

        self.jax, self.steps = jax, args.steps
        torch.manual_seed(0)
        self.torch_model = torchref.models.CNN_MODELS[name]()
        self.model, self.params, self.buffers = nn.from_torch(self.torch_model, with_buffers=True)
        optimizer = optim.sgd(lr=0.01, momentum=0.9)
        self.opt_state = optimizer.init(self.params)
        rng = np.random.default_rng(0)
        xs = rng.standard_normal((args.steps, args.batch, 1, 8, 8)).astype(np.float32)
        ys = rng.integers(0, 10, (args.steps, args.batch))
        self.xs, self.ys = jnp.asarray(xs), jnp.asarray(ys)
        self.torch_xs, self.torch_ys = torch.from_numpy(xs), torch.from_numpy(ys)
        self.torch_optimizer = torch.optim.SGD(self.torch_model.parameters(), lr=0.01, momentum=0.9)
        self.key = jax.random.key(0)
        state = (self.params, self.buffers, self.opt_state)
        self.programs = {}
        for lowering in LOWERINGS:
            with nn.conv_lowering(lowering):  # read while tracing, in lower()
                step = make_stateful_train_step(
                    self.model, losses.cross_entropy, optimizer, donate=False
                )
                epoch = make_stateful_train_epoch(
                    self.model, losses.cross_entropy, optimizer, donate=False
                )
                self.programs[(lowering, "step")] = step.lower(
                    *state, (self.xs[0], self.ys[0]), self.key
                ).compile()
                self.programs[(lowering, "epoch")] = epoch.lower(
                    *state, (self.xs, self.ys), self.key
                ).compile()

    def run(self, lowering, kind):
        program = self.programs[(lowering, kind)]
        state = (self.params, self.buffers, self.opt_state)
        if kind == "step":
            for i in range(self.steps):
                *state, _ = program(*state, (self.xs[i], self.ys[i]), self.key)
        else:
            state = program(*state, (self.xs, self.ys), self.key)
        self.jax.block_until_ready(state)

    def run_torch(self):
        import torch

        for i in range(self.steps):
            self.torch_optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(
                self.torch_model(self.torch_xs[i]), self.torch_ys[i]
            )
            loss.backward()
            self.torch_optimizer.step()


def print_kernels(name, setup) -> None:
    from jaxgrad.train import xla_cpu

    print(
        f"{name} b{setup.xs.shape[1]}: convolutions in the compiled programs "
        f"(XLA_FLAGS={os.environ.get('XLA_FLAGS', '') or 'unset'})"
    )
    for (lowering, kind), program in setup.programs.items():
        s = xla_cpu.conv_summary(program.as_text())
        parts = [
            f"{where}: {c['canonical']} canonical, {c['other']} other"
            for where, c in s.items()
            if c["canonical"] or c["other"]
        ]
        print(f"  {lowering:<8} {kind:<6} {'; '.join(parts) or 'no convolution'}")


def time_rounds(setup, rounds):
    """Per-round seconds per step of torch eager and every compiled program."""
    runs = {"torch eager": setup.run_torch}
    for lowering, kind in setup.programs:
        runs[f"jax {kind} ({lowering})"] = lambda lowering=lowering, kind=kind: setup.run(
            lowering, kind
        )
    for run in runs.values():
        run()  # warm caches
    seconds = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            began = time.perf_counter()
            run()
            seconds[name].append((time.perf_counter() - began) / setup.steps)
    return seconds


def main(argv=None) -> int:
    args = parse_args(argv)
    load_before = os.getloadavg()[0]
    _cli.apply_xla_flags(args.xla_flag)
    import jax
    import torch

    from jaxgrad.train import benchmark

    print(
        f"cpu: {benchmark.describe_cpu()}; jax {jax.__version__}, "
        f"torch {torch.__version__} with {torch.get_num_threads()} threads"
    )
    setups = {}
    for name in args.model:
        setups[name] = Setup(name, args)
        print_kernels(name, setups[name])
    if args.kernels_only:
        return 0
    seconds = {name: time_rounds(setup, args.rounds) for name, setup in setups.items()}
    load_after = os.getloadavg()[0]
    spreads = {
        f"{name} {run}": benchmark.spread(t)
        for name, runs in seconds.items()
        for run, t in runs.items()
    }
    trust = benchmark.judge_timings(load_before, load_after, spreads)
    print(
        f"\n{args.rounds} interleaved rounds of {args.steps} steps; load average "
        f"{load_before:.2f} before, {load_after:.2f} after"
    )
    print(
        f"{'model':<7} {'contender':<21} {'ms/step':>8} {'IQR':>5} "
        f"{'torch/jax per round (median, min-max)':>38}"
    )
    for name, runs in seconds.items():
        torch_times = runs["torch eager"]
        for run, times in runs.items():
            paired = [t / j for t, j in zip(torch_times, times)]
            ratio = (
                ""
                if run == "torch eager"
                else f"{statistics.median(paired):>18.2f}x ({min(paired):.2f}-{max(paired):.2f})"
            )
            print(
                f"{name:<7} {run:<21} {1e3 * statistics.median(times):>8.2f} "
                f"{100 * spreads[f'{name} {run}'].relative_iqr:>4.0f}% {ratio}"
            )
    print(f"verdict: {trust.describe()}")
    if args.strict and not trust.trusted:
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
