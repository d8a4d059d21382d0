"""Autograd workflows side by side: accumulation, detach, freezing, intermediate
gradients, gradients on demand, clipping. Each row compares jaxgrad with torch on
copied weights and the same inputs."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

import jaxgrad.nn
import torchref
from jaxgrad import autodiff as jautodiff
from jaxgrad import losses as jlosses
from jaxgrad import optim as joptim
from jaxgrad.accumulate import accumulate_grads, split_batch
from jaxgrad.parity import ParityReport, compare
from parity_checks.harness import TORCH_DTYPES, Check, jax_precision
from torchref import accumulate as taccumulate
from torchref import autodiff as tautodiff
from torchref import clipping as tclip
from torchref import optim as toptim

# ------------------------------------------------------------------ the two-layer twins


def two_layer_jax(x, w1, b1, w2, b2, y, *, tap=jautodiff.no_tap):
    """``mean((tanh(x w1ᵀ + b1) w2ᵀ + b2 - y)²)`` with its intermediates tapped."""
    pre = tap("pre", x @ w1.T + b1)
    hidden = tap("hidden", jnp.tanh(pre))
    out = tap("out", hidden @ w2.T + b2)
    return jnp.mean((out - y) ** 2)


def two_layer_torch(x, w1, b1, w2, b2, y, *, tap=lambda name, value: value):
    pre = tap("pre", x @ w1.T + b1)
    hidden = tap("hidden", torch.tanh(pre))
    out = tap("out", hidden @ w2.T + b2)
    return ((out - y) ** 2).mean()


TAPS = ("pre", "hidden", "out")


def two_layer_arrays(dtype: str, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    shapes = {"x": (5, 3), "w1": (4, 3), "b1": (4,), "w2": (2, 4), "b2": (2,), "y": (5, 2)}
    return {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}


def intermediate_parity(dtype: str, *, jit: bool = True) -> ParityReport:
    arrays = two_layer_arrays(dtype)
    tensors = [torch.from_numpy(a).requires_grad_(k not in ("x", "y")) for k, a in arrays.items()]
    out, grads = tautodiff.retain_grads(two_layer_torch, tensors, TAPS)
    with jax_precision(dtype):

        def run(args):
            return jautodiff.intermediate_grads(two_layer_jax, args, TAPS)

        jout, jgrads = (jax.jit(run) if jit else run)(
            tuple(jnp.asarray(a) for a in arrays.values())
        )
        return compare(
            {"output": out, "grads": grads},
            {"output": jout, "grads": jgrads},
            name=f"retain_grad vs intermediate_grads {dtype}",
        )


def grad_wrt_parity(dtype: str) -> ParityReport:
    arrays = two_layer_arrays(dtype)
    tensors = {k: torch.from_numpy(a).requires_grad_(k in ("w1", "w2")) for k, a in arrays.items()}
    loss = two_layer_torch(*tensors.values())
    reference = torch.autograd.grad(loss, [tensors["w1"], tensors["w2"]])
    with jax_precision(dtype):
        params = {k: jnp.asarray(a) for k, a in arrays.items()}
        candidate = jautodiff.grad_wrt(lambda p: two_layer_jax(**p), params, ["w1", "w2"])
        return compare(list(reference), list(candidate), name=f"autograd.grad vs grad_wrt {dtype}")


# ---------------------------------------------------------------------- accumulation


def accumulation_parity(dtype: str, k: int = 4, micro: int = 3, seed: int = 0) -> ParityReport:
    torch.manual_seed(seed)
    module = torchref.mlp([4, 6, 2], "tanh", dtype=TORCH_DTYPES[dtype])
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((k * micro, 4)).astype(dtype)
    y = rng.standard_normal((k * micro, 2)).astype(dtype)
    batches = [
        (
            torch.from_numpy(x[i * micro : (i + 1) * micro]),
            torch.from_numpy(y[i * micro : (i + 1) * micro]),
        )
        for i in range(k)
    ]
    loss, grads = taccumulate.accumulate_grads(module, torch.nn.functional.mse_loss, batches)
    with jax_precision(dtype):
        model, params = jaxgrad.nn.from_torch(module)

        def loss_fn(params, batch):
            return jlosses.mse_loss(model.apply(params, batch[0]), batch[1])

        jloss, jgrads = jax.jit(functools.partial(accumulate_grads, loss_fn))(
            params, split_batch((jnp.asarray(x), jnp.asarray(y)), k)
        )
        return compare(
            {"loss": loss, "grads": grads},
            {"loss": jloss, "grads": jgrads},
            name=f"accumulation over {k} micro-batches {dtype}",
        )


# --------------------------------------------------------------------------- detach


def target_network_twins(dtype: str = "float64", seed: int = 0, n_batches: int = 2):
    """``(torch result, jax result)`` of lesson 002's target network."""
    torch.manual_seed(seed)
    online = torch.nn.Linear(4, 1, dtype=TORCH_DTYPES[dtype])
    target_net = torch.nn.Linear(4, 1, dtype=TORCH_DTYPES[dtype])
    rng = np.random.default_rng(seed)
    batches = [rng.standard_normal((8, 4)).astype(dtype) for _ in range(n_batches)]
    reference = tautodiff.target_network_step(
        online, target_net, [torch.from_numpy(b) for b in batches]
    )
    with jax_precision(dtype):
        online_model, online_params = jaxgrad.nn.from_torch(online)
        target_model, target_params = jaxgrad.nn.from_torch(target_net)
        candidate = jautodiff.target_network_grads(
            online_model,
            online_params,
            target_model,
            target_params,
            [jnp.asarray(b) for b in batches],
        )
        candidate = jax.tree.map(np.asarray, candidate)
    return reference, candidate


def detach_parity(dtype: str) -> ParityReport:
    reference, candidate = target_network_twins(dtype)
    # torch leaves the target's .grad as None; JAX returns exact zeros
    target_absent = all(g is None for g in reference["target"].values())
    target_zero = all(not np.any(g) for g in candidate["target"].values())
    # `running` is a Python-float total of `dtype` losses: held in float64, computed in
    # `dtype`, so it is judged at `dtype`'s tier (float32 bits differ between CPUs).
    return compare(
        {
            "online": reference["online"],
            "running": np.float64(reference["running"]),
            "no_gradient_into_target": np.array(target_absent),
        },
        {
            "online": candidate["online"],
            "running": np.float64(candidate["running"]),
            "no_gradient_into_target": np.array(target_zero),
        },
        computed_in={"running": dtype},
        name=f"target network (detach / stop_gradient) {dtype}",
    )


# -------------------------------------------------------------------------- freezing


def frozen_model(dtype: str = "float64", seed: int = 0):
    """Lesson 002's ``Linear(64,128) → ReLU → Linear(128,10)``, a batch of 4 and labels."""
    torch.manual_seed(seed)
    module = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    ).to(TORCH_DTYPES[dtype])
    rng = np.random.default_rng(seed)
    return module, rng.standard_normal((4, 64)).astype(dtype), np.array([0, 1, 2, 3])


def frozen_training(
    dtype: str = "float64", steps: int = 5, lr: float = 1e-2, weight_decay: float = 0.1
) -> tuple[dict, dict, dict]:
    """AdamW with layer 0 frozen, ``steps`` steps in both frameworks.

    Returns ``(start params, torch params, jax params)``, numpy.
    """
    module, x, labels = frozen_model(dtype)
    start = torchref.models.state_dict_numpy(module)
    toptim.freeze(module, ["0"])
    torch_opt = torch.optim.AdamW(
        [p for p in module.parameters() if p.requires_grad], lr=lr, weight_decay=weight_decay
    )
    for _ in range(steps):
        torch_opt.zero_grad()
        torch.nn.functional.cross_entropy(
            module(torch.from_numpy(x)), torch.from_numpy(labels)
        ).backward()
        torch_opt.step()
    with jax_precision(dtype):
        model, params = jaxgrad.nn.from_torch(module)
        params = model.load_state_dict(start)
        optimizer = joptim.freeze(joptim.adamw(lr=lr, weight_decay=weight_decay), {"0"})

        @jax.jit
        def step(params, opt_state):
            grads = jax.grad(
                lambda p: jlosses.cross_entropy(model.apply(p, jnp.asarray(x)), jnp.asarray(labels))
            )(params)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        opt_state = optimizer.init(params)
        for _ in range(steps):
            params, opt_state = step(params, opt_state)
        params = jax.tree.map(np.asarray, params)
    return start, torchref.models.state_dict_numpy(module), params


def freezing_parity(dtype: str) -> ParityReport:
    start, torch_params, jax_params = frozen_training(dtype)
    frozen_unchanged = all(np.array_equal(start[k], jax_params[k]) for k in ("0.weight", "0.bias"))
    # the frozen layer keeps torch's float32 initialisation, up-cast: its values look
    # float32, but the run is `dtype` arithmetic and is judged at `dtype`'s tier
    return compare(
        {"params": torch_params, "frozen_bit_identical": np.array(True)},
        {"params": jax_params, "frozen_bit_identical": np.array(frozen_unchanged)},
        computed_in=dtype,
        name=f"AdamW with layer 0 frozen, 5 steps {dtype}",
    )


# -------------------------------------------------------------------------- clipping


def clipping_parity(
    dtype: str, mode: str, *, scale: float = 1.0, max_norm: float = 1.0
) -> ParityReport:
    """The lesson's 3.48e6-norm gradient times ``scale``, clipped by norm or value.

    At scale 1 torch's ``+ 1e-6`` in the clip coefficient is 3e-13 relative, under
    the float64 tier; a 3.48e-3 norm clipped to 1e-3 shows it at 3e-4.
    """
    example = tclip.huge_gradient_example(dtype)
    example["loss_scale"] *= scale
    if mode == "norm":
        reference = tclip.clipped(example, max_norm=max_norm)
    else:
        reference = {"grads": tclip.clipped(example, clip_value=1.0)["grads"]}
    with jax_precision(dtype):
        model = jaxgrad.nn.mlp(tclip.SIZES, "tanh", dtype=getattr(jnp, dtype))
        params = model.load_state_dict(example["state_dict"])
        x, y = jnp.asarray(example["x"]), jnp.asarray(example["y"])
        grads = jax.grad(lambda p: jlosses.mse_loss(model.apply(p, x), y) * example["loss_scale"])(
            params
        )
        if mode == "norm":
            clipped, total_norm = joptim.clip_grad_norm(grads, max_norm)
            candidate = {"grads": clipped, "total_norm": total_norm}
        else:
            candidate = {"grads": joptim.clip_grad_value(grads, 1.0)}
        return compare(
            reference,
            candidate,
            name=f"clip_grad_{mode} on a {3.48e6 * scale:.3g} gradient {dtype}",
        )


CHECKS = []
for _dtype in ("float64", "float32"):
    CHECKS += [
        Check(
            name="accumulation over micro-batches",
            dtype=_dtype,
            area="autograd",
            run=functools.partial(accumulation_parity, _dtype),
        ),
        Check(
            name="detach: target network",
            dtype=_dtype,
            area="autograd",
            run=functools.partial(detach_parity, _dtype),
        ),
        Check(
            name="freezing: AdamW, layer 0 frozen",
            dtype=_dtype,
            area="autograd",
            run=functools.partial(freezing_parity, _dtype),
        ),
        Check(
            name="intermediate grads (retain_grad)",
            dtype=_dtype,
            area="autograd",
            run=functools.partial(intermediate_parity, _dtype),
        ),
        Check(
            name="grads on demand (autograd.grad)",
            dtype=_dtype,
            area="autograd",
            run=functools.partial(grad_wrt_parity, _dtype),
        ),
        Check(
            name="clip_grad_norm_ (3.48e6 -> 1.0)",
            dtype=_dtype,
            area="autograd",
            run=functools.partial(clipping_parity, _dtype, "norm"),
        ),
        Check(
            name="clip_grad_value_ (1.0)",
            dtype=_dtype,
            area="autograd",
            run=functools.partial(clipping_parity, _dtype, "value"),
        ),
        Check(
            name="clip_grad_norm_ (3.48e-3 -> 1e-3)",
            dtype=_dtype,
            area="autograd",
            run=functools.partial(clipping_parity, _dtype, "norm", scale=1e-9, max_norm=1e-3),
        ),
    ]
