"""What ``to_nnx`` maps for each torch layer, one line per class: the conventions
``scripts/port.py`` prints for a user's model (``conversion_notes``) and
``docs/flax.md`` tabulates."""

from __future__ import annotations

NOTES = {
    "Linear": "weight (out, in) -> nnx.Linear kernel (in, out), transposed",
    "Conv1d": "weight OIL -> kernel LIO; explicit symmetric padding pairs, never 'SAME'",
    "Conv2d": "weight OIHW -> kernel HWIO; explicit symmetric padding pairs, never 'SAME'",
    # padding_mode other than zeros: flax's 'CIRCULAR'/'REFLECT' or TorchPaddedConv
    "BatchNorm1d": "TorchBatchNorm: momentum as torch's (new-batch weight), unbiased running var",
    "BatchNorm2d": "TorchBatchNorm: momentum as torch's (new-batch weight), unbiased running var",
    "GroupNorm": "epsilon 1e-5 (flax 1e-6), two-pass variance",
    "LayerNorm": "epsilon 1e-5 (flax 1e-6), two-pass variance",
    "RMSNorm": "epsilon: torch's (None = machine eps of the dtype; flax 1e-6)",
    "MultiheadAttention": "nnx.MultiHeadAttention: in_proj (3E, E) split into (E, heads, "
    "head_dim) kernels; bool masks True = masked -> attend; torch's "
    "fully masked rows; bias_kv, zero_attn, float masks between the "
    "stock projections and attention_fn; vdim: TorchVdimAttention",
    "LSTM": "nnx.RNN(TorchLSTMCell): nnx.LSTMCell with bias_ih on ii..io and bias_hh on "
    "hi..ho (two Params, as torch trains them), rows i,f,g,o per gate, "
    "state (h, c) <-> carry (c, h); proj_size: TorchProjLSTMCell (weight_hr)",
    "GRU": "nnx.RNN(TorchGRUCell): nnx.GRUCell plus b_hn (r * (W_hn h + b_hn))",
    "LSTMCell": "TorchCell(TorchLSTMCell): as LSTM, torch's (h, c) <-> flax's carry (c, h)",
    "GRUCell": "TorchCell(TorchGRUCell): nnx.GRUCell plus b_hn",
    "RNNCell": "TorchCell(TorchRNNCell): nnx.SimpleCell plus bias_hh",
    "RNN": "nnx.RNN(TorchRNNCell): nnx.SimpleCell with bias_ih on dense_i and bias_hh on "
    "dense_h (two Params)",
    "TransformerEncoderLayer": "stock nnx.MultiHeadAttention, nnx.Linear, nnx.LayerNorm "
    "(eps 1e-5), torch's norm order",
    "TransformerEncoder": "one TorchTransformerEncoderLayer per layer, stock layers inside",
    "TransformerDecoderLayer": "stock nnx.MultiHeadAttention (self and cross), nnx.Linear, "
    "nnx.LayerNorm (eps 1e-5), torch's norm order",
    "TransformerDecoder": "one TorchTransformerDecoderLayer per layer, stock layers inside",
    "ConvTranspose1d": "nnx.ConvTranspose(transpose_kernel=True): weight (in, out, k) -> "
    "(k, out, in), pads d(k-1)-p (+ output_padding); groups: one per "
    "group (TorchGroupedConvTranspose)",
    "ConvTranspose2d": "nnx.ConvTranspose(transpose_kernel=True): weight (in, out, kH, kW) -> "
    "(kH, kW, out, in), pads d(k-1)-p (+ output_padding); groups: one "
    "per group (TorchGroupedConvTranspose)",
    "InstanceNorm1d": "nnx.GroupNorm (one channel per group); TorchInstanceNorm with running stats",
    "InstanceNorm2d": "nnx.GroupNorm (one channel per group); TorchInstanceNorm with running stats",
    "Embedding": "weight -> embedding; padding_idx row frozen (TorchEmbed)",
    "Dropout": "rate = p (drop probability, as torch)",
    "Flatten": "channels moved first before flattening: torch's C,H,W feature order",
    "GELU": "approximate=False unless torch's 'tanh' (jax.nn.gelu defaults to tanh)",
    "LeakyReLU": "negative_slope carried (flax 0.01 = torch 0.01)",
    "MaxPool1d": "padding with -inf, explicit pairs; ceil_mode/dilation via TorchPool",
    "MaxPool2d": "padding with -inf, explicit pairs; ceil_mode/dilation via TorchPool",
    "AvgPool1d": "count_include_pad carried; ceil_mode/divisor_override via TorchPool",
    "AvgPool2d": "count_include_pad carried; ceil_mode/divisor_override via TorchPool",
    "AdaptiveAvgPool1d": "torch's windows [floor(i·n/o), ceil((i+1)·n/o)) via TorchPool",
    "AdaptiveAvgPool2d": "torch's windows [floor(i·n/o), ceil((i+1)·n/o)) via TorchPool",
    "AdaptiveMaxPool1d": "torch's windows [floor(i·n/o), ceil((i+1)·n/o)) via TorchPool",
    "AdaptiveMaxPool2d": "torch's windows [floor(i·n/o), ceil((i+1)·n/o)) via TorchPool",
}


def conversion_notes(model, path: str = "") -> list[tuple[str, str, str]]:
    """``(path, class name, what to_nnx maps)`` for every layer of ``model`` that
    carries a convention, in order (what ``scripts/port.py`` prints as "conventions
    mapped").

    Args:
      model: a ``jaxgrad.nn`` model (``Sequential`` and traced ``GraphModule``s are
        walked).
      path: the torch module path of ``model`` itself (``""`` at the top).

    Returns:
      A list of ``(path, class name, note)`` tuples.
    """
    if type(model).__name__ in ("Sequential", "GraphModule"):
        children = (
            zip(model.names, model.layers) if type(model).__name__ == "Sequential" else model.layers
        )
        notes = []
        for name, layer in children:
            notes += conversion_notes(layer, f"{path}.{name}" if path else name)
        return notes
    name = type(model).__name__
    return [(path, name, NOTES[name])] if name in NOTES else []
