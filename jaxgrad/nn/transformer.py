"""``TransformerEncoderLayer``, ``TransformerEncoder``, ``TransformerDecoderLayer``,
``TransformerDecoder`` and ``Transformer``, mirroring ``torch.nn``.

The layers are containers of torch's children under torch's names —
``self_attn`` (and ``multihead_attn``) = ``MultiheadAttention``, ``linear1``,
``linear2``, ``norm1``…``norm3`` = ``LayerNorm(eps=layer_norm_eps)`` — so params come
out ``self_attn.in_proj_weight``, ``linear1.weight``, ``norm2.bias``…; the stacks
prefix them ``layers.0.``, ``layers.1.``… and ``norm.`` as torch's. Torch's defaults:
``dim_feedforward=2048``, ``dropout=0.1``, ``activation="relu"``, post-norm
(``norm_first=False``), ``layer_norm_eps=1e-5``, sequence-first. Masks follow
``MultiheadAttention``: boolean True = **masked**.

``TransformerEncoder(encoder_layer, num_layers, norm=None)`` deep-copies the layer as
torch does, so after ``init`` every layer holds *the same* parameters (torch warns
about it too). Dropout (``dropout``, ``dropout1``…, and the attention's) is active
with ``train=True`` and draws from ``key`` per path (``layers.0.dropout1``…);
``dropout_masks={path: keep_mask}`` replaces the draws of those layer dropouts with
torch's own masks (captured with forward hooks), for parity of training-mode runs.

torch's inference fast path (``eval()`` under ``no_grad`` with ``batch_first`` and a
``src_key_padding_mask``: nested tensors) returns 0 at padded positions instead of
computing them; the positions that are not padded are the same math as here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxgrad.nn import init as initializers
from jaxgrad.nn.attention import MultiheadAttention
from jaxgrad.nn.functional import _dropout
from jaxgrad.nn.functional._args import check_sizes
from jaxgrad.nn.functional._attention import dropout_keep
from jaxgrad.nn.layernorm import LayerNorm
from jaxgrad.nn.linear import Linear
from jaxgrad.nn.module import Module, child_path, layer_key, sub_dict

_ACTIVATIONS = {"relu": jax.nn.relu, "gelu": lambda x: jax.nn.gelu(x, approximate=False)}


def _activation_fn(activation, where: str) -> Callable:
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise ValueError(
                f"{where}: `activation` (={activation!r}) must be 'relu', 'gelu' or a callable."
            )
        return _ACTIVATIONS[activation]
    if isinstance(activation, Module):
        return lambda x: activation.apply({}, x)
    if callable(activation):
        return activation
    raise TypeError(
        f"{where}: `activation` must be 'relu', 'gelu' or a callable, got {activation!r}."
    )


class _Children(Module):
    """Params and key order of a container: each child's params under its name."""

    def children(self) -> list:
        raise NotImplementedError

    def init(self, key):
        params = {}
        named = self.children()
        for (name, child), child_key in zip(named, jax.random.split(key, len(named))):
            params.update({f"{name}.{k}": v for k, v in child.init(child_key).items()})
        return params

    def _call(self, name, child, params, *inputs, train, key, path, **options):
        out, _ = child.forward_with_state(
            sub_dict(params, name),
            *inputs,
            buffers={},
            train=train,
            key=key,
            path=child_path(path, name),
            **options,
        )
        return out

    def _dropout(self, name, x, *, train, key, path, masks=None):
        if not train or self.dropout == 0.0:
            return x
        where = child_path(path, name)
        if masks and where in masks:  # torch's own keep-mask, injected for parity
            return _dropout.dropout(x, self.dropout, True, mask=masks[where])
        return dropout_keep(
            x, self.dropout, None if key is None else layer_key(key, where), f"Dropout at {where!r}"
        )


def _attention_p(layer) -> float:
    return layer.dropout if layer.attention_dropout is None else layer.attention_dropout


def _layer_fields_check(self, name):
    if self.d_model % self.nhead:
        raise ValueError(
            f"{name}: `d_model` (={self.d_model}) must be divisible by `nhead` (={self.nhead})."
        )
    _activation_fn(self.activation, name)


@dataclasses.dataclass(frozen=True)
class TransformerEncoderLayer(_Children):
    """``torch.nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=2048,
    dropout=0.1, activation='relu', layer_norm_eps=1e-5, batch_first=False,
    norm_first=False, bias=True, device=None, dtype=None)``.

    ``apply(params, src, src_mask=None, src_key_padding_mask=None, is_causal=False,
    *, train=False, key=None)``; src `(S, N, E)` (`(N, S, E)` with ``batch_first``) or `(S, E)`.
    """

    d_model: int
    nhead: int
    dim_feedforward: int = 2048
    dropout: float = 0.1
    activation: Any = "relu"
    layer_norm_eps: float = 1e-5
    batch_first: bool = False
    norm_first: bool = False
    bias: bool = True
    device: Any = None
    dtype: Any = None
    # torch's attention modules keep their own `dropout` attribute, which users may
    # change after construction; None = `dropout`, as torch's constructor sets it
    attention_dropout: float | None = None

    def __post_init__(self):
        _layer_fields_check(self, "TransformerEncoderLayer")

    def children(self):
        E, kw = self.d_model, dict(dtype=self.dtype)
        return [
            (
                "self_attn",
                MultiheadAttention(
                    E,
                    self.nhead,
                    _attention_p(self),
                    bias=self.bias,
                    batch_first=self.batch_first,
                    **kw,
                ),
            ),
            ("linear1", Linear(E, self.dim_feedforward, bias=self.bias, **kw)),
            ("linear2", Linear(self.dim_feedforward, E, bias=self.bias, **kw)),
            ("norm1", LayerNorm(E, eps=self.layer_norm_eps, bias=self.bias, **kw)),
            ("norm2", LayerNorm(E, eps=self.layer_norm_eps, bias=self.bias, **kw)),
        ]

    def forward_with_state(
        self,
        params,
        src,
        src_mask=None,
        src_key_padding_mask=None,
        is_causal=False,
        *,
        buffers,
        train,
        key,
        path,
        dropout_masks=None,
    ):
        kids = dict(self.children())
        ctx = dict(train=train, key=key, path=path)
        drop = dict(ctx, masks=dropout_masks)

        def sa_block(x):
            out, _ = self._call(
                "self_attn",
                kids["self_attn"],
                params,
                x,
                x,
                x,
                attn_mask=src_mask,
                key_padding_mask=src_key_padding_mask,
                need_weights=False,
                is_causal=bool(is_causal),
                **ctx,
            )
            return self._dropout("dropout1", out, **drop)

        def ff_block(x):
            hidden = _activation_fn(self.activation, "TransformerEncoderLayer")(
                self._call("linear1", kids["linear1"], params, x, **ctx)
            )
            hidden = self._dropout("dropout", hidden, **drop)
            return self._dropout(
                "dropout2", self._call("linear2", kids["linear2"], params, hidden, **ctx), **drop
            )

        def norm(name, x):
            return self._call(name, kids[name], params, x, **ctx)

        x = jnp.asarray(src)
        if self.norm_first:
            x = x + sa_block(norm("norm1", x))
            x = x + ff_block(norm("norm2", x))
        else:
            x = norm("norm1", x + sa_block(x))
            x = norm("norm2", x + ff_block(x))
        return x, dict(buffers)


@dataclasses.dataclass(frozen=True)
class TransformerDecoderLayer(_Children):
    """``torch.nn.TransformerDecoderLayer(d_model, nhead, dim_feedforward=2048,
    dropout=0.1, activation='relu', layer_norm_eps=1e-5, batch_first=False,
    norm_first=False, bias=True, device=None, dtype=None)``.

    ``apply(params, tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None, tgt_is_causal=False,
    memory_is_causal=False, *, train=False, key=None)``.
    """

    d_model: int
    nhead: int
    dim_feedforward: int = 2048
    dropout: float = 0.1
    activation: Any = "relu"
    layer_norm_eps: float = 1e-5
    batch_first: bool = False
    norm_first: bool = False
    bias: bool = True
    device: Any = None
    dtype: Any = None
    attention_dropout: float | None = None  # as TransformerEncoderLayer's

    def __post_init__(self):
        _layer_fields_check(self, "TransformerDecoderLayer")

    def children(self):
        E, kw = self.d_model, dict(dtype=self.dtype)
        attention = dict(bias=self.bias, batch_first=self.batch_first, **kw)
        return [
            ("self_attn", MultiheadAttention(E, self.nhead, _attention_p(self), **attention)),
            ("multihead_attn", MultiheadAttention(E, self.nhead, _attention_p(self), **attention)),
            ("linear1", Linear(E, self.dim_feedforward, bias=self.bias, **kw)),
            ("linear2", Linear(self.dim_feedforward, E, bias=self.bias, **kw)),
            ("norm1", LayerNorm(E, eps=self.layer_norm_eps, bias=self.bias, **kw)),
            ("norm2", LayerNorm(E, eps=self.layer_norm_eps, bias=self.bias, **kw)),
            ("norm3", LayerNorm(E, eps=self.layer_norm_eps, bias=self.bias, **kw)),
        ]

    def forward_with_state(
        self,
        params,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=False,
        memory_is_causal=False,
        *,
        buffers,
        train,
        key,
        path,
        dropout_masks=None,
    ):
        kids = dict(self.children())
        ctx = dict(train=train, key=key, path=path)
        drop = dict(ctx, masks=dropout_masks)
        memory = jnp.asarray(memory)

        def attend(name, x, source, mask, padding, causal, dropout_name):
            out, _ = self._call(
                name,
                kids[name],
                params,
                x,
                source,
                source,
                attn_mask=mask,
                key_padding_mask=padding,
                need_weights=False,
                is_causal=bool(causal),
                **ctx,
            )
            return self._dropout(dropout_name, out, **drop)

        def ff_block(x):
            hidden = _activation_fn(self.activation, "TransformerDecoderLayer")(
                self._call("linear1", kids["linear1"], params, x, **ctx)
            )
            hidden = self._dropout("dropout", hidden, **drop)
            return self._dropout(
                "dropout3", self._call("linear2", kids["linear2"], params, hidden, **ctx), **drop
            )

        def norm(name, x):
            return self._call(name, kids[name], params, x, **ctx)

        def sa(x):
            return attend(
                "self_attn", x, x, tgt_mask, tgt_key_padding_mask, tgt_is_causal, "dropout1"
            )

        def mha(x):
            return attend(
                "multihead_attn",
                x,
                memory,
                memory_mask,
                memory_key_padding_mask,
                memory_is_causal,
                "dropout2",
            )

        x = jnp.asarray(tgt)
        if self.norm_first:
            x = x + sa(norm("norm1", x))
            x = x + mha(norm("norm2", x))
            x = x + ff_block(norm("norm3", x))
        else:
            x = norm("norm1", x + sa(x))
            x = norm("norm2", x + mha(x))
            x = norm("norm3", x + ff_block(x))
        return x, dict(buffers)


class _Stack(_Children):
    """``layers.{i}`` = deep copies of one layer (identical params at init), then ``norm``."""

    @property
    def layer(self):
        return getattr(self, "encoder_layer", None) or self.decoder_layer

    def children(self):
        named = [(f"layers.{i}", self.layer) for i in range(self.num_layers)]
        return named + ([("norm", self.norm)] if self.norm is not None else [])

    def init(self, key):
        layer_key_, norm_key = jax.random.split(key)
        layer_params = self.layer.init(layer_key_)  # torch deep-copies one initialised layer
        params = {
            f"layers.{i}.{k}": v for i in range(self.num_layers) for k, v in layer_params.items()
        }
        if self.norm is not None:
            params.update({f"norm.{k}": v for k, v in self.norm.init(norm_key).items()})
        return params

    def _run(self, params, x, *extra, buffers, train, key, path, dropout_masks=None):
        for i in range(self.num_layers):
            x = self._call(
                f"layers.{i}",
                self.layer,
                params,
                x,
                *extra,
                train=train,
                key=key,
                path=path,
                dropout_masks=dropout_masks,
            )
        if self.norm is not None:
            x = self._call("norm", self.norm, params, x, train=train, key=key, path=path)
        return x, dict(buffers)


def _check_stack(self, name, layer_type):
    if not isinstance(self.layer, layer_type):
        raise TypeError(
            f"{name}: the layer must be a {layer_type.__name__}, got {type(self.layer).__name__}."
        )
    if not isinstance(self.num_layers, int) or self.num_layers < 1:
        raise ValueError(f"{name}: `num_layers` (={self.num_layers!r}) must be a positive int.")


@dataclasses.dataclass(frozen=True)
class TransformerEncoder(_Stack):
    """``torch.nn.TransformerEncoder(encoder_layer, num_layers, norm=None,
    enable_nested_tensor=True, mask_check=True)``.

    ``apply(params, src, mask=None, src_key_padding_mask=None, is_causal=None, *,
    train=False, key=None)``. ``enable_nested_tensor`` and ``mask_check`` only steer
    torch's inference fast path; they are accepted and change nothing here.
    """

    encoder_layer: TransformerEncoderLayer
    num_layers: int
    norm: Module | None = None
    enable_nested_tensor: bool = True
    mask_check: bool = True

    def __post_init__(self):
        _check_stack(self, "TransformerEncoder", TransformerEncoderLayer)

    def forward_with_state(
        self,
        params,
        src,
        mask=None,
        src_key_padding_mask=None,
        is_causal=None,
        *,
        buffers,
        train,
        key,
        path,
        dropout_masks=None,
    ):
        # is_causal=None: torch detects a causal mask and then lets SDPA build it; the
        # result equals applying the mask, which is what happens here
        return self._run(
            params,
            src,
            mask,
            src_key_padding_mask,
            bool(is_causal),
            buffers=buffers,
            train=train,
            key=key,
            path=path,
            dropout_masks=dropout_masks,
        )


@dataclasses.dataclass(frozen=True)
class TransformerDecoder(_Stack):
    """``torch.nn.TransformerDecoder(decoder_layer, num_layers, norm=None)``.

    ``apply(params, tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None, tgt_is_causal=None,
    memory_is_causal=False, *, train=False, key=None)``.
    """

    decoder_layer: TransformerDecoderLayer
    num_layers: int
    norm: Module | None = None

    def __post_init__(self):
        _check_stack(self, "TransformerDecoder", TransformerDecoderLayer)

    def forward_with_state(
        self,
        params,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=None,
        memory_is_causal=False,
        *,
        buffers,
        train,
        key,
        path,
        dropout_masks=None,
    ):
        return self._run(
            params,
            tgt,
            memory,
            tgt_mask,
            memory_mask,
            tgt_key_padding_mask,
            memory_key_padding_mask,
            bool(tgt_is_causal),
            memory_is_causal,
            buffers=buffers,
            train=train,
            key=key,
            path=path,
            dropout_masks=dropout_masks,
        )


@dataclasses.dataclass(frozen=True)
class Transformer(_Children):
    """``torch.nn.Transformer(d_model=512, nhead=8, num_encoder_layers=6,
    num_decoder_layers=6, dim_feedforward=2048, dropout=0.1, activation='relu',
    custom_encoder=None, custom_decoder=None, layer_norm_eps=1e-5, batch_first=False,
    norm_first=False, bias=True, device=None, dtype=None)``: an encoder stack and a
    decoder stack, each closed by a ``LayerNorm``.

    Params under torch's names: ``encoder.layers.0.self_attn.in_proj_weight``…,
    ``encoder.norm.weight``, ``decoder.layers.0.multihead_attn.…``, ``decoder.norm.bias``.
    ``init`` is torch's: the layers' default init, then ``xavier_uniform`` on every
    parameter with more than one dimension (each layer drawn separately, unlike a
    bare ``TransformerEncoder``'s identical copies). ``custom_encoder`` /
    ``custom_decoder`` (jaxgrad modules) replace the stacks, as torch's.

    ``apply(params, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
    src_key_padding_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
    src_is_causal=None, tgt_is_causal=None, memory_is_causal=False, *, train=False,
    key=None)``: src `(S, N, E)`, tgt `(T, N, E)` (batch first with ``batch_first``, or
    unbatched `(S, E)`, `(T, E)`); output tgt's shape. Masks as ``MultiheadAttention``:
    boolean True = masked, or additive floats (``generate_square_subsequent_mask``).
    """

    d_model: int = 512
    nhead: int = 8
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dim_feedforward: int = 2048
    dropout: float = 0.1
    activation: Any = "relu"
    custom_encoder: Module | None = None
    custom_decoder: Module | None = None
    layer_norm_eps: float = 1e-5
    batch_first: bool = False
    norm_first: bool = False
    bias: bool = True
    device: Any = None
    dtype: Any = None

    def __post_init__(self):
        _layer_fields_check(self, "Transformer")
        check_sizes(self, ("num_encoder_layers", "num_decoder_layers"), where="Transformer")

    def children(self):
        layer = dict(
            dim_feedforward=self.dim_feedforward,
            dropout=self.dropout,
            activation=self.activation,
            layer_norm_eps=self.layer_norm_eps,
            batch_first=self.batch_first,
            norm_first=self.norm_first,
            bias=self.bias,
            dtype=self.dtype,
        )
        norm = LayerNorm(self.d_model, eps=self.layer_norm_eps, bias=self.bias, dtype=self.dtype)
        encoder = self.custom_encoder or TransformerEncoder(
            TransformerEncoderLayer(self.d_model, self.nhead, **layer),
            self.num_encoder_layers,
            norm,
        )
        decoder = self.custom_decoder or TransformerDecoder(
            TransformerDecoderLayer(self.d_model, self.nhead, **layer),
            self.num_decoder_layers,
            norm,
        )
        return [("encoder", encoder), ("decoder", decoder)]

    def init(self, key):
        layers_key, xavier_key = jax.random.split(key)
        params = super().init(layers_key)
        # torch's _reset_parameters: xavier_uniform_ on every matrix, in parameter order
        keys = jax.random.split(xavier_key, max(len(params), 1))
        return {
            name: (
                initializers.xavier_uniform(k, value.shape, value.dtype)
                if value.ndim > 1
                else value
            )
            for (name, value), k in zip(params.items(), keys)
        }

    @staticmethod
    def generate_square_subsequent_mask(sz: int, dtype=jnp.float32):
        """``torch.nn.Transformer.generate_square_subsequent_mask``: the causal mask.

        Args:
          sz: the sequence length.
          dtype: the mask's floating dtype (torch's default float32).

        Returns:
          `(sz, sz)`: ``-inf`` above the diagonal (masked), 0 elsewhere.

        Raises:
          ValueError: a negative ``sz``.
        """
        if isinstance(sz, bool) or not isinstance(sz, int) or sz < 0:
            raise ValueError(f"`sz` (={sz!r}) must be a non-negative int.")
        upper = jnp.triu(jnp.ones((sz, sz), bool), k=1)
        return jnp.where(upper, -jnp.inf, 0.0).astype(dtype)

    def forward_with_state(
        self,
        params,
        src,
        tgt,
        src_mask=None,
        tgt_mask=None,
        memory_mask=None,
        src_key_padding_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        src_is_causal=None,
        tgt_is_causal=None,
        memory_is_causal=False,
        *,
        buffers,
        train,
        key,
        path,
        dropout_masks=None,
    ):
        src, tgt = jnp.asarray(src), jnp.asarray(tgt)
        batch_axis = 0 if self.batch_first else 1
        if src.ndim == 3 and (tgt.ndim != 3 or src.shape[batch_axis] != tgt.shape[batch_axis]):
            raise ValueError(
                f"Transformer: the batch sizes of `src` {tuple(src.shape)} and "
                f"`tgt` {tuple(tgt.shape)} must be equal (batch axis "
                f"{batch_axis})."
            )
        if src.shape[-1:] != (self.d_model,) or tgt.shape[-1:] != (self.d_model,):
            raise ValueError(
                f"Transformer: the feature sizes of `src` {tuple(src.shape)} and "
                f"`tgt` {tuple(tgt.shape)} must equal `d_model` (={self.d_model})."
            )
        kids = dict(self.children())
        ctx = dict(train=train, key=key, path=path, dropout_masks=dropout_masks)
        memory = self._call(
            "encoder",
            kids["encoder"],
            params,
            src,
            src_mask,
            src_key_padding_mask,
            src_is_causal,
            **ctx,
        )
        output = self._call(
            "decoder",
            kids["decoder"],
            params,
            tgt,
            memory,
            tgt_mask,
            memory_mask,
            tgt_key_padding_mask,
            memory_key_padding_mask,
            tgt_is_causal,
            memory_is_causal,
            **ctx,
        )
        return output, dict(buffers)
