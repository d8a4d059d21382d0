"""Gradient accumulation in PyTorch and in jaxgrad, side by side.

Four demonstrations (lesson 002 "The accumulation trap", lesson 004 example 5):
  1. the trap: backward() three times on one batch without zero_grad() — torch's
     gradient norm grows 1x, 2x, 3x; jax.grad returns the same gradient every call;
     an explicit running sum in JAX reproduces torch's numbers;
  2. deliberate accumulation over micro-batches equals the combined batch;
  3. forgetting to divide by k: a k=2 run equals the correct run at twice the lr;
  4. zero_grad() sets .grad to None; zero_grad(set_to_none=False) to zeros.
"""

from __future__ import annotations

import argparse
import functools

import numpy as np


def global_norm(grads) -> float:
    return float(np.sqrt(sum(np.sum(np.asarray(g, np.float64) ** 2) for g in grads.values())))


def trap(seed: int) -> None:
    import jax
    import jax.numpy as jnp
    import torch

    import jaxgrad.nn
    from jaxgrad import losses as jlosses
    from torchref import accumulate as taccumulate

    print("1. The accumulation trap: nn.Linear(4, 1), the same batch, backward() x3")
    torch.manual_seed(seed)
    module = torch.nn.Linear(4, 1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    history = taccumulate.accumulation_trap(module, torch.nn.functional.mse_loss, x, y)
    model, params = jaxgrad.nn.from_torch(module)
    grad_fn = jax.grad(
        lambda p: jlosses.mse_loss(model.apply(p, jnp.asarray(x.numpy())), jnp.asarray(y.numpy()))
    )
    running = jax.tree.map(jnp.zeros_like, params)
    first = history[0]["weight"].norm().item()
    print(
        f"{'call':>4}  {'torch .grad (no zero_grad)':>27}  {'ratio':>5}  "
        f"{'jax.grad':>9}  {'JAX explicit running sum':>24}"
    )
    for step, grads in enumerate(history, start=1):
        jax_grads = grad_fn(params)
        running = jax.tree.map(jnp.add, running, jax_grads)
        torch_norm = grads["weight"].norm().item()
        print(
            f"{step:>4}  {torch_norm:>27.6f}  {torch_norm / first:>4.2f}x  "
            f"{float(jnp.linalg.norm(jax_grads['weight'])):>9.6f}  "
            f"{float(jnp.linalg.norm(running['weight'])):>24.6f}"
        )
    print("(lesson 002 printed 0.42 / 0.84 / 1.26 for its random batch: the same 1x, 2x, 3x)\n")


def micro_batches(seed: int) -> None:
    import jax
    import jax.numpy as jnp
    import torch

    import jaxgrad.nn
    from jaxgrad.accumulate import accumulate_grads
    from torchref import accumulate as taccumulate

    print("2. Deliberate accumulation: Linear(3, 1), two micro-batches of 4, float32")
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 1)
    x1, x2 = torch.randn(4, 3), torch.randn(4, 3)
    y1, y2 = torch.randn(4, 1), torch.randn(4, 1)

    def mse(out, y):
        return ((out - y) ** 2).mean()

    _, accumulated = taccumulate.accumulate_grads(model, mse, [(x1, y1), (x2, y2)])
    model.zero_grad()
    mse(model(torch.cat([x1, x2])), torch.cat([y1, y2])).backward()
    combined = {n: p.grad.clone() for n, p in model.named_parameters()}
    jmodel, params = jaxgrad.nn.from_torch(model)

    def loss_fn(p, batch):
        return jnp.mean((jmodel.apply(p, batch[0]) - batch[1]) ** 2)

    stacked = (
        jnp.stack([jnp.asarray(x1.numpy()), jnp.asarray(x2.numpy())]),
        jnp.stack([jnp.asarray(y1.numpy()), jnp.asarray(y2.numpy())]),
    )
    _, jax_accumulated = jax.jit(functools.partial(accumulate_grads, loss_fn))(params, stacked)
    jax_combined = jax.grad(loss_fn)(
        params, (jnp.concatenate(stacked[0]), jnp.concatenate(stacked[1]))
    )

    def max_diff(a, b):
        return max(float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k])))) for k in a)

    print(
        f"  torch: (loss/2).backward() x2 vs combined batch   max |diff| = "
        f"{max_diff(accumulated, combined):.1e}"
    )
    print(
        f"  JAX:   accumulate_grads (lax.scan) vs combined     max |diff| = "
        f"{max_diff(jax_accumulated, jax_combined):.1e}"
    )
    print(
        f"  torch accumulated vs jaxgrad accumulated           max |diff| = "
        f"{max_diff(accumulated, jax_accumulated):.1e}"
    )
    print("  (lesson 004 example 5 measured ~3e-8 in float32)\n")


def forgetting_to_divide(seed: int, steps: int) -> None:
    import jax.numpy as jnp
    import optax
    import torch

    import jaxgrad.nn
    from jaxgrad import losses as jlosses
    from jaxgrad import optim as joptim
    from jaxgrad.accumulate import accumulate_grads
    from torchref import accumulate as taccumulate

    print(f"3. Forgetting '/ k' (k = 2): SGD on a Linear(4, 1), {steps} steps, loss before each")
    torch.manual_seed(seed)
    module = torch.nn.Linear(4, 1)
    start = {k: v.clone() for k, v in module.state_dict().items()}
    batches = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(2)]
    rows = {}
    for label, divide, lr in (
        ("torch, loss / k, lr 0.05", True, 0.05),
        ("torch, no / k,  lr 0.05", False, 0.05),
        ("torch, loss / k, lr 0.10", True, 0.10),
    ):
        module.load_state_dict(start)
        rows[label] = taccumulate.train_with_accumulation(
            module, torch.nn.functional.mse_loss, batches, steps=steps, lr=lr, divide=divide
        )
    module.load_state_dict(start)
    model, params = jaxgrad.nn.from_torch(module)
    stacked = (
        jnp.stack([jnp.asarray(b[0].numpy()) for b in batches]),
        jnp.stack([jnp.asarray(b[1].numpy()) for b in batches]),
    )

    def loss_fn(p, batch):
        return jlosses.mse_loss(model.apply(p, batch[0]), batch[1])

    for reduction in ("mean", "sum"):
        p, optimizer, losses = params, joptim.sgd(0.05), []
        state = optimizer.init(p)
        for _ in range(steps):
            loss, grads = accumulate_grads(loss_fn, p, stacked, reduction=reduction)
            losses.append(float(loss) / (1 if reduction == "mean" else 2))
            updates, state = optimizer.update(grads, state, p)
            p = optax.apply_updates(p, updates)
        rows[f"jaxgrad, reduction={reduction!r}, lr 0.05"] = losses
    width = max(map(len, rows))
    print(f"  {'run':<{width}}  " + "  ".join(f"step {i + 1:<3}" for i in range(steps)))
    for label, losses in rows.items():
        print(f"  {label:<{width}}  " + "  ".join(f"{v:8.5f}" for v in losses))
    print("  -> the run without '/ k' is the correct run at twice the learning rate\n")


def zero_grad_semantics() -> None:
    import torch

    print("4. zero_grad() in torch (jaxgrad has no .grad to clear)")
    module = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    module(torch.ones(1, 2)).sum().backward()
    print(f"  after backward():                     weight.grad = {module.weight.grad}")
    optimizer.zero_grad()
    print(f"  after zero_grad():                    weight.grad = {module.weight.grad}")
    module(torch.ones(1, 2)).sum().backward()
    optimizer.zero_grad(set_to_none=False)
    print(f"  after zero_grad(set_to_none=False):   weight.grad = {module.weight.grad}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=0, help="torch seed for weights and data")
    parser.add_argument(
        "--steps", type=int, default=5, help="training steps in demonstration 3 (default 5)"
    )
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps (={args.steps}) must be >= 1")
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
    trap(args.seed)
    micro_batches(args.seed)
    forgetting_to_divide(args.seed, args.steps)
    zero_grad_semantics()


if __name__ == "__main__":
    main()
