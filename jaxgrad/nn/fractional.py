"""``FractionalMaxPool2d``, ``FractionalMaxPool3d``, mirroring ``torch.nn``.

torch's module draws fresh window offsets on every call unless it was built with
``_random_samples`` (a tensor it registers as a buffer, so it is in the module's
``state_dict``). The twin keeps both faces, with the randomness explicit:

- built with ``_random_samples`` (``from_torch`` copies torch's): the samples are the
  buffer ``_random_samples``, every call uses them, and the output is torch's exactly;
- built without: each call draws them from ``layer_key(key, path)`` — in training and
  in evaluation mode, as torch draws in both — and a call without ``key`` raises,
  naming the layer's path.

The windows and the maximum are ``jaxgrad.nn.functional.fractional_max_pool2d/3d``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxgrad.nn.functional import _fractional
from jaxgrad.nn.functional._args import ntuple
from jaxgrad.nn.module import Module, layer_key


@dataclasses.dataclass(frozen=True)
class Samples:
    """Fixed random samples held by value (hashable, unlike an array): ``shape``,
    ``dtype`` (a name) and the ``values`` in row-major order."""

    shape: tuple
    dtype: str
    values: tuple

    @classmethod
    def of(cls, array) -> Samples:
        """The samples of an array (torch tensors are read through ``numpy()``)."""
        if hasattr(array, "detach"):
            array = array.detach().cpu().numpy()
        array = np.asarray(array)
        return cls(tuple(array.shape), str(array.dtype), tuple(array.ravel().tolist()))

    def array(self):
        """The samples as a jax array of ``shape``."""
        return jnp.asarray(np.asarray(self.values, self.dtype).reshape(self.shape))


@dataclasses.dataclass(frozen=True)
class _FractionalMaxPoolNd(Module):
    kernel_size: Any
    output_size: Any = None
    output_ratio: Any = None
    return_indices: bool = False
    _random_samples: Any = None

    _n = 0

    def __post_init__(self):
        name, n = type(self).__name__, self._n
        object.__setattr__(
            self, "kernel_size", ntuple("kernel_size", self.kernel_size, n, minimum=1, where=name)
        )
        if (self.output_size is None) == (self.output_ratio is None):
            raise ValueError(
                f"{name}: exactly one of `output_size` (={self.output_size!r}) "
                f"and `output_ratio` (={self.output_ratio!r}) must be given."
            )
        if self.output_size is not None:
            object.__setattr__(
                self,
                "output_size",
                ntuple("output_size", self.output_size, n, minimum=1, where=name),
            )
        else:  # torch stores the ratio as a tuple and checks each is in (0, 1)
            _fractional.fractional_output_size(name, n, (1,) * n, None, self.output_ratio)
            ratio = self.output_ratio
            ratio = (
                tuple(ratio) * (n if len(ratio) == 1 else 1)
                if isinstance(ratio, (tuple, list))
                else (ratio,) * n
            )
            object.__setattr__(self, "output_ratio", ratio)
        if self._random_samples is not None and not isinstance(self._random_samples, Samples):
            object.__setattr__(self, "_random_samples", Samples.of(self._random_samples))

    def init(self, key):
        return {}

    def init_buffers(self):
        return (
            {}
            if self._random_samples is None
            else {"_random_samples": self._random_samples.array()}
        )

    def forward_with_state(self, params, x, *, buffers, train, key, path):
        del train  # torch draws in both modes
        where = f"{type(self).__name__}" + (f" at {path!r}" if path else "")
        samples = buffers.get("_random_samples") if self._random_samples is not None else None
        function = (
            _fractional.fractional_max_pool2d if self._n == 2 else _fractional.fractional_max_pool3d
        )
        try:
            output = function(
                x,
                self.kernel_size,
                self.output_size,
                self.output_ratio,
                self.return_indices,
                samples,
                key=None if key is None else layer_key(key, path),
            )
        except (ValueError, TypeError) as error:  # the functional form knows no path
            raise type(error)(f"{where}: {error}") from None
        return output, dict(buffers)


@dataclasses.dataclass(frozen=True)
class FractionalMaxPool2d(_FractionalMaxPoolNd):
    """``torch.nn.FractionalMaxPool2d(kernel_size, output_size=None, output_ratio=None,
    return_indices=False, _random_samples=None)``.

    Input `(N, C, H, W)` or `(C, H, W)`. ``_random_samples`` `(N, C, 2)` (a buffer, as in
    torch) fixes the windows; without it each call needs a ``key``.
    """

    _n = 2


@dataclasses.dataclass(frozen=True)
class FractionalMaxPool3d(_FractionalMaxPoolNd):
    """``torch.nn.FractionalMaxPool3d(kernel_size, output_size=None, output_ratio=None,
    return_indices=False, _random_samples=None)``.

    Input `(N, C, T, H, W)` or `(C, T, H, W)`; ``_random_samples`` `(N, C, 3)`.
    """

    _n = 3
