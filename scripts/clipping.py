"""Gradient clipping: torch.nn.utils.clip_grad_norm_/clip_grad_value_ vs jaxgrad.optim.

1. lesson 004 example 6: a gradient of total norm ~3.48e6 (tanh MLP [4, 8, 1],
   loss deliberately scaled) clipped to total norm 1.0 across all parameters —
   torch and jaxgrad give the same clipped tensors; optax.clip_by_global_norm
   differs by torch's 1e-6 in the denominator;
2. the same gradient clipped element-wise at 1.0;
3. where the 1e-6 matters: a gradient of norm 2e-6 clipped to 1e-6;
4. clipping after accumulation over micro-batches, then one SGD step, in the same
   order as torch (backward per micro-batch -> clip -> step).
"""

from __future__ import annotations

import argparse

import numpy as np


def _grads(example, dtype):
    import jax
    import jax.numpy as jnp

    import jaxgrad.nn
    from jaxgrad import losses as jlosses
    from torchref import clipping as tclip

    model = jaxgrad.nn.mlp(tclip.SIZES, "tanh", dtype=getattr(jnp, dtype))
    params = model.load_state_dict(example["state_dict"])
    x, y = jnp.asarray(example["x"]), jnp.asarray(example["y"])
    return jax.grad(lambda p: jlosses.mse_loss(model.apply(p, x), y) * example["loss_scale"])(
        params
    )


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k])))) for k in a)


def norm_and_value(dtype: str) -> None:
    import jax
    import jax.numpy as jnp
    import optax

    from jaxgrad import optim as joptim
    from torchref import clipping as tclip

    example = tclip.huge_gradient_example(dtype)
    grads = _grads(example, dtype)
    before = float(joptim.global_norm(grads))
    torch_clipped = tclip.clipped(example, max_norm=1.0)
    ours, total = joptim.clip_grad_norm(grads, 1.0)
    theirs, _ = optax.clip_by_global_norm(1.0).update(grads, optax.EmptyState())
    print(f"1. clip_grad_norm_(max_norm=1.0) on lesson 004's exploding gradient, {dtype}")
    print(
        f"  total norm before: torch {torch_clipped['total_norm'].item():.6e}   "
        f"jaxgrad {float(total):.6e}   (lesson 004: 3.48e+06)"
    )
    torch_after = np.sqrt(sum(float(g.norm()) ** 2 for g in torch_clipped["grads"].values()))
    print(
        f"  total norm after:  torch {torch_after:.15f}   jaxgrad "
        f"{float(joptim.global_norm(ours)):.15f}   optax {float(joptim.global_norm(theirs)):.15f}"
    )
    print(
        f"  {'param':<9} {'torch clipped (first 3)':<42} {'max |jaxgrad - torch|':>22} "
        f"{'max |optax - torch|':>20}"
    )
    for name, g in torch_clipped["grads"].items():
        g = g.numpy()
        print(
            f"  {name:<9} {np.array2string(g.ravel()[:3], precision=8):<42} "
            f"{np.max(np.abs(np.asarray(ours[name]) - g)):>22.1e} "
            f"{np.max(np.abs(np.asarray(theirs[name]) - g)):>20.1e}"
        )
    print(
        f"  (before clipping the largest element was {max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(grads)):.4e};"
        f" norm {before:.4e})\n"
    )

    torch_value = tclip.clipped(example, clip_value=1.0)["grads"]
    ours_value = joptim.clip_grad_value(grads, 1.0)
    print(f"2. clip_grad_value_(clip_value=1.0), {dtype}")
    for name, g in torch_value.items():
        g = g.numpy()
        print(
            f"  {name:<9} torch {np.array2string(g.ravel()[:4], precision=4):<40} "
            f"max |jaxgrad - torch| {np.max(np.abs(np.asarray(ours_value[name]) - g)):.1e}"
        )
    total_after = float(joptim.global_norm(ours_value))
    print(
        f"  norm after value clipping: {total_after:.4f} (direction changes: "
        f"cosine with the original {_cosine(grads, ours_value):.4f})\n"
    )


def _cosine(a, b) -> float:
    import jax

    flat_a = np.concatenate([np.ravel(v) for v in jax.tree.leaves(a)])
    flat_b = np.concatenate([np.ravel(v) for v in jax.tree.leaves(b)])
    return float(flat_a @ flat_b / np.linalg.norm(flat_a) / np.linalg.norm(flat_b))


def small_norm() -> None:
    import jax.numpy as jnp
    import optax
    import torch

    from jaxgrad import optim as joptim

    print("3. Where torch's 1e-6 matters: a gradient [2e-6, 0] clipped to max_norm=1e-6 (float64)")
    weight = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    weight.grad = torch.tensor([2e-6, 0.0], dtype=torch.float64)
    torch.nn.utils.clip_grad_norm_([weight], 1e-6)
    grads = {"w": jnp.array([2e-6, 0.0])}
    ours, _ = joptim.clip_grad_norm(grads, 1e-6)
    theirs, _ = optax.clip_by_global_norm(1e-6).update(grads, optax.EmptyState())
    print(f"  torch                         {weight.grad.numpy()}   scale 1e-6/(2e-6 + 1e-6) = 1/3")
    print(f"  jaxgrad clip_grad_norm        {np.asarray(ours['w'])}")
    print(f"  optax.clip_by_global_norm     {np.asarray(theirs['w'])}   scale 1e-6/2e-6 = 1/2\n")


def after_accumulation(k: int = 4) -> None:
    import jax.numpy as jnp
    import optax
    import torch

    import jaxgrad.nn
    from jaxgrad import losses as jlosses
    from jaxgrad import optim as joptim
    from jaxgrad.accumulate import accumulate_grads
    from torchref import accumulate as taccumulate

    print(f"4. Accumulate over {k} micro-batches, clip to 0.1, one SGD step (float64)")
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
    ).double()
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4 * k, 4)), rng.standard_normal((4 * k, 1))
    model, params = jaxgrad.nn.from_torch(module)
    batches = [(torch.from_numpy(x[i::k]), torch.from_numpy(y[i::k])) for i in range(k)]
    # torch: backward per micro-batch (loss / k) -> clip_grad_norm_ -> step()
    taccumulate.accumulate_grads(module, torch.nn.functional.mse_loss, batches)
    torch_norm = torch.nn.utils.clip_grad_norm_(module.parameters(), 0.1).item()
    torch.optim.SGD(module.parameters(), lr=0.5).step()
    # jaxgrad: accumulate_grads -> chain(clip_grad_norm_transform, sgd)
    micro = (
        jnp.stack([jnp.asarray(b[0].numpy()) for b in batches]),
        jnp.stack([jnp.asarray(b[1].numpy()) for b in batches]),
    )
    _, grads = accumulate_grads(
        lambda p, b: jlosses.mse_loss(model.apply(p, b[0]), b[1]), params, micro
    )
    optimizer = optax.chain(joptim.clip_grad_norm_transform(0.1), joptim.sgd(0.5))
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    stepped = optax.apply_updates(params, updates)
    torch_params = {n: p.detach().numpy() for n, p in module.named_parameters()}
    print(
        f"  accumulated gradient norm: torch {torch_norm:.12f}   jaxgrad "
        f"{float(joptim.global_norm(grads)):.12f}"
    )
    print(
        f"  params after the step: max |jaxgrad - torch| = {_max_diff(torch_params, stepped):.1e}"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dtype",
        choices=("float64", "float32"),
        default="float64",
        help="precision of demonstrations 1 and 2 (default float64)",
    )
    args = parser.parse_args(argv)
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
    jax.config.update("jax_enable_x64", True)
    norm_and_value(args.dtype)
    small_norm()
    after_accumulation()


if __name__ == "__main__":
    main()
