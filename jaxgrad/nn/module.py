"""The layer contract shared by every ``jaxgrad.nn`` class.

Each layer is a frozen dataclass of hyperparameters with pure methods:

- ``init(key) -> params``: a flat dict keyed exactly like the torch module's
  ``named_parameters()``, arrays in torch's shapes and layouts, drawn from torch's
  default initialisation distributions;
- ``init_buffers() -> buffers``: the persistent entries of torch's
  ``named_buffers()`` (``running_mean``, ``running_var``, ``num_batches_tracked``),
  ``{}`` for a layer without any. ``params`` and ``buffers`` together are exactly
  torch's ``state_dict()``; gradients are taken with respect to ``params`` only;
- ``apply(params, *inputs, buffers=None, train=False, key=None, **options)``: the
  forward pass; nothing is mutated. It returns the output when ``buffers`` is
  ``None`` and ``(output, new_buffers)`` when buffers are given; a model that has
  buffers raises when called without them. ``train=True`` is torch's
  ``module.train()`` (batch statistics, running statistics updated, dropout active),
  ``train=False`` is ``module.eval()`` (buffers returned unchanged). Randomness takes
  an explicit ``key``: each layer derives its own from the caller's key and its path
  in the model (``layer_key``), so the same key gives the same masks whatever else
  the model contains.

A layer implements one of two methods and inherits ``apply``:

- ``forward(params, *inputs, **options) -> output`` for a stateless, deterministic
  layer (``Linear``, the activations, convolutions, pooling…);
- ``forward_with_state(params, *inputs, buffers, train, key, path, **options) ->
  (output, new_buffers)`` for a layer with buffers or randomness (BatchNorm,
  Dropout) and for containers, which thread ``buffers``, ``train``, ``key`` and the
  child's ``path`` (``"3"``, ``"layer1.0.bn1"``) to every child.

``Module`` adds what follows from that contract alone: ``load_state_dict`` and
``load_buffers`` (validated against ``jax.eval_shape`` of ``init`` /
``init_buffers``), ``state_dict`` and ``num_parameters``.
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from jaxgrad._arrays import to_device, to_numpy

Params = dict  # flat ``{"0.weight": Array, ...}``, torch named_parameters() keys
Buffers = dict  # flat ``{"1.running_mean": Array, ...}``, torch named_buffers() keys


class Module:
    """Base of every layer: ``apply`` and state-dict conversion, derived from the
    layer's ``init``, ``init_buffers`` and ``forward`` / ``forward_with_state``."""

    def init(self, key) -> Params:  # pragma: no cover - every layer overrides
        """Fresh parameters drawn from torch's default initialisation.

        Args:
          key: a ``jax.random`` key.

        Returns:
          A flat dict under torch's ``named_parameters()`` keys, in torch's shapes and
          layouts, of the layer's ``dtype``.
        """
        raise NotImplementedError

    def init_buffers(self) -> Buffers:
        """torch's persistent buffers at construction (``{}``: this layer has none)."""
        return {}

    def forward(self, params: Params, *inputs, **options):  # pragma: no cover
        """The stateless, deterministic forward a layer implements (``apply`` calls it).

        Args:
          params: this layer's params.
          *inputs: the forward's inputs, as torch's ``forward`` takes them.
          **options: the forward's keyword options.

        Returns:
          The output.
        """
        raise NotImplementedError(
            f"{type(self).__name__} implements neither `forward` nor `forward_with_state`."
        )

    def forward_with_state(
        self, params: Params, *inputs, buffers: Buffers, train: bool, key, path: str, **options
    ):
        """``(output, new_buffers)``; a stateless layer's buffers are ``{}``."""
        del train, key, path
        return self.forward(params, *inputs, **options), dict(buffers)

    def apply(
        self,
        params: Params,
        *inputs,
        buffers: Buffers | None = None,
        train: bool = False,
        key=None,
        **options,
    ):
        """The forward pass, ``module(*inputs)`` in torch.

        Args:
          params: this model's params (``init`` / ``load_state_dict``).
          *inputs: the forward's inputs, as torch's ``forward`` takes them.
          buffers: this model's buffers (``init_buffers`` / ``load_buffers``); required
            when the model has any.
          train: ``module.train()`` when True, ``module.eval()`` when False.
          key: a ``jax.random`` key; required for dropout with ``train=True``.

        Returns:
          The output when ``buffers`` is ``None``; ``(output, new_buffers)`` otherwise.

        Raises:
          TypeError: a torch tensor among the inputs or params (convert it first).
          ValueError: a parameter whose shape is not the model's (``param_shapes()``),
            named with both shapes; missing or unexpected buffers.
        """
        _refuse_torch_tensors(self, params, inputs, options)
        _check_param_shapes(self, params)
        names = _buffer_names(self)
        if buffers is None and names:
            shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
            raise ValueError(
                f"{type(self).__name__}.apply: this model has buffers ({shown}); pass "
                "`buffers=` (from `init_buffers()`, `load_buffers(state_dict)` or "
                "`from_torch(module, with_buffers=True)`); apply then returns "
                "`(output, new_buffers)`."
            )
        if buffers is not None:
            if not isinstance(buffers, Mapping):
                raise TypeError(
                    f"`buffers` must be a mapping of buffer names to arrays, got "
                    f"{type(buffers).__name__}."
                )
            problems = _key_problems(names, buffers)
            if problems:
                raise ValueError(
                    f"{type(self).__name__}.apply: `buffers` do not fit the model: "
                    + "; ".join(problems)
                    + "."
                )
        output, new_buffers = self.forward_with_state(
            params,
            *inputs,
            buffers=dict(buffers or {}),
            train=train,
            key=key,
            path="",
            **options,
        )
        return output if buffers is None else (output, new_buffers)

    def __call__(self, params: Params, *inputs, **kwargs):
        """Alias of ``apply``: ``model(params, x)``."""
        return self.apply(params, *inputs, **kwargs)

    def param_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
        """The shape and dtype of every parameter, in ``init``'s (torch's) key order,
        without allocating any. (``jax.eval_shape`` alone would sort the keys.)"""
        return _shapes(self, "params")

    def buffer_shapes(self) -> dict[str, jax.ShapeDtypeStruct]:
        """The shape and dtype of every buffer, in ``init_buffers``' key order."""
        return _shapes(self, "buffers")

    def state_dict_keys(self) -> list[str]:
        """torch's ``state_dict()`` key order: each module's parameters, then its
        buffers, then its children's. Containers override it."""
        return [*self.param_shapes(), *self.buffer_shapes()]

    def params_without_gradient(self, train: bool = True) -> tuple:
        """The parameters torch leaves without a ``.grad`` after a backward of this
        model's forward in the mode ``train`` names (frozen ones, ones read only through
        ``detach`` or a ``no_grad`` region, unused ones): ``()`` for a layer, which reads
        every parameter it has. torch's optimizers skip them; pass them to
        ``jaxgrad.optim.freeze`` to do the same. Captured models
        (``GraphModule``, ``ExportedModule``) read them from their graph."""
        del train
        return ()

    def num_parameters(self) -> int:
        """Total number of scalar parameters (``sum(p.numel() for p in m.parameters())``)."""
        return int(sum(np.prod(s.shape, dtype=np.int64) for s in self.param_shapes().values()))

    def load_state_dict(self, mapping: Mapping[str, Any]) -> Params:
        """Validate ``mapping`` against this model and return it as jax params.

        Args:
          mapping: ``{name: array}`` with torch ``state_dict()`` keys; values may be
            torch tensors (read by duck typing), numpy arrays or jax arrays. Buffer
            keys (a full torch ``state_dict``) are expected and left to
            ``load_buffers``.

        Returns:
          A new flat dict of jax arrays in the model's key order.

        Raises:
          ValueError: listing, all at once, every missing key, unexpected key, and
            shape or dtype mismatch. Nothing is cast or reshaped silently.
        """
        return _load(self, mapping, self.param_shapes(), self.buffer_shapes(), "load_state_dict")

    def load_buffers(self, mapping: Mapping[str, Any]) -> Buffers:
        """Validate the buffers in ``mapping`` (a torch ``state_dict``; parameter keys
        are expected and skipped) and return them as jax arrays, every buffer required.

        Args:
          mapping: ``{name: array}`` with torch ``state_dict()`` keys.

        Returns:
          A new flat dict of jax arrays under the buffers' names.

        Raises:
          ValueError: listing every missing, unexpected, misshapen or mistyped buffer.
        """
        return _load(self, mapping, self.buffer_shapes(), self.param_shapes(), "load_buffers")

    def state_dict(self, params: Params, buffers: Buffers | None = None) -> dict[str, np.ndarray]:
        """``params`` and ``buffers`` merged as numpy arrays in torch's key order.

        ``torch_module.load_state_dict({k: torch.from_numpy(v) for k, v in ...})``.

        Args:
          params: this model's params.
          buffers: this model's buffers; required when it has any.

        Returns:
          ``{torch key: numpy array}``, exactly torch's ``state_dict()`` keys and order.

        Raises:
          ValueError: a model with buffers and none given, or keys missing from
            ``params`` or ``buffers``.
        """
        param_names = list(self.param_shapes())
        buffer_names = list(self.buffer_shapes())
        if buffer_names and buffers is None:
            raise ValueError(
                f"{type(self).__name__}.state_dict: this model has buffers "
                f"({', '.join(buffer_names[:6])}{', ...' if len(buffer_names) > 6 else ''}); "
                "pass them: `state_dict(params, buffers)`."
            )
        merged = {**dict(params), **dict(buffers or {})}
        missing = [k for k in [*param_names, *buffer_names] if k not in merged]
        if missing:
            raise ValueError(f"state_dict: missing keys: {', '.join(missing)}.")
        return {name: np.array(merged[name], copy=True) for name in self.state_dict_keys()}


def layer_key(key, path: str):
    """The key of the layer at ``path``: ``key`` folded with a stable hash of the path,
    so a layer's random draws do not depend on what else the model contains."""
    return jax.random.fold_in(key, zlib.crc32(path.encode()) & 0x7FFFFFFF)


def child_path(path: str, name: str) -> str:
    """``"layer1"`` + ``"0"`` -> ``"layer1.0"``; the top level's path is ``""``."""
    return f"{path}.{name}" if path else name


def sub_dict(tree: Mapping, prefix: str) -> dict:
    """The entries of ``tree`` under ``prefix + "."``, with the prefix removed."""
    prefix = prefix + "."
    return {k[len(prefix) :]: v for k, v in tree.items() if k.startswith(prefix)}


def _shapes(module, which: str) -> dict[str, jax.ShapeDtypeStruct]:
    """``param_shapes`` / ``buffer_shapes``. Tracing ``init`` (every layer's random
    draws, for a deep model most of ``from_torch``'s time) happens once per layer
    configuration: a frozen dataclass whose fields are plain values (numbers, strings,
    dtypes, tuples, other such layers) has an ``init`` that depends on them alone, so an
    equal layer has the same shapes; ``jax_enable_x64`` (float64 or float32) is part of
    the key. Any other module (one holding an array, a function or a recorder, which
    the cache must not keep alive) is traced on every call."""
    if not _is_configuration(module):
        return _traced_shapes(module, which)
    return dict(_cached_shapes(module, which, bool(jax.config.jax_enable_x64)))


_PLAIN = (bool, int, float, complex, str, bytes, type(None), type, np.dtype)


def _is_configuration(value) -> bool:
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, tuple):
        return all(_is_configuration(v) for v in value)
    if dataclasses.is_dataclass(value) and value.__dataclass_params__.frozen:
        return all(_is_configuration(getattr(value, f.name)) for f in dataclasses.fields(value))
    return False


@functools.lru_cache(maxsize=512)
def _cached_shapes(module, which: str, x64: bool) -> tuple:
    del x64  # a key only
    return tuple(_traced_shapes(module, which).items())


def _traced_shapes(module, which: str) -> dict[str, jax.ShapeDtypeStruct]:
    if which == "params":
        return _ordered_shapes(lambda: module.init(jax.random.key(0)))
    return _ordered_shapes(module.init_buffers)


def _ordered_shapes(make) -> dict[str, jax.ShapeDtypeStruct]:
    names = []

    def specs_in_order():
        tree = make()
        names.extend(tree)
        return tuple(tree.values())

    specs = jax.eval_shape(specs_in_order)
    return dict(zip(names, specs))


@functools.lru_cache(maxsize=256)
def _buffer_names_cached(module) -> tuple:
    return tuple(module.buffer_shapes())


def _buffer_names(module) -> tuple:
    try:
        return _buffer_names_cached(module)
    except TypeError:  # an unhashable model: no cache
        return tuple(module.buffer_shapes())


def _is_torch_tensor(value) -> bool:
    """Duck typing, so that ``jaxgrad`` never imports torch."""
    module = type(value).__module__ or ""
    return (module == "torch" or module.startswith("torch.")) and hasattr(value, "detach")


def _refuse_torch_tensors(module, params, inputs, options) -> None:
    """A ``TypeError`` naming the first torch tensor given to ``apply``: jax would
    otherwise fail on its dtype (``Cannot interpret 'torch.float64' as a data type``)."""
    where = [(f"input {i}", value) for i, value in enumerate(inputs)]
    where += [(f"`{name}`", value) for name, value in options.items()]
    for name, tree in where:
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
            if _is_torch_tensor(leaf):
                raise TypeError(
                    f"{type(module).__name__}.apply: {name}{jax.tree_util.keystr(path)} is a "
                    f"torch tensor ({leaf.dtype}, shape {list(leaf.shape)}); jaxgrad takes "
                    "jax or numpy arrays: convert it with `jnp.asarray(t.detach().numpy())` "
                    "(`.cpu()` first for a GPU tensor)."
                )
    if isinstance(params, Mapping):
        for name, value in params.items():
            if _is_torch_tensor(value):
                raise TypeError(
                    f"{type(module).__name__}.apply: param `{name}` is a torch tensor "
                    f"({value.dtype}, shape {list(value.shape)}); convert the whole state "
                    "dict with `model.load_state_dict(torch_module.state_dict())`."
                )


def _check_param_shapes(module, params) -> None:
    """A ``ValueError`` naming every given parameter whose shape is not the model's
    (``param_shapes()``, cached per layer configuration): shapes only, once per
    ``apply``, under ``jit`` too. Missing keys are left to the layers' own messages."""
    if not isinstance(params, Mapping):
        return
    problems = []
    for name, spec in module.param_shapes().items():
        shape = getattr(params.get(name), "shape", None)
        if shape is None or tuple(shape) == tuple(spec.shape):
            continue
        hint = ""
        if len(shape) == 2 and tuple(shape[::-1]) == tuple(spec.shape):
            hint = " (transposed? torch layout is (out_features, in_features))"
        problems.append(
            f"`{name}`: shape {tuple(shape)} does not match the model's {tuple(spec.shape)}{hint}"
        )
    if problems:
        raise ValueError(
            f"{type(module).__name__}.apply: params do not fit the model: "
            + "; ".join(problems)
            + "."
        )


def _key_problems(expected, mapping) -> list[str]:
    problems = []
    missing = [k for k in expected if k not in mapping]
    unexpected = [k for k in mapping if k not in expected]
    if missing:
        problems.append(f"missing keys: {', '.join(missing)}")
    if unexpected:
        problems.append(f"unexpected keys: {', '.join(map(str, unexpected))}")
    return problems


def _load(module, mapping, expected, other, method: str) -> dict:
    """Validate the ``expected`` entries of ``mapping``; keys in ``other`` (the
    model's buffers when loading params, and vice versa) are skipped, not unexpected."""
    if not isinstance(mapping, Mapping):
        raise TypeError(
            f"`mapping` must be a mapping of names to arrays, got {type(mapping).__name__}."
        )
    problems = _key_problems(expected, {k: v for k, v in mapping.items() if k not in other})
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
        elif array.dtype != spec.dtype and not _integer_narrowing_ok(array, spec):
            problems.append(
                f"`{name}`: dtype {array.dtype} does not match the model's "
                f"{spec.dtype} (build the model with dtype={array.dtype} or cast "
                "the array explicitly)"
            )
        else:
            # a copy: torch tensors come in as numpy views of torch's memory, and a
            # zero-copy jax array donated to a jitted step would overwrite them
            arrays[name] = to_device(array, spec.dtype)
    if problems:
        raise ValueError(f"{method} for {type(module).__name__}: " + "; ".join(problems) + ".")
    return arrays


def _integer_narrowing_ok(array: np.ndarray, spec) -> bool:
    """torch's int64 counters (``num_batches_tracked``) load into JAX's int32 when
    ``jax_enable_x64`` is off, as long as the value fits."""
    if not (np.issubdtype(array.dtype, np.integer) and np.issubdtype(spec.dtype, np.integer)):
        return False
    info = np.iinfo(spec.dtype)
    return array.size == 0 or (array.min() >= info.min and array.max() <= info.max)


def require_params(layer: str, params: Mapping, names) -> None:
    """Raise a clear error when ``apply`` is handed params of the wrong layer."""
    missing = [n for n in names if n not in params]
    if missing:
        raise ValueError(
            f"{layer}.apply: `params` lacks {', '.join(map(repr, missing))} "
            f"(got keys {sorted(params)}); pass this layer's own params, as "
            "returned by its `init` or `load_state_dict`."
        )
