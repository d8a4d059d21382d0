"""PyTorch's own op samples (``op_db``) run through jaxgrad's ATen table.

Every overload in ``jaxgrad.nn.aten`` is held to the samples of the ``op_db`` entries
(OpInfos) that exercise it: those whose ``name`` or ``aten_name`` is the op's name
(``aten.add.Tensor`` -> ``add``), plus ``OPINFOS`` where the op is reached through
another name (``aten.convolution`` <- ``nn.functional.conv2d``). Each float64 sample is
captured the way ``from_torch`` captures a model — traced to core ATen ops
(``make_fx`` with export's decomposition table: ``torch.export`` itself costs ~0.4 s a
call, ``make_fx`` ~10 ms) and converted node by node with ``jaxgrad.nn.capture.export``'s
``build_nodes`` — then run in JAX and compared with torch at the float64 tier:
every output, and the vector-Jacobian product for a fixed cotangent with respect to
every floating input (torch's ``autograd.grad`` against ``jax.vjp``). A random op
(dropout, ``bernoulli``, ``rand_like``) runs on the draws torch made in its own run of
the sample (``torchref.random_draws``), so it is compared exactly too.

What torch rejects, jaxgrad rejects: each ``error_inputs`` case is captured with fake
tensors, as ``torch.export`` would see it; torch refusing there is a refusal of
``from_torch``. A case torch only rejects while running (a value check: an index out
of range) is run eagerly in JAX and must raise.
"""

from __future__ import annotations

import dataclasses
import re
import warnings

import jax
import torch

from jaxgrad import parity
from jaxgrad.nn import aten
from jaxgrad.nn.capture.export import build_nodes, decompositions, tree_of
from jaxgrad.nn.capture.program import Program, run, unflatten
from jaxgrad.nn.capture.refs import Ref
from parity_checks._conformance_losses import Outcome, _cotangent, _no_test_function_lookup, _to_jax
from torchref.random_draws import recording

# ATen op name -> op_db entries whose samples reach it under another name
OPINFOS = {
    "convolution": (
        "nn.functional.conv1d",
        "nn.functional.conv2d",
        "nn.functional.conv3d",
        "nn.functional.conv_transpose1d",
        "nn.functional.conv_transpose2d",
        "nn.functional.conv_transpose3d",
    ),
    "addmm": ("addmm", "nn.functional.linear"),
    "_native_batch_norm_legit_functional": ("nn.functional.batch_norm",),
    "_native_batch_norm_legit_no_training": ("nn.functional.batch_norm",),
    "native_batch_norm": ("nn.functional.batch_norm",),
    "native_layer_norm": ("nn.functional.layer_norm",),
    "native_group_norm": ("nn.functional.group_norm",),
    "avg_pool2d": ("nn.functional.avg_pool1d",),
    "max_pool2d_with_indices": ("nn.functional.max_pool2d",),
    "max_pool3d_with_indices": ("nn.functional.max_pool3d",),
    "_adaptive_avg_pool2d": (
        "nn.functional.adaptive_avg_pool1d",
        "nn.functional.adaptive_avg_pool2d",
    ),
    "_adaptive_avg_pool3d": ("nn.functional.adaptive_avg_pool3d",),
    "adaptive_max_pool2d": (
        "nn.functional.adaptive_max_pool1d",
        "nn.functional.adaptive_max_pool2d",
    ),
    "adaptive_max_pool3d": ("nn.functional.adaptive_max_pool3d",),
    "upsample_bilinear2d": ("nn.functional.interpolate", "nn.functional.upsample_bilinear"),
    "upsample_bicubic2d": ("nn.functional.interpolate",),
    "upsample_trilinear3d": ("nn.functional.interpolate",),
    "grid_sampler_2d": ("nn.functional.grid_sample",),
    "_cdist_forward": ("cdist",),
    "_pdist_forward": ("nn.functional.pdist",),
    "_embedding_bag_forward_only": ("nn.functional.embedding_bag",),
    "mean": ("mean",),
    "view": ("view", "reshape", "flatten"),
    "permute": ("permute",),
    # shapes, indexing, factories: op_db names that decompose to the table's overloads
    "split_with_sizes": ("split_with_sizes", "split"),
    "index": ("__getitem__",),
    "index_put": ("index_put", "index_copy"),
    "gather": ("gather", "take_along_dim"),
    "embedding": ("nn.functional.embedding",),
    "full": ("full", "zeros", "ones", "new_zeros", "new_ones", "new_full"),
    "full_like": ("full_like", "zeros_like", "ones_like", "fill"),
    # pointwise: Scalar overloads and activations that decompose to the table's ops
    "add": ("add", "special.ndtr"),
    "pow": ("pow", "square"),
    "fmod": ("fmod", "fft.fftshift"),
    "remainder": ("remainder", "cross"),
    "eq": ("eq", "isposinf"),
    "ne": ("ne", "isfinite"),
    "lt": ("lt", "logit"),
    "le": ("le", "nn.functional.threshold"),
    "gt": ("gt", "nn.functional.celu"),
    "ge": ("ge", "triu"),
    "clamp": ("clamp",),
    "hardtanh": ("nn.functional.hardtanh", "nn.functional.relu6"),
    "hardsigmoid": ("nn.functional.hardsigmoid",),
    "elu": ("nn.functional.elu", "nn.functional.selu"),
    "sigmoid": ("sigmoid", "nn.functional.silu"),
    "log1p": ("log1p", "nn.functional.softplus", "nn.functional.mish"),
    "_to_copy": ("float", "long", "bool"),
    "alias": ("alias_copy",),
    # reductions
    "_softmax": ("softmax",),
    "_log_softmax": ("log_softmax",),
    "_safe_softmax": ("nn.functional.scaled_dot_product_attention",),
    # random ops: compared on torch's own draws
    "native_dropout": (
        "nn.functional.dropout",
        "nn.functional.dropout2d",
        "nn.functional.dropout3d",
    ),
    "bernoulli": ("bernoulli", "nn.functional.dropout2d", "nn.functional.dropout3d"),
}

_PREFIX = re.compile(r"^aten\.([A-Za-z0-9_]+)\.")


def op_name(overload: str) -> str:
    """``"aten.add.Tensor"`` -> ``"add"``."""
    match = _PREFIX.match(overload)
    return match.group(1) if match else overload


def opinfos(overload: str) -> list:
    """The ``op_db`` entries that hold ``overload`` (float64 samples, no variants
    beyond what the name says)."""
    from torch.testing._internal.common_methods_invocations import op_db

    name = op_name(overload)
    wanted = set(OPINFOS.get(name, ())) | {name}
    return [
        info
        for info in op_db
        if (info.name in wanted or getattr(info, "aten_name", None) == name)
        and info.supports_dtype(torch.float64, "cpu")
    ]


# ------------------------------------------------------------------ capture
@dataclasses.dataclass
class Captured:
    """A sample traced to core ATen and converted: the ``Program``, its inputs'
    placeholder names, and constants (tensors the trace made attributes)."""

    program: Program
    placeholders: list
    constants: dict
    overloads: set


_TABLE = None


# factories whose values torch leaves undefined (uninitialised memory); jaxgrad's are
# zeros, so their samples compare shape and dtype only
UNDEFINED_VALUES = {
    "empty",
    "empty_like",
    "empty_strided",
    "empty_permuted",
    "new_empty",
    "new_empty_strided",
}


class WritesItsInput(ValueError):
    """The sample writes one of its inputs in place (``inplace=True``): ``from_torch``
    refuses such a forward (``torch.export``: a user-input mutation)."""


def capture(fn, tensors, *, tracing_mode: str = "real", name: str = "sample") -> Captured:
    """Trace ``fn(*tensors)`` to core ATen (``make_fx``, functionalised as
    ``torch.export`` is) and convert it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    global _TABLE
    if _TABLE is None:
        _TABLE = dict(decompositions().items())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # twice, as export does: functionalised ATen first, then the decompositions,
        # functionalised again (a decomposition may write in place: matmul's of a vector
        # squeezes its result with squeeze_, which export's run_decompositions removes)
        graph_module = make_fx(torch.func.functionalize(fn), tracing_mode=tracing_mode)(*tensors)
        graph_module = make_fx(
            torch.func.functionalize(graph_module),
            decomposition_table=_TABLE,
            tracing_mode=tracing_mode,
        )(*tensors)
    graph = graph_module.graph
    written = [
        n
        for n in graph.nodes
        if n.op == "call_function"
        and str(n.target) in ("aten.copy_.default",)
        and n.args[0].op == "placeholder"
    ]
    if written:
        raise WritesItsInput(
            f"{name} writes its input {written[0].args[0].name!r} in place; "
            "from_torch refuses a forward that does (torch.export: a user "
            "input mutation)"
        )
    placeholders = [n.name for n in graph.nodes if n.op == "placeholder"]
    constants = {
        n.name: getattr(graph_module, n.target).detach().cpu().numpy().copy()
        for n in graph.nodes
        if n.op == "get_attr"
    }
    nodes = build_nodes(graph.nodes, set(placeholders) | set(constants), class_name=name, path="")
    (output,) = [n for n in graph.nodes if n.op == "output"]
    leaves, spec = torch.utils._pytree.tree_flatten(output.args[0])
    outputs = tuple(Ref(leaf.name) if type(leaf).__name__ == "Node" else leaf for leaf in leaves)
    program = Program((), nodes, outputs, tree_of(spec, lambda: name))
    return Captured(program, placeholders, constants, {n.target for n in nodes})


def draws_for(captured: Captured, draws) -> dict:
    """torch's recorded draws for the captured sample's random ops, in order."""
    nodes = captured.program.random_nodes()
    if len(nodes) != len(draws):
        raise ValueError(
            f"torch drew {len(draws)} random tensors, the captured sample has "
            f"{len(nodes)} random ops"
        )
    return {node.name: draw.values.detach().cpu().numpy() for node, draw in zip(nodes, draws)}


def run_captured(captured: Captured, inputs, *, random_draws=None, key=None):
    """Run a captured sample on JAX ``inputs`` (one per placeholder)."""
    env = dict(zip(captured.placeholders, inputs))
    env.update(captured.constants)
    outputs, _ = run(
        captured.program, env, key=key, path="", random_draws=random_draws, class_name="sample"
    )
    return unflatten(captured.program.out_tree, iter(outputs))


# ------------------------------------------------------------------ samples
def _split(sample):
    """The sample's tensors (flattened from input, args and kwargs) and a function of
    them that calls the op."""
    leaves, spec = torch.utils._pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

    def rebuild(tensors):
        filled = list(leaves)
        for i, tensor in zip(positions, tensors):
            filled[i] = tensor
        return torch.utils._pytree.tree_unflatten(filled, spec)

    return [leaves[i] for i in positions], rebuild


def _differentiable(tensor) -> bool:
    return tensor.is_floating_point() or tensor.is_complex()


def _caller(info, sample):
    """The sample's tensors and ``call(*tensors)``, which runs the op on them."""
    tensors, rebuild = _split(sample)

    def call(*tensors):
        inp, args, kwargs = rebuild(tensors)
        return info.op(inp, *args, **kwargs)

    return tensors, call


def capture_sample(info, sample) -> Captured:
    """The sample traced and converted (refused as ``from_torch`` refuses it)."""
    tensors, call = _caller(info, sample)
    if info.name.startswith("as_strided") and any(
        t.storage_offset() or t.untyped_storage().nbytes() != t.numel() * t.element_size()
        for t in tensors
    ):
        raise ValueError(
            f"{info.name}: as_strided reads a view's whole storage, and "
            "jaxgrad's arrays have no strides (from_torch refuses it)"
        )
    return capture(call, [t.detach() for t in tensors], name=info.name)


def compare_sample(info, sample, captured=None) -> tuple[parity.ParityReport, set]:
    """Forward and VJP of one sample against torch; also the overloads it ran."""
    tensors, call = _caller(info, sample)
    captured = captured or capture_sample(info, sample)
    # detached, not cloned: a sample may hand the op a view into a larger storage
    # the sample's own choice of differentiable inputs (batch norm's running statistics
    # are not: torch refuses a gradient for them)
    leaves = [
        t.detach().requires_grad_(t.requires_grad and _differentiable(t) and info.supports_autograd)
        for t in tensors
    ]
    with warnings.catch_warnings(), recording() as draws:
        warnings.simplefilter("ignore")
        out = call(*leaves)
    random_draws = draws_for(captured, draws) if captured.program.random_nodes() else None
    flat_out, _ = torch.utils._pytree.tree_flatten(out)
    out_tensors = [o for o in flat_out if isinstance(o, torch.Tensor)]
    diff_in = [i for i, t in enumerate(leaves) if t.requires_grad]
    diff_out = [i for i, o in enumerate(out_tensors) if o.requires_grad]
    cotangents = [_cotangent(tuple(out_tensors[i].shape)) for i in diff_out]
    reference = {"value": [o.detach() for o in out_tensors]}
    if info.name in UNDEFINED_VALUES:  # torch's values are whatever memory held: compare
        reference["value"] = [torch.zeros_like(o) for o in out_tensors]  # shapes, dtypes
    if diff_in and diff_out:
        grads = torch.autograd.grad(
            [out_tensors[i] for i in diff_out],
            [leaves[i] for i in diff_in],
            [torch.from_numpy(c).to(out_tensors[i].dtype) for c, i in zip(cotangents, diff_out)],
            allow_unused=True,
        )
        reference["grads"] = [
            torch.zeros_like(leaves[i]) if g is None else g for i, g in zip(diff_in, grads)
        ]
    inputs = [_to_jax(t) for t in tensors]

    def forward(*diff_values):
        full = list(inputs)
        for i, value in zip(diff_in, diff_values):
            full[i] = value
        flat, _ = jax.tree_util.tree_flatten(
            run_captured(captured, full, random_draws=random_draws)
        )
        return [v for v in flat if hasattr(v, "shape")]

    if "grads" in reference:

        def selected(*diff_values):
            values = forward(*diff_values)
            return [values[i] for i in diff_out], values

        _, vjp, values = jax.vjp(selected, *[inputs[i] for i in diff_in], has_aux=True)
        grads = vjp(
            [jax.device_put(c.astype(values[i].dtype)) for c, i in zip(cotangents, diff_out)]
        )
        candidate = {"value": values, "grads": list(grads)}
    else:
        candidate = {"value": forward()}
    return parity.compare(reference, candidate), captured.overloads


def _outcome(name, index, run) -> tuple[Outcome, set]:
    try:
        report, overloads = run()
    except WritesItsInput as refusal:  # refused, as from_torch refuses it
        return Outcome("op_db", name, index, "refused", str(refusal)), set()
    except ValueError as error:
        if any(r in str(error) for r in REFUSALS):  # as_strided of a view, in-place batch norm
            return Outcome("op_db", name, index, "refused", str(error)), set()
        return Outcome("op_db", name, index, "error", f"{type(error).__name__}: {error}"), set()
    except Exception as error:  # noqa: BLE001 - any exception is this sample's failure
        return Outcome("op_db", name, index, "error", f"{type(error).__name__}: {error}"), set()
    status = "pass" if report.passed else "fail"
    return Outcome("op_db", name, index, status, "" if report.passed else report.table()), overloads


def error_outcome(info, index, error_input) -> Outcome:
    """torch rejects ``error_input``: capture it with fake tensors (as export sees it);
    if that passes, jaxgrad must raise while running it."""
    sample = error_input.sample_input
    tensors, rebuild = _split(sample)

    def call(*tensors):
        inp, args, kwargs = rebuild(tensors)
        return info.op(inp, *args, **kwargs)

    try:
        captured = capture(call, tensors, tracing_mode="fake", name=info.name)
    except Exception as error:  # noqa: BLE001 - torch refused at capture: so does from_torch
        return Outcome(
            "op_db errors",
            info.name,
            index,
            "rejected",
            f"at capture: {type(error).__name__}: {str(error)[:120]}",
        )
    try:
        with jax.disable_jit():
            run_captured(captured, [_to_jax(t) for t in tensors])
    except Exception as error:  # noqa: BLE001
        return Outcome(
            "op_db errors",
            info.name,
            index,
            "rejected",
            f"while running: {type(error).__name__}: {str(error)[:120]}",
        )
    return Outcome(
        "op_db errors",
        info.name,
        index,
        "fail",
        f"accepted an input torch rejects ({error_input.error_regex!r})",
    )


def _max_pool_configurations(shapes):
    """max_poolNd's samples are keyword sets × inputs where ``return_indices`` only
    picks outputs and ``padding=1`` is ``(1, 1)``: every ATen configuration (kernel,
    stride, padding, dilation, ceil_mode) once per kind of input."""
    return lambda sample: (
        sample.kwargs["return_indices"]
        and not isinstance(sample.kwargs["padding"], tuple)
        and tuple(sample.input.shape) in shapes
    )


# OpInfos whose samples repeat ATen configurations: the distinct ones (max_pool2d: 144
# of 1,440 samples, one batched input of odd height, contiguous and channels-last, and
# one unbatched; max_pool3d: 96 of 576)
SAMPLE_FILTERS = {
    "nn.functional.max_pool2d": _max_pool_configurations({(2, 2, 3, 6), (2, 6, 6)}),
    "nn.functional.max_pool3d": _max_pool_configurations({(2, 2, 3, 6, 5), (2, 6, 6, 5)}),
}

QUICK_SAMPLES = 1  # the quick run's first samples of each OpInfo (see ``op_outcomes``)
QUICK_SCAN = 24  # and how many later samples it captures looking for unreached overloads


def op_outcomes(overloads=None, *, quick: bool = False) -> tuple[list[Outcome], dict]:
    """Every float64 sample (``SAMPLE_FILTERS`` applied) and error input of the
    OpInfos holding ``overloads`` (default: the whole table); also ``{overload: OpInfo
    names whose samples ran it}``.

    ``quick``: of each OpInfo's samples, the first ``QUICK_SAMPLES``, and after them
    each sample whose captured program holds one of ``overloads`` that no sample
    compared so far reached (the next ``QUICK_SCAN`` samples are captured, ~20 ms, not
    run, until every overload the OpInfo is listed for is reached); every error input.
    The test suite runs this; ``scripts/conformance_aten.py`` runs every sample."""
    overloads = list(overloads or aten.supported())
    infos, targets = {}, {}
    for overload in overloads:
        for info in opinfos(overload):
            key = (info.name, info.variant_test_name)
            infos.setdefault(key, info)
            targets.setdefault(key, set()).add(overload)
    outcomes, reached = [], {}
    with jax.enable_x64(True), _no_test_function_lookup():
        for key, info in sorted(infos.items()):
            label = f"{key[0]}.{key[1]}" if key[1] else key[0]
            samples = info.sample_inputs("cpu", torch.float64, requires_grad=True)
            keep = SAMPLE_FILTERS.get(info.name, lambda sample: True)
            samples = (sample for sample in samples if keep(sample))
            for i, sample in enumerate(samples):
                captured = None
                if quick and i >= QUICK_SAMPLES:
                    missing = targets[key] - set(reached)
                    if not missing or i >= QUICK_SAMPLES + QUICK_SCAN:
                        break
                    try:
                        captured = capture_sample(info, sample)
                    except Exception:  # noqa: BLE001 - the full run reports it
                        continue
                    if not captured.overloads & missing:
                        continue
                outcome, ran = _outcome(
                    label,
                    i,
                    lambda s=sample, c=captured: compare_sample(info, s, c),  # noqa: B023
                )
                outcomes.append(outcome)
                for overload in ran:
                    reached.setdefault(overload, set()).add(label)
            if info.error_inputs_func is not None:
                for i, error_input in enumerate(info.error_inputs("cpu")):
                    outcomes.append(error_outcome(info, i, error_input))
    return outcomes, reached


# overloads no op_db sample reaches, and the test that holds each to torch instead
UNSAMPLED = {
    # make_fx records `x - 2`, `2 ** x`, `x // 2` as .Tensor overloads; no float64
    # OpInfo has bitwise ops; the OpInfos that reach the others are slow (linspace,
    # logspace: 1,000+ samples) or cost seconds for one trivial overload
    **dict.fromkeys(
        (
            "aten.sub.Scalar",
            "aten.div.Scalar",
            "aten.div.Scalar_mode",
            "aten.pow.Scalar",
            "aten.copy.default",
            "aten.lift_fresh_copy.default",
            "aten.bitwise_not.default",
            "aten.bitwise_and.Tensor",
            "aten.bitwise_and.Scalar",
            "aten.bitwise_or.Tensor",
            "aten.bitwise_or.Scalar",
            "aten.bitwise_xor.Tensor",
            "aten.bitwise_xor.Scalar",
        ),
        "test_aten_pointwise.py::test_unsampled_pointwise_overloads_match_torch",
    ),
    # random ops export keeps but make_fx decomposes (dropout -> bernoulli), or that no
    # OpInfo calls (rand_like's OpInfo calls randn_like): compared on torch's draws
    "aten.native_dropout.default": "test_capture.py::test_stochastic_depth_and_dropout_"
    "are_active_in_training_and_match_torchs_draws",
    **dict.fromkeys(
        ("aten.rand.default", "aten.rand_like.default", "aten.randperm.default"),
        "test_capture.py::test_uniform_normal_and_permutation_draws_match_torch",
    ),
    # .item(): make_fx cannot trace it, so no sample reaches it; refused, named
    "aten._local_scalar_dense.default": "test_aten_indexing.py::test_item_is_refused_naming_the_op",
    # what only torch.export records: functionalised batch norm, the .vec upsampling
    # overloads, and _embedding_bag (make_fx on detached samples takes the forward-only one)
    "aten._native_batch_norm_legit_functional.default": "test_aten_nn.py::test_batch_norm_overloads_of_both_modes_match_torch",
    "aten._native_batch_norm_legit_no_training.default": "test_aten_nn.py::test_batch_norm_overloads_of_both_modes_match_torch",
    **dict.fromkeys(
        ("aten.upsample_nearest2d.vec", "aten.upsample_bilinear2d.vec"),
        "test_aten_nn.py::test_upsample_vec_overloads_match_torch",
    ),
    "aten._embedding_bag.default": "test_aten_nn.py::test_embedding_bag_matches_torch",
    "aten._upsample_bicubic2d_aa.default": "test_aten_nn.py::test_antialiased_bicubic_matches_torch",
    # clamp with Python-number bounds: make_fx records no op_db sample as it (hardswish's
    # decomposition did, until hardswish was kept whole with torch's derivative)
    "aten.clamp.default": "test_edges.py::test_clamp_passes_the_gradient_at_its_bounds_like_torch",
    # jaxgrad's own marks of autograd written in a forward (detach, no_grad regions,
    # custom autograd.Functions): no OpInfo; models that hold them against torch
    "jaxgrad.stop_gradient.default": "test_autograd_in_forward.py::test_stop_gradients_match_torch_on_both_front_ends",
    "jaxgrad.autograd_function.default": "test_autograd_in_forward.py::test_custom_functions_convert_with_their_own_backward",
}

# refusals by design, each named in the refusal
REFUSALS = ("writes its input", "jaxgrad's arrays have no strides")


@dataclasses.dataclass
class FamilyVerdict:
    """One family's samples: every outcome, the bad ones (a wrong value or gradient, an
    error, an accepted error input, a refusal not by design), and the overloads no
    compared sample reached (``UNSAMPLED`` excepted)."""

    overloads: list
    outcomes: list
    bad: list
    unreached: list

    @property
    def passed(self) -> bool:
        return not self.bad and not self.unreached


def family(name: str) -> str:
    """The family (module of ``jaxgrad.nn.aten``) an overload's entry lives in."""
    return aten.lookup(name).fn.__module__.rsplit(".", 1)[-1]


def family_verdict(family_name: str, *, quick: bool = False) -> FamilyVerdict:
    """Run a family's samples (``op_outcomes``) and judge them."""
    overloads = [name for name in sorted(aten.supported()) if family(name) == family_name]
    outcomes, reached = op_outcomes(overloads, quick=quick) if overloads else ([], {})
    bad = [
        o
        for o in outcomes
        if o.status not in ("pass", "rejected", "refused")
        or (o.status == "refused" and not any(r in o.detail for r in REFUSALS))
    ]
    unreached = [name for name in overloads if name not in reached and name not in UNSAMPLED]
    return FamilyVerdict(overloads, outcomes, bad, unreached)


def coverage() -> dict:
    """The table against torch's core ATen opset: ``{"core", "backward", "symbolic",
    "out", "decomposed", "reachable", "mapped", "unmapped", "beyond"}`` (sets of
    overload names). *Reachable* core overloads are those an exported forward can
    contain: not a backward (JAX differentiates the forward), not a symbolic-size op
    (static shapes), not an ``out=`` variant, not one export's decomposition table
    decomposes further."""
    core = core_aten_ops()
    decomposed = {str(op) for op in decompositions().keys()}
    backward = {op for op in core if "backward" in op}
    symbolic = {op for op in core if op.startswith("aten.sym_")}
    out = {op for op in core if op.endswith(".out")}
    reachable = core - backward - symbolic - out - decomposed
    # ATen overloads only: jaxgrad's own marks (jaxgrad.stop_gradient, ...) are no ATen op
    mapped = {name for name in aten.supported() if name.startswith("aten.")}
    return {
        "core": core,
        "backward": backward,
        "symbolic": symbolic,
        "out": out,
        "decomposed": (core & decomposed) - backward,
        "reachable": reachable,
        "mapped": reachable & mapped,
        "unmapped": reachable - mapped,
        "beyond": mapped - core,
    }


def core_aten_ops() -> set:
    """Every overload torch tags ``core`` (the core ATen opset export decomposes to)."""
    core = set()
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            if torch.Tag.core in getattr(packet, overload).tags:
                core.add(str(getattr(packet, overload)))
    return core
