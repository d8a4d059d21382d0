"""nnx twins of torch's transformer layers, built from stock layers under torch's
child names: ``TorchMultiheadAttention`` (around ``nnx.MultiHeadAttention``),
``nnx.Linear``, ``nnx.LayerNorm`` and ``nnx.Dropout``. Only the order of the blocks
(post- or pre-norm, where dropout acts) is ours; stock flax has no transformer layer.
"""

from __future__ import annotations

from flax import nnx


class TorchTransformerEncoderLayer(nnx.Module):
    """``torch.nn.TransformerEncoderLayer`` from stock layers under torch's child
    names: ``self_attn`` (``TorchMultiheadAttention``), ``linear1``, ``linear2``
    (``nnx.Linear``), ``norm1``, ``norm2`` (``nnx.LayerNorm``), ``dropout``,
    ``dropout1``, ``dropout2`` (``nnx.Dropout``). ``__call__(src, src_mask=None,
    src_key_padding_mask=None, is_causal=False)``."""

    def __init__(self, self_attn, linear1, linear2, norm1, norm2, *, dropout: float,
                 activation: str, norm_first: bool, seed: int = 0):
        self.self_attn, self.linear1, self.linear2 = self_attn, linear1, linear2
        self.norm1, self.norm2 = norm1, norm2
        rngs = nnx.Rngs(dropout=seed)
        self.dropout = nnx.Dropout(dropout, rngs=rngs)
        self.dropout1 = nnx.Dropout(dropout, rngs=rngs)
        self.dropout2 = nnx.Dropout(dropout, rngs=rngs)
        self.activation, self.norm_first = activation, norm_first

    def _feed_forward(self, x):
        act = nnx.relu if self.activation == "relu" else (lambda v: nnx.gelu(v, approximate=False))
        return self.dropout2(self.linear2(self.dropout(act(self.linear1(x)))))

    def __call__(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        def attend(x):
            out, _ = self.self_attn(x, x, x, key_padding_mask=src_key_padding_mask,
                                    need_weights=False, attn_mask=src_mask)
            return self.dropout1(out)

        x = src
        if self.norm_first:
            x = x + attend(self.norm1(x))
            return x + self._feed_forward(self.norm2(x))
        x = self.norm1(x + attend(x))
        return self.norm2(x + self._feed_forward(x))


class TorchTransformerEncoder(nnx.Module):
    """``torch.nn.TransformerEncoder``: ``layers`` (an ``nnx.List`` of
    ``TorchTransformerEncoderLayer``, each with its own parameters) then ``norm``."""

    def __init__(self, layers: list, norm=None):
        self.layers = nnx.List(layers)
        self.norm = norm

    def __call__(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        for layer in self.layers:
            x = layer(x, mask, src_key_padding_mask)
        return x if self.norm is None else self.norm(x)
