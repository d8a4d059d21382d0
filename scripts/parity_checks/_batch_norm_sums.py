"""torch's batch norm with its batch statistics summed by ``torch.mean``: torch against
itself in another summation order, for the float64 training rule
(``_zoo.torch_noise_step``'s ``"BatchNorm by torch.mean"`` run).

torch's CPU batch-norm kernel sums each channel's values in one sequential loop
(``batch_norm_cpu_collect_stats_contiguous_impl`` in ATen's
``native/cpu/batch_norm_kernel.cpp``; channels-last: one sequential sum per thread), so
the rounding of its mean and variance grows with the values a channel holds, while
``torch.mean`` and XLA's reductions sum in a tree. ``scripts/batch_norm_sums.py``
measures it: at 100,352 float64 values a channel (a 1x64x8x112x112 clip), torch's mean
and variance lie 107 and 169 ulps from the exact ones (``math.fsum``), ``torch.mean``'s
and jaxgrad's within 3. Every other torch run of the noise rule (channels-last, the
batch reversed, one ulp off) keeps torch's kernel, so none measured that rounding: torchvision's s3d (one clip
of 16x224x224) failed its float64 training step with jaxgrad 1.7x the tier from torch
against at most 0.38x from any of those runs; torch with its statistics summed by
``torch.mean`` lies as far from torch's kernel as jaxgrad does (16.75x against 16.86x on
its worst gradient, dropout off), and jaxgrad lies within the one-ulp noise of it.

The function is the same batch norm (biased variance to normalise, unbiased into the
running variance, ``momentum`` as ``F.batch_norm`` takes it), written in torch ops that
autograd differentiates: another summation order of the same arithmetic, not another
formula.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_SIGNATURE = inspect.signature(F.batch_norm)


def batch_norm_by_mean(
    input,
    running_mean,
    running_var,
    weight=None,
    bias=None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
):
    """``F.batch_norm`` in training mode, its statistics summed by ``torch.mean``.

    Args:
      input: `(N, C, *)`, more than one value a channel.
      running_mean, running_var: `(C,)` or ``None``; updated in place, as torch does.
      weight, bias: `(C,)` or ``None``.
      training: must be True (evaluation mode normalises by the running statistics:
        no sum to reorder).

    Returns:
      `(N, C, *)`: ``(input - mean) / sqrt(var + eps) * weight + bias``.
    """
    if not training:
        raise ValueError(
            "batch_norm_by_mean: training=False normalises by the running statistics, "
            "with no batch sum to reorder; call F.batch_norm."
        )
    dims = [0, *range(2, input.ndim)]
    shape = [1, -1] + [1] * (input.ndim - 2)
    count = input.numel() // input.shape[1]
    if count < 2:
        raise ValueError(
            f"batch_norm_by_mean: expected more than 1 value per channel when training, "
            f"got input shape {tuple(input.shape)}."
        )
    mean = input.mean(dims)
    centred = input - mean.reshape(shape)
    var = (centred * centred).mean(dims)  # biased: normalises
    out = centred * (1 / torch.sqrt(var + eps)).reshape(shape)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    with torch.no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(momentum * mean)
        if running_var is not None:  # the unbiased variance, as torch accumulates
            running_var.mul_(1 - momentum).add_(momentum * var * (count / (count - 1)))
    return out


class BatchNormByMean(TorchFunctionMode):
    """While active, every training-mode ``F.batch_norm`` call (``nn.BatchNorm*``,
    timm's ``BatchNormAct2d``) runs as ``batch_norm_by_mean``; ``calls`` counts them
    (none: the run was torch's own step again, and measures nothing)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.batch_norm:
            bound = _SIGNATURE.bind(*args, **kwargs)
            bound.apply_defaults()
            if bound.arguments["training"]:
                self.calls += 1
                return batch_norm_by_mean(**bound.arguments)
        return func(*args, **kwargs)


def has_batch_norm(module) -> bool:
    """Whether ``module`` holds a torch batch-norm layer (``nn.BatchNorm1d/2d/3d`` and
    their subclasses): a ``BatchNormByMean`` run has statistics to reorder."""
    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in module.modules())


__all__ = ["batch_norm_by_mean", "BatchNormByMean", "has_batch_norm"]
