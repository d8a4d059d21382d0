"""Conformance with PyTorch's own module tests: every ``module_db`` sample, both frameworks.

PyTorch's test suite describes each ``torch.nn`` class by a ``ModuleInfo`` in
``torch.testing._internal.common_modules.module_db``; its ``module_inputs_func``
yields samples — constructor arguments and forward inputs — chosen by torch's
maintainers to cover the class's options. For every class in ``REGISTRY`` this
harness runs every sample in float64, in training mode and — for the classes
``module_db`` marks ``train_and_eval_differ`` (normalisation, dropout), as torch's own
suite does — in evaluation mode too (``modes``):

1. build the torch module from the sample's constructor arguments (``.double()``,
   ``.train(training)``) and convert it with ``jaxgrad.nn.from_torch(module,
   with_buffers=True)`` before torch runs it;
2. run torch's forward and ``torch.autograd.grad`` of the floating outputs against a
   fixed random cotangent, with respect to the inputs that require grad and every
   parameter; read the buffers after the forward (train mode updates them);
3. run the jaxgrad twin (``apply(params, *inputs, buffers=..., train=training,
   key=...)``) and ``jax.vjp`` with the same cotangent;
4. compare outputs, input and parameter gradients and new buffers with
   ``jaxgrad.parity.compare`` at the float64 tier (rtol 1e-10, atol 1e-12).

An evaluation-mode sample on which the twin runs a program already held to torch by a
training-mode sample, and on which torch's two modes agree, skips steps 3–4 and
passes by transitivity (``run_sample``'s ``verified``; ``run_class(reuse=False)`` runs
it in full).

A sample jaxgrad cannot run is never dropped silently. Either its ``Entry`` names the
constructor or forward argument jaxgrad refuses (``refused``), and jaxgrad must then
raise ``ValueError``/``TypeError`` naming it in backticks (the sample counts as
refused, with that argument), or the entry gives the reason the sample cannot be
expressed as a pure function at all (``skipped``). An error nobody declared is a
failure, and so is a declared refusal that jaxgrad does not raise. What torch
rejects (``module_error_inputs_func``), jaxgrad must reject too (``run_error_samples``).

Torch's positional-or-keyword forward arguments passed by name (``Linear``'s sample
calls ``forward(input=x)``) are passed positionally: jaxgrad's ``apply`` takes its
inputs positionally after ``params``.

To register a class, add a line to ``REGISTRY``: ``"Name": Entry()`` when every sample
runs as is, or an ``Entry`` with ``refused`` / ``skipped`` / ``run``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import zlib
from collections.abc import Callable
from typing import Any

import jax
import torch

import jaxgrad
from jaxgrad.parity import ParityReport
from jaxgrad_dev.layer_parity import forward_program, jax_side, torch_side

STATUSES = ("passed", "failed", "refused", "skipped", "rejected")


def _nothing(sample) -> str | None:
    return None


@dataclasses.dataclass(frozen=True)
class Entry:
    """How the harness runs one class's samples.

    Attributes:
      refused: ``sample -> argument name or None``: the argument jaxgrad refuses in
        this sample; jaxgrad must raise naming it (in backticks).
      skipped: ``sample -> reason or None``: why the sample cannot be expressed as a
        pure function (e.g. it tests in-place mutation); the sample is not run.
      run: replaces ``run_sample`` for this class (``run(info, sample, training) ->
        SampleResult``), for layers whose comparison needs more than the default
        (randomness with injected masks).
      jit: compile each sample's forward and backward as one program (the default,
        4x faster than op-by-op dispatch for a convolution's or an LSTM's samples).
        Off for the attention and transformer classes, whose dozens of samples
        share a few op shapes: dispatched op by op, each primitive is compiled once
        per shape and reused (TransformerDecoderLayer 36 s instead of 123 s).
    """

    refused: Callable[[Any], str | None] = _nothing
    skipped: Callable[[Any], str | None] = _nothing
    run: Callable | None = None
    jit: bool = True


# One line per class; keep alphabetical within each helper's block to ease merges.
REGISTRY: dict[str, Entry] = {
    # layers of the MLP era
    "GELU": Entry(),
    "LeakyReLU": Entry(),
    "Linear": Entry(),
    "ReLU": Entry(),
    "Sigmoid": Entry(),
    "Tanh": Entry(),
    # CNN activations
    "ELU": Entry(),
    "Hardswish": Entry(),
    "LogSoftmax": Entry(),
    "Mish": Entry(),
    "ReLU6": Entry(),
    "SiLU": Entry(),
    "Softmax": Entry(),
    "Softplus": Entry(),
    # the rest of torch.nn's activations
    "CELU": Entry(),
    "GLU": Entry(),
    "Hardshrink": Entry(),
    "Hardtanh": Entry(),
    "LogSigmoid": Entry(),
    "PReLU": Entry(),
    "SELU": Entry(),
    "Softmax2d": Entry(),
    "Softmin": Entry(),
    "Softshrink": Entry(),
    "Softsign": Entry(),
    "Tanhshrink": Entry(),
    "Threshold": Entry(),
    # convolutions
    "Conv1d": Entry(),
    "Conv2d": Entry(),
    "ConvTranspose1d": Entry(),
    "ConvTranspose2d": Entry(),
    # pooling
    "AdaptiveAvgPool1d": Entry(),
    "AdaptiveAvgPool2d": Entry(),
    "AdaptiveMaxPool1d": Entry(),
    "AdaptiveMaxPool2d": Entry(),
    "AvgPool1d": Entry(),
    "AvgPool2d": Entry(),
    "MaxPool1d": Entry(),
    "MaxPool2d": Entry(),
    # padding
    "CircularPad1d": Entry(),
    "CircularPad2d": Entry(),
    "ConstantPad1d": Entry(),
    "ConstantPad2d": Entry(),
    "ReflectionPad1d": Entry(),
    "ReflectionPad2d": Entry(),
    "ReplicationPad1d": Entry(),
    "ReplicationPad2d": Entry(),
    "ZeroPad1d": Entry(),
    "ZeroPad2d": Entry(),
    # normalisation (module_db has no Dropout entries)
    "BatchNorm1d": Entry(),
    "BatchNorm2d": Entry(),
    "GroupNorm": Entry(),
    "InstanceNorm1d": Entry(),
    "InstanceNorm2d": Entry(),
    # sequence layers
    "Embedding": Entry(),
    "GRU": Entry(),
    "GRUCell": Entry(),
    "LSTM": Entry(),
    "LSTMCell": Entry(),
    "LayerNorm": Entry(),
    "MultiheadAttention": Entry(jit=False),
    "RMSNorm": Entry(),
    "RNN": Entry(),
    "RNNCell": Entry(),
    "TransformerDecoderLayer": Entry(jit=False),
    "TransformerEncoder": Entry(jit=False),
    "TransformerEncoderLayer": Entry(jit=False),
    # 3-d family, LPPool, LocalResponseNorm, FractionalMaxPool
    "AdaptiveAvgPool3d": Entry(),
    "AdaptiveMaxPool3d": Entry(),
    "AvgPool3d": Entry(),
    "BatchNorm3d": Entry(),
    "CircularPad3d": Entry(),
    "ConstantPad3d": Entry(),
    "Conv3d": Entry(),
    "ConvTranspose3d": Entry(),
    "FractionalMaxPool2d": Entry(),
    "FractionalMaxPool3d": Entry(),
    "InstanceNorm3d": Entry(),
    "LPPool1d": Entry(),
    "LPPool2d": Entry(),
    "LPPool3d": Entry(),
    "LocalResponseNorm": Entry(),
    "MaxPool3d": Entry(),
    "ReflectionPad3d": Entry(),
    "ReplicationPad3d": Entry(),
    "ZeroPad3d": Entry(),
    # Bilinear, Transformer, Lazy convolutions
    "Bilinear": Entry(),
    "Transformer": Entry(jit=False),
    # (lazy: from_torch refuses them until torch's first forward has materialised them)
    "LazyConv1d": Entry(run=lambda *sample: run_sample(*sample, materialise=True)),
    "LazyConv2d": Entry(run=lambda *sample: run_sample(*sample, materialise=True)),
    "LazyConv3d": Entry(run=lambda *sample: run_sample(*sample, materialise=True)),
    "LazyConvTranspose1d": Entry(run=lambda *sample: run_sample(*sample, materialise=True)),
    "LazyConvTranspose2d": Entry(run=lambda *sample: run_sample(*sample, materialise=True)),
    "LazyConvTranspose3d": Entry(run=lambda *sample: run_sample(*sample, materialise=True)),
}


@dataclasses.dataclass
class SampleResult:
    """One sample's outcome. ``detail``: the argument refused, the reason skipped, or
    the failure (parity table or error)."""

    cls: str
    training: bool
    desc: str
    status: str
    detail: str = ""
    report: ParityReport | None = None

    @property
    def label(self) -> str:
        return f"{self.cls}[{'train' if self.training else 'eval'}] {self.desc or '(default)'}"


@functools.cache
def module_infos() -> dict[str, Any]:
    """``{class name: ModuleInfo}`` of ``module_db``; imported once per process (~10 s)."""
    from torch.testing._internal.common_modules import module_db

    return {info.module_cls.__name__: info for info in module_db}


def samples(info, training: bool) -> list:
    """The class's float64 samples, reproducibly (torch's RNG seeded from the name)."""
    torch.manual_seed(zlib.crc32(f"{info.module_cls.__name__} {training}".encode()))
    return list(
        info.module_inputs_func(
            info, device="cpu", dtype=torch.float64, requires_grad=True, training=training
        )
    )


def modes(info, all_modes: bool = False) -> tuple[bool, ...]:
    """The ``training`` flags to run: torch's own rule (``common_modules.modules``) is
    both modes when ``train_and_eval_differ``, training only otherwise — for the other
    classes the eval samples repeat the training ones, and neither torch's layer nor
    jaxgrad's stateless twin reads the mode. ``all_modes`` runs both anyway."""
    return (True, False) if all_modes or info.train_and_eval_differ else (True,)


def run_class(
    name: str, all_modes: bool = False, reuse: bool = True, every: int = 1, dtype: str = "float64"
) -> list[SampleResult]:
    """Every sample of ``name``, in training then (see ``modes``) evaluation mode.

    ``reuse``: an evaluation-mode sample on which the twin runs a program already held
    to torch in training mode, and on which torch's two modes agree, is not run again
    (see ``run_sample``); ``False`` runs every sample in full. ``every``: one sample in
    ``every`` (the first, then at that stride: module_db's samples are a product of
    constructor options, so a stride prime to its factors still varies each option),
    the suite's selection for the classes whose samples cost minutes. ``dtype``
    ``"float32"``: the float32 mode (``run_sample_float32``; a class with its own
    ``Entry.run`` then runs the default float32 comparison, materialising lazy modules;
    every sample runs in full, ``reuse`` aside: a float32 verdict depends on the values)."""
    info = module_infos()[name]
    entry = REGISTRY[name]
    if dtype not in ("float64", "float32"):
        raise ValueError(f"`dtype` (={dtype!r}) must be 'float64' or 'float32'")
    if dtype == "float32":
        # no reuse: an evaluation-mode sample has its own values, and a float32 verdict
        # depends on the values (rounding), not only on the program
        run = functools.partial(run_sample_float32, materialise=name.startswith("Lazy"))
        return [
            run(info, sample, training)
            for training in modes(info, all_modes)
            for sample in samples(info, training)[::every]
        ]
    run = entry.run or functools.partial(
        run_sample, verified={} if reuse and len(modes(info, all_modes)) > 1 else None
    )
    return [
        run(info, sample, training)
        for training in modes(info, all_modes)
        for sample in samples(info, training)[::every]
    ]


def run_sample(
    info, sample, training: bool, verified: dict | None = None, materialise: bool = False
) -> SampleResult:
    """Run one sample in both frameworks and compare (see the module docstring).

    ``verified`` (``{program: label}``), when given, collects the twin's forward programs
    (``forward_program``: its jaxpr and constants, traced, not compiled) of the
    training-mode samples that pass. An evaluation-mode sample whose program is among
    them runs the very computation already held to torch; it is then checked on torch's
    side only (``_torch_modes_agree``: torch's evaluation and training results on this
    sample, equal at the float64 tier) and passes by transitivity. Where either
    framework's modes differ — normalisation statistics, dropout, a twin that reads
    ``train`` — the sample runs in full. For the recurrent and attention classes, whose
    samples have no dropout, this halves their cost."""
    entry, result, argument = _entry(info, sample, training)
    reason = entry.skipped(sample)
    if reason:
        return result("skipped", reason)
    module, args, kwargs = _build(info, sample, training, torch.float64, materialise)
    with jax.enable_x64(True), jax.default_matmul_precision("highest"):
        try:  # converted before torch's forward updates any buffer
            model, params, buffers = jaxgrad.nn.from_torch(module, with_buffers=True)
        except (ValueError, TypeError) as exc:
            return _refusal(result, argument, exc)
        program = None
        if verified is not None and not argument:
            try:
                program = forward_program(model, params, buffers, args, kwargs, training)
            except (ValueError, TypeError):  # raised again, and judged, by jax_side below
                program = None
            if not training and program in verified and _torch_modes_agree(module, args, kwargs):
                return result(
                    "passed",
                    f"same program as {verified[program]}; torch's "
                    "evaluation and training results agree",
                )
        reference, torch_spec, cotangents = torch_side(module, args, kwargs)
        candidate = _jax_candidate(
            entry,
            result,
            argument,
            model,
            params,
            buffers,
            args,
            kwargs,
            training,
            cotangents,
            torch_spec,
        )
        if isinstance(candidate, SampleResult):
            return candidate
        report = jaxgrad.parity.compare(reference, candidate, name=result("").label)
    if training and report.passed and program is not None:
        verified.setdefault(program, result("").label)
    return result(
        "passed" if report.passed else "failed", "" if report.passed else report.table(), report
    )


def run_sample_float32(
    info, sample, training: bool, verified: dict | None = None, materialise: bool = False
) -> SampleResult:
    """One sample in float32 on both sides, judged with the calibrated float32 verdict.

    The sample (drawn in float64, as ``run_sample`` draws it) runs with the module in
    float32 (``.float()``) and its floating inputs cast to float32; jaxgrad's twin runs
    with ``jax_enable_x64`` off, as a float32 user runs it. torch's float64 run of the
    same sample — a copy of the float32 module made ``.double()``, the float32 inputs
    cast up, the same cotangent — is the float64 answer both float32 runs approximate:
    ``jaxgrad.parity.compare(torch32, jaxgrad32, reference64=torch64)`` passes a leaf
    outside the float32 tier when jaxgrad is within the tier of the float64 answer, or
    within ``CALIBRATION_MULTIPLE`` times torch float32's own distance from it; each
    leaf's ``rule`` says which. Integer outputs and buffers (pooling indices,
    ``num_batches_tracked``) compare by value across int32/int64. ``verified``: as
    ``run_sample`` (``run_class`` passes none in this mode: float32 rounding depends on
    the sample's values, so a program held to torch on other values proves less)."""
    entry, result, argument = _entry(info, sample, training)
    reason = entry.skipped(sample)
    if reason:
        return result("skipped", reason)
    module, args, kwargs = _build(info, sample, training, torch.float32, materialise)
    # the float64 answer: the same values, cast up (copied before any forward moves a buffer)
    module64 = copy.deepcopy(module).double()
    args64, kwargs64 = _cast_floats((args, kwargs), torch.float64)
    with jax.default_matmul_precision("highest"):
        try:
            model, params, buffers = jaxgrad.nn.from_torch(module, with_buffers=True)
        except (ValueError, TypeError) as exc:
            return _refusal(result, argument, exc)
        program = None
        if verified is not None and not argument:
            try:
                program = forward_program(model, params, buffers, args, kwargs, training)
            except (ValueError, TypeError):
                program = None
            if not training and program in verified and _torch_modes_agree(module, args, kwargs):
                return result(
                    "passed",
                    f"same program as {verified[program]}; torch's "
                    "evaluation and training results agree",
                )
        reference, torch_spec, cotangents = torch_side(module, args, kwargs)
        reference64 = torch_side(
            module64,
            args64,
            kwargs64,
            [  # the same product, cast up
                None if c is None else c.double() for c in cotangents
            ],
        )[0]
        candidate = _jax_candidate(
            entry,
            result,
            argument,
            model,
            params,
            buffers,
            args,
            kwargs,
            training,
            cotangents,
            torch_spec,
        )
        if isinstance(candidate, SampleResult):
            return candidate
        report = jaxgrad.parity.compare(
            reference, candidate, reference64=reference64, name=result("").label + " float32"
        )
    if training and report.passed and program is not None:
        verified.setdefault(program, result("").label)
    return result(
        "passed" if report.passed else "failed", "" if report.passed else report.table(), report
    )


def _cast_floats(tree, dtype):
    """``tree`` (torch's args and kwargs) with every floating tensor cast to ``dtype``,
    detached, keeping ``requires_grad``; a tensor that appears twice (self-attention's
    query, key and value) stays one tensor."""
    import torch.utils._pytree as torch_pytree

    cast = {}

    def one(leaf):
        if not isinstance(leaf, torch.Tensor) or not leaf.is_floating_point():
            return leaf
        if id(leaf) not in cast:
            cast[id(leaf)] = leaf.detach().to(dtype).requires_grad_(leaf.requires_grad)
        return cast[id(leaf)]

    return torch_pytree.tree_map(one, tree)


def rules(results: list[SampleResult]) -> dict[str, int]:
    """``{rule: leaves}`` over the passed samples' reports: how many leaves each rule
    of ``jaxgrad.parity.compare`` passed (``"tier"``, ``"float64 answer"``, …)."""
    counts: dict[str, int] = {}
    for r in results:
        if r.status == "passed" and r.report is not None:
            for leaf in r.report.leaves:
                counts[leaf.rule] = counts.get(leaf.rule, 0) + 1
    return counts


def _jax_candidate(
    entry, result, argument, model, params, buffers, args, kwargs, training, cotangents, torch_spec
):
    """The twin's outputs and gradients for ``cotangents``, or the ``SampleResult`` that
    ends the sample: a refusal (declared or not), a run the entry declared refused, or
    an output structure other than torch's."""
    try:
        candidate, spec = jax_side(
            model,
            params,
            buffers,
            args,
            kwargs,
            training,
            cotangents,
            fast_compile=True,
            eager=not entry.jit,
        )
    except (ValueError, TypeError) as exc:
        return _refusal(result, argument, exc)
    if argument:
        return result("failed", f"jaxgrad ran it, but the entry declares `{argument}` refused")
    if spec != torch_spec:
        return result("failed", f"output structure {spec} differs from torch's {torch_spec}")
    return candidate


def _entry(info, sample, training: bool):
    """``(entry, result, argument)``: the class's ``Entry``, a ``SampleResult`` maker for
    this sample, and the argument the entry declares refused (or None)."""
    name = info.module_cls.__name__
    entry = REGISTRY[name]
    return (
        entry,
        functools.partial(SampleResult, name, training, sample.desc),
        entry.refused(sample),
    )


def _build(info, sample, training: bool, dtype, materialise: bool) -> tuple:
    """``(module, args, kwargs)``: the torch module of a sample (seed 0) in ``dtype`` and
    mode, its forward inputs positional (floating ones cast to ``dtype``), a lazy module
    materialised by one forward (torch's first forward gives it shapes and class)."""
    torch.manual_seed(0)
    c_args, c_kwargs = sample.constructor_input.args, sample.constructor_input.kwargs
    module = info.module_cls(*c_args, **c_kwargs).to(dtype).train(training)
    args, kwargs = _positional(module, sample.forward_input.args, sample.forward_input.kwargs)
    if dtype != torch.float64:  # the samples are drawn in float64
        args, kwargs = _cast_floats((args, kwargs), dtype)
    if materialise:
        with torch.no_grad():
            module(*args, **kwargs)
    return module, args, kwargs


def _torch_modes_agree(module, args, kwargs) -> bool:
    """torch's outputs, gradients and buffers on this sample are the same in evaluation
    mode as in training mode, at the float64 tier; both run on copies, so ``module`` is
    left as converted for a full run (a forward may write a buffer or a weight)."""
    evaluated, eval_spec, _ = torch_side(copy.deepcopy(module), args, kwargs)
    trained, train_spec, _ = torch_side(copy.deepcopy(module).train(True), args, kwargs)
    return eval_spec == train_spec and jaxgrad.parity.compare(trained, evaluated).passed


def _refusal(result, argument: str | None, exc: Exception) -> SampleResult:
    """A declared refusal naming its argument counts as refused; any other error fails."""
    if argument and f"`{argument}`" in str(exc):
        return result("refused", argument)
    expected = f" (expected a refusal naming `{argument}`)" if argument else ""
    return result("failed", f"{type(exc).__name__}: {exc}{expected}")


def _positional(module, args, kwargs) -> tuple[tuple, dict]:
    """Move keyword arguments that torch's ``forward`` also takes positionally."""
    bound = inspect.signature(module.forward).bind(*args, **kwargs)
    return tuple(bound.args), dict(bound.kwargs)


def run_error_samples(name: str) -> list[SampleResult]:
    """``module_error_inputs_func``'s samples (what torch rejects), in training mode:
    each must be rejected by jaxgrad too, with a ``ValueError``/``TypeError`` at
    construction, conversion or forward (status ``"rejected"``), else ``"failed"``."""
    info = module_infos()[name]
    if info.module_error_inputs_func is None:
        return []
    results = []
    torch.manual_seed(zlib.crc32(f"{name} errors".encode()))
    for error in info.module_error_inputs_func(
        info, device="cpu", dtype=torch.float64, requires_grad=True, training=True
    ):
        sample = error.module_error_input
        result = functools.partial(SampleResult, name, True, f"error: {error.error_regex}")
        c_args, c_kwargs = sample.constructor_input.args, sample.constructor_input.kwargs
        try:
            with jax.enable_x64(True):
                try:
                    module = info.module_cls(*c_args, **c_kwargs).to(torch.float64)
                except Exception:  # torch refuses at construction: build jaxgrad's directly
                    getattr(jaxgrad.nn, name)(*c_args, **c_kwargs)
                else:
                    model, params, buffers = jaxgrad.nn.from_torch(module, with_buffers=True)
                    # nested inputs too: an LSTMCell's (h, c) state
                    inputs = jax.tree_util.tree_map(
                        lambda a: (
                            jax.numpy.asarray(a.detach().numpy())
                            if isinstance(a, torch.Tensor)
                            else a
                        ),
                        list(sample.forward_input.args),
                    )
                    model.apply(params, *inputs, buffers=buffers, train=True, key=jax.random.key(0))
        except (ValueError, TypeError) as exc:
            results.append(result("rejected", f"{type(exc).__name__}: {exc}"))
        else:
            results.append(result("failed", "torch rejects this sample; jaxgrad ran it"))
    return results


def summary(results: list[SampleResult]) -> dict[str, int]:
    """``{status: count}`` over ``results``, every status present."""
    counts = dict.fromkeys(STATUSES, 0)
    for r in results:
        counts[r.status] += 1
    return counts
