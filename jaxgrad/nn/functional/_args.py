"""Argument checks shared by the convolution, pooling, padding and resampling functions.

torch accepts ``int`` or a tuple of ``n`` ints for every spatial argument
(``kernel_size``, ``stride``, ``padding``, ``dilation``); ``ntuple`` turns either into
a tuple and rejects everything else with an error naming the argument, the value
received and what was expected. ``check_sizes`` does the same for a layer's feature
and layer counts (``in_features``, ``num_encoder_layers``…).
"""

from __future__ import annotations

import operator


def _is_int(value) -> bool:
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def ntuple(name: str, value, n: int, *, minimum: int, where: str = "") -> tuple[int, ...]:
    """``value`` as a tuple of ``n`` ints, each ``>= minimum``.

    Raises:
      TypeError: for a value that is neither an int nor a sequence of ints.
      ValueError: for a sequence of the wrong length or an element below ``minimum``.
    """
    prefix = f"{where}: " if where else ""
    if _is_int(value):
        values = (operator.index(value),) * n
    elif isinstance(value, (tuple, list)) and all(_is_int(v) for v in value):
        values = tuple(operator.index(v) for v in value)
        if len(values) == 1 and n > 1:
            values = values * n  # torch's _ntuple repeats a 1-sequence too
        if len(values) != n:
            raise ValueError(
                f"{prefix}`{name}` (={value!r}) must be an int or {n} ints, got {len(values)}."
            )
    else:
        raise TypeError(f"{prefix}`{name}` (={value!r}) must be an int or a tuple of {n} ints.")
    if any(v < minimum for v in values):
        what = "positive" if minimum == 1 else "non-negative" if minimum == 0 else f">= {minimum}"
        raise ValueError(f"{prefix}`{name}` (={value!r}) must be {what}.")
    return values


def check_sizes(layer, names, *, where: str = "") -> None:
    """Check that each field of ``layer`` named in ``names`` is a non-negative int.

    Raises:
      ValueError: naming the first field that is not (``bool`` included), its value and
        what was expected, after ``where`` when given.
    """
    prefix = f"{where}: " if where else ""
    for name in names:
        value = getattr(layer, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{prefix}`{name}` (={value!r}) must be a non-negative int.")


def check_input_rank(
    where: str, x, spatial: int, *, channels: int | None = None, channel_name: str = "in_channels"
) -> bool:
    """Check ``x`` is `(N, C, *spatial)` or unbatched `(C, *spatial)`; return True when batched.

    Raises:
      ValueError: naming the input's shape and the expected ranks, or ``channel_name``
        when the channel count differs from ``channels``.
    """
    if x.ndim not in (spatial + 1, spatial + 2):
        dims = {1: " L", 2: " H W", 3: " D H W"}.get(spatial, "")
        raise ValueError(
            f"{where}: expected a {spatial + 1}-d (unbatched, C{dims}) or "
            f"{spatial + 2}-d (batched, N C{dims}) input, got shape {tuple(x.shape)}."
        )
    batched = x.ndim == spatial + 2
    if channels is not None and x.shape[1 if batched else 0] != channels:
        raise ValueError(
            f"{where}: `{channel_name}` (={channels}) must match the input's channel "
            f"dimension (={x.shape[1 if batched else 0]}, input shape {tuple(x.shape)})."
        )
    return batched
