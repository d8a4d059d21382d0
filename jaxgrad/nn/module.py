"""The layer contract shared by every ``jaxgrad.nn`` class.

Each layer is a frozen dataclass of hyperparameters with two pure methods:

- ``init(key) -> params``: a flat dict keyed exactly like the torch module's
  ``state_dict()``, arrays in torch's shapes and layouts, drawn from torch's default
  initialisation distributions;
- ``apply(params, x) -> y``: the forward pass; nothing is mutated.

``Module`` adds what follows from that contract alone: ``load_state_dict`` (validated
against ``jax.eval_shape(model.init, key)``), ``state_dict`` and ``num_parameters``.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxgrad._arrays import to_numpy

Params = dict  # flat ``{"0.weight": Array, ...}``, torch state_dict keys


class Module:
    """Mixin for layers: state-dict conversion and validation, derived from ``init``."""

    def init(self, key) -> Params:  # pragma: no cover - every layer overrides
        raise NotImplementedError

    def apply(self, params: Params, x):  # pragma: no cover - every layer overrides
        raise NotImplementedError

    def __call__(self, params: Params, x):
        """Alias of ``apply``: ``model(params, x)``."""
        return self.apply(params, x)

    def param_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
        """The shape and dtype of every parameter, in ``init``'s (torch's) key order,
        without allocating any. (``jax.eval_shape`` alone would sort the keys.)"""
        names = []

        def specs_in_order(key):
            params = self.init(key)
            names.extend(params)
            return tuple(params.values())

        specs = jax.eval_shape(specs_in_order, jax.random.key(0))
        return dict(zip(names, specs))

    def num_parameters(self) -> int:
        """Total number of scalar parameters (``sum(p.numel() for p in m.parameters())``)."""
        return int(sum(np.prod(s.shape, dtype=np.int64) for s in self.param_shapes().values()))

    def load_state_dict(self, mapping: Mapping[str, Any]) -> Params:
        """Validate ``mapping`` against this model and return it as jax params.

        Args:
          mapping: ``{name: array}`` with torch ``state_dict()`` keys; values may be
            torch tensors (read by duck typing), numpy arrays or jax arrays.

        Returns:
          A new flat dict of jax arrays in the model's key order.

        Raises:
          ValueError: listing, all at once, every missing key, unexpected key, and
            shape or dtype mismatch. Nothing is cast or reshaped silently.
        """
        if not isinstance(mapping, Mapping):
            raise TypeError(
                f"`mapping` must be a mapping of parameter names to arrays, got "
                f"{type(mapping).__name__}."
            )
        expected = self.param_shapes()
        problems = []
        missing = [k for k in expected if k not in mapping]
        unexpected = [k for k in mapping if k not in expected]
        if missing:
            problems.append(f"missing keys: {', '.join(missing)}")
        if unexpected:
            problems.append(f"unexpected keys: {', '.join(map(str, unexpected))}")
        arrays = {}
        for name, spec in expected.items():
            if name not in mapping:
                continue
            array = to_numpy(mapping[name])
            if tuple(array.shape) != tuple(spec.shape):
                hint = ""
                if array.ndim == 2 and tuple(array.shape[::-1]) == tuple(spec.shape):
                    hint = " (transposed? torch layout is (out_features, in_features))"
                problems.append(
                    f"`{name}`: shape {tuple(array.shape)} does not match the model's "
                    f"{tuple(spec.shape)}{hint}"
                )
            elif array.dtype != spec.dtype:
                problems.append(
                    f"`{name}`: dtype {array.dtype} does not match the model's "
                    f"{spec.dtype} (build the model with dtype={array.dtype} or cast "
                    "the array explicitly)"
                )
            else:
                arrays[name] = jnp.asarray(array)
        if problems:
            raise ValueError(
                f"load_state_dict for {type(self).__name__}: "
                + "; ".join(problems) + "."
            )
        return arrays

    def state_dict(self, params: Params) -> dict[str, np.ndarray]:
        """``params`` as numpy arrays in the model's key order, ready for torch.

        ``torch_module.load_state_dict({k: torch.from_numpy(v) for k, v in ...})``.
        """
        expected = self.param_shapes()
        missing = [k for k in expected if k not in params]
        if missing:
            raise ValueError(f"`params` is missing keys: {', '.join(missing)}.")
        return {name: np.array(params[name], copy=True) for name in expected}


def require_params(layer: str, params: Mapping, names) -> None:
    """Raise a clear error when ``apply`` is handed params of the wrong layer."""
    missing = [n for n in names if n not in params]
    if missing:
        raise ValueError(
            f"{layer}.apply: `params` lacks {', '.join(map(repr, missing))} "
            f"(got keys {sorted(params)}); pass this layer's own params, as "
            "returned by its `init` or `load_state_dict`."
        )
