"""What is stored for the backward pass, in PyTorch and in JAX, side by side.

For an MLP (default: the 14,217,226-parameter 784-2048-2048-2048-2048-10 ReLU network,
our reading of lesson 000's "14.2-million-parameter network", at batch 1024):

1. forward only (torch.no_grad / a plain jitted forward), forward that keeps what
   backward needs (torch's graph / JAX's vjp residuals), forward+backward:
   torch's saved tensors counted exactly through ``saved_tensors_hooks``; JAX's
   residuals (``jax.ad_checkpoint`` view and the jitted vjp closure) and XLA's
   ``memory_analysis()`` of the compiled programs. Lesson 000 reference: no_grad
   forward +58 MB, the graph +56 MB more (process memory, 14.2M params, batch 1024).
2. gradient checkpointing (``torch.utils.checkpoint``, ``jax.checkpoint`` with a
   policy): per layer (Linear+ReLU) and in blocks of two layers; saved bytes,
   forward+backward time, and gradients bit-identical to the plain run.
3. bfloat16 parameters and inputs: saved activation bytes halved in both.

Examples:
  python scripts/memory.py                 # 14.2M params, batch 1024 (~2 min on 2 busy cores)
  python scripts/memory.py --quick --json memory.json
"""

from __future__ import annotations

import argparse
import json

import _cli
import numpy as np

FULL = dict(sizes=[784, 2048, 2048, 2048, 2048, 10], batch=1024)
QUICK = dict(sizes=[64, 128, 128, 128, 128, 10], batch=64)
LESSON_000 = {"params": 14.2e6, "batch": 1024, "no_grad_forward_mb": 58, "graph_extra_mb": 56}
MB = 1e6


class Setup:
    """The torch module, its JAX twin (same weights), one batch, in one dtype."""

    def __init__(self, sizes, batch, dtype="float32", seed=0):
        import jax.numpy as jnp
        import torch

        import jaxgrad.nn
        import torchref.models
        from jaxgrad import memory as jmemory

        torch.manual_seed(seed)
        self.module = torchref.models.mlp(sizes, "relu")
        rng = np.random.default_rng(seed)
        x = rng.random((batch, sizes[0]), dtype=np.float32)
        y = rng.integers(0, sizes[-1], batch)
        self.model, params = jaxgrad.nn.from_torch(self.module)
        self.x_t, self.y_t = torch.from_numpy(x), torch.from_numpy(y)
        self.x, self.y = jnp.asarray(x), jnp.asarray(y)
        self.params = params
        if dtype == "bfloat16":
            self.module = self.module.to(torch.bfloat16)
            self.x_t = self.x_t.to(torch.bfloat16)
            self.params = jmemory.cast_floats(params, jnp.bfloat16)
            self.x = self.x.astype(jnp.bfloat16)
        self.batch = batch

    def torch_loss(self, every: int = 0):
        import torch

        from torchref import memory as tmemory

        out = (
            tmemory.checkpointed_forward(self.module, self.x_t, every=every)
            if every
            else self.module(self.x_t)
        )
        return torch.nn.functional.cross_entropy(out, self.y_t)

    def torch_saved(self, every: int = 0) -> dict:
        from torchref import memory as tmemory

        _, counts = tmemory.saved_bytes(
            lambda: self.torch_loss(every), self.module.parameters(), [self.x_t]
        )
        return counts

    def torch_grads(self, every: int = 0) -> dict:
        self.module.zero_grad(set_to_none=True)
        self.torch_loss(every).backward()
        return {name: p.grad.clone() for name, p in self.module.named_parameters()}

    def jax_loss(self, every: int = 0, policy=None):
        from jaxgrad import losses
        from jaxgrad import memory as jmemory

        apply = (
            jmemory.checkpointed_apply(self.model, every=every, policy=policy)
            if every
            else self.model.apply
        )
        return lambda params, x: losses.cross_entropy(apply(params, x), self.y)


def forward_modes(setup: Setup, repeats: int) -> dict:
    import jax
    import torch

    from jaxgrad import memory as jmemory
    from jaxgrad.lessons.cost import median_seconds
    from torchref import memory as tmemory

    torch_forward = lambda: setup.module(setup.x_t)  # noqa: E731
    with torch.no_grad():
        _, no_grad = tmemory.saved_bytes(torch_forward, setup.module.parameters(), [setup.x_t])
        no_grad_time = median_seconds(torch_forward, repeats)
    _, graph = tmemory.saved_bytes(torch_forward, setup.module.parameters(), [setup.x_t])
    graph_time = median_seconds(torch_forward, repeats)
    grad_bytes = sum(p.numel() * p.element_size() for p in setup.module.parameters())

    loss = setup.jax_loss()
    forward = lambda p, x: setup.model.apply(p, x)  # noqa: E731
    vjp_forward = lambda p, x: jax.vjp(lambda q: forward(q, x), p)  # noqa: E731  (no grad for x)
    compiled = {
        "forward": jmemory.compiled_memory(forward, setup.params, setup.x),
        "forward_with_residuals": jmemory.compiled_memory(vjp_forward, setup.params, setup.x),
        "forward_backward": jmemory.compiled_memory(jax.grad(loss), setup.params, setup.x),
    }
    logits_bytes = setup.batch * setup.model.layers[-1].out_features * setup.x.dtype.itemsize
    compiled["forward_with_residuals"]["residual_outputs"] = (
        compiled["forward_with_residuals"]["outputs"] - logits_bytes
    )
    fast_forward = jax.jit(forward)
    fast_vjp = jax.jit(lambda p, x: vjp_forward(p, x)[0])
    return {
        "torch": {
            "no_grad_saved": no_grad,
            "graph_saved": graph,
            "gradient_bytes": grad_bytes,
            "no_grad_seconds": no_grad_time,
            "graph_seconds": graph_time,
        },
        "jax": {
            "eager_residuals": jmemory.classify(
                jmemory.saved_residuals(lambda p: forward(p, setup.x), setup.params), setup.batch
            ),
            "vjp_residuals": jmemory.classify(
                jmemory.vjp_residuals(lambda p: forward(p, setup.x), setup.params), setup.batch
            ),
            "compiled": compiled,
            "forward_seconds": median_seconds(
                lambda: fast_forward(setup.params, setup.x).block_until_ready(), repeats
            ),
            "vjp_forward_seconds": median_seconds(
                lambda: fast_vjp(setup.params, setup.x).block_until_ready(), repeats
            ),
        },
    }


def checkpointing(setup: Setup, repeats: int) -> dict:
    import jax

    from jaxgrad import memory as jmemory
    from jaxgrad.lessons.cost import median_seconds
    from jaxgrad.parity import BIT_IDENTICAL, compare

    plain_torch = setup.torch_grads()
    plain_jax_fn = jax.jit(jax.grad(setup.jax_loss()))
    plain_jax = plain_jax_fn(setup.params, setup.x)
    rows = {}
    variants = [
        ("plain", 0, None),
        ("per layer", 2, None),
        ("blocks of 2 layers", 4, None),
        ("blocks of 2, dots_saveable", 4, jax.checkpoint_policies.dots_saveable),
    ]
    for label, every, policy in variants:
        loss = setup.jax_loss(every, policy)
        grad_fn = jax.jit(jax.grad(loss))
        row = {
            "every": every,
            "jax_policy": "nothing_saveable"
            if every and policy is None
            else ("dots_saveable" if policy else None),
            "jax_residuals": jmemory.classify(
                jmemory.saved_residuals(lambda p: loss(p, setup.x), setup.params),  # noqa: B023
                setup.batch,
            ),
            "jax_compiled": jmemory.compiled_memory(jax.grad(loss), setup.params, setup.x),
            "jax_seconds": median_seconds(
                lambda: jax.block_until_ready(grad_fn(setup.params, setup.x)),  # noqa: B023
                repeats,
            ),
            "jax_bit_identical": compare(
                plain_jax, grad_fn(setup.params, setup.x), **BIT_IDENTICAL
            ).passed,
        }
        if policy is None:  # torch.utils.checkpoint has no policies: nothing inside is kept
            row["torch_saved"] = setup.torch_saved(every)
            row["torch_seconds"] = median_seconds(lambda: setup.torch_grads(every), repeats)  # noqa: B023
            row["torch_bit_identical"] = compare(
                plain_torch, setup.torch_grads(every), **BIT_IDENTICAL
            ).passed
        rows[label] = row
    return rows


def bfloat16(sizes, batch) -> dict:
    from jaxgrad import memory as jmemory
    from torchref import memory as tmemory

    result = {}
    for dtype in ("float32", "bfloat16"):
        setup = Setup(sizes, batch, dtype)
        forward = lambda p, x, s=setup: s.model.apply(p, x)  # noqa: E731
        result[dtype] = {
            "torch_saved": tmemory.saved_bytes(
                lambda s=setup: s.module(s.x_t), setup.module.parameters(), [setup.x_t]
            )[1],
            "jax_residuals": jmemory.classify(
                jmemory.saved_residuals(lambda p, s=setup: forward(p, s.x), setup.params),  # noqa: B023
                setup.batch,
            ),
        }
    return result


def report(results: dict) -> None:
    cfg, forward = results["config"], results["forward"]
    t, j = forward["torch"], forward["jax"]
    print(
        f"MLP {'-'.join(map(str, cfg['sizes']))} ({cfg['params']:,} params), ReLU, batch {cfg['batch']}, float32"
    )
    print("\n1. what the forward keeps for the backward (MB = 1e6 bytes)")
    print(
        f"  torch  no_grad forward: saved {t['no_grad_saved']['total'] / MB:.1f} MB "
        f"(median {t['no_grad_seconds'] * 1e3:.0f} ms)"
    )
    g = t["graph_saved"]
    print(
        f"  torch  forward with graph: saved {g['total'] / MB:.1f} MB = activations "
        f"{g['activations'] / MB:.1f} + input {g['inputs'] / MB:.1f} + parameters (referenced, "
        f"not copied) {g['parameters'] / MB:.1f}; {g['tensors']} storages "
        f"(median {t['graph_seconds'] * 1e3:.0f} ms)"
    )
    print(
        f"  torch  forward+backward: saved tensors freed by backward(); .grad adds "
        f"{t['gradient_bytes'] / MB:.1f} MB"
    )
    er, vr, c = j["eager_residuals"], j["vjp_residuals"], j["compiled"]
    print(
        f"  JAX    forward (jit): XLA temporaries {c['forward']['temporaries'] / MB:.1f} MB "
        f"(median {j['forward_seconds'] * 1e3:.1f} ms)"
    )
    print(
        f"  JAX    residuals, jax.ad_checkpoint view: activations {er['activations'] / MB:.1f} MB, "
        f"bool masks {er['masks'] / MB:.1f} MB, weight-shaped {er['other'] / MB:.1f} MB, parameters and input (already in memory) {er['arguments'] / MB:.1f} MB"
    )
    print(
        f"  JAX    residuals in the jitted vjp closure: batch-shaped {vr['activations'] / MB:.1f} MB "
        f"(input included), masks {vr['masks'] / MB:.1f} MB, weight-shaped {vr['other'] / MB:.1f} MB; compiled outputs beyond the "
        f"logits {c['forward_with_residuals']['residual_outputs'] / MB:.1f} MB "
        f"(median {j['vjp_forward_seconds'] * 1e3:.1f} ms)"
    )
    print(
        f"  JAX    forward+backward (jit): XLA temporaries "
        f"{c['forward_backward']['temporaries'] / MB:.1f} MB, outputs (the gradients) "
        f"{c['forward_backward']['outputs'] / MB:.1f} MB"
    )
    print(
        f"  lesson 000 (process memory, 14.2M params, batch 1024): no_grad forward "
        f"+{LESSON_000['no_grad_forward_mb']} MB, graph +{LESSON_000['graph_extra_mb']} MB more"
    )

    print(
        "\n2. gradient checkpointing: saved activation bytes, forward+backward median, "
        "gradients vs plain"
    )
    print(
        f"  {'variant':<28}{'torch MB':>9}{'torch ms':>9}{'bit-id':>7}{'JAX MB':>9}"
        f"{'XLA tmp MB':>11}{'JAX ms':>8}{'bit-id':>7}"
    )
    for label, row in results["checkpointing"].items():
        ts = row.get("torch_saved")
        torch_cols = (
            (
                f"{ts['activations'] / MB:>9.2f}{row['torch_seconds'] * 1e3:>9.0f}"
                f"{str(row['torch_bit_identical']):>7}"
            )
            if ts
            else f"{'—':>9}{'—':>9}{'—':>7}"
        )
        print(
            f"  {label:<28}{torch_cols}{row['jax_residuals']['activations'] / MB:>9.2f}"
            f"{row['jax_compiled']['temporaries'] / MB:>11.2f}{row['jax_seconds'] * 1e3:>8.1f}"
            f"{str(row['jax_bit_identical']):>7}"
        )
    for line in results["checkpoint_findings"]:
        print("  " + line)

    print("\n3. bfloat16 parameters and input: saved activation bytes")
    b = results["bfloat16"]
    for side, key in (("torch", "torch_saved"), ("JAX", "jax_residuals")):
        f32, bf16 = b["float32"][key]["activations"], b["bfloat16"][key]["activations"]
        print(
            f"  {side:<6} float32 {f32 / MB:.2f} MB -> bfloat16 {bf16 / MB:.2f} MB (ratio {bf16 / f32:.3f})"
        )


def findings(rows: dict) -> list[str]:
    plain, layer, block = rows["plain"], rows["per layer"], rows["blocks of 2 layers"]
    lines = []
    if layer["torch_saved"]["activations"] == plain["torch_saved"]["activations"]:
        lines.append(
            "torch: per-layer checkpointing saves NOTHING here — each checkpoint stores "
            "its input, which is exactly the ReLU output the plain graph already stored."
        )
    lines.append(
        f"torch: blocks of 2 layers store {block['torch_saved']['activations'] / MB:.2f} MB "
        f"instead of {plain['torch_saved']['activations'] / MB:.2f} MB (only every "
        "other layer's output), at the cost of recomputing the blocks."
    )
    jp, jl = plain["jax_residuals"], layer["jax_residuals"]
    lines.append(
        f"JAX: per-layer checkpointing keeps the same ReLU outputs; it drops only what "
        f"jax.nn.relu's JVP rule adds (bool masks {jp['masks'] / MB:.2f} MB and a zeros "
        f"buffer per layer: {jp['activations'] / MB:.2f} -> {jl['activations'] / MB:.2f} MB) "
        "to the eager residual list. Blocks of 2 layers halve the stored outputs; "
        "dots_saveable keeps the matmul outputs inside each block, so it saves less."
    )
    temps = {row["jax_compiled"]["temporaries"] for row in rows.values()}
    if len(temps) == 1:
        lines.append(
            f"XLA: the compiled forward+backward's temporaries are {temps.pop() / MB:.2f} MB "
            "in every variant: checkpointing lowers what the forward stores, but not XLA's "
            "compiled peak for this network on this backend."
        )
    return lines


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="64-128x4-10 at batch 64 (seconds)")
    parser.add_argument("--batch", type=int, help="override the batch size")
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
    cfg = dict(QUICK if args.quick else FULL)
    if args.batch:
        cfg["batch"] = args.batch
    setup = Setup(cfg["sizes"], cfg["batch"])
    cfg["params"] = sum(p.numel() for p in setup.module.parameters())
    print(f"measuring {cfg['params']:,} params at batch {cfg['batch']} ...", flush=True)
    results = {"config": cfg, "lesson_000": LESSON_000}
    with jax.default_matmul_precision("highest"):
        results["forward"] = forward_modes(setup, args.repeats)
        print("checkpointing ...", flush=True)
        results["checkpointing"] = checkpointing(setup, args.repeats)
        results["checkpoint_findings"] = findings(results["checkpointing"])
        print("bfloat16 ...", flush=True)
        results["bfloat16"] = bfloat16(cfg["sizes"], cfg["batch"])
    report(results)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
        print(f"\nJSON written to {args.json}")
    return results


if __name__ == "__main__":
    main()
