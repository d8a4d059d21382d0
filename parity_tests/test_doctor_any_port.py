"""The doctor on the ports people write: a custom ``nnx.Module``, an equinox-style
pytree module and a plain ``fn(params, x)``, of an MLP, a small CNN and a transformer
block. Every catalogue entry that applies to the model, planted by hand into each
port, must be ranked first at the torch module where it is made; a correct port gets
a clean bill; what cannot be matched is said.

Expected values: torch runs the reference; the ports and their mistakes are written
here by hand (flax conventions: kernels ``(in, out)``, HWIO, NHWC, 'SAME', eps 1e-6,
the tanh GELU), never by the doctor's own transformations."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from jaxgrad.doctor import diagnose
from parity_tests._sampling import one_in

D = torch.float64


# ------------------------------------------------------------------ torch models
class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm = torch.nn.Linear(8, 8), torch.nn.LayerNorm(8)
        self.act, self.fc2 = torch.nn.GELU(), torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.act(self.norm(self.fc1(x))))


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, stride=2, padding=1)
        self.bn, self.relu = torch.nn.BatchNorm2d(4), torch.nn.ReLU()
        self.smooth = torch.nn.AvgPool2d(3, 1, 1)  # count_include_pad=True
        self.pool, self.flatten = torch.nn.MaxPool2d(2), torch.nn.Flatten()
        self.fc = torch.nn.Linear(16, 3)

    def forward(self, x):
        x = self.smooth(self.relu(self.bn(self.conv(x))))
        return self.fc(self.flatten(self.pool(x)))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(8)
        self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)
        self.ln2, self.fc1 = torch.nn.LayerNorm(8), torch.nn.Linear(8, 16)
        self.act, self.fc2 = torch.nn.GELU(), torch.nn.Linear(16, 8)

    def forward(self, x, key_padding_mask=None):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, key_padding_mask=key_padding_mask, need_weights=False)[0]
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


INPUTS = {"mlp": (5, 8), "cnn": (2, 2, 8, 8), "block": (2, 3, 8)}


def _torch(kind):
    torch.manual_seed(0)
    tm = {"mlp": MLP, "cnn": CNN, "block": Block}[kind]().to(D).eval()
    with torch.no_grad():  # trained-looking affine params and statistics: no ties
        for m in tm.modules():
            if isinstance(m, (torch.nn.LayerNorm, torch.nn.BatchNorm2d)):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.05, 0.2)
            if isinstance(m, torch.nn.MultiheadAttention):
                m.in_proj_bias.uniform_(-0.5, 0.5)
                m.out_proj.bias.uniform_(-0.5, 0.5)
    x = torch.from_numpy(np.random.default_rng(1).normal(size=INPUTS[kind]))
    return tm, x


@dataclasses.dataclass(frozen=True)
class Plant:
    """The port's conventions: torch's unless a mistake is planted."""

    eps: float = 1e-5  # LayerNorm
    bn_eps: float = 1e-5
    gelu_tanh: bool = False
    transposed: bool = False  # MLP fc1 / attention out_proj kept untransposed
    conv_reshaped: bool = False  # the kernel reshaped between OIHW and HWIO
    conv_flipped: bool = False
    same: bool = False  # 'SAME' padding (pads (0, 1) at stride 2) for torch's 1
    flatten_hwc: bool = False  # H,W,C features into a weight ordered C,H,W
    valid_count: bool = False  # average pooling divides by the valid cells, not 9
    qk_swapped: bool = False  # in_proj split k, q, v
    float32: bool = False
    mask_attend: bool = False  # a boolean mask read as True = attend (flax, SDPA)
    finite_fill: bool = False  # masked logits filled with finfo.min (flax), not -inf


# which entries apply to which model, where they are made, and how to plant them
CASES = {
    "mlp": {
        "norm_eps": ("norm", Plant(eps=1e-6)),
        "gelu_variant": ("act", Plant(gelu_tanh=True)),
        "linear_transposed": ("fc1", Plant(transposed=True)),
        "precision": ("fc1", Plant(float32=True)),
    },
    "cnn": {
        "conv_kernel_layout": ("conv", Plant(conv_reshaped=True)),
        "conv_kernel_flip": ("conv", Plant(conv_flipped=True)),
        "padding": ("conv", Plant(same=True)),
        "norm_eps": ("bn", Plant(bn_eps=1e-3)),
        "count_include_pad": ("smooth", Plant(valid_count=True)),
        "flatten_order": ("fc", Plant(flatten_hwc=True)),
        "precision": ("conv", Plant(float32=True)),
    },
    "block": {
        "norm_eps": ("ln1", Plant(eps=1e-6)),
        "gelu_variant": ("act", Plant(gelu_tanh=True)),
        "attention_packing": ("attn", Plant(qk_swapped=True)),
        "linear_transposed": ("attn", Plant(transposed=True)),
        "precision": ("ln1", Plant(float32=True)),
    },
}


def _state(tm, plant):
    dtype = np.float32 if plant.float32 else np.float64
    return {
        k: v.detach().numpy().astype(dtype)
        for k, v in tm.state_dict().items()
        if v.dtype.is_floating_point
    }


def _hwio(w, plant):
    """torch's OIHW weight as a flax HWIO kernel (or reshaped: the mistake)."""
    w = w[..., ::-1, ::-1].copy() if plant.conv_flipped else w
    return (
        w.reshape(w.shape[2], w.shape[3], w.shape[1], w.shape[0])
        if plant.conv_reshaped
        else w.transpose(2, 3, 1, 0)
    )


def _oihw(w, plant):
    """torch's OIHW weight for an OIHW port (reshaped from a HWIO checkpoint: the mistake)."""
    w = w[..., ::-1, ::-1].copy() if plant.conv_flipped else w
    return w.transpose(2, 3, 1, 0).reshape(w.shape) if plant.conv_reshaped else w


def _head_kernel(w, plant):
    """The CNN head's (in, out) kernel for H,W,C features: rows permuted, unless forgotten."""
    if plant.flatten_hwc:
        return w.T
    return w.reshape(3, 4, 2, 2).transpose(0, 2, 3, 1).reshape(3, -1).T


def _qkv(sd, plant):
    blocks = np.split(sd["attn.in_proj_weight"], 3)
    biases = np.split(sd["attn.in_proj_bias"], 3)
    order = (1, 0, 2) if plant.qk_swapped else (0, 1, 2)
    return [blocks[i] for i in order], [biases[i] for i in order]


def _x(x, plant):
    return x.astype(jnp.float32) if plant.float32 else x


def _smooth(x, plant, window):
    """AvgPool2d(3, 1, 1) on `x` (``window``: the 3x3 window in x's layout), torch's
    divisor 9, or the count of valid cells (the mistake)."""
    pads = [(1, 1) if w == 3 else (0, 0) for w in window]
    total = jax.lax.reduce_window(x, 0.0, jax.lax.add, window, (1,) * x.ndim, pads)
    if not plant.valid_count:
        return total / 9
    count = jax.lax.reduce_window(jnp.ones_like(x), 0.0, jax.lax.add, window, (1,) * x.ndim, pads)
    return total / count


def _masked(logits, key_padding_mask, plant):
    """torch's key_padding_mask (True = masked) on `(batch, heads, q, k)` logits."""
    if key_padding_mask is None:
        return logits
    masked = jnp.asarray(key_padding_mask)[:, None, None, :]
    masked = ~masked if plant.mask_attend else masked
    fill = jnp.finfo(logits.dtype).min if plant.finite_fill else -jnp.inf
    return jnp.where(masked, fill, logits)


# ------------------------------------------------------------------ plain functions
def _gelu(x, plant):
    return jax.nn.gelu(x, approximate=plant.gelu_tanh)


def _ln(x, p, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps) * p["scale"] + p["bias"]


def fn_port(kind, tm, plant):
    """``(fn, params)``: flax names and layouts, NHWC inside the CNN."""
    sd = _state(tm, plant)
    if kind == "mlp":
        params = {
            "dense_in": {
                "kernel": sd["fc1.weight"] if plant.transposed else sd["fc1.weight"].T,
                "bias": sd["fc1.bias"],
            },
            "ln": {"scale": sd["norm.weight"], "bias": sd["norm.bias"]},
            "dense_out": {"kernel": sd["fc2.weight"].T, "bias": sd["fc2.bias"]},
        }

        def fn(p, x):
            h = _x(x, plant) @ p["dense_in"]["kernel"] + p["dense_in"]["bias"]
            h = _gelu(_ln(h, p["ln"], plant.eps), plant)
            return h @ p["dense_out"]["kernel"] + p["dense_out"]["bias"]

        return fn, params
    if kind == "cnn":
        params = {
            "conv": {"kernel": _hwio(sd["conv.weight"], plant), "bias": sd["conv.bias"]},
            "bn": {
                "scale": sd["bn.weight"],
                "bias": sd["bn.bias"],
                "mean": sd["bn.running_mean"],
                "var": sd["bn.running_var"],
            },
            "head": {"kernel": _head_kernel(sd["fc.weight"], plant), "bias": sd["fc.bias"]},
        }

        def fn(p, x):
            x = _x(x, plant).transpose(0, 2, 3, 1)  # NHWC
            x = (
                jax.lax.conv_general_dilated(
                    x,
                    p["conv"]["kernel"],
                    (2, 2),
                    "SAME" if plant.same else ((1, 1), (1, 1)),
                    dimension_numbers=("NHWC", "HWIO", "NHWC"),
                )
                + p["conv"]["bias"]
            )
            bn = p["bn"]
            x = (x - bn["mean"]) / jnp.sqrt(bn["var"] + plant.bn_eps) * bn["scale"] + bn["bias"]
            x = _smooth(jax.nn.relu(x), plant, (1, 3, 3, 1))
            x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
            return x.reshape(x.shape[0], -1) @ p["head"]["kernel"] + p["head"]["bias"]

        return fn, params
    (wq, wk, wv), (bq, bk, bv) = _qkv(sd, plant)
    wo = sd["attn.out_proj.weight"]

    def dense(w, b):  # flax DenseGeneral: (in, heads, head_dim)
        return {"kernel": w.T.reshape(8, 2, 4), "bias": b.reshape(2, 4)}

    params = {
        "ln_1": {"scale": sd["ln1.weight"], "bias": sd["ln1.bias"]},
        "attn": {
            "query": dense(wq, bq),
            "key": dense(wk, bk),
            "value": dense(wv, bv),
            "out": {
                "kernel": (wo if plant.transposed else wo.T).reshape(2, 4, 8),
                "bias": sd["attn.out_proj.bias"],
            },
        },
        "ln_2": {"scale": sd["ln2.weight"], "bias": sd["ln2.bias"]},
        "mlp": {
            "fc_in": {"kernel": sd["fc1.weight"].T, "bias": sd["fc1.bias"]},
            "fc_out": {"kernel": sd["fc2.weight"].T, "bias": sd["fc2.bias"]},
        },
    }

    def fn(p, x, key_padding_mask=None):
        x = _x(x, plant)
        h = _ln(x, p["ln_1"], plant.eps)
        a = p["attn"]
        q, k, v = (
            jnp.einsum("ble,ehd->blhd", h, a[n]["kernel"]) + a[n]["bias"]
            for n in ("query", "key", "value")
        )
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(4.0)
        weights = jax.nn.softmax(_masked(logits, key_padding_mask, plant), axis=-1)
        att = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
        x = x + jnp.einsum("bqhd,hde->bqe", att, a["out"]["kernel"]) + a["out"]["bias"]
        m = p["mlp"]
        h = _gelu(_ln(x, p["ln_2"], plant.eps) @ m["fc_in"]["kernel"] + m["fc_in"]["bias"], plant)
        return x + h @ m["fc_out"]["kernel"] + m["fc_out"]["bias"]

    return fn, params


# ------------------------------------------------------------------ equinox style
def _pytree(cls, data, meta=()):
    return jax.tree_util.register_dataclass(
        dataclasses.dataclass(cls), data_fields=list(data), meta_fields=list(meta)
    )


class _Linear:  # equinox's layout: weight (out, in)
    weight: jax.Array
    bias: jax.Array

    def __call__(self, x):
        return x @ self.weight.T + self.bias


class _LayerNorm:
    weight: jax.Array
    bias: jax.Array
    eps: float

    def __call__(self, x):
        mean = x.mean(-1, keepdims=True)
        var = x.var(-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + self.eps) * self.weight + self.bias


EqxLinear = _pytree(_Linear, ("weight", "bias"))
EqxLayerNorm = _pytree(_LayerNorm, ("weight", "bias"), ("eps",))


class _EqxMLP:
    fc1: EqxLinear
    norm: EqxLayerNorm
    fc2: EqxLinear
    plant: Plant

    def __call__(self, x):
        return self.fc2(_gelu(self.norm(self.fc1(_x(x, self.plant))), self.plant))


class _EqxCNN:
    weight: jax.Array  # OIHW, as equinox's Conv2d
    bias: jax.Array
    bn: dict
    fc: EqxLinear
    plant: Plant

    def __call__(self, x):
        x = jax.lax.conv_general_dilated(
            _x(x, self.plant), self.weight, (2, 2), "SAME" if self.plant.same else ((1, 1), (1, 1))
        )
        x = x + self.bias[:, None, None]
        bn = {k: v[:, None, None] for k, v in self.bn.items()}
        x = (x - bn["mean"]) / jnp.sqrt(bn["var"] + self.plant.bn_eps) * bn["weight"] + bn["bias"]
        x = _smooth(jnp.maximum(x, 0), self.plant, (1, 1, 3, 3))
        x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        if self.plant.flatten_hwc:
            x = x.transpose(0, 2, 3, 1)
        return self.fc(x.reshape(x.shape[0], -1))


class _EqxAttention:  # equinox's MultiheadAttention: four (out, in) projections
    query_proj: EqxLinear
    key_proj: EqxLinear
    value_proj: EqxLinear
    output_proj: EqxLinear
    plant: Plant

    def __call__(self, x, key_padding_mask=None):
        q, k, v = (
            p(x).reshape(*x.shape[:2], 2, 4)
            for p in (self.query_proj, self.key_proj, self.value_proj)
        )
        logits = _masked(
            jnp.einsum("bqhd,bkhd->bhqk", q / jnp.sqrt(4.0), k), key_padding_mask, self.plant
        )
        att = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, axis=-1), v)
        return self.output_proj(att.reshape(x.shape))


EqxAttention = _pytree(
    _EqxAttention, ("query_proj", "key_proj", "value_proj", "output_proj"), ("plant",)
)


class _EqxBlock:
    ln1: EqxLayerNorm
    attn: EqxAttention
    ln2: EqxLayerNorm
    fc1: EqxLinear
    fc2: EqxLinear
    plant: Plant

    def __call__(self, x, key_padding_mask=None):
        x = _x(x, self.plant)
        x = x + self.attn(self.ln1(x), key_padding_mask)
        return x + self.fc2(_gelu(self.fc1(self.ln2(x)), self.plant))


EqxMLP = _pytree(_EqxMLP, ("fc1", "norm", "fc2"), ("plant",))
EqxCNN = _pytree(_EqxCNN, ("weight", "bias", "bn", "fc"), ("plant",))
EqxBlock = _pytree(_EqxBlock, ("ln1", "attn", "ln2", "fc1", "fc2"), ("plant",))


def eqx_port(kind, tm, plant):
    sd = _state(tm, plant)

    def linear(name, transposed=False):
        w = sd[f"{name}.weight"]
        return EqxLinear(w.T if transposed else w, sd[f"{name}.bias"])

    def norm(name, eps):
        return EqxLayerNorm(sd[f"{name}.weight"], sd[f"{name}.bias"], eps)

    if kind == "mlp":
        return EqxMLP(
            linear("fc1", plant.transposed), norm("norm", plant.eps), linear("fc2"), plant
        )
    if kind == "cnn":
        w = sd["fc.weight"]
        return EqxCNN(
            _oihw(sd["conv.weight"], plant),
            sd["conv.bias"],
            {
                "weight": sd["bn.weight"],
                "bias": sd["bn.bias"],
                "mean": sd["bn.running_mean"],
                "var": sd["bn.running_var"],
            },
            EqxLinear(w, sd["fc.bias"]),
            plant,
        )
    (wq, wk, wv), (bq, bk, bv) = _qkv(sd, plant)
    wo = sd["attn.out_proj.weight"]
    attn = EqxAttention(
        EqxLinear(wq, bq),
        EqxLinear(wk, bk),
        EqxLinear(wv, bv),
        EqxLinear(wo.T if plant.transposed else wo, sd["attn.out_proj.bias"]),
        plant,
    )
    return EqxBlock(
        norm("ln1", plant.eps), attn, norm("ln2", plant.eps), linear("fc1"), linear("fc2"), plant
    )


# ------------------------------------------------------------------ custom nnx modules
def _set(variable, value):
    variable.set_value(jnp.asarray(value))  # the value's dtype (BatchStat defaults to float32)


class NnxMLP(nnx.Module):
    def __init__(self, plant, dtype, rngs):
        self.plant = plant
        self.dense_in = nnx.Linear(8, 8, param_dtype=dtype, rngs=rngs)
        self.ln = nnx.LayerNorm(8, epsilon=plant.eps, param_dtype=dtype, rngs=rngs)
        self.dense_out = nnx.Linear(8, 3, param_dtype=dtype, rngs=rngs)

    def __call__(self, x):
        h = self.ln(self.dense_in(_x(x, self.plant)))
        return self.dense_out(nnx.gelu(h, approximate=self.plant.gelu_tanh))


class NnxCNN(nnx.Module):
    def __init__(self, plant, dtype, rngs):
        self.plant = plant
        self.conv = nnx.Conv(
            2,
            4,
            (3, 3),
            strides=2,
            padding="SAME" if plant.same else 1,
            param_dtype=dtype,
            rngs=rngs,
        )
        self.bn = nnx.BatchNorm(
            4, use_running_average=True, epsilon=plant.bn_eps, param_dtype=dtype, rngs=rngs
        )
        self.head = nnx.Linear(16, 3, param_dtype=dtype, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.bn(self.conv(_x(x, self.plant).transpose(0, 2, 3, 1))))
        x = nnx.avg_pool(
            x,
            (3, 3),
            strides=(1, 1),
            padding=((1, 1), (1, 1)),
            count_include_pad=not self.plant.valid_count,
        )
        x = nnx.max_pool(x, (2, 2), strides=(2, 2))
        return self.head(x.reshape(x.shape[0], -1))


def _attention(query, key, value, *, mask=None, fill=-np.inf, **options):
    """flax's attention without ``jax.nn.dot_product_attention``, which (what
    nnx.MultiHeadAttention calls without dropout) takes its softmax in float32: the
    doctor finds that at `attn` (3.3e-8 in float64, nothing in the catalogue). Masked
    logits (``mask``: True = attend, flax's polarity) are filled with ``fill``."""
    logits = jnp.einsum("...qhd,...khd->...hqk", query / jnp.sqrt(query.shape[-1]), key)
    if mask is not None:
        logits = jnp.where(mask, logits, fill)
    return jnp.einsum("...hqk,...khd->...qhd", jax.nn.softmax(logits, axis=-1), value)


class NnxBlock(nnx.Module):
    def __init__(self, plant, dtype, rngs):
        self.plant = plant
        self.ln_1 = nnx.LayerNorm(8, epsilon=plant.eps, param_dtype=dtype, rngs=rngs)
        fill = float(jnp.finfo(dtype).min) if plant.finite_fill else -np.inf
        self.attn = nnx.MultiHeadAttention(
            2,
            8,
            decode=False,
            param_dtype=dtype,
            rngs=rngs,
            attention_fn=functools.partial(_attention, fill=fill),
        )
        self.ln_2 = nnx.LayerNorm(8, epsilon=plant.eps, param_dtype=dtype, rngs=rngs)
        self.fc_in = nnx.Linear(8, 16, param_dtype=dtype, rngs=rngs)
        self.fc_out = nnx.Linear(16, 8, param_dtype=dtype, rngs=rngs)

    def __call__(self, x, key_padding_mask=None):
        x = _x(x, self.plant)
        attend = None
        if key_padding_mask is not None:  # flax's mask: True = attend
            masked = jnp.asarray(key_padding_mask)[:, None, None, :]
            attend = masked if self.plant.mask_attend else ~masked
        x = x + self.attn(self.ln_1(x), mask=attend)
        h = nnx.gelu(self.fc_in(self.ln_2(x)), approximate=self.plant.gelu_tanh)
        return x + self.fc_out(h)


def nnx_port(kind, tm, plant):
    sd = _state(tm, plant)
    dtype = jnp.float32 if plant.float32 else jnp.float64
    rngs = nnx.Rngs(0)
    if kind == "mlp":
        m = NnxMLP(plant, dtype, rngs)
        w = sd["fc1.weight"]
        _set(m.dense_in.kernel, w if plant.transposed else w.T)
        _set(m.dense_in.bias, sd["fc1.bias"])
        _set(m.ln.scale, sd["norm.weight"])
        _set(m.ln.bias, sd["norm.bias"])
        _set(m.dense_out.kernel, sd["fc2.weight"].T)
        _set(m.dense_out.bias, sd["fc2.bias"])
        return m
    if kind == "cnn":
        m = NnxCNN(plant, dtype, rngs)
        _set(m.conv.kernel, _hwio(sd["conv.weight"], plant))
        _set(m.conv.bias, sd["conv.bias"])
        for ours, theirs in (
            ("scale", "weight"),
            ("bias", "bias"),
            ("mean", "running_mean"),
            ("var", "running_var"),
        ):
            _set(getattr(m.bn, ours), sd[f"bn.{theirs}"])
        _set(m.head.kernel, _head_kernel(sd["fc.weight"], plant))
        _set(m.head.bias, sd["fc.bias"])
        return m
    m = NnxBlock(plant, dtype, rngs)
    (wq, wk, wv), (bq, bk, bv) = _qkv(sd, plant)
    for layer, w, b in ((m.attn.query, wq, bq), (m.attn.key, wk, bk), (m.attn.value, wv, bv)):
        _set(layer.kernel, w.T.reshape(8, 2, 4))
        _set(layer.bias, b.reshape(2, 4))
    wo = sd["attn.out_proj.weight"]
    _set(m.attn.out.kernel, (wo if plant.transposed else wo.T).reshape(2, 4, 8))
    _set(m.attn.out.bias, sd["attn.out_proj.bias"])
    for ours, theirs in (("ln_1", "ln1"), ("ln_2", "ln2")):
        _set(getattr(m, ours).scale, sd[f"{theirs}.weight"])
        _set(getattr(m, ours).bias, sd[f"{theirs}.bias"])
    for ours, theirs in (("fc_in", "fc1"), ("fc_out", "fc2")):
        _set(getattr(m, ours).kernel, sd[f"{theirs}.weight"].T)
        _set(getattr(m, ours).bias, sd[f"{theirs}.bias"])
    return m


PORTS = {"nnx": nnx_port, "pytree": eqx_port, "fn": fn_port}


# ------------------------------------------------------------------ the tests
# kind x form: one in three in the default run, each kind with another form (mlp-nnx,
# cnn-pytree, block-fn); all nine in the exhaustive run (CI: -m "exhaustive or long")
@pytest.mark.parametrize(
    "kind,form",
    one_in(
        3,
        [
            pytest.param(kind, form, id=f"{kind}-{form}")
            for k, kind in enumerate(INPUTS)
            for form in [*PORTS][k:] + [*PORTS][:k]
        ],
    ),
)
def test_correct_port_gets_a_clean_bill(x64, kind, form):
    tm, x = _torch(kind)
    report = diagnose(tm, PORTS[form](kind, tm, Plant()), x)
    assert report.clean, str(report)
    assert "clean bill" in report.verdict
    # every torch parameter was found in the port by value, none twice
    assert report.params and not any("not found" in p or "ambiguous" in p for p in report.params), (
        str(report)
    )
    assert not report.unmatched, str(report)


# one entry per model in the default run (the suite's time budget); the whole
# catalogue x model x port matrix under the `long` marker (CI runs it)
QUICK = {("mlp", "gelu_variant"), ("cnn", "flatten_order"), ("block", "attention_packing")}


@pytest.mark.parametrize("form", PORTS)
@pytest.mark.parametrize(
    "kind, entry",
    [
        pytest.param(k, e, marks=() if (k, e) in QUICK else pytest.mark.long)
        for k in CASES
        for e in CASES[k]
    ],
)
def test_planted_mistake_is_ranked_first(x64, kind, entry, form):
    tm, x = _torch(kind)
    layer, plant = CASES[kind][entry]
    report = diagnose(tm, PORTS[form](kind, tm, plant), x)
    assert report.first_layer == layer, str(report)
    assert report.causes and report.causes[0].name == entry, str(report)
    assert report.causes[0].explains, str(report)
    assert f"layer `{layer}`" in report.verdict and f"[{entry}]" in report.verdict


# item 1 fully masked for mask_fill: torch gives it no weights (zeros through SDPA with
# need_weights=False, NaN with need_weights=True), flax's finfo.min uniform weights
def test_nnx_attention_softmax_in_float32(x64):
    """nnx.MultiHeadAttention as it comes (no attention_fn): without dropout it calls
    jax.nn.dot_product_attention, whose softmax is float32; a float64 port then misses
    torch by ~3e-8 at `attn`, and the doctor names it."""
    tm, x = _torch("block")
    port = nnx_port("block", tm, Plant())
    port.attn.attention_fn = nnx.dot_product_attention
    report = diagnose(tm, port, x)
    assert report.first_layer == "attn", str(report)
    assert report.causes[0].name == "attention_softmax_float32", str(report)
    assert report.causes[0].explains and 1e-9 < report.causes[0].error_before < 1e-6


MASKS = {
    "clean": [[False, True, False], [True, False, False]],
    "mask_polarity": [[False, True, False], [True, False, False]],
    "mask_fill": [[False, True, False], [True, True, True]],
}


@pytest.mark.parametrize(
    "form", [pytest.param(f, marks=() if f == "fn" else pytest.mark.long) for f in PORTS]
)
@pytest.mark.parametrize(
    "entry, plant",
    [
        ("clean", Plant()),
        ("mask_polarity", Plant(mask_attend=True)),
        ("mask_fill", Plant(finite_fill=True)),
    ],
)
def test_masked_attention(x64, entry, plant, form):
    """The mask conventions, planted in the transformer block's attention."""
    tm, x = _torch("block")
    mask = torch.tensor(MASKS[entry])
    report = diagnose(tm, PORTS[form]("block", tm, plant), x, kwargs={"key_padding_mask": mask})
    if entry == "clean":
        assert report.clean, str(report)
        return
    assert report.first_layer == "attn", str(report)
    assert report.causes[0].name == entry and report.causes[0].explains, str(report)


def _tiny():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).to(
        D
    ), torch.randn(5, 4, dtype=D)


def test_what_cannot_be_matched_is_said(x64):
    tm, x = _tiny()
    w1, b1 = tm[0].weight.detach().numpy(), tm[0].bias.detach().numpy()
    w2, b2 = tm[2].weight.detach().numpy(), tm[2].bias.detach().numpy()

    def column_major(p, x):  # activations kept (features, batch); w1 stored doubled
        h = jnp.tanh((p["w1_twice"] / 2) @ x.T + p["b1"][:, None])
        return (p["w2"] @ h).T + p["b2"]

    report = diagnose(tm, (column_major, {"w1_twice": 2 * w1, "b1": b1, "w2": w2, "b2": b2}), x)
    assert report.clean, str(report)  # the output is right: the unmatched are only said
    text = str(report)
    assert "0.weight: not found in the port" in report.params
    assert "port leaves holding no torch parameter: w1_twice" in text
    why = {}
    for path, reason in report.unmatched:
        why[path] = why.get(path, "") + reason + " | "
    assert "0.weight not found among the port's leaves by value" in why["0"]
    assert why["1"].startswith(
        "its output is not among the port's values, though the model's output is"
    ), text
    assert "could not match `1`: its output is not among the port's values" in text


def test_ambiguous_parameters_are_said(x64):
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.LayerNorm(4), torch.nn.LayerNorm(4)).to(D)  # ones, zeros
    params = {
        "a": {"scale": np.ones(4), "bias": np.zeros(4)},
        "b": {"scale": np.ones(4), "bias": np.zeros(4)},
    }

    def fn(p, x):
        for name in ("a", "b"):
            x = _ln(x, p[name], 1e-5)
        return x

    report = diagnose(tm, (fn, params), torch.randn(3, 4, dtype=D))
    assert report.clean, str(report)
    # the same values in four leaves: told apart by the values each module's output uses
    assert report.params == [
        "0.weight -> a.scale",
        "0.bias -> a.bias",
        "1.weight -> b.scale",
        "1.bias -> b.bias",
    ], str(report)
    assert not report.unmatched, str(report)
    # a module whose output the port does not reproduce: its twins stay ambiguous
    report = diagnose(tm, (lambda p, x: fn(p, x) * 1.5, params), torch.randn(3, 4, dtype=D))
    assert report.first_layer is None and report.glue == "<output>", str(report)


def test_error_between_modules(x64):
    tm, x = _torch("block")
    _, params = fn_port("block", tm, Plant())

    def minus(p, x):
        a = p["attn"]
        h = _ln(x, p["ln_1"], 1e-5)
        q, k, v = (
            jnp.einsum("ble,ehd->blhd", h, a[n]["kernel"]) + a[n]["bias"]
            for n in ("query", "key", "value")
        )
        weights = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / 2.0, axis=-1)
        att = (
            jnp.einsum(
                "bqhd,hde->bqe", jnp.einsum("bhqk,bkhd->bqhd", weights, v), a["out"]["kernel"]
            )
            + a["out"]["bias"]
        )
        x = x - att  # torch adds
        m = p["mlp"]
        h = jax.nn.gelu(
            _ln(x, p["ln_2"], 1e-5) @ m["fc_in"]["kernel"] + m["fc_in"]["bias"], approximate=False
        )
        return x + h @ m["fc_out"]["kernel"] + m["fc_out"]["bias"]

    report = diagnose(tm, (minus, params), x)
    assert report.first_layer is None and not report.output_within_tier, str(report)
    assert "made between layers, in the forward code before layer `ln2`" in report.verdict


def test_untraceable_port_and_training_mode(x64):
    tm, x = _tiny()
    w1, b1 = tm[0].weight.detach().numpy(), tm[0].bias.detach().numpy()
    w2, b2 = tm[2].weight.detach().numpy(), tm[2].bias.detach().numpy()

    def branchy(p, x):  # Python control flow on a value: jax.make_jaxpr refuses it
        h = np.tanh(np.asarray(x) @ p["w1"].T + p["b1"])
        return h @ p["w2"].T + p["b2"] if float(h.sum()) == float(h.sum()) else h

    report = diagnose(tm, (branchy, {"w1": w1, "b1": b1, "w2": w2, "b2": b2}), x)
    assert report.output_within_tier and report.layers == [], str(report)
    assert "cannot be traced with jax.make_jaxpr" in report.verdict
    with pytest.raises(ValueError, match="`train`=True needs a jaxgrad model"):
        diagnose(tm, eqx_port("mlp", _torch("mlp")[0], Plant()), x, train=True)


def test_closure_port(x64):
    tm, x = _tiny()
    w1, b1 = (jnp.asarray(tm[0].weight.detach().numpy()), jnp.asarray(tm[0].bias.detach().numpy()))
    w2, b2 = (jnp.asarray(tm[2].weight.detach().numpy()), jnp.asarray(tm[2].bias.detach().numpy()))

    def closure(x):  # the weights it closes over are the jaxpr's constants
        return jnp.tanh(x @ w1.T + b1) @ w2.T + b2

    assert diagnose(tm, closure, x).clean

    def transposed(x):
        return jnp.tanh(x @ w1 + b1) @ w2.T + b2

    report = diagnose(tm, transposed, x)
    assert report.port_kind == "closure" and report.first_layer == "0", str(report)
    assert report.causes[0].name == "linear_transposed" and report.causes[0].explains
    assert "0.weight -> constant 0" in report.params, str(report)  # held as torch holds it


def test_a_mistake_outside_the_catalogue_is_not_explained(x64):
    """The should-fail twin: a wrong bias is localised, and nothing is named for it."""
    tm, x = _torch("mlp")
    fn, params = fn_port("mlp", tm, Plant())
    params["dense_out"]["bias"] = params["dense_out"]["bias"] + np.array([0.0, 0.5, 0.0])
    report = diagnose(tm, (fn, params), x)
    assert report.first_layer == "fc2" and not any(c.explains for c in report.causes), str(report)
    assert "nothing in the catalogue explains it" in report.verdict
    # the changed bias is found nowhere: the report says where it looked
    assert "fc2.bias: not found in the port" in report.params
    assert any(path == "fc2" and "fc2.bias not found" in why for path, why in report.unmatched)
