"""Normalisation: ``batch_norm``, ``instance_norm``, ``group_norm``,
``local_response_norm``, as pure functions.

torch's functional forms update ``running_mean`` / ``running_var`` in place; nothing
here mutates, so each has two faces:

- ``batch_norm(input, running_mean, running_var, weight, bias, training, momentum,
  eps)`` and ``instance_norm`` with torch's signatures return the output only, as
  torch does (the in-place update is the part a pure function cannot mirror);
- ``batch_norm_with_stats`` / ``instance_norm_with_stats`` return ``(output,
  new_running_mean, new_running_var)``: what torch's running buffers hold after the
  call. The layers in ``jaxgrad.nn.norm`` use these.

torch's conventions, each a porting pitfall (flax / equinox differ):

- ``momentum`` is the weight of the *new* batch statistic: ``running = (1 − m)·running
  + m·batch`` (flax's ``momentum=0.99`` is the weight of the old average);
- the input is normalised with the *biased* batch variance (divide by ``n``) but the
  running variance accumulates the *unbiased* one (divide by ``n − 1``), ``n`` the
  number of values per channel (flax accumulates the biased one);
- variance is computed two-pass, ``mean((x − mean)²)`` (flax's default is
  ``E[x²] − E[x]²``); ``eps`` (1e-5) sits inside the square root.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxgrad.nn.functional._padding import pad
from jaxgrad.nn.functional._pool import avg_pool2d, avg_pool3d


def _per_channel(array, ndim: int):
    """`(C,)` -> `(1, C, 1, …)` for broadcasting against an `(N, C, *)` input."""
    return array.reshape((1, -1) + (1,) * (ndim - 2))


def _affine(out, weight, bias):
    if weight is not None:
        out = out * _per_channel(weight, out.ndim)
    if bias is not None:
        out = out + _per_channel(bias, out.ndim)
    return out


def _check_input(name: str, input, min_ndim: int = 2) -> None:
    if input.ndim < min_ndim:
        raise ValueError(
            f"{name}: `input` must be `(N, C, *)` with at least {min_ndim} dims, got shape "
            f"{tuple(input.shape)}."
        )


def batch_norm_with_stats(
    input,
    running_mean,
    running_var,
    weight=None,
    bias=None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
):
    """``F.batch_norm`` and what it leaves in the running buffers.

    Args:
      input: `(N, C, *)`.
      running_mean, running_var: `(C,)` or ``None`` (no running statistics: the
        batch statistics are used whatever ``training`` says, as torch does).
      weight, bias: `(C,)` or ``None``.
      training: normalise with the batch statistics and update the running ones.
      momentum: the weight of the new batch statistic in the running average
        (``1 / num_batches_tracked`` is torch's ``momentum=None``).

    Returns:
      ``(output `(N, C, *)`, new_running_mean, new_running_var)``; the running
      statistics are returned unchanged (or ``None``) when not updated.
    """
    _check_input("batch_norm", input)
    axes = (0, *range(2, input.ndim))
    use_batch = training or running_mean is None or running_var is None
    if not use_batch:
        mean, var = running_mean, running_var
        out = (input - _per_channel(mean, input.ndim)) / jnp.sqrt(
            _per_channel(var, input.ndim) + eps
        )
        return _affine(out, weight, bias), running_mean, running_var
    count = input.size // input.shape[1] if input.shape[1] else 0
    if input.size == 0:  # torch: an empty output, running statistics left alone
        return _affine(input, weight, bias), running_mean, running_var
    if training and count == 1:
        raise ValueError(
            "batch_norm: expected more than 1 value per channel when training, got input "
            f"shape {tuple(input.shape)} (torch raises the same: the unbiased variance "
            "is undefined)."
        )
    mean = jnp.mean(input, axis=axes)
    centred = input - _per_channel(mean, input.ndim)
    var = jnp.mean(centred * centred, axis=axes)  # biased: normalises
    invstd = 1.0 / jnp.sqrt(var + eps)
    out = _affine(centred * _per_channel(invstd, input.ndim), weight, bias)
    if training and running_mean is not None and running_var is not None:
        unbiased = var * (count / (count - 1))  # what the running average accumulates
        running_mean = (1 - momentum) * running_mean + momentum * mean.astype(running_mean.dtype)
        running_var = (1 - momentum) * running_var + momentum * unbiased.astype(running_var.dtype)
    return out, running_mean, running_var


def batch_norm(
    input,
    running_mean,
    running_var,
    weight=None,
    bias=None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
):
    """``torch.nn.functional.batch_norm``: the output only (see ``batch_norm_with_stats``
    for the updated running statistics torch writes in place)."""
    return batch_norm_with_stats(
        input, running_mean, running_var, weight, bias, training, momentum, eps
    )[0]


def instance_norm_with_stats(
    input,
    running_mean=None,
    running_var=None,
    weight=None,
    bias=None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
):
    """``F.instance_norm`` and its running statistics: every `(n, c)` slice normalised
    by its own mean and biased variance over the spatial dims.

    With ``use_input_stats`` and running statistics given, each is updated with the
    batch average of the per-instance statistics (unbiased variance), as torch's
    ``instance_norm`` does by running ``batch_norm`` on `(1, N·C, *)`.

    Args:
      input: `(N, C, *)` with at least one spatial dim.

    Returns:
      ``(output, new_running_mean, new_running_var)``.
    """
    _check_input("instance_norm", input, 3)
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ValueError(
                "instance_norm: `use_input_stats=False` needs `running_mean` and "
                "`running_var`, got None."
            )
        out = (input - _per_channel(running_mean, input.ndim)) / jnp.sqrt(
            _per_channel(running_var, input.ndim) + eps
        )
        return _affine(out, weight, bias), running_mean, running_var
    axes = tuple(range(2, input.ndim))
    count = 1
    for size in input.shape[2:]:
        count *= size
    if count <= 1:
        raise ValueError(
            "instance_norm: expected more than 1 spatial element when training, got input "
            f"shape {tuple(input.shape)}."
        )
    mean = jnp.mean(input, axis=axes, keepdims=True)
    centred = input - mean
    var = jnp.mean(centred * centred, axis=axes, keepdims=True)
    out = _affine(centred / jnp.sqrt(var + eps), weight, bias)
    if running_mean is not None and running_var is not None:
        batch_mean = jnp.mean(mean.reshape(mean.shape[:2]), axis=0)
        batch_var = jnp.mean(var.reshape(var.shape[:2]), axis=0) * (count / (count - 1))
        running_mean = (1 - momentum) * running_mean + momentum * batch_mean
        running_var = (1 - momentum) * running_var + momentum * batch_var
    return out, running_mean, running_var


def instance_norm(
    input,
    running_mean=None,
    running_var=None,
    weight=None,
    bias=None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
):
    """``torch.nn.functional.instance_norm``: the output only."""
    return instance_norm_with_stats(
        input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps
    )[0]


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """``torch.nn.functional.group_norm``: each sample's channels split into
    ``num_groups`` groups, each normalised by its mean and biased variance.

    Args:
      input: `(N, C, *)`, ``C`` divisible by ``num_groups``.
      weight, bias: `(C,)` or ``None``.
    """
    _check_input("group_norm", input)
    channels = input.shape[1]
    if num_groups <= 0 or channels % num_groups:
        raise ValueError(
            f"group_norm: the input's channels (={channels}) must be divisible by "
            f"`num_groups` (={num_groups})."
        )
    grouped = input.reshape((input.shape[0], num_groups, -1))
    mean = jnp.mean(grouped, axis=-1, keepdims=True)
    centred = grouped - mean
    var = jnp.mean(centred * centred, axis=-1, keepdims=True)
    out = (centred / jnp.sqrt(var + eps)).reshape(input.shape)
    return _affine(out, weight, bias)


def local_response_norm(input, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
    """``torch.nn.functional.local_response_norm``: ``x / (k + alpha · mean x²)^beta``, the
    mean over a window of ``size`` channels centred on each (``size // 2`` before,
    ``(size − 1) // 2`` after, zero-padded: the divisor stays ``size`` at the edges).

    torch's own steps (square, pad the channel dim, average pool, power), so the
    float64 results agree to rounding.

    Args:
      input: `(N, C, *)` with at least 3 dims.

    Raises:
      ValueError: for an input of fewer than 3 dims.
    """
    if input.ndim < 3:
        raise ValueError(
            f"local_response_norm: expected a 3-D or higher input `(N, C, *)`, "
            f"got shape {tuple(input.shape)} ({input.ndim} dims)."
        )
    if input.size == 0:
        return input
    div = input * input
    if input.ndim == 3:
        div = pad(div[:, None], (0, 0, size // 2, (size - 1) // 2))
        div = avg_pool2d(div, (size, 1), stride=1)[:, 0]
    else:
        sizes = input.shape
        div = div.reshape((sizes[0], 1, sizes[1], sizes[2], -1))
        div = pad(div, (0, 0, 0, 0, size // 2, (size - 1) // 2))
        div = avg_pool3d(div, (size, 1, 1), stride=1)[:, 0].reshape(sizes)
    div = (div * alpha + k) ** beta
    return input / div
