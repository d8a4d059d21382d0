#!/usr/bin/env python
"""Training speed, jaxgrad vs PyTorch, measured side by side in one process.

For each configuration (the lessons' 784-256-10 MLP at batch 128 and 1024, a
14.2M-parameter MLP, 784-2048-2048-2048-2048-10, at batch 1024, and the digits'
transformer and LSTM classifiers of torchref.sequence_models at batch 128) it times:

  jax step    the jitted jaxgrad train step, called once per batch (donated buffers)
  jax epoch   the same steps fused into one call with lax.scan
  torch eager zero_grad / backward / step, the ordinary loop
  torch comp. the same loop on torch.compile(model)  (only with --compile)

All contenders train the same model (SGD, momentum 0.9) on the same synthetic
batches. Rounds are interleaved (contender A, B, C, A, B, C, ...) so a machine
that gets busier slows every contender alike; the table gives the median
steps/s over rounds with the min-max range, the ratio to torch eager, the
achieved GFLOP/s (exact matmul FLOPs of forward + backward: 2·B·in·out per
Linear forward, twice that backward, the first layer's input gradient excluded
since neither framework computes it) and that as a fraction of the
matrix-multiply peak measured in the same run (the best of a jax and a torch
square float32 matmul). First-call (compile) times are reported separately and
never enter the rates (a first call is compilation plus one execution: one
step, or for the fused epoch one whole round). On a GPU every timer waits for the device
(block_until_ready / torch.cuda.synchronize).

Goals it reports (never asserts): at batch 128 the jax epoch >= 1.8x torch
eager; at batch 1024 >= 1.0x; on the 14.2M model >= 0.95x; transformer and LSTM
at batch 128 >= 1.5x (their GFLOP/s are not counted: shown as nan).

Examples:
  python scripts/bench.py --quick
  python scripts/bench.py --rounds 7 --json bench.json
  python scripts/bench.py --compile --device gpu
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import numpy as np

CONFIGS = [  # name, sizes, batch, steps per round (full), steps per round (--quick)
    ("784-256-10 b128", [784, 256, 10], 128, 100, 20),
    ("784-256-10 b1024", [784, 256, 10], 1024, 30, 6),
    ("14.2M b1024", [784, 2048, 2048, 2048, 2048, 10], 1024, 4, 2),
    # sequence classifiers of the digits (torchref.sequence_models; sizes = model name)
    ("transformer b128", "transformer", 128, 10, 3),
    ("lstm b128", "lstm", 128, 30, 6),
]
GOALS = {"784-256-10 b128": 1.8, "784-256-10 b1024": 1.0, "14.2M b1024": 0.95,
         "transformer b128": 1.5, "lstm b128": 1.5}
LR, MOMENTUM = 0.01, 0.9


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="fewer steps per round and 3 rounds (a smoke run, ~1 min on 2 cores)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5, --quick 3)")
    parser.add_argument("--steps", type=int, help="steps per round for every configuration "
                        "(default: 100/30/4, --quick 20/6/2)")
    parser.add_argument("--only", choices=[c[0] for c in CONFIGS], action="append",
                        help="run only this configuration (repeatable)")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile (opt-in)")
    parser.add_argument("--peak-size", type=int, help="n of the n×n matmul that measures the "
                        "peak (default 2048, --quick 1024)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "gpu"])
    parser.add_argument("--tf32", action="store_true",
                        help="let both frameworks use TF32 for float32 matmuls on GPUs (default: "
                             "full float32, torch's own default; jax's GPU default is TF32)")
    parser.add_argument("--torch-threads", type=int,
                        help="torch.set_num_threads (default: torch's own choice)")
    parser.add_argument("--json", metavar="PATH", help="write every measurement as JSON")
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = 3 if args.quick else 5
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1 (got {args.rounds})")
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps must be >= 1 (got {args.steps})")
    return args


def train_flops(sizes, batch: int) -> float:
    """Exact matmul FLOPs of one training step (forward + backward) of an MLP (NaN,
    not counted, for the sequence models)."""
    if isinstance(sizes, str):
        return float("nan")
    total = 0
    for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        one = 2 * batch * fan_in * fan_out
        total += one + one + (one if layer > 0 else 0)  # forward, dW, dX (not for x)
    return total


def timed(fn) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


class JaxSide:
    def __init__(self, sizes, batches, device):
        import jax
        import jax.numpy as jnp
        from jaxgrad import losses, nn, optim
        from jaxgrad.train import make_train_epoch, make_train_step, select_devices

        self.jax = jax
        self.device = select_devices(device)[0]
        self.optimizer = optim.sgd(lr=LR, momentum=MOMENTUM)
        if isinstance(sizes, str):  # a sequence model: the twin of torch's, via from_torch
            from torchref.sequence_models import sequence_model

            self.model, params = nn.from_torch(sequence_model(sizes))
        else:
            self.model = nn.mlp(sizes)
        with jax.default_device(self.device):
            self.params = (jax.device_put(params, self.device) if isinstance(sizes, str)
                           else self.model.init(jax.random.key(0)))
            self.opt_state = self.optimizer.init(self.params)
        xs, ys = batches
        self.xs = jax.device_put(jnp.asarray(xs), self.device)
        self.ys = jax.device_put(jnp.asarray(ys), self.device)
        self.step = make_train_step(self.model, losses.cross_entropy, self.optimizer)
        self.epoch = make_train_epoch(self.model, losses.cross_entropy, self.optimizer)
        # first calls (compile + one execution), outside the timed rounds
        self.compile_seconds = {"jax step": timed(self._one_step),
                                "jax epoch": timed(self.run_epoch)}
        self.run_steps()

    def _one_step(self):
        self.params, self.opt_state, _ = self.step(self.params, self.opt_state,
                                                   (self.xs[0], self.ys[0]))
        self.jax.block_until_ready((self.params, self.opt_state))

    def run_steps(self):
        params, state = self.params, self.opt_state
        for i in range(self.xs.shape[0]):
            params, state, metrics = self.step(params, state, (self.xs[i], self.ys[i]))
        self.jax.block_until_ready((params, state))
        self.params, self.opt_state = params, state

    def run_epoch(self):
        params, state, metrics = self.epoch(self.params, self.opt_state, (self.xs, self.ys))
        self.jax.block_until_ready((params, state))
        self.params, self.opt_state = params, state


class TorchSide:
    def __init__(self, sizes, batches, device, *, compiled: bool):
        import torch
        import torchref
        from torchref import train as ttrain

        self.torch, self.ttrain = torch, ttrain
        self.device = ttrain.torch_device(device)
        torch.manual_seed(0)
        if isinstance(sizes, str):
            from torchref.sequence_models import sequence_model

            self.module = sequence_model(sizes).to(self.device)
        else:
            self.module = torchref.mlp(sizes).to(self.device)
        self.forward = torch.compile(self.module) if compiled else self.module
        self.optimizer = torch.optim.SGD(self.module.parameters(), lr=LR, momentum=MOMENTUM)
        self.loss_fn = torch.nn.functional.cross_entropy
        xs, ys = batches
        self.xs = torch.from_numpy(xs).to(self.device)
        self.ys = torch.from_numpy(ys).to(self.device)
        self.compile_seconds = timed(lambda: self._one_step(0))  # first call: compile/warm-up

    def _one_step(self, i):
        self.ttrain.train_step(self.forward, self.optimizer, self.loss_fn, self.xs[i], self.ys[i])
        self.ttrain.synchronize(self.device)

    def run_steps(self):
        for i in range(self.xs.shape[0]):
            self.ttrain.train_step(self.forward, self.optimizer, self.loss_fn,
                                   self.xs[i], self.ys[i])
        self.ttrain.synchronize(self.device)


def matmul_peak(device: str, n: int = 2048, repeats: int = 5) -> dict:
    """Best GFLOP/s of an `(n, n) @ (n, n)` float32 matmul in jax and in torch."""
    import jax
    import jax.numpy as jnp
    import torch
    from jaxgrad.train import select_devices
    from torchref.train import synchronize, torch_device

    flops = 2 * n ** 3
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    jax_device = select_devices(device)[0]
    ja, jb = (jax.device_put(jnp.asarray(m), jax_device) for m in (a, b))
    matmul = jax.jit(jnp.matmul)
    matmul(ja, jb).block_until_ready()
    jax_best = min(timed(lambda: matmul(ja, jb).block_until_ready()) for _ in range(repeats))
    target = torch_device(device)
    ta, tb = (torch.from_numpy(m).to(target) for m in (a, b))
    torch.matmul(ta, tb)
    synchronize(target)

    def torch_mm():
        torch.matmul(ta, tb)
        synchronize(target)

    torch_best = min(timed(torch_mm) for _ in range(repeats))
    result = {"n": n, "jax_gflops": flops / jax_best / 1e9, "torch_gflops": flops / torch_best / 1e9}
    result["peak_gflops"] = max(result["jax_gflops"], result["torch_gflops"])
    return result


def bench_config(name, sizes, batch, steps, args, peak) -> dict:
    rng = np.random.default_rng(0)
    if sizes == "transformer":  # 64 tokens 0…16 per example
        xs = rng.integers(0, 17, size=(steps, batch, 64)).astype(np.int64)
    elif isinstance(sizes, str):  # 64 pixels read as 8 rows of 8
        xs = rng.random((steps, batch, 64)).astype(np.float32)
    else:
        xs = rng.standard_normal((steps, batch, sizes[0])).astype(np.float32)
    ys = rng.integers(0, 10 if isinstance(sizes, str) else sizes[-1],
                      size=(steps, batch)).astype(np.int64)
    jax_side = JaxSide(sizes, (xs, ys), args.device)
    contenders = {"jax step": jax_side.run_steps, "jax epoch": jax_side.run_epoch}
    compile_seconds = dict(jax_side.compile_seconds)
    torch_side = TorchSide(sizes, (xs, ys), args.device, compiled=False)
    contenders["torch eager"] = torch_side.run_steps
    compile_seconds["torch eager"] = torch_side.compile_seconds
    if args.compile:
        compiled = TorchSide(sizes, (xs, ys), args.device, compiled=True)
        contenders["torch compile"] = compiled.run_steps
        compile_seconds["torch compile"] = compiled.compile_seconds
    seconds = {k: [] for k in contenders}
    for round_index in range(args.rounds):
        for contender, run in contenders.items():
            seconds[contender].append(timed(run))
        print(f"  {name}: round {round_index + 1}/{args.rounds} done", file=sys.stderr)
    flops = train_flops(sizes, batch)
    rows = {}
    for contender, times in seconds.items():
        rates = [steps / t for t in times]
        median = statistics.median(rates)
        rows[contender] = {
            "steps_per_s_median": median, "steps_per_s_min": min(rates),
            "steps_per_s_max": max(rates), "round_seconds": times,
            "gflops": median * flops / 1e9,
            "fraction_of_peak": median * flops / 1e9 / peak["peak_gflops"],
            "first_call_seconds": compile_seconds[contender],
        }
    eager = rows["torch eager"]["steps_per_s_median"]
    for row in rows.values():
        row["vs_torch_eager"] = row["steps_per_s_median"] / eager
    params = (None if isinstance(sizes, str) else
              sum(i * o + o for i, o in zip(sizes[:-1], sizes[1:])))
    return {"name": name, "sizes": sizes, "batch": batch, "parameters": params,
            "steps_per_round": steps, "flops_per_step": flops, "contenders": rows}


def print_results(results, peak) -> None:
    header = (f"{'configuration':<17} {'contender':<13} {'ms/step':>8} {'steps/s':>9} {'min-max':>17} "
              f"{'vs eager':>8} {'GFLOP/s':>8} {'of peak':>7} {'1st call s':>10}")
    print(header)
    print("-" * len(header))
    for result in results:
        for contender, row in result["contenders"].items():
            spread = f"{row['steps_per_s_min']:.1f}-{row['steps_per_s_max']:.1f}"
            print(f"{result['name']:<17} {contender:<13} {1e3 / row['steps_per_s_median']:>8.2f} "
                  f"{row['steps_per_s_median']:>9.1f} "
                  f"{spread:>17} {row['vs_torch_eager']:>7.2f}x {row['gflops']:>8.1f} "
                  f"{100 * row['fraction_of_peak']:>6.1f}% {row['first_call_seconds']:>10.2f}")
    print(f"\nmatmul peak ({peak['n']}x{peak['n']} float32): jax {peak['jax_gflops']:.1f} GFLOP/s, "
          f"torch {peak['torch_gflops']:.1f} GFLOP/s; peak = {peak['peak_gflops']:.1f}")
    print("\ngoals (jax epoch vs torch eager, steps/s):")
    for result in results:
        goal = GOALS.get(result["name"])
        if goal is None:
            continue
        ratio = result["contenders"]["jax epoch"]["vs_torch_eager"]
        verdict = "met" if ratio >= goal else "NOT met"
        print(f"  {result['name']:<17} {ratio:.2f}x (goal >= {goal:.2f}x): {verdict}; jax epoch "
              f"reaches {100 * result['contenders']['jax epoch']['fraction_of_peak']:.1f}% of "
              f"the matmul peak")


def main(argv=None) -> int:
    args = parse_args(argv)
    import jax
    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    if args.device == "gpu":
        # The same float32 matmul arithmetic on both sides: jax's GPU default is TF32,
        # torch's is full float32. On CPUs XLA's default already is full float32 (and
        # forcing "float32" there measurably slows the small models' steps).
        jax.config.update("jax_default_matmul_precision",
                          "tensorfloat32" if args.tf32 else "float32")
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
    try:
        peak = matmul_peak(args.device, n=args.peak_size or (1024 if args.quick else 2048))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import jaxgrad.train as jtrain
    devices = jtrain.select_devices(args.device)
    print(f"jax {jax.__version__} on {jtrain.sharding.describe_devices(devices[:1])}; "
          f"torch {torch.__version__} on {args.device} with {torch.get_num_threads()} threads; "
          f"{platform.processor() or platform.machine()}, rounds={args.rounds}, "
          f"float32 matmuls: {'TF32 allowed' if args.tf32 and args.device == 'gpu' else 'full float32'}")
    results = []
    for name, sizes, batch, steps, quick_steps in CONFIGS:
        if args.only and name not in args.only:
            continue
        steps = args.steps or (quick_steps if args.quick else steps)
        results.append(bench_config(name, sizes, batch, steps, args, peak))
    print_results(results, peak)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"args": vars(args), "jax": jax.__version__, "torch": torch.__version__,
                       "device": args.device, "torch_threads": torch.get_num_threads(),
                       "matmul_peak": peak, "results": results}, handle, indent=1)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
