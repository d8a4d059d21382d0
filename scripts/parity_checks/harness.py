"""One parity harness for the report and the tests (tinygrad's ``helper_test_op`` idea).

``model_parity(torch_module, x, y, ...)`` runs the torch module forward and
``backward()``, converts it with ``jaxgrad.nn.from_torch`` (weights copied, never
"same seed"), runs the twin forward and ``jax.grad`` (jitted or not), and compares
output, loss and every parameter gradient with ``jaxgrad.parity.compare`` at the
policy tier of the dtype. Float64 checks run inside ``jax.enable_x64``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import torch

import jaxgrad
from jaxgrad import losses as jlosses
from jaxgrad.parity import ParityReport
from jaxgrad_dev.precision import jax_precision  # the checks import it from here too

TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclasses.dataclass(frozen=True)
class Check:
    """A row of the parity report: ``run()`` returns a ``ParityReport``."""

    name: str
    dtype: str
    run: Callable[[], ParityReport]
    area: str = ""


def torch_forward_backward(
    module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: Callable
) -> dict:
    """Output, loss and ``.grad`` of every parameter after one ``backward()``."""
    module.zero_grad(set_to_none=True)
    out = module(x)
    loss = loss_fn(out, y)
    loss.backward()
    return {
        "output": out.detach(),
        "loss": loss.detach(),
        "grads": {name: p.grad for name, p in module.named_parameters()},
    }


def jax_forward_backward(model, params: dict, x, y, loss_fn: Callable, *, jit: bool) -> dict:
    """The same as ``torch_forward_backward`` with ``jax.value_and_grad``."""

    def objective(params):
        out = model.apply(params, x)
        return loss_fn(out, y), out

    fn = jax.value_and_grad(objective, has_aux=True)
    if jit:
        fn = jax.jit(fn)
    (loss, out), grads = fn(params)
    return {"output": out, "loss": loss, "grads": grads}


LOSS_PAIRS = {
    "mse": (torch.nn.functional.mse_loss, jlosses.mse_loss),
    "cross_entropy": (torch.nn.functional.cross_entropy, jlosses.cross_entropy),
}


def model_parity(
    torch_module: torch.nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    loss: str = "mse",
    jit: bool = False,
    name: str = "",
    rtol: float | None = None,
    atol: float | None = None,
) -> ParityReport:
    """Compare forward output, loss and parameter gradients of a torch module and its twin.

    Args:
      torch_module: a module made of ``jaxgrad.nn.SUPPORTED`` layers, in the dtype
        to check (float32 or float64).
      x, y: numpy input `(batch, in_features)` and target (float `(batch, out)` for
        ``"mse"``, integer `(batch,)` for ``"cross_entropy"``).
      loss: a key of ``LOSS_PAIRS``.
      jit: run the JAX side under ``jax.jit``.
    """
    dtype = str(next(torch_module.parameters()).dtype).replace("torch.", "")
    torch_loss, jax_loss = LOSS_PAIRS[loss]
    reference = torch_forward_backward(
        torch_module, torch.from_numpy(x), torch.from_numpy(y), torch_loss
    )
    with jax_precision(dtype):
        model, params = jaxgrad.nn.from_torch(torch_module)
        candidate = jax_forward_backward(
            model, params, jnp.asarray(x), jnp.asarray(y), jax_loss, jit=jit
        )
        return jaxgrad.parity.compare(reference, candidate, rtol=rtol, atol=atol, name=name)


def random_batch(
    rng: np.random.Generator,
    batch: int,
    in_features: int,
    out_features: int,
    dtype: str,
    loss: str = "mse",
) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` for ``model_parity``: standard-normal inputs and matching targets."""
    x = rng.standard_normal((batch, in_features)).astype(dtype)
    if loss == "cross_entropy":
        y = rng.integers(0, out_features, size=(batch,)).astype(np.int64)
    else:
        y = rng.standard_normal((batch, out_features)).astype(dtype)
    return x, y
