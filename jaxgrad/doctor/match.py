"""Finding torch's parameters and per-module outputs among a port's values.

Values are compared at the tier of the reference's dtype (``jaxgrad.parity``
``tolerance_for``), *up to the layouts the catalogue knows*:

- activations (``ACTIVATION_LAYOUTS``): as torch holds them; NHWC for an NCHW
  activation; channels last for an NCL one; sequence first for batch first (and
  back); features flattened H,W,C for a flattened C,H,W activation (the shapes
  ``(C, H, W)`` are those of torch's own 4-d values); any reshape of the same
  values in the same order;
- parameters (``match_params``): as torch holds them; transposed (a Linear weight as
  a flax kernel); HWIO for an OIHW kernel; reshaped (a scale kept ``(1, 1, 1, C)``, a
  ``DenseGeneral`` kernel ``(in, heads, head_dim)``); a Linear weight whose input
  columns are in H,W,C order; and, for packed parameters (``in_proj_weight``, LSTM and
  GRU ``weight_ih``/``weight_hh``/biases), each q/k/v or gate block on its own.

For a float32 torch module, a module's output may also be given with torch's float64
run of it (``Pool.find(reference, reference64)``): a port value outside the tier of
torch's float32 value is then still its match when ``jaxgrad.parity.compare`` passes it
by the calibrated float32 rule (within the tier of the float64 answer, or within
``CALIBRATION_MULTIPLE`` times torch float32's own distance from it); ``Found.rule``
says which rule matched.

A torch parameter with several port leaves of the same values (two LayerNorms both at
their initial ones) is *ambiguous*: the leaves are assigned in order and the report
says so. Localisation never depends on it: it is done on the activations.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxgrad.parity import CALIBRATION_MULTIPLE, compare, headroom, tolerance_for


def close(reference, candidate) -> tuple[float, bool]:
    """``(max abs error, within the tier of the reference's dtype)`` of two arrays of
    one shape (NaN masks must agree; ``inf`` when they do not)."""
    ref = np.asarray(reference)
    cand = np.asarray(candidate)
    if ref.shape != cand.shape:
        return np.inf, False
    if ref.dtype == np.bool_ or cand.dtype == np.bool_:
        same = bool(np.array_equal(ref, cand))
        return (0.0 if same else 1.0), same
    r, c = ref.astype(np.float64, copy=False), cand.astype(np.float64, copy=False)
    diff = np.abs(r - c)
    if np.isfinite(diff).all():  # the common case: no NaN or inf on either side
        err = float(diff.max()) if diff.size else 0.0
        dtype = ref.dtype if ref.dtype.kind == "f" else np.dtype(np.float64)
        rtol, atol = tolerance_for(dtype, r)
        return err, bool(err <= atol or np.all(diff <= atol + rtol * np.abs(r)))
    nan_r, nan_c = np.isnan(r), np.isnan(c)
    if not np.array_equal(nan_r, nan_c):
        return np.inf, False
    finite = np.isfinite(r) & np.isfinite(c)
    if not np.array_equal(r[~finite & ~nan_r], c[~finite & ~nan_c]):
        return np.inf, False
    if not finite.any():
        return 0.0, True
    diff = np.abs(r[finite] - c[finite])
    dtype = ref.dtype if ref.dtype.kind == "f" else np.dtype(np.float64)
    rtol, atol = tolerance_for(dtype, r[finite])
    return float(diff.max()), bool(np.all(diff <= atol + rtol * np.abs(r[finite])))


def activation_layouts(value, chw: tuple):
    """``[(layout name, value in that layout), ...]`` for a torch activation."""
    value = np.asarray(value)
    out = [("", value)]
    if value.ndim == 4:
        out.append(("NHWC", value.transpose(0, 2, 3, 1)))
    if value.ndim == 3:
        out.append(("channels last", value.transpose(0, 2, 1)))
        out.append(("batch and sequence axes swapped", value.transpose(1, 0, 2)))
    if value.ndim == 2:
        for c, h, w in chw:
            if c * h * w == value.shape[1] and min(h, w) > 1 and c > 1:
                out.append(
                    (
                        "flattened H,W,C",
                        value.reshape(-1, c, h, w)
                        .transpose(0, 2, 3, 1)
                        .reshape(value.shape[0], -1),
                    )
                )
    return out


@dataclasses.dataclass
class Found:
    """The port value nearest a torch value: ``error`` (max abs), ``ok`` (within the
    tier), ``where`` (the port's equation), ``layout``, ``value`` (the port's array)."""

    error: float
    ok: bool
    where: str | None = None
    layout: str = ""
    value: np.ndarray | None = None
    order: int = -1
    reference: np.ndarray | None = None  # torch's value in the port's layout
    leaves: frozenset = frozenset()  # the port leaves the value depends on
    rule: str = ""  # the rule of ``jaxgrad.parity.compare`` that matched it ("tier", …)
    reference64: np.ndarray | None = None  # torch's float64 run, in the port's layout


def calibrated(reference, candidate, reference64, error: float) -> str:
    """The rule of ``compare(..., reference64=...)`` that passes a float32 ``candidate``
    outside the tier of ``reference`` (``error``: their max abs difference), or ``""``.
    A candidate farther from ``reference`` than the rule could ever allow is not
    compared (most of a pool's values)."""
    ref = np.asarray(reference)
    if ref.dtype != np.float32 or reference64 is None or np.shape(reference64) != ref.shape:
        return ""
    exact = np.asarray(reference64, np.float64)
    if not np.isfinite(exact).all() or not ref.size:
        return ""
    rtol, atol = tolerance_for(np.float32, exact)
    own = headroom(ref, exact)
    # |c - r| <= |c - r64| + |r - r64| <= (max(1, k·own) + own) x the tier's widest point
    if error > (max(1.0, CALIBRATION_MULTIPLE * own) + own) * (atol + rtol * np.abs(exact).max()):
        return ""
    leaf = compare(
        {"value": ref}, {"value": np.asarray(candidate, np.float32)}, reference64={"value": exact}
    ).leaves[0]
    return leaf.rule if leaf.passed else ""


class Pool:
    """The port's recorded values, searched by size."""

    def __init__(self, values, chw, residuals=()):
        self.chw = chw
        self.residuals = list(residuals)  # torch values a port may have added in (x + f(x))
        self.cache: dict = {}
        self.by_size: dict[int, list] = {}
        for v in values:
            self.by_size.setdefault(v.array.size, []).append(v)

    def find(self, reference, reference64=None) -> Found:
        """The port value that best reproduces ``reference`` (a torch value); failing
        that, one that holds it added to a residual (``x + f(x)`` computed in one
        expression, ``f(x)`` never on its own). ``reference64``: torch's float64 run
        of the same value, calibrating a float32 match (module docstring)."""
        reference = np.asarray(reference)
        if reference64 is not None:
            reference64 = np.asarray(reference64)
            if reference64.shape != reference.shape or reference.dtype != np.float32:
                reference64 = None
        key = (
            reference.shape,
            reference.dtype.str,
            reference.tobytes(),
            None if reference64 is None else reference64.tobytes(),
        )
        if key not in self.cache:
            self.cache[key] = self._find_with_residuals(reference, reference64)
        return self.cache[key]

    def _find_with_residuals(self, reference, reference64=None) -> Found:
        best = self._find(reference, reference64=reference64)
        if best.ok:
            return best
        reference = np.asarray(reference)
        for residual in self.residuals:
            if residual.shape != reference.shape or residual.dtype.kind not in "fc":
                continue
            found = self._find(
                reference + residual,
                only_ok=True,
                reference64=None if reference64 is None else reference64 + residual,
            )
            if found.ok:
                found.layout = (found.layout + ", " if found.layout else "") + "plus a residual"
                return found
        return best

    def _find(self, reference, only_ok=False, reference64=None) -> Found:
        reference = np.asarray(reference)
        best = Found(np.inf, False)
        if reference.dtype.kind not in "fc":
            return best
        layouts = activation_layouts(reference, self.chw)
        layouts64 = (
            dict(activation_layouts(reference64, self.chw)) if reference64 is not None else {}
        )
        # a value within the tier has a sum within size x the worst allowed difference:
        # a cheap test that skips most candidates (sums ignore layouts)
        ref64 = reference.astype(np.float64)
        finite = np.isfinite(ref64).all()
        if finite and reference.size:
            rtol, atol = tolerance_for(
                reference.dtype if reference.dtype.kind == "f" else np.float64, ref64
            )
            total, slack = ref64.sum(), reference.size * (atol + rtol * np.abs(ref64).max())
        for v in self.by_size.get(reference.size, []):
            if v.array.dtype.kind not in "fc":
                continue
            if only_ok and finite and reference.size and abs(self._sum(v) - total) > slack:
                continue
            tried = [(name, ref) for name, ref in layouts if ref.shape == v.array.shape]
            if not tried and v.array.size == reference.size:
                tried = [("reshaped", reference.reshape(v.array.shape))]
                if reference64 is not None:
                    layouts64["reshaped"] = reference64.reshape(v.array.shape)
            for name, ref in tried:
                err, ok = close(ref, v.array)
                rule = "tier" if ok else ""
                if not ok and name in layouts64:
                    rule = calibrated(ref, v.array, layouts64[name], err)
                    ok = bool(rule)
                # within the tier, the last value wins: the module's whole output (after
                # a bias of zeros or a scale of ones), not a partial result equal to it
                if (ok, v.order if ok else -err) > (
                    best.ok,
                    best.order if best.ok else -best.error,
                ):
                    best = Found(
                        err,
                        ok,
                        v.where,
                        name,
                        v.array,
                        v.order,
                        ref,
                        v.leaves,
                        rule,
                        layouts64.get(name),
                    )
        return best

    def _sum(self, value) -> float:
        if not hasattr(value, "total"):
            value.total = float(np.asarray(value.array, np.float64).sum())
        return value.total


# ------------------------------------------------------------------ parameters
_BLOCKS = {
    "in_proj_weight": ("q", "k", "v"),
    "in_proj_bias": ("q", "k", "v"),
    "weight_ih": ("i", "f", "g", "o"),
    "weight_hh": ("i", "f", "g", "o"),
    "bias_ih": ("i", "f", "g", "o"),
    "bias_hh": ("i", "f", "g", "o"),
}


def _param_layouts(weight, chw):
    w = np.asarray(weight)
    out = [("", w)]
    if w.ndim == 2:
        out.append(("transposed", w.T))
        for c, h, k in chw:
            if c * h * k == w.shape[1] and min(h, k) > 1 and c > 1:
                hwc = w.reshape(w.shape[0], c, h, k).transpose(0, 2, 3, 1).reshape(w.shape[0], -1)
                out += [
                    ("input columns in H,W,C order", hwc),
                    ("transposed, input rows in H,W,C order", hwc.T),
                ]
    if w.ndim == 4:
        out.append(("HWIO", w.transpose(2, 3, 1, 0)))
    if w.ndim == 3:
        out.append(("WIO", w.transpose(2, 1, 0)))
    return out


def _same(reference, candidate):
    ref, cand = np.asarray(reference), np.asarray(candidate)
    if ref.shape != cand.shape:
        return False
    dtype = (
        ref.dtype if np.dtype(ref.dtype).itemsize <= np.dtype(cand.dtype).itemsize else cand.dtype
    )
    r = ref.astype(np.float64)
    rtol, atol = tolerance_for(dtype if np.dtype(dtype).kind == "f" else np.float64, r)
    return bool(np.all(np.abs(r - cand.astype(np.float64)) <= atol + rtol * np.abs(r)))


def _match_one(weight, leaves, chw):
    """``[(leaf index, layout), ...]``: the port leaves holding ``weight``."""
    found = []
    w = np.asarray(weight)
    layouts = _param_layouts(w, chw)
    for i, leaf in enumerate(leaves):
        leaf = np.asarray(leaf)
        if leaf.size != w.size:
            continue
        hit = next((name for name, form in layouts if _same(form, leaf)), None)
        if hit is None and w.ndim == 2:
            if leaf.shape != w.T.shape and _same(w.T.reshape(leaf.shape), leaf):
                hit = "transposed and reshaped"
        if hit is None and leaf.shape != w.shape and _same(w.reshape(leaf.shape), leaf):
            hit = "reshaped"
        if hit is not None:
            found.append((i, hit))
    return found


@dataclasses.dataclass
class ParamMatch:
    """Where a torch parameter (or one block of a packed one) lives in the port."""

    torch_name: str
    port_name: str | None  # None: not found
    layout: str = ""
    ambiguous: tuple = ()  # the other port leaves with the same values

    def describe(self) -> str:
        if self.port_name is None:
            return f"{self.torch_name}: not found in the port"
        text = f"{self.torch_name} -> {self.port_name}" + (
            f" ({self.layout})" if self.layout else ""
        )
        if self.ambiguous:
            text += (
                f" [ambiguous: the same values are also in {', '.join(self.ambiguous)}; "
                "chosen by name]"
            )
        return text


def match_params(
    torch_params: dict,
    names: list,
    leaves: list,
    chw: tuple,
    user_names: dict | None = None,
    hints: dict | None = None,
) -> list:
    """``[ParamMatch, ...]``, one per torch parameter (one per block of a packed one
    that no single leaf holds). ``user_names`` (``{port name: torch name}``) overrides
    the search for the parameters it names. Where several leaves hold a parameter's
    values, ``hints`` (``{torch module path: leaf indices its output depends on and
    its inputs do not}``) decide, then the likeness of the names, then the layout (as
    is first)."""
    hints = hints or {}
    used: set[int] = set()
    out = []
    by_torch = {t: p for p, t in (user_names or {}).items()}
    for tname, weight in torch_params.items():
        if tname in by_torch:
            port = by_torch[tname]
            if port in names:
                used.add(names.index(port))
                hits = _match_one(weight, [leaves[names.index(port)]], chw)
                out.append(ParamMatch(tname, port, hits[0][1] if hits else "given by `names`"))
                continue
        hits = _match_one(weight, leaves, chw)
        if not hits:
            short = tname.rsplit(".", 1)[-1]
            labels = next((lab for key, lab in _BLOCKS.items() if short.startswith(key)), None)
            w = np.asarray(weight)
            if (
                short.startswith(("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
                and w.shape[0] % 4
                and w.shape[0] % 3 == 0
            ):
                labels = ("r", "z", "n")  # a GRU
            if labels and w.shape[0] % len(labels) == 0:
                for label, block in zip(labels, np.split(w, len(labels))):
                    out.append(
                        _assign(
                            f"{tname}[{label}]", _match_one(block, leaves, chw), names, used, hints
                        )
                    )
                continue
        out.append(_assign(tname, hits, names, used, hints))
    return out


def _plain(name):
    return "".join(ch for ch in name.lower() if ch.isalnum())


def _assign(tname, hits, names, used, hints):
    import difflib

    free = [(i, layout) for i, layout in hits if i not in used]
    if not free:
        return ParamMatch(tname, None)
    module = tname.split("[")[0].rsplit(".", 1)[0] if "." in tname else ""
    hint = hints.get(module, frozenset())
    label = tname[tname.index("[") + 1 : -1] if "[" in tname else ""
    spelled = tname.replace(
        f"[{label}]", "." + {"q": "query", "k": "key", "v": "value"}.get(label, label)
    )
    torch_tokens = [_plain(t) for t in spelled.split(".")]

    def shared(port_name):  # port name parts found in torch's (ln_1 ~ ln1, out ~ out_proj)
        return sum(
            any(p == t or (len(p) > 2 and (p in t or t in p)) for t in torch_tokens)
            for p in map(_plain, port_name.split("."))
        )

    def rank(hit):
        i, layout = hit
        return (
            i not in hint,
            -shared(names[i]),
            -round(difflib.SequenceMatcher(None, _plain(spelled), _plain(names[i])).ratio(), 6),
            layout != "",
            i,
        )

    free.sort(key=rank)
    i, layout = free[0]
    used.add(i)
    others = [j for j, _ in free[1:] if (j in hint) == (i in hint)] if len(free) > 1 else []
    return ParamMatch(tname, names[i], layout, tuple(names[j] for j in others))


def unused_leaves(matches, names) -> list:
    """The port leaves no torch parameter was found in."""
    taken = {m.port_name for m in matches}
    return [n for n in names if n not in taken]
