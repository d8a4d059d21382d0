"""The catalogue's mistakes made on torch's own layer, for ports the doctor cannot vary.

A jaxgrad or stock-nnx port has layers the doctor can transform into torch's
(``Convention.candidates``). A custom ``nnx.Module``, a pytree module or a plain
function has none: the doctor sees only its values. For those it runs the opposite
experiment: each entry's ``mistakes(case)`` builds *torch's* layer (``case.layer``,
torch's params and inputs) with the mistake a port commonly makes — flax's eps, the
tanh GELU, a kernel reshaped instead of transposed, 'SAME' padding, features
flattened H,W,C, a q/k/v block order, float32 — and the doctor looks for that
variant's output among the port's values. The entry whose variant the port
reproduces names the convention; the error left is the port's error with the
convention undone.

The training-only entries (BatchNorm momentum, running variance) have no mistake
here: a traced port's running statistics are not compared.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from jaxgrad.doctor.trial import Trial

_NORMS = (
    "LayerNorm",
    "GroupNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "RMSNorm",
)
_EPS = (1e-6, 1e-3, 1e-12, 1e-8, 1e-7, 1e-4, 1e-5, 1e-2)


def _eps(case):
    if case.class_name not in _NORMS or getattr(case.layer, "eps", None) is None:
        return []
    theirs = case.layer.eps
    return [
        (
            f"eps is {eps!r}, torch uses {theirs!r}",
            Trial(layer=dataclasses.replace(case.layer, eps=eps)),
        )
        for eps in _EPS
        if eps != theirs
    ]


def _gelu(case):
    if case.class_name != "GELU":
        return []
    theirs = case.layer.approximate
    ours = "tanh" if theirs == "none" else "none"
    return [
        (
            f"approximate={ours!r} (jax.nn.gelu's default is tanh), torch uses "
            f"approximate={theirs!r}",
            Trial(layer=dataclasses.replace(case.layer, approximate=ours)),
        )
    ]


def _transposed(case):
    if case.class_name == "Linear":
        w = np.asarray(case.params["weight"])
        if w.shape[0] != w.shape[1]:
            return []
        return [
            (
                "the weight is used transposed (a torch [out, in] weight taken as a flax "
                "[in, out] kernel, or the reverse)",
                Trial(params={**case.params, "weight": w.T.copy()}),
            )
        ]
    if case.class_name != "MultiheadAttention" or "in_proj_weight" not in case.params:
        return []
    out = []
    w = np.asarray(case.params["out_proj.weight"])
    out.append(
        (
            "the output projection's weight is used transposed",
            Trial(params={**case.params, "out_proj.weight": w.T.copy()}),
        )
    )
    packed = np.asarray(case.params["in_proj_weight"])
    blocks = np.split(packed, 3)
    for i, label in enumerate("qkv"):
        changed = [b.T if j == i else b for j, b in enumerate(blocks)]
        out.append(
            (
                f"the {label} projection's weight is used transposed",
                Trial(params={**case.params, "in_proj_weight": np.concatenate(changed)}),
            )
        )
    out.append(
        (
            "the q, k and v projections' weights are used transposed",
            Trial(params={**case.params, "in_proj_weight": np.concatenate([b.T for b in blocks])}),
        )
    )
    return out


def _kernel_layout(case):
    w = case.params.get("weight")
    if case.class_name not in ("Conv1d", "Conv2d") or w is None:
        return []
    w = np.asarray(w)
    if w.ndim == 4:
        o, i, h, k = w.shape
        hwio = w.reshape(h, k, i, o).transpose(3, 2, 0, 1)
        oihw = w.transpose(2, 3, 1, 0).reshape(w.shape)
        names = ("HWIO", "OIHW", "transpose(2, 3, 1, 0)")
    else:
        o, i, k = w.shape
        hwio = w.reshape(k, i, o).transpose(2, 1, 0)
        oihw = w.transpose(2, 1, 0).reshape(w.shape)
        names = ("WIO", "OIW", "transpose(2, 1, 0)")
    return [
        (
            f"the {names[0]} kernel was reshaped from torch's {names[1]} weight instead of "
            f"transposed ({names[2]})",
            Trial(params={**case.params, "weight": hwio.copy()}),
        ),
        (
            f"the {names[1]} weight was reshaped from a {names[0]} kernel instead of transposed",
            Trial(params={**case.params, "weight": oihw.copy()}),
        ),
    ]


def conv_kernel_flip(case):
    # a flip undoes itself: the catalogue's fix for a flipped kernel is this same trial
    w = case.params.get("weight")
    if case.class_name not in ("Conv1d", "Conv2d") or w is None:
        return []
    w = np.asarray(w)
    flipped = w[..., ::-1] if w.ndim == 3 else w[..., ::-1, ::-1]
    return [
        (
            "the kernel is spatially flipped (a convolution, where torch computes a "
            "cross-correlation)",
            Trial(params={**case.params, "weight": flipped.copy()}),
        )
    ]


def _tuple(value, n):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


_PADDED = ("Conv1d", "Conv2d", "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d")


def _padding(case):
    layer = case.layer
    if (
        case.class_name not in _PADDED
        or isinstance(getattr(layer, "padding", None), str)
        or not case.args
    ):
        return []
    n = 1 if case.class_name.endswith("1d") else 2
    x = np.asarray(case.args[0])
    kernel = _tuple(layer.kernel_size, n)
    stride = _tuple(layer.stride if layer.stride is not None else layer.kernel_size, n)
    dilation = _tuple(getattr(layer, "dilation", 1), n)
    pad = _tuple(layer.padding, n)
    out = []
    for p in range(0, max(kernel)):
        if (p,) * n != pad and all(
            p <= k // 2 or not case.class_name.startswith(("Max", "Avg")) for k in kernel
        ):
            out.append(
                (
                    f"padding is {p} where torch pads {layer.padding}",
                    Trial(layer=dataclasses.replace(layer, padding=p)),
                )
            )
    # flax's 'SAME': out = ceil(in / stride), the odd pad at the end
    pairs = []
    for size, k, s, d in zip(x.shape[-n:], kernel, stride, dilation):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        pairs.append((total // 2, total - total // 2))
    if any(lo != hi for lo, hi in pairs) and not case.class_name.startswith("Avg"):
        fill = -np.inf if case.class_name.startswith("Max") else 0.0
        padded = np.pad(x, [(0, 0)] * (x.ndim - n) + pairs, constant_values=fill)
        out.append(
            (
                f"'SAME' padding pads {pairs[0] if n == 1 else tuple(pairs)} at stride "
                f"{stride if n > 1 else stride[0]}; torch pads {layer.padding} on each side",
                Trial(layer=dataclasses.replace(layer, padding=0), args=(padded, *case.args[1:])),
            )
        )
    return out


def _flatten(case):
    x = np.asarray(case.args[0]) if case.args else None
    if case.class_name == "Flatten" and x is not None and x.ndim == 4:
        n, c, h, w = x.shape
        hwc = x.transpose(0, 2, 3, 1)
        return [
            (
                "the port flattens H,W,C (flax's NHWC order); torch flattens C,H,W",
                Trial(args=(np.ascontiguousarray(hwc).reshape(n, c, h, w),)),
            )
        ]
    if case.class_name != "Linear" or x is None or x.ndim != 2:
        return []
    out = []
    for c, h, w in case.chw:
        if c * h * w == x.shape[1] and min(h, w) > 1 and c > 1:
            hwc = x.reshape(-1, c, h, w).transpose(0, 2, 3, 1).reshape(x.shape)
            out.append(
                (
                    f"the input is flattened H,W,C (flax's NHWC order, from {c}x{h}x{w}) "
                    "but the weight's columns are torch's C,H,W order (not permuted)",
                    Trial(args=(hwc,)),
                )
            )
    return out


def _flag(field, classes):
    def mistakes(case):
        if case.class_name not in classes or not hasattr(case.layer, field):
            return []
        theirs = getattr(case.layer, field)
        return [
            (
                f"{field} is {not theirs!r}, torch uses {theirs!r}",
                Trial(layer=dataclasses.replace(case.layer, **{field: not theirs})),
            )
        ]

    return mistakes


def _blocks(case, names, labels):
    keys = [k for k in case.params if k.startswith(names)]
    if not keys:
        return []
    out = []
    size = len(labels)
    for perm in itertools.permutations(range(size)):
        if perm == tuple(range(size)):
            continue
        params = dict(case.params)
        for k in keys:
            parts = np.split(np.asarray(params[k]), size, axis=0)
            params[k] = np.concatenate([parts[p] for p in perm], axis=0)  # block j holds perm[j]
        out.append(
            (
                f"the port stores the blocks in the order "
                f"{','.join(labels[p] for p in perm)}; torch's order is {','.join(labels)}",
                Trial(params=params),
            )
        )
    return out


def _packing(case):
    if case.class_name != "MultiheadAttention":
        return []
    return _blocks(case, ("in_proj_weight", "in_proj_bias"), ("q", "k", "v"))


def _lstm(case):
    if case.class_name not in ("LSTM", "LSTMCell"):
        return []
    return _blocks(case, ("weight_ih", "weight_hh", "bias_ih", "bias_hh"), ("i", "f", "g", "o"))


def _gru(case):
    if case.class_name not in ("GRU", "GRUCell"):
        return []
    return _blocks(case, ("weight_ih", "weight_hh", "bias_ih", "bias_hh"), ("r", "z", "n"))


def _bool_masks(case):
    return {
        k: np.asarray(v)
        for k, v in case.kwargs.items()
        if k in ("attn_mask", "key_padding_mask")
        and v is not None
        and np.asarray(v).dtype == np.bool_
    }


def _polarity(case):
    masks = _bool_masks(case) if case.class_name == "MultiheadAttention" else {}
    if not masks:
        return []
    return [
        (
            "the boolean mask is read with flax/SDPA polarity (True = attend); "
            "nn.MultiheadAttention's True means masked",
            Trial(kwargs={**case.kwargs, **{k: ~v for k, v in masks.items()}}),
        )
    ]


def _fill(case):
    masks = _bool_masks(case) if case.class_name == "MultiheadAttention" else {}
    if not masks:
        return []
    finite = {
        k: np.where(v, -1e300, 0.0).astype(np.asarray(case.args[0]).dtype) for k, v in masks.items()
    }
    return [
        (
            "masked keys are filled with a finite value (flax's finfo.min: fully masked "
            "rows get uniform weights); torch gives those rows no weights (NaN with "
            "need_weights=True, zeros through SDPA with need_weights=False)",
            Trial(kwargs={**case.kwargs, **finite}),
        )
    ]


def _softmax_float32(case):
    """torch's attention with its softmax taken in float32, as
    ``jax.nn.dot_product_attention`` does (what ``nnx.MultiHeadAttention`` calls when
    it has no dropout), the rest in the input's dtype."""
    if (
        case.class_name != "MultiheadAttention"
        or "in_proj_weight" not in case.params
        or len(case.args) < 3
        or any(case.kwargs.get(k) is not None for k in ("attn_mask", "key_padding_mask"))
    ):
        return []
    q, k, v = (np.asarray(a) for a in case.args[:3])
    if q.dtype != np.float64:
        return []
    layer, params = case.layer, case.params
    batch_first = getattr(layer, "batch_first", False)
    unbatched = q.ndim == 2
    if unbatched:
        q, k, v = q[None], k[None], v[None]
    elif not batch_first:
        q, k, v = (a.transpose(1, 0, 2) for a in (q, k, v))
    e, heads = layer.embed_dim, layer.num_heads
    w = np.asarray(params["in_proj_weight"])
    b = np.asarray(params.get("in_proj_bias", np.zeros(3 * e)))

    def project(x, i):
        out = x @ w[i * e : (i + 1) * e].T + b[i * e : (i + 1) * e]
        return out.reshape(*x.shape[:2], heads, e // heads)

    logits = np.einsum("nlhd,nshd->nhls", project(q, 0), project(k, 1)) / np.sqrt(e // heads)
    low = logits.astype(np.float32)
    low = np.exp(low - low.max(axis=-1, keepdims=True))
    weights = (low / low.sum(axis=-1, keepdims=True)).astype(np.float64)
    out = np.einsum("nhls,nshd->nlhd", weights, project(v, 2)).reshape(q.shape)
    out = out @ np.asarray(params["out_proj.weight"]).T + np.asarray(
        params.get("out_proj.bias", np.zeros(e))
    )
    out = out[0] if unbatched else (out if batch_first else out.transpose(1, 0, 2))

    def fix(output, new, case, out=out):
        # judged at the float32 tier: the softmax carries float32 rounding
        return out.astype(np.float32), new

    return [
        (
            "the softmax is taken in float32 (jax.nn.dot_product_attention, which "
            "nnx.MultiHeadAttention calls without dropout); torch keeps float64",
            Trial(fix_output=fix),
        )
    ]


def _precision(case):
    ours = case.port_dtype
    theirs = next(
        (
            np.asarray(a).dtype
            for a in case.args
            if isinstance(a, np.ndarray) and a.dtype.kind == "f"
        ),
        None,
    )
    if (
        ours is None
        or theirs is None
        or np.dtype(ours) == theirs
        or not hasattr(case.layer, "dtype")
    ):
        return []
    ours = np.dtype(ours)
    cast = {
        k: np.asarray(v).astype(ours) if np.asarray(v).dtype.kind == "f" else v
        for k, v in case.params.items()
    }
    args = tuple(
        np.asarray(a).astype(ours) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a
        for a in case.args
    )
    return [
        (
            f"the port computes in {ours.name}, torch in {theirs.name}",
            Trial(layer=dataclasses.replace(case.layer, dtype=ours.name), params=cast, args=args),
        )
    ]


MISTAKES = {
    "norm_eps": _eps,
    "gelu_variant": _gelu,
    "linear_transposed": _transposed,
    "conv_kernel_layout": _kernel_layout,
    "conv_kernel_flip": conv_kernel_flip,
    "padding": _padding,
    "flatten_order": _flatten,
    "ceil_mode": _flag("ceil_mode", ("MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d")),
    "count_include_pad": _flag("count_include_pad", ("AvgPool1d", "AvgPool2d")),
    "attention_packing": _packing,
    "mask_polarity": _polarity,
    "mask_fill": _fill,
    "lstm_gate_order": _lstm,
    "gru_gate_order": _gru,
    "precision": _precision,
    "attention_softmax_float32": _softmax_float32,
}
"""``{entry name: mistakes(case)}``: the catalogue entries a traced port is tested on."""
