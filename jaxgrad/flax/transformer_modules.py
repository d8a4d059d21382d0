"""nnx twins of torch's transformer layers, built from stock layers under torch's
child names: ``TorchMultiheadAttention`` (around ``nnx.MultiHeadAttention``),
``nnx.Linear``, ``nnx.LayerNorm`` and ``nnx.Dropout``. Only the order of the blocks
(post- or pre-norm, where dropout acts) is ours; stock flax has no transformer layer.

=================================  =======================================================
module                             torch's
=================================  =======================================================
``TorchTransformerEncoderLayer``   ``TransformerEncoderLayer``: self-attention block,
                                   feed-forward block
``TorchTransformerDecoderLayer``   ``TransformerDecoderLayer``: self-attention block,
                                   cross-attention block over ``memory``, feed-forward
                                   block
``TorchTransformerEncoder`` /      ``TransformerEncoder`` / ``TransformerDecoder``:
``TorchTransformerDecoder``        ``layers`` (an ``nnx.List``, each layer its own
                                   parameters) then the optional final ``norm``
=================================  =======================================================

Masks are torch's (``TorchMultiheadAttention``): boolean True = masked, or float
(added to the logits); the ``*is_causal`` flags are torch's hints, passed to the
attention as torch passes them.
"""

from __future__ import annotations

from flax import nnx


def _gelu(x):
    return nnx.gelu(x, approximate=False)  # torch's "gelu" is exact (erf)


_ACTIVATIONS = {"relu": nnx.relu, "gelu": _gelu}


class _Layer(nnx.Module):
    """The blocks both layers share: attention then dropout, and the feed-forward block
    (``linear1``, activation, ``dropout``, ``linear2``, then the layer's last dropout)."""

    @staticmethod
    def _attention_block(attention, dropout, query, memory, attn_mask, key_padding_mask, is_causal):
        """torch's ``_sa_block`` / ``_mha_block``: attention (no weights), then dropout."""
        out, _ = attention(
            query,
            memory,
            memory,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            attn_mask=attn_mask,
            is_causal=bool(is_causal),
        )
        return dropout(out)

    def _feed_forward(self, x, last_dropout):
        hidden = self.dropout(_ACTIVATIONS[self.activation](self.linear1(x)))
        return last_dropout(self.linear2(hidden))


class TorchTransformerEncoderLayer(_Layer):
    """``torch.nn.TransformerEncoderLayer`` from stock layers under torch's child
    names: ``self_attn`` (``TorchMultiheadAttention``), ``linear1``, ``linear2``
    (``nnx.Linear``), ``norm1``, ``norm2`` (``nnx.LayerNorm``), ``dropout``,
    ``dropout1``, ``dropout2`` (``nnx.Dropout``). ``__call__(src, src_mask=None,
    src_key_padding_mask=None, is_causal=False)``; src `(S, N, E)` (`(N, S, E)` with
    the attention's ``batch_first``) or `(S, E)`."""

    def __init__(
        self,
        self_attn,
        linear1,
        linear2,
        norm1,
        norm2,
        *,
        dropout: float,
        activation: str,
        norm_first: bool,
        seed: int = 0,
    ):
        self.self_attn, self.linear1, self.linear2 = self_attn, linear1, linear2
        self.norm1, self.norm2 = norm1, norm2
        rngs = nnx.Rngs(dropout=seed)
        self.dropout = nnx.Dropout(dropout, rngs=rngs)
        self.dropout1 = nnx.Dropout(dropout, rngs=rngs)
        self.dropout2 = nnx.Dropout(dropout, rngs=rngs)
        self.activation, self.norm_first = activation, norm_first

    def __call__(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        def attend(x):
            return self._attention_block(
                self.self_attn, self.dropout1, x, x, src_mask, src_key_padding_mask, is_causal
            )

        x = src
        if self.norm_first:
            x = x + attend(self.norm1(x))
            return x + self._feed_forward(self.norm2(x), self.dropout2)
        x = self.norm1(x + attend(x))
        return self.norm2(x + self._feed_forward(x, self.dropout2))


class TorchTransformerDecoderLayer(_Layer):
    """``torch.nn.TransformerDecoderLayer`` from stock layers under torch's child
    names: ``self_attn``, ``multihead_attn`` (``TorchMultiheadAttention``: self- and
    cross-attention), ``linear1``, ``linear2`` (``nnx.Linear``), ``norm1``, ``norm2``,
    ``norm3`` (``nnx.LayerNorm``), ``dropout``, ``dropout1``, ``dropout2``, ``dropout3``
    (``nnx.Dropout``).

    ``__call__(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False)``:
    tgt `(T, N, E)`, memory `(S, N, E)` (batch first with the attentions'
    ``batch_first``) or unbatched; ``tgt_mask`` `(T, T)`, ``memory_mask`` `(T, S)`
    (or `(N·heads, ·, ·)`), key padding masks `(N, T)` / `(N, S)`."""

    def __init__(
        self,
        self_attn,
        multihead_attn,
        linear1,
        linear2,
        norm1,
        norm2,
        norm3,
        *,
        dropout: float,
        activation: str,
        norm_first: bool,
        seed: int = 0,
    ):
        self.self_attn, self.multihead_attn = self_attn, multihead_attn
        self.linear1, self.linear2 = linear1, linear2
        self.norm1, self.norm2, self.norm3 = norm1, norm2, norm3
        rngs = nnx.Rngs(dropout=seed)
        self.dropout = nnx.Dropout(dropout, rngs=rngs)
        self.dropout1 = nnx.Dropout(dropout, rngs=rngs)
        self.dropout2 = nnx.Dropout(dropout, rngs=rngs)
        self.dropout3 = nnx.Dropout(dropout, rngs=rngs)
        self.activation, self.norm_first = activation, norm_first

    def __call__(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=False,
        memory_is_causal=False,
    ):
        def self_block(x):
            return self._attention_block(
                self.self_attn, self.dropout1, x, x, tgt_mask, tgt_key_padding_mask, tgt_is_causal
            )

        def cross_block(x):
            return self._attention_block(
                self.multihead_attn,
                self.dropout2,
                x,
                memory,
                memory_mask,
                memory_key_padding_mask,
                memory_is_causal,
            )

        x = tgt
        if self.norm_first:
            x = x + self_block(self.norm1(x))
            x = x + cross_block(self.norm2(x))
            return x + self._feed_forward(self.norm3(x), self.dropout3)
        x = self.norm1(x + self_block(x))
        x = self.norm2(x + cross_block(x))
        return self.norm3(x + self._feed_forward(x, self.dropout3))


class TorchTransformerEncoder(nnx.Module):
    """``torch.nn.TransformerEncoder``: ``layers`` (an ``nnx.List`` of
    ``TorchTransformerEncoderLayer``, each with its own parameters) then ``norm``
    (``nnx.LayerNorm`` or ``None``). ``__call__(src, mask=None,
    src_key_padding_mask=None, is_causal=None)``."""

    def __init__(self, layers: list, norm=None):
        self.layers = nnx.List(layers)
        self.norm = norm

    def __call__(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        # is_causal=None: torch detects a causal `mask` and hints it; applying the
        # mask is the same computation
        x = src
        for layer in self.layers:
            x = layer(x, mask, src_key_padding_mask, bool(is_causal))
        return x if self.norm is None else self.norm(x)


class TorchTransformerDecoder(nnx.Module):
    """``torch.nn.TransformerDecoder``: ``layers`` (an ``nnx.List`` of
    ``TorchTransformerDecoderLayer``, each with its own parameters) then ``norm``
    (``nnx.LayerNorm`` or ``None``). ``__call__(tgt, memory, tgt_mask=None,
    memory_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
    tgt_is_causal=None, memory_is_causal=False)``."""

    def __init__(self, layers: list, norm=None):
        self.layers = nnx.List(layers)
        self.norm = norm

    def __call__(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=None,
        memory_is_causal=False,
    ):
        x = tgt
        for layer in self.layers:  # tgt_is_causal=None: as the encoder's is_causal
            x = layer(
                x,
                memory,
                tgt_mask,
                memory_mask,
                tgt_key_padding_mask,
                memory_key_padding_mask,
                bool(tgt_is_causal),
                memory_is_causal,
            )
        return x if self.norm is None else self.norm(x)
