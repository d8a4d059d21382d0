"""The catalogue of porting conventions: data, one ``Convention`` per entry.

Each entry names a convention on which torch and a port commonly disagree, and
gives a *transformation* of the port layer that undoes the mistake: a change of its
hyperparameters (``dataclasses.replace`` with torch's value), of its weights (a
transpose, a block permutation), of its inputs (an inverted mask) or of its output
(BatchNorm's running variance). ``candidates(case)`` returns every variant worth
trying as ``[(detail, Trial), ...]``; an empty list means the entry does not apply.
The doctor runs each trial on the torch layer's own input and ranks the entries by
the error that remains.

``signature`` is the measured size and pattern of the error each mistake leaves
(float64, unit-normal inputs, the tiny layers of the doctor's tests); it is printed
with a verdict so a reader can tell a match from a coincidence.

Adding a convention is adding one entry to ``CATALOGUE``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import numpy as np

from jaxgrad.doctor.mistakes import MISTAKES, conv_kernel_flip
from jaxgrad.doctor.trial import Case, Trial


@dataclasses.dataclass(frozen=True)
class Convention:
    """One porting convention the doctor can test on a diverging layer.

    Attributes:
      name: a short identifier (``"norm_eps"``, ``"gelu_approximate"``…).
      description: what the convention is, in one sentence.
      signature: the measured size and pattern of the error it leaves.
      candidates: ``candidates(case) -> [(detail, trial), ...]``: the variants of the
        port's layer that follow torch on this convention (empty when it cannot apply).
      mistakes: ``mistakes(case) -> [(detail, trial), ...]`` where ``case.layer`` is
        torch's own layer: the variants of *torch's* layer that make the mistake a
        port commonly makes (for a port whose layers the doctor cannot vary: it
        looks for the variant's output among the port's values).
    """

    name: str
    description: str  # what the convention is, in one sentence
    signature: str  # the measured size and pattern of the error it leaves
    candidates: Callable[[Case], list]
    mistakes: Callable[[Case], list] | None = None


def _field_differs(case: Case, field: str, classes: tuple) -> bool:
    return (
        case.class_name in classes
        and case.torch_layer is not None
        and hasattr(case.layer, field)
        and hasattr(case.torch_layer, field)
        and getattr(case.layer, field) != getattr(case.torch_layer, field)
    )


def _use_torch_field(field: str, classes: tuple, wording: Callable | None = None):
    def candidates(case):
        if not _field_differs(case, field, classes):
            return []
        ours, theirs = getattr(case.layer, field), getattr(case.torch_layer, field)
        detail = wording(ours, theirs) if wording else f"{field} is {ours!r}, torch uses {theirs!r}"
        return [(detail, Trial(layer=dataclasses.replace(case.layer, **{field: theirs})))]

    return candidates


def _transposed_linear(case):
    w = case.params.get("weight")
    if case.class_name != "Linear" or w is None or w.ndim != 2 or w.shape[0] != w.shape[1]:
        return []
    return [
        (
            "the weight is stored transposed ([in, out], flax's kernel layout); torch's "
            "weight is [out, in]",
            Trial(params={**case.params, "weight": np.asarray(w).T}),
        )
    ]


def _conv_kernel_layout(case):
    w = case.params.get("weight")
    if case.class_name not in ("Conv2d",) or w is None or w.ndim != 4:
        return []
    w = np.asarray(w)
    o, i, h, k = w.shape
    return [
        (
            "the kernel was reshaped from flax's HWIO layout instead of transposed "
            "(torch's is OIHW: transpose(3, 2, 0, 1))",
            Trial(params={**case.params, "weight": w.reshape(h, k, i, o).transpose(3, 2, 0, 1)}),
        )
    ]


def _bn_unbiased_running_var(case):
    if (
        not case.train
        or not case.class_name.startswith("BatchNorm")
        or case.torch_layer is None
        or not getattr(case.layer, "track_running_stats", False)
    ):
        return []
    x = np.asarray(case.args[0])
    n = x.size // x.shape[1]
    momentum = case.torch_layer.momentum

    def fix(output, new, case, n=n, m=momentum):
        # the port accumulated the biased batch variance: rv' = (1-m) rv + m var_b;
        # torch adds m var_b n/(n-1), i.e. (rv' - (1-m) rv) / (n - 1) more.
        old = np.asarray(case.buffers["running_var"])
        rv = np.asarray(new["running_var"])
        return output, {**new, "running_var": rv + (rv - (1 - m) * old) / (n - 1)}

    return [
        (
            f"the running variance accumulates the biased batch variance; torch "
            f"accumulates the unbiased one (x n/(n-1) = {n}/{n - 1})",
            Trial(fix_output=fix),
        )
    ]


def _block_permutations(case, names, blocks, label):
    """Reorder ``blocks`` equal row blocks of every param in ``names``."""
    keys = [k for k in case.params if any(k.startswith(p) for p in names)]
    if not keys:
        return []
    out = []
    # every swap of two blocks, and every rotation (ONNX's i,o,f,c is a rotation
    # of the last three): the orders other frameworks use, not all n! of them
    perms = {
        tuple(p)
        for p in itertools.permutations(range(blocks))
        if sum(a != b for a, b in zip(p, range(blocks))) == 2
    }
    perms |= {tuple((i + r) % blocks for i in range(blocks)) for r in range(1, blocks)}
    perms.add((0, 3, 1, 2)[:blocks] if blocks == 4 else tuple(range(blocks)))
    for perm in sorted(perms):
        if perm == tuple(range(blocks)):
            continue
        params = dict(case.params)
        for k in keys:
            v = np.asarray(params[k])
            parts = np.split(v, blocks, axis=0)
            # the port stored block perm[j] where torch has block j: undo it
            fixed = [None] * blocks
            for j, p in enumerate(perm):
                fixed[p] = parts[j]
            params[k] = np.concatenate(fixed, axis=0)
        order = ",".join(label[p] for p in perm)
        out.append(
            (
                f"the port stores the blocks in the order {order}; torch's order is "
                f"{','.join(label)}",
                Trial(params=params),
            )
        )
    return out


def _lstm_gate_order(case):
    if case.class_name not in ("LSTM", "LSTMCell"):
        return []
    return _block_permutations(
        case, ("weight_ih", "weight_hh", "bias_ih", "bias_hh"), 4, ("i", "f", "g", "o")
    )


def _gru_gate_order(case):
    if case.class_name not in ("GRU", "GRUCell"):
        return []
    return _block_permutations(
        case, ("weight_ih", "weight_hh", "bias_ih", "bias_hh"), 3, ("r", "z", "n")
    )


def _attention_packing(case):
    if case.class_name != "MultiheadAttention" or "in_proj_weight" not in case.params:
        return []
    out = _block_permutations(case, ("in_proj_weight", "in_proj_bias"), 3, ("q", "k", "v"))
    heads = case.layer.num_heads
    params = dict(case.params)
    for k in ("in_proj_weight", "in_proj_bias"):
        if k in params:
            v = np.asarray(params[k])
            e = v.shape[0] // 3
            # fused per head: rows (head, [q|k|v], head_dim) → torch's ([q|k|v], head, head_dim)
            params[k] = (
                v.reshape(heads, 3, e // heads, *v.shape[1:]).swapaxes(0, 1).reshape(v.shape)
            )
    out.append(
        (
            "the packed projection is interleaved per head ([head, q|k|v, head_dim] "
            "rows, a fused qkv layout); torch stacks q, k, v blocks",
            Trial(params=params),
        )
    )
    return out


def _mask_polarity(case):
    if case.class_name != "MultiheadAttention":
        return []
    masks = {
        k: v
        for k, v in case.kwargs.items()
        if k in ("attn_mask", "key_padding_mask")
        and v is not None
        and np.asarray(v).dtype == np.bool_
    }
    if not masks:
        return []
    flipped = {**case.kwargs, **{k: ~np.asarray(v) for k, v in masks.items()}}
    return [
        (
            "the boolean mask is read with flax/SDPA polarity (True = attend); "
            "nn.MultiheadAttention's True means masked",
            Trial(kwargs=flipped),
        )
    ]


def _mask_fill(case):
    if case.class_name != "MultiheadAttention":
        return []
    kpm, am = case.kwargs.get("key_padding_mask"), case.kwargs.get("attn_mask")
    kpm = None if kpm is None or np.asarray(kpm).dtype != np.bool_ else np.asarray(kpm)
    am = None if am is None or np.asarray(am).dtype != np.bool_ else np.asarray(am)
    if kpm is None and am is None:
        return []
    query = np.asarray(case.args[0])
    batch_first = getattr(case.layer, "batch_first", False)
    n, length = (
        (query.shape[0], query.shape[1])
        if batch_first or query.ndim == 2
        else (query.shape[1], query.shape[0])
    )
    if query.ndim == 2:
        n, length = 1, query.shape[0]
    dead = np.zeros((n, length), bool)  # (batch, query) rows with every key masked
    if kpm is not None:
        dead |= kpm.reshape(n, -1).all(axis=-1)[:, None]
    if am is not None and am.ndim == 2:
        dead |= am.all(axis=-1)[None, :]
    if not dead.any():
        return []

    def fix(output, new, case, dead=dead):
        out, weights = (
            (output[0], output[1]) if isinstance(output, (tuple, list)) else (output, None)
        )
        out = np.array(out, dtype=np.result_type(out, np.float32))
        if out.ndim == 2:
            out[dead[0]] = np.nan
        elif batch_first:
            out[dead] = np.nan
        else:
            out[dead.T] = np.nan
        if weights is not None:
            weights = np.array(weights)
            weights[dead.reshape(weights.shape[0], -1) if weights.ndim == 3 else dead] = np.nan
            return (out, weights), new
        return out, new

    return [
        (
            "fully masked rows are filled with a finite value (flax's finfo.min: uniform "
            "weights); torch fills -inf, so those rows are NaN",
            Trial(fix_output=fix),
        )
    ]


def hwc_to_chw(flat, shape):
    """Rows of ``flat`` `(N, H·W·C)` (flax's NHWC flatten) in torch's C,H,W order;
    ``shape`` is the NCHW activation `(N, C, H, W)` that was flattened."""
    n, c, h, w = shape
    return np.asarray(flat).reshape(n, h, w, c).transpose(0, 3, 1, 2).reshape(n, -1)


def _flatten_order(case):
    x = case.args[0] if case.args else None
    if case.class_name != "Flatten" or x is None or np.ndim(x) != 4:
        return []
    shape = np.shape(x)

    def fix(output, new, case, shape=shape):
        out = np.asarray(output)
        return (
            hwc_to_chw(out, shape) if out.ndim == 2 and out.size == np.prod(shape) else out
        ), new

    return [
        ("the port flattens H,W,C (flax's NHWC order); torch flattens C,H,W", Trial(fix_output=fix))
    ]


def _precision(case):
    ref_dtype = next(
        (
            np.asarray(a).dtype
            for a in case.args
            if isinstance(a, np.ndarray) and a.dtype.kind == "f"
        ),
        None,
    )
    dtype = getattr(case.layer, "dtype", None)
    if ref_dtype is None or dtype is None or np.dtype(dtype) == ref_dtype:
        return []
    params = {k: np.asarray(v).astype(ref_dtype) for k, v in case.params.items()}
    return [
        (
            f"the port computes in {np.dtype(dtype).name}, torch in {ref_dtype.name}",
            Trial(layer=dataclasses.replace(case.layer, dtype=ref_dtype), params=params),
        )
    ]


_NORMS = (
    "LayerNorm",
    "GroupNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "RMSNorm",
)
_BN = ("BatchNorm1d", "BatchNorm2d")

CATALOGUE = (
    Convention(
        "norm_eps",
        "the normalisation epsilon (torch 1e-5, flax 1e-6)",
        "about 4.5e-6 x |normalised value| on unit-variance rows, everywhere (measured "
        "2.2e-5 max abs on 32 rows of 64 N(0,1) features, eps 1e-6 vs 1e-5); larger on "
        "low-variance rows (5.7e-4 on a BatchNorm with running_var ~0.1)",
        _use_torch_field("eps", _NORMS),
    ),
    Convention(
        "gelu_variant",
        "GELU exact (erf, torch's default) vs tanh (jax.nn.gelu's default)",
        "up to 4.7e-4 absolute per element (measured 4.73e-4 max on N(0, 9) inputs), zero at 0",
        _use_torch_field(
            "approximate",
            ("GELU",),
            lambda a, b: (
                f"approximate={a!r} (jax.nn.gelu's default is tanh), torch uses approximate={b!r}"
            ),
        ),
    ),
    Convention(
        "linear_transposed",
        "Linear weight layout: torch [out, in], flax kernel [in, out]",
        "O(1) everywhere; silent (no shape error) only for square layers",
        _transposed_linear,
    ),
    Convention(
        "conv_kernel_layout",
        "conv kernel layout: torch OIHW, flax HWIO (transpose, not reshape)",
        "O(1) everywhere; silent when the shapes happen to agree",
        _conv_kernel_layout,
    ),
    Convention(
        "conv_kernel_flip",
        "cross-correlation (torch, lax.conv) vs a flipped kernel",
        "O(1) everywhere",
        conv_kernel_flip,
    ),
    Convention(
        "padding",
        "explicit torch padding vs 'SAME' / 'VALID' / other pairs",
        "O(1) on the border rows and columns; a different output size when the total "
        "padding differs",
        _use_torch_field(
            "padding", ("Conv1d", "Conv2d", "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d")
        ),
    ),
    Convention(
        "flatten_order",
        "flatten order after a conv: torch C,H,W (NCHW), flax H,W,C (NHWC)",
        "O(1) in the flattened features (a permutation: same values, other places)",
        _flatten_order,
    ),
    Convention(
        "ceil_mode",
        "pooling ceil_mode (flax has none)",
        "one extra (or missing) output row/column: a different output size",
        _use_torch_field("ceil_mode", ("MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d")),
    ),
    Convention(
        "count_include_pad",
        "AvgPool count_include_pad (torch True; flax divides by the valid count)",
        "border cells off by the factor valid/k^2 (measured 0.56 = 1 - 4/9 at the corner "
        "of an all-ones input, 3x3 window, padding 1); interior exact",
        _use_torch_field("count_include_pad", ("AvgPool1d", "AvgPool2d")),
    ),
    Convention(
        "bn_momentum",
        "BatchNorm momentum: torch's 0.1 weights the new batch; flax's 0.9/0.99 the old",
        "training only: outputs agree, the running statistics take 0.9 instead of 0.1 "
        "of the batch statistics (measured 0.22 max abs after one step, N(0,1), n=8)",
        _use_torch_field(
            "momentum",
            _BN,
            lambda a, b: (
                f"momentum is {a!r} (weight on the old statistic, "
                f"flax's meaning), torch uses {b!r} (weight on the new batch)"
            ),
        ),
    ),
    Convention(
        "bn_unbiased_running_var",
        "BatchNorm running variance: torch accumulates the unbiased batch variance",
        "training only: running_var update smaller by n/(n-1) (measured 1.1e-2 max abs "
        "after one step, N(0,1), n=8); outputs and running_mean agree",
        _bn_unbiased_running_var,
    ),
    Convention(
        "attention_packing",
        "MultiheadAttention in_proj packing: [q; k; v] row blocks",
        "O(1) everywhere",
        _attention_packing,
    ),
    Convention(
        "mask_polarity",
        "boolean attention-mask polarity (nn.MultiheadAttention: True = masked)",
        "O(1) on the rows whose masks differ; masked keys get weight",
        _mask_polarity,
    ),
    Convention(
        "mask_fill",
        "mask fill value: torch -inf (fully masked rows are NaN), flax finfo.min",
        "NaN in torch where the port is finite, only on fully masked query rows",
        _mask_fill,
    ),
    Convention(
        "lstm_gate_order",
        "LSTM gate order: torch packs i, f, g, o",
        "O(1) in the hidden state from the first step",
        _lstm_gate_order,
    ),
    Convention(
        "gru_gate_order",
        "GRU gate order: torch packs r, z, n",
        "O(1) in the hidden state from the first step",
        _gru_gate_order,
    ),
    Convention(
        "attention_softmax_float32",
        "attention softmax in float32 (jax.nn.dot_product_attention, called by "
        "nnx.MultiHeadAttention without dropout) vs torch's input dtype",
        "float64 ports only: about 1e-8 absolute in the attention output (measured 3.3e-8 "
        "max on a 2-head, 8-wide block with unit-normal inputs), everywhere",
        lambda case: [],
    ),
    Convention(
        "precision",
        "the port's dtype (float32 vs torch's float64, x64 off)",
        "about 1e-7 relative (float32 rounding), everywhere (measured 1.5e-7 max abs on "
        "a 16-wide Linear with outputs up to 1.7)",
        _precision,
    ),
)
"""Every layer ``Convention`` ``diagnose`` tries, in the order it tries them."""

CATALOGUE = tuple(
    dataclasses.replace(entry, mistakes=MISTAKES.get(entry.name)) for entry in CATALOGUE
)
