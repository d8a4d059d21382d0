"""flax.nnx interop: ``jaxgrad.flax.to_nnx`` twins against torch, and the cost of each
torch-vs-flax convention when it is left unmapped (``scripts/flax_conventions.py``).

Each convention is measured on one small float64 layer: the stock ``flax.nnx`` layer
with the convention mapped (what ``to_nnx`` sets) and with flax's default left in
place, both against torch on the same weights and input.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx

from jaxgrad import losses as jlosses
from jaxgrad.flax import grads_to_torch, modules, nnx_state_dict, to_nnx
from jaxgrad.parity import compare
from parity_checks.harness import Check, jax_precision

F64 = torch.float64


def _t(array) -> torch.Tensor:
    return torch.from_numpy(np.asarray(array))


def _err(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return float("nan")
    return float(np.max(np.abs(a - b)))


def _set(variable, value):
    variable.set_value(jnp.asarray(np.asarray(value), dtype=variable.get_value().dtype))


def _rngs():
    return nnx.Rngs(0)


# ------------------------------------------------------------------ conventions
def _linear_layout(rng):
    layer = torch.nn.Linear(4, 4, dtype=F64)  # square: a missed transpose raises nothing
    x = rng.standard_normal((3, 4))
    ref = layer(_t(x)).detach().numpy()
    w, b = layer.weight.detach().numpy(), layer.bias.detach().numpy()
    out = {}
    for mapped, kernel in ((True, w.T), (False, w)):
        dense = nnx.Linear(4, 4, param_dtype=jnp.float64, rngs=_rngs())
        _set(dense.kernel, kernel)
        _set(dense.bias, b)
        out[mapped] = _err(dense(jnp.asarray(x)), ref)
    return "weight (out, in)", "kernel (in, out)", out


def _gelu(rng):
    x = rng.standard_normal(1000) * 3
    ref = torch.nn.functional.gelu(_t(x)).numpy()
    return (
        "GELU erf (exact)",
        "nnx.gelu: tanh approx.",
        {
            True: _err(nnx.gelu(jnp.asarray(x), approximate=False), ref),
            False: _err(nnx.gelu(jnp.asarray(x)), ref),
        },
    )


def _norm_eps(kind: str, rng):
    x = rng.standard_normal((4, 8, 3, 3)) * 0.1  # low-variance rows, as late in training
    if kind == "LayerNorm":
        x = x.reshape(4, 72)
        ref = torch.nn.functional.layer_norm(_t(x), (72,)).numpy()
        make = lambda eps: nnx.LayerNorm(
            72, epsilon=eps, use_fast_variance=False, param_dtype=jnp.float64, rngs=_rngs()
        )
        data = jnp.asarray(x)
    else:
        ref = torch.nn.functional.group_norm(_t(x), 4).numpy()
        make = lambda eps: nnx.GroupNorm(
            8,
            num_groups=4,
            epsilon=eps,
            use_fast_variance=False,
            param_dtype=jnp.float64,
            rngs=_rngs(),
        )
        data = jnp.moveaxis(jnp.asarray(x), 1, -1)
    result = {}
    for mapped, eps in ((True, 1e-5), (False, None)):
        layer = make(eps) if eps is not None else make(1e-6)  # 1e-6: flax's default
        y = layer(data)
        y = y if kind == "LayerNorm" else jnp.moveaxis(y, -1, 1)
        result[mapped] = _err(y, ref)
    return "eps 1e-5", "epsilon 1e-6", result


def _batch_norm_stats(which: str, rng):
    x = rng.standard_normal((8, 3)) * 2 + 1
    torch_bn = torch.nn.BatchNorm1d(3, dtype=F64)
    torch_bn(_t(x))
    field = "running_mean" if which == "momentum" else "running_var"
    ref = getattr(torch_bn, field).numpy()
    mapped = modules.TorchBatchNorm(3, momentum=0.1, param_dtype=jnp.float64)
    mapped(jnp.asarray(x))
    if which == "momentum":  # flax's default momentum 0.99 weighs the *old* average
        stock = nnx.BatchNorm(3, param_dtype=jnp.float64, use_fast_variance=False, rngs=_rngs())
        torch_text, flax_text = "momentum 0.1 (new batch)", "momentum 0.99 (old avg)"
    else:  # momentum mapped (0.9), variance left biased
        stock = nnx.BatchNorm(
            3, momentum=0.9, param_dtype=jnp.float64, use_fast_variance=False, rngs=_rngs()
        )
        torch_text, flax_text = "running var unbiased n/(n-1)", "running var biased"
    stock(jnp.asarray(x))
    name = "mean" if which == "momentum" else "var"
    return (
        torch_text,
        flax_text,
        {True: _err(getattr(mapped, name)[...], ref), False: _err(getattr(stock, name)[...], ref)},
    )


def _conv_same(rng):
    conv = torch.nn.Conv2d(2, 3, 3, stride=2, padding=1, dtype=F64)
    x = rng.standard_normal((1, 2, 8, 8))
    ref = conv(_t(x)).detach().numpy()
    kernel = np.moveaxis(conv.weight.detach().numpy(), (0, 1), (-1, -2))
    stock = nnx.Conv(2, 3, (3, 3), strides=2, param_dtype=jnp.float64, rngs=_rngs())  # 'SAME'
    _set(stock.kernel, kernel)
    _set(stock.bias, conv.bias.detach().numpy())
    nhwc = jnp.moveaxis(jnp.asarray(x), 1, -1)
    out = {
        True: _err(jnp.moveaxis(to_nnx(conv)(nhwc), -1, 1), ref),
        False: _err(jnp.moveaxis(stock(nhwc), -1, 1), ref),
    }
    return "padding=1: pads (1, 1)", "'SAME' at stride 2: (0, 1)", out


def _flatten_order(rng):
    fc = torch.nn.Linear(2 * 3 * 3, 2, dtype=F64)
    x = rng.standard_normal((2, 2, 3, 3))  # torch NCHW feature map
    ref = fc(_t(x).flatten(1)).detach().numpy()
    nhwc = jnp.moveaxis(jnp.asarray(x), 1, -1)
    dense = nnx.Linear(18, 2, param_dtype=jnp.float64, rngs=_rngs())
    _set(dense.kernel, fc.weight.detach().numpy().T)
    _set(dense.bias, fc.bias.detach().numpy())
    mapped = dense(modules.TorchFlatten()(modules.ChannelsFirst()(nhwc)))
    unmapped = dense(nhwc.reshape(2, -1))
    return (
        "flatten C,H,W",
        "flatten H,W,C (NHWC)",
        {True: _err(mapped, ref), False: _err(unmapped, ref)},
    )


def _adaptive_pool(rng):
    x = rng.standard_normal((1, 2, 8, 8))
    ref = torch.nn.functional.adaptive_avg_pool2d(_t(x), 3).numpy()
    nhwc = jnp.moveaxis(jnp.asarray(x), 1, -1)
    # the usual substitute: stride in//out, window in - (out - 1)·stride
    stock = nnx.avg_pool(nhwc, (4, 4), strides=(2, 2))
    mapped = to_nnx(torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(3)))(nhwc)
    return (
        "windows [⌊i·n/o⌋, ⌈(i+1)·n/o⌉)",
        "avg_pool(window 4, stride 2)",
        {
            True: _err(jnp.moveaxis(mapped, -1, 1), ref),
            False: _err(jnp.moveaxis(stock, -1, 1), ref),
        },
    )


def _count_include_pad(rng):
    x = rng.standard_normal((1, 2, 6, 6))
    ref = torch.nn.functional.avg_pool2d(_t(x), 3, 2, 1, count_include_pad=False).numpy()
    nhwc = jnp.moveaxis(jnp.asarray(x), 1, -1)
    stock = nnx.avg_pool(nhwc, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
    mapped = to_nnx(torch.nn.Sequential(torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False)))
    return (
        "count_include_pad=False",
        "count_include_pad=True",
        {
            True: _err(jnp.moveaxis(mapped(nhwc), -1, 1), ref),
            False: _err(jnp.moveaxis(stock, -1, 1), ref),
        },
    )


def _padding_idx(rng):
    emb = torch.nn.Embedding(5, 3, padding_idx=0, dtype=F64)
    ids = np.array([[0, 1, 2], [0, 3, 0]])
    emb(_t(ids)).sum().backward()
    ref = emb.weight.grad.numpy()
    table = emb.weight.detach().numpy()
    mapped = modules.TorchEmbed(5, 3, 0, param_dtype=jnp.float64)
    stock = nnx.Embed(5, 3, param_dtype=jnp.float64, rngs=_rngs())
    grads = {}
    for key, layer in ((True, mapped), (False, stock)):
        _set(layer.embedding, table)
        g = nnx.grad(lambda mod: mod(jnp.asarray(ids)).sum())(layer)
        grads[key] = _err(g["embedding"][...], ref)
    return "padding_idx row: zero grad", "nnx.Embed: no padding_idx", grads


def _default_init(rng):
    del rng
    torch.manual_seed(0)
    torch_std = float(torch.nn.Linear(256, 256).weight.detach().std())
    flax_std = float(jnp.std(nnx.Linear(256, 256, rngs=_rngs()).kernel[...]))
    # "error" here: the ratio of the weight's standard deviations (from-scratch runs)
    return (
        "kaiming_uniform(a=√5)",
        "lecun_normal",
        {True: 0.0, False: flax_std / torch_std, "unit": "std ratio"},
    )


def _attention(rng, which: str):
    """One nnx.MultiHeadAttention from to_nnx, then the same with one convention undone."""
    mha = torch.nn.MultiheadAttention(4, 2, batch_first=True, dtype=F64)
    with torch.no_grad():
        mha.in_proj_bias.normal_()
    x = rng.standard_normal((2, 5, 4))
    padding = np.array([[False] * 4 + [True], [False, True, True, False, False]])
    if which == "fill":
        padding[0] = True  # a fully masked row
    ref = mha(*(_t(x),) * 3, key_padding_mask=_t(padding), need_weights=False)[0].detach().numpy()
    twin = to_nnx(mha)
    mapped = twin(
        *(jnp.asarray(x),) * 3, key_padding_mask=jnp.asarray(padding), need_weights=False
    )[0]
    attention = twin.attention
    attend = jnp.asarray(~padding)[:, None, None, :]
    if which == "mask":  # torch's True = masked handed to flax as is
        unmapped = attention(jnp.asarray(x), mask=jnp.asarray(padding)[:, None, None, :])
        texts = "nn.MHA: True = masked", "mask: True = attend"
    elif which == "packed":  # in_proj_weight's (3E, E) rows reshaped without the transpose
        w = mha.in_proj_weight.detach().numpy()
        for name, rows in zip(("query", "key", "value"), np.split(w, 3)):
            _set(getattr(attention, name).kernel, rows.reshape(4, 2, 2))
        unmapped = attention(jnp.asarray(x), mask=attend)
        texts = "in_proj_weight (3E, E), q/k/v rows", "kernels (in, heads, head_dim)"
    else:  # flax's own fill: uniform weights on the fully masked row
        attention.attention_fn = nnx.dot_product_attention
        unmapped = attention(jnp.asarray(x), mask=attend)
        texts = "-inf fill: masked row -> 0", "finfo.min: masked row -> mean"
    return texts[0], texts[1], {True: _err(mapped, ref), False: _err(unmapped, ref)}


def _recurrent(rng, which: str):
    """A torch LSTM/GRU's to_nnx twin, then the same with one convention undone."""
    cls = torch.nn.GRU if which == "b_hn" else torch.nn.LSTM
    layer = cls(3, 4, batch_first=True, dtype=F64)
    x = rng.standard_normal((2, 6, 3))
    h0, c0 = rng.standard_normal((1, 2, 4)), rng.standard_normal((1, 2, 4))
    if which == "b_hn":
        ref = layer(_t(x))[0].detach().numpy()
        mapped = to_nnx(layer)(jnp.asarray(x))[0]
        stock = nnx.GRUCell(3, 4, param_dtype=jnp.float64, rngs=_rngs())
        p = {k: v.detach().numpy() for k, v in layer.named_parameters()}
        b = p["bias_ih_l0"] + np.concatenate([p["bias_hh_l0"][:8], np.zeros(4)])  # b_hn dropped
        _set(stock.dense_i.kernel, p["weight_ih_l0"].T)
        _set(stock.dense_i.bias, b)
        _set(stock.dense_h.kernel, p["weight_hh_l0"].T)
        unmapped = nnx.RNN(stock, rngs=False)(jnp.asarray(x), initial_carry=jnp.zeros((2, 4)))
        return (
            "r ⊙ (W_hn h + b_hn)",
            "nnx.GRUCell: r ⊙ (W_hn h)",
            {True: _err(mapped, ref), False: _err(unmapped, ref)},
        )
    ref = layer(_t(x), (_t(h0), _t(c0)))[0].detach().numpy()
    twin = to_nnx(layer)
    mapped = twin(jnp.asarray(x), (jnp.asarray(h0), jnp.asarray(c0)))[0]
    rnn = twin.layers[0]
    cell = rnn.cell
    if which == "gates":  # torch's f and g rows swapped (as if the order were i, g, f, o)
        cell.if_, cell.ig, cell.hf, cell.hg = cell.ig, cell.if_, cell.hg, cell.hf
        carry = (jnp.asarray(c0[0]), jnp.asarray(h0[0]))
        texts = "gate rows i, f, g, o", "rows taken as i, g, f, o"
    else:  # torch's (h, c) handed to flax's (c, h) carry unswapped
        carry = (jnp.asarray(h0[0]), jnp.asarray(c0[0]))
        texts = "state (h, c)", "carry (c, h)"
    unmapped = rnn(jnp.asarray(x), initial_carry=carry)
    return texts[0], texts[1], {True: _err(mapped, ref), False: _err(unmapped, ref)}


def _lstm_bias_training(rng, lr: float = 0.5):
    """One SGD step of a torch LSTM, of its to_nnx twin (``TorchLSTMCell``: two biases)
    and of a stock ``nnx.LSTMCell`` holding their sum, then the output after the step:
    flax's one bias moves by lr·g where torch's two move their sum by 2·lr·g."""
    layer = torch.nn.LSTM(3, 4, batch_first=True, dtype=F64)
    x = rng.standard_normal((2, 6, 3))
    cotangent = rng.standard_normal((2, 6, 4))
    p = {k: v.detach().numpy() for k, v in layer.named_parameters()}
    stock = nnx.LSTMCell(3, 4, param_dtype=jnp.float64, rngs=_rngs())
    gates = (("ii", "hi"), ("if_", "hf"), ("ig", "hg"), ("io", "ho"))
    for (i_name, h_name), w_i, w_h, b in zip(
        gates,
        np.split(p["weight_ih_l0"], 4),
        np.split(p["weight_hh_l0"], 4),
        np.split(p["bias_ih_l0"] + p["bias_hh_l0"], 4),
    ):
        _set(getattr(stock, i_name).kernel, w_i.T)
        _set(getattr(stock, h_name).kernel, w_h.T)
        _set(getattr(stock, h_name).bias, b)
    stock = nnx.RNN(stock, rngs=False)
    zeros = (jnp.zeros((2, 4)), jnp.zeros((2, 4)))
    candidates = {
        True: (to_nnx(layer), lambda mod: mod(jnp.asarray(x))[0]),  # before the step
        False: (stock, lambda mod: mod(jnp.asarray(x), initial_carry=zeros)),
    }
    (layer(_t(x))[0] * _t(cotangent)).sum().backward()
    torch.optim.SGD(layer.parameters(), lr=lr).step()
    ref = layer(_t(x))[0].detach().numpy()
    out = {}
    for mapped, (module, call) in candidates.items():
        grads = nnx.grad(lambda mod: jnp.sum(call(mod) * cotangent))(module)  # noqa: B023
        params = nnx.state(module, nnx.Param)
        nnx.update(module, jax.tree.map(lambda v, g: v - lr * g, params, grads))
        out[mapped] = _err(call(module), ref)
    return "bias_ih, bias_hh: 2 params", "nnx.LSTMCell: 1 bias (sum)", out


CONVENTIONS = [
    ("Linear weight layout", _linear_layout),
    ("GELU", _gelu),
    ("LayerNorm eps", functools.partial(_norm_eps, "LayerNorm")),
    ("GroupNorm eps", functools.partial(_norm_eps, "GroupNorm")),
    ("BatchNorm momentum (1 step)", functools.partial(_batch_norm_stats, "momentum")),
    ("BatchNorm running var (1 step)", functools.partial(_batch_norm_stats, "variance")),
    ("Conv2d padding, stride 2", _conv_same),
    ("flatten after conv", _flatten_order),
    ("AdaptiveAvgPool2d 8 -> 3", _adaptive_pool),
    ("AvgPool2d count_include_pad", _count_include_pad),
    ("Embedding padding_idx grad", _padding_idx),
    ("attention mask polarity", functools.partial(_attention, which="mask")),
    ("attention packed q/k/v split", functools.partial(_attention, which="packed")),
    ("attention fully masked row", functools.partial(_attention, which="fill")),
    ("LSTM gate order", functools.partial(_recurrent, which="gates")),
    ("LSTM two biases (1 SGD step)", _lstm_bias_training),
    ("LSTM state order", functools.partial(_recurrent, which="carry")),
    ("GRU b_hn", functools.partial(_recurrent, which="b_hn")),
    ("default Linear init", _default_init),
]


def measure_conventions() -> list[dict]:
    """One row per convention: torch's value, flax's default, and the max abs error
    against torch with the convention mapped and left unmapped (float64)."""
    rows = []
    with jax_precision("float64"):
        for name, measure in CONVENTIONS:
            torch.manual_seed(0)  # the torch layers' weights: the same every run
            torch_text, flax_text, errors = measure(np.random.default_rng(0))
            unit = errors.get("unit", "max abs err")
            rows.append(
                {
                    "convention": name,
                    "torch": torch_text,
                    "flax": flax_text,
                    "mapped": errors[True],
                    "unmapped": errors[False],
                    "unit": unit,
                }
            )
    return rows


# ---------------------------------------------------------------- parity rows
def nnx_trajectory(
    module,
    x,
    y,
    *,
    steps: int,
    torch_optimizer,
    jax_optimizer,
    batch_size: int = 8,
    layout: str = "NHWC",
):
    """Train ``module`` (torch) and its ``to_nnx`` twin (driven by ``nnx.Optimizer``
    with ``jax_optimizer``) on the same batches; ``(reference, candidate)``: every
    step's full ``state_dict`` (parameters and buffers) on both sides."""
    nnx_module = to_nnx(module, layout=layout)
    optimizer = nnx.Optimizer(nnx_module, jax_optimizer, wrt=nnx.Param)
    image = x.ndim >= 3

    @nnx.jit
    def step(nnx_module, optimizer, xb, yb):
        grads = nnx.grad(lambda mod: jlosses.cross_entropy(mod(xb), yb))(nnx_module)
        optimizer.update(nnx_module, grads)

    reference, candidate = [], []
    batches = len(x) // batch_size
    for t in range(steps):
        idx = slice((t % batches) * batch_size, (t % batches + 1) * batch_size)
        torch_optimizer.zero_grad()
        torch.nn.functional.cross_entropy(module(_t(x[idx])), _t(y[idx])).backward()
        torch_optimizer.step()
        xb = jnp.asarray(x[idx])
        if image and layout == "NHWC":
            xb = jnp.moveaxis(xb, 1, -1)
        step(nnx_module, optimizer, xb, jnp.asarray(y[idx]))
        reference.append({k: v.detach().numpy().copy() for k, v in module.state_dict().items()})
        candidate.append(nnx_state_dict(nnx_module))
    return reference, candidate


class _RowAttention(torch.nn.Module):
    """8×8 images as 8 rows: self-attention over the rows, its output and its
    head-averaged weights (``need_weights``) averaged over rows, logits. (Masks are
    exercised in ``parity_tests/test_flax_sequence.py``: the fx op table has no
    comparison to build one inside a traced forward.)"""

    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, pixels):
        rows = pixels.reshape(-1, 8, 8)
        out, weights = self.attn(rows, rows, rows)  # need_weights: head-averaged (N, 8, 8)
        return self.head(out.mean(dim=1) + weights.mean(dim=1))


class _RowBiLSTM(torch.nn.Module):
    """Rows through a 2-layer bidirectional LSTM (sequence-first), last output, logits."""

    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(8, 6, num_layers=2, bidirectional=True)
        self.head = torch.nn.Linear(12, 5)

    def forward(self, pixels):
        rows = pixels.reshape(-1, 8, 8).transpose(0, 1)
        return self.head(self.rnn(rows)[0][-1])


class _RowDecoder(torch.nn.Module):
    """Rows as the target, columns as the memory: a pre-norm GELU decoder layer (self-
    and cross-attention), then attention with torch's extras (``add_bias_kv``,
    ``add_zero_attn``, ``kdim != vdim``) over slices of the columns, logits."""

    def __init__(self):
        super().__init__()
        self.decoder = torch.nn.TransformerDecoderLayer(
            8, 2, 16, dropout=0.0, norm_first=True, activation="gelu", batch_first=True
        )
        self.extras = torch.nn.MultiheadAttention(
            8, 2, kdim=4, vdim=6, add_bias_kv=True, add_zero_attn=True, batch_first=True
        )
        self.head = torch.nn.Linear(8, 5)

    def forward(self, pixels):
        rows = pixels.reshape(-1, 8, 8)
        columns = rows.transpose(1, 2)
        x = self.decoder(rows, columns)
        out, _ = self.extras(x, columns[:, :, :4], columns[:, :, 2:], need_weights=False)
        return self.head(out.mean(dim=1))


def _upconv():
    """ConvTranspose2d up to 16×16, convs with replicate and circular padding,
    InstanceNorm2d with running statistics, logits."""
    nn = torch.nn
    return nn.Sequential(
        nn.ConvTranspose2d(1, 2, 3, stride=2, padding=1, output_padding=1),
        nn.ReLU(),
        nn.Conv2d(2, 2, 3, padding=1, padding_mode="replicate"),
        nn.Conv2d(2, 2, 3, padding=1, padding_mode="circular"),
        nn.InstanceNorm2d(2, affine=True, track_running_stats=True),
        nn.Flatten(),
        nn.Linear(2 * 16 * 16, 5),
    )


def _model(name: str, dtype):
    import torchref
    from torchref.sequence_models import sequence_model

    torch.manual_seed(0)
    if name in _SMALL_MODELS:
        return _SMALL_MODELS[name]().to(dtype)
    if name == "transformer":
        return sequence_model(
            name, dtype=dtype, d_model=8, nhead=2, dim_feedforward=16, num_layers=1, num_classes=5
        )
    if name in ("lstm", "gru"):
        return sequence_model(name, dtype=dtype, hidden_size=8, num_classes=5)
    if name == "mlp":
        return torch.nn.Sequential(
            torch.nn.Linear(12, 16),
            torch.nn.GELU(),
            torch.nn.Linear(16, 16),
            torch.nn.Tanh(),
            torch.nn.Linear(16, 5),
        ).to(dtype)
    return getattr(torchref.models, name)(num_classes=5, dtype=dtype)


def _batch(name: str, dtype: str, n: int = 8):
    rng = np.random.default_rng(0)
    if name == "transformer":  # 64 pixel intensities 0..16 as tokens
        return rng.integers(0, 17, (n, 64)), rng.integers(0, 5, n)
    shape = {
        "mlp": (n, 12),
        "lstm": (n, 64),
        "gru": (n, 64),
        "attention": (n, 64),
        "bilstm": (n, 64),
        "decoder": (n, 64),
    }.get(name, (n, 1, 8, 8))
    return rng.standard_normal(shape).astype(dtype), rng.integers(0, 5, n)


def _forward_and_grads(module, x, y, layout="NHWC"):
    """torch and nnx: output, and the gradients of cross-entropy in torch's names."""
    module.zero_grad(set_to_none=True)
    out = module(_t(x))
    torch.nn.functional.cross_entropy(out, _t(y)).backward()
    reference = {
        "output": out.detach().numpy(),
        "grads": {n: p.grad.numpy() for n, p in module.named_parameters()},
    }
    nnx_module = to_nnx(module, layout=layout)
    # moved on the host: jnp.asarray / an eager moveaxis would compile a program per shape
    feed = jax.device_put(np.moveaxis(x, 1, -1) if x.ndim >= 3 and layout == "NHWC" else x)

    def loss(mod):
        logits = mod(feed)
        return jlosses.cross_entropy(logits, jnp.asarray(y)), logits

    # one compiled program (eagerly, every op of the model would compile on its own)
    (_, logits), grads = nnx.jit(nnx.value_and_grad(loss, has_aux=True))(nnx_module)
    candidate = {"output": np.asarray(logits), "grads": grads_to_torch(nnx_module, grads)}
    return reference, candidate


def _forward_check(name: str, dtype: str, layout: str = "NHWC"):
    torch_dtype = {"float64": torch.float64, "float32": torch.float32}[dtype]
    with jax_precision(dtype):
        module = _model(name, torch_dtype).eval()
        x, y = _batch(name, dtype)
        reference, candidate = _forward_and_grads(module, x, y, layout)
        return compare(reference, candidate, name=f"nnx {name} {dtype} {layout}")


def _round_trip_check(name: str):
    from jaxgrad.parity import BIT_IDENTICAL

    with jax_precision("float64"):
        module = _model(name, torch.float64)
        state = {k: v.numpy() for k, v in module.state_dict().items()}
        back = nnx_state_dict(to_nnx(module))
        return compare(state, back, name=f"nnx {name} round trip", **BIT_IDENTICAL)


def _trajectory_check(name: str, optimizer: str = "sgd"):
    """20 float64 training steps in train mode: torch's ``optimizer.step()`` loop
    against ``nnx.Optimizer`` driving jaxgrad's twin of the same torch optimizer;
    every parameter (and buffer) after every step."""
    from jaxgrad import optim as joptim

    with jax_precision("float64"):
        module = _model(name, torch.float64).train()
        x, y = _batch(name, "float64", n=32)
        if optimizer == "sgd":
            torch_optimizer = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
            jax_optimizer = joptim.sgd(lr=0.05, momentum=0.9)
        else:
            torch_optimizer = torch.optim.Adam(module.parameters(), lr=1e-2)
            jax_optimizer = joptim.adam(lr=1e-2)
        reference, candidate = nnx_trajectory(
            module, x, y, steps=20, torch_optimizer=torch_optimizer, jax_optimizer=jax_optimizer
        )
        return compare(reference, candidate, name=f"nnx {name} 20 steps {optimizer}")


_SMALL_MODELS = {
    "attention": _RowAttention,
    "bilstm": _RowBiLSTM,
    "upconv": _upconv,
    "decoder": _RowDecoder,
}

CHECKS = (
    [
        Check(
            f"nnx {name} forward+grads",
            dtype,
            functools.partial(_forward_check, name, dtype),
            area="flax",
        )
        for name in ("mlp", "cnn", "resnet", "transformer", "lstm")
        for dtype in ("float64", "float32")
    ]
    + [
        Check(
            f"nnx {name} forward+grads",
            "float64",
            functools.partial(_forward_check, name, "float64"),
            area="flax",
        )
        for name in ("attention", "gru", "bilstm", "upconv", "decoder")
    ]
    + [
        Check(
            f"nnx {name} round trip bit-exact",
            "float64",
            functools.partial(_round_trip_check, name),
            area="flax",
        )
        for name in ("transformer", "bilstm", "upconv")
    ]
    + [
        Check(
            "nnx resnet forward+grads NCHW",
            "float64",
            functools.partial(_forward_check, "resnet", "float64", "NCHW"),
            area="flax",
        ),
        Check(
            "nnx resnet round trip bit-exact",
            "float64",
            functools.partial(_round_trip_check, "resnet"),
            area="flax",
        ),
        Check(
            "nnx resnet 20 steps (params+BN stats)",
            "float64",
            functools.partial(_trajectory_check, "resnet"),
            area="flax",
        ),
        Check(
            "nnx lstm 20 steps adam (two biases)",
            "float64",
            functools.partial(_trajectory_check, "lstm", "adam"),
            area="flax",
        ),
        # SGD: the key bias has no gradient (softmax ignores it), and Adam would turn its
        # rounding noise into lr-sized steps on both sides
        Check(
            "nnx transformer 20 steps sgd",
            "float64",
            functools.partial(_trajectory_check, "transformer"),
            area="flax",
        ),
    ]
)


# --------------------------------------------------------------- port reports
# A model's output may be a tensor, a tuple tree of them (an LSTM's ``(output, (h, c))``)
# or a dict of them (a Hugging Face ``ModelOutput``, which a captured program returns as
# a dict of its fields); every leaf is compared, and every floating leaf gets its own
# cotangent, paired by position and key.
def _torch_tree(value):
    """A torch output as the same tree of numpy arrays (tuples, dicts; ``None`` kept)."""
    if isinstance(value, dict):  # ModelOutput is an OrderedDict of its non-None fields
        return {k: _torch_tree(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return tuple(_torch_tree(v) for v in value)
    # a copy: an in-place op later in the forward (ReLU(inplace=True) after a BatchNorm,
    # a residual `out += identity`) would otherwise rewrite what was recorded
    return None if value is None else value.detach().numpy().copy()


def _jax_tree(value):
    """An nnx output as a tree of numpy arrays, shaped as ``_torch_tree``'s."""
    if isinstance(value, dict):
        return {k: _jax_tree(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return tuple(_jax_tree(v) for v in value)
    return None if value is None else np.asarray(value)


def _pairs(tree, other) -> list:
    """``(leaf of tree, leaf of other)`` for every leaf, dicts matched by key (a
    captured program's dict need not keep torch's field order)."""
    if isinstance(other, dict):
        return [pair for key in other for pair in _pairs(tree[key], other[key])]
    if isinstance(other, (tuple, list)):
        return [pair for a, b in zip(tree, other) for pair in _pairs(a, b)]
    return [(tree, other)]


def _map_tree(fn, tree):
    if isinstance(tree, dict):
        return {k: _map_tree(fn, v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return tuple(_map_tree(fn, v) for v in tree)
    return fn(tree)


def _torch_order(array: np.ndarray, reference_shape) -> np.ndarray:
    """A channels-last spatial leaf moved back to torch's channel-first order."""
    if array.ndim >= 3 and array.shape != tuple(reference_shape):
        return np.moveaxis(array, -1, 1)
    return array


def _to_torch_order(tree, reference):
    if isinstance(reference, dict):
        return {k: _to_torch_order(tree[k], r) for k, r in reference.items()}
    if isinstance(reference, tuple):
        return tuple(_to_torch_order(t, r) for t, r in zip(tree, reference))
    return tree if reference is None else _torch_order(tree, reference.shape)


def is_captured(model) -> bool:
    """Whether ``model`` (from ``from_torch``) is a program captured with
    ``torch.export`` (an ``ExportedModule``: a ``TorchProgram`` on the nnx side)."""
    from jaxgrad.nn.capture.program import ExportedModule

    return isinstance(model, ExportedModule)


class Example(NamedTuple):
    """A model's example inputs as numpy arrays: positional ``args`` (a tuple) and
    keyword ``kwargs`` (a dict), each float array float32 or float64, each integer
    array token ids."""

    args: tuple
    kwargs: dict

    @classmethod
    def of(cls, inputs) -> Example:
        """``inputs`` as an ``Example``: one array (the only positional input), or an
        ``Example``."""
        return inputs if isinstance(inputs, Example) else cls((inputs,), {})

    def astype(self, dtype: str) -> Example:
        """The float arrays in ``dtype``; token ids stay integers."""

        def cast(a):
            return a.astype(dtype) if np.issubdtype(a.dtype, np.floating) else a

        return Example(
            tuple(cast(a) for a in self.args), {k: cast(v) for k, v in self.kwargs.items()}
        )

    def torch(self) -> tuple[tuple, dict]:
        """``(args, kwargs)`` as torch tensors."""
        return tuple(_t(a) for a in self.args), {k: _t(v) for k, v in self.kwargs.items()}

    def feed(self, channels_last: bool) -> tuple[tuple, dict]:
        """``(args, kwargs)`` as the nnx twin takes them: jax arrays, each image input
        (3 dimensions or more) channels-last when the twin is (``channels_last``)."""

        def put(a):
            return jax.device_put(np.moveaxis(a, 1, -1) if channels_last and a.ndim >= 3 else a)

        return tuple(put(a) for a in self.args), {k: put(v) for k, v in self.kwargs.items()}


def nnx_port(module, layout: str, example=None, example_kwargs=None):
    """The nnx twin of the torch ``module``, whether it takes channels-last input (an
    image model with ``layout="NHWC"``) and the jaxgrad model it was built from:
    ``(nnx_module, channels_last, model)``. ``example`` (a tuple of torch inputs) lets
    ``from_torch`` capture with ``torch.export`` what its layer path cannot take;
    ``example_kwargs`` (keyword inputs, a dict of torch tensors) are passed by name,
    which only a program captured with ``torch.export`` takes: it is captured so.

    Raises ``ValueError`` (from ``from_torch`` or ``to_nnx``) naming what cannot be
    converted."""
    from jaxgrad.flax import is_image_model
    from jaxgrad.nn import from_torch

    model, params, buffers = from_torch(
        module,
        example,
        example_kwargs=example_kwargs or None,
        with_buffers=True,
        capture="export" if example_kwargs else "auto",
    )
    nnx_module = to_nnx(model, params, buffers, layout=layout)
    if not module.training:
        nnx_module.eval()
    channels_last = layout == "NHWC" and not is_captured(model) and is_image_model(model)
    return nnx_module, channels_last, model


def layer_table(module, nnx_module, x, channels_last: bool, computed_in=None) -> list[dict]:
    """Per layer (the top-level children of a torch ``Sequential``, the converted
    layers of a traced forward): the max abs error of the nnx twin's output against
    torch's (float64 or float32 as the module), in torch's layout. Other modules get
    one row for the whole forward. ``x``: one input array, or an ``Example`` of
    several; ``channels_last``: the twin takes NHWC input; ``computed_in``: as
    ``compare``'s (``"float32"`` for a float64 model whose own code computes in
    float32)."""
    from jaxgrad.flax import modules as m
    from jaxgrad.parity import compare as compare_trees

    example = Example.of(x)
    torch_args, torch_kwargs = example.torch()
    feed_args, feed_kwargs = example.feed(channels_last)

    def row(layer, kind, reference, candidate):
        report = compare_trees(
            reference, _to_torch_order(candidate, reference), computed_in=computed_in
        )
        return {
            "layer": layer,
            "type": kind,
            "max_abs_err": report.max_abs_err,
            "passed": report.passed,
        }

    from jaxgrad.flax.program import TorchProgram

    if isinstance(nnx_module, (m.TorchGraph, TorchProgram)):
        paths = (
            [path for path, _ in nnx_module.graph.layers]
            if isinstance(nnx_module, m.TorchGraph)
            else list(nnx_module.layers.keys())
        )
        captured, hooks, torch_outputs = {}, [], {}

        def record(path, out):  # returns None: a hook's return value replaces the output
            # the last call, as the twin's capture keeps it (a module called twice, such
            # as a ResNet block's one ReLU, has one row)
            torch_outputs[path] = _torch_tree(out)

        for path in paths:
            hooks.append(
                module.get_submodule(path).register_forward_hook(
                    lambda mod, args, out, path=path: record(path, out)
                )
            )
        try:
            module(*torch_args, **torch_kwargs)
        finally:
            for hook in hooks:
                hook.remove()
        nnx_module(*feed_args, capture=captured, **feed_kwargs)
        return [
            row(
                path,
                type(module.get_submodule(path)).__name__,
                torch_outputs[path],
                _jax_tree(captured[path]),
            )
            for path in paths
            if path in captured and path in torch_outputs
        ]
    if not (isinstance(module, torch.nn.Sequential) and isinstance(nnx_module, nnx.Sequential)):
        return [
            row(
                "(whole model)",
                type(module).__name__,
                _torch_tree(module(*torch_args, **torch_kwargs)),
                _jax_tree(nnx_module(*feed_args, **feed_kwargs)),
            )
        ]
    rows = []
    (torch_value,), (value,) = torch_args, feed_args  # a Sequential takes one input
    children = iter(module.named_children())
    for item in nnx_module.layers:
        value = item(value)
        if isinstance(item, (m.ChannelsLast, m.ChannelsFirst)):
            continue
        name, child = next(children)
        torch_value = child(torch_value)
        rows.append(row(name, type(child).__name__, _torch_tree(torch_value), _jax_tree(value)))
    return rows


class PortParity(NamedTuple):
    """What ``port_parity`` found: the ``report``, the twin (``nnx_module``, whether it
    takes channels-last input) and the jaxgrad ``model`` it was built from, the two
    sides compared (``{"output": ..., "grads": {torch name: array}}``, numpy), and
    ``float32_regions``: the torch module paths where a float64 model's own code
    computes in float32 (its leaves then judged at the float32 tier; empty otherwise)."""

    report: object
    nnx_module: object
    channels_last: bool
    model: object
    reference: dict
    candidate: dict
    float32_regions: tuple = ()


def port_parity(module, x, layout: str, dtype: str, *, fresh=None) -> PortParity:
    """Forward and gradients (of ``Σ output · cotangent`` over every floating output,
    every parameter) of ``module`` and its nnx twin at the ``dtype`` tier (``x``, one
    input array or an ``Example`` of several, is also the example a capture with
    ``torch.export`` needs). The cotangents are drawn in float32 whatever ``dtype``, so
    with float32 weights and input the float64 run computes exactly what the float32
    run approximates (``compare``'s ``reference64``).

    ``module`` itself is never run: the conversion and torch's reference each take
    their own copy (``fresh()``, default ``copy.deepcopy(module)``), so a forward that
    fills a cache (timm's LeViT keeps its attention biases) leaves nothing behind that
    the other run, or a later copy, would read.

    The float64 verdict follows the zoo's rules: a model whose own code computes in
    float32 (Hugging Face's RMSNorm casts to float32) is judged at the float32 tier,
    the tier of that arithmetic (``float32_regions`` says where), and a float32-tier
    leaf that is zero in exact arithmetic (float64 noise, at most
    ``jaxgrad.parity.ZERO_IN_EXACT`` of its neighbours) at its neighbours' scale:
    ``compare`` with the float64 reference as its own float64 answer, which adds that
    rule and nothing else (a leaf outside the tier is also outside the tier of it).

    Raises ``ValueError`` when the module cannot be converted (see ``nnx_port``)."""
    import copy

    from parity_checks._zoo import float32_regions

    fresh = fresh or (lambda: copy.deepcopy(module))
    torch_dtype = {"float64": torch.float64, "float32": torch.float32}[dtype]
    example = Example.of(x).astype(dtype)  # token ids stay ints
    torch_args, torch_kwargs = example.torch()
    with jax_precision(dtype):
        nnx_module, channels_last, model = nnx_port(
            fresh().to(torch_dtype), layout, torch_args, torch_kwargs
        )
        feed_args, feed_kwargs = example.feed(channels_last)
        module = fresh().to(torch_dtype)
        module.zero_grad(set_to_none=True)
        torch_out = module(*torch_args, **torch_kwargs)
        out = _torch_tree(torch_out)
        rng = np.random.default_rng(1)
        cotangents = _map_tree(
            lambda leaf: (
                None
                if leaf is None or not np.issubdtype(leaf.dtype, np.floating)
                else rng.standard_normal(leaf.shape).astype(np.float32).astype(dtype)
            ),
            out,
        )
        sum(
            ((leaf * _t(c)).sum() for leaf, c in _pairs(torch_out, cotangents) if c is not None),
            start=torch.zeros((), dtype=torch_dtype),
        ).backward()
        # a parameter torch leaves without .grad (read only through detach / no_grad)
        # has gradient zero: the twin's must be exactly that, not missing
        reference = {
            "output": out,
            "grads": {
                n: p.grad.numpy() if p.grad is not None else np.zeros(p.shape, dtype)
                for n, p in module.named_parameters()
            },
        }

        def objective(mod):
            y = mod(*feed_args, **feed_kwargs)
            total = 0.0
            for leaf, c in _pairs(y, cotangents):
                if c is not None:
                    if leaf.shape != c.shape:  # channels-last output: back to torch's order
                        leaf = jnp.moveaxis(leaf, -1, 1)
                    total = total + jnp.sum(leaf * c)
            return total, y

        (_, y), grads = nnx.jit(nnx.value_and_grad(objective, has_aux=True))(nnx_module)
        candidate = {
            "output": _to_torch_order(_jax_tree(y), out),
            "grads": grads_to_torch(nnx_module, grads),
        }
        regions = tuple(float32_regions(model)) if dtype == "float64" else ()
        report = compare(
            reference,
            candidate,
            computed_in="float32" if regions else None,
            reference64=float64_leaves(reference) if dtype == "float64" else None,
            name=f"port {type(module).__name__} {dtype}",
        )
        return PortParity(report, nnx_module, channels_last, model, reference, candidate, regions)


def float64_leaves(tree):
    """``tree`` with every leaf that is not a float64 array set to None: what
    ``compare``'s ``reference64`` takes from a float64 run (whose output may hold token
    ids, or a float32 leaf the model returns as such)."""
    return _map_tree(
        lambda leaf: leaf if getattr(leaf, "dtype", None) == np.float64 else None, tree
    )


def round_trip(saved, reloaded, feed):
    """``saved`` (the proved nnx module) against ``reloaded`` (a fresh twin that
    ``load_nnx`` filled from the file ``saved`` was written to): every variable (PRNG
    keys by their key data) and the output on ``feed`` (one input, or the twin's
    ``(args, kwargs)`` as ``Example.feed`` gives them), bit-identical."""
    args, kwargs = (
        feed
        if isinstance(feed, tuple) and len(feed) == 2 and isinstance(feed[1], dict)
        else ((feed,), {})
    )

    def variables(module):
        return {
            ".".join(map(str, path)): np.asarray(
                jax.random.key_data(node.get_value())
                if jax.dtypes.issubdtype(node.get_value().dtype, jax.dtypes.prng_key)
                else node.get_value()
            )
            for path, node in nnx.iter_graph(module)
            if isinstance(node, nnx.Variable)
        }

    # jitted: a captured program run eagerly compiles each of its ATen ops on its own
    call = nnx.jit(lambda module, args, kwargs: module(*args, **kwargs))
    reference = {"variables": variables(saved), "output": _jax_tree(call(saved, args, kwargs))}
    candidate = {
        "variables": variables(reloaded),
        "output": _jax_tree(call(reloaded, args, kwargs)),
    }
    return compare(reference, candidate, rtol=0.0, atol=0.0, name="save_nnx -> load_nnx")
