"""``diagnose(torch_module, port, example_input)``: localise, then test the catalogue.

Torch rule: this module never imports torch. The torch module is driven by duck
typing (hooks, ``named_modules``, ``named_parameters``; see ``capture``), and its
layers' hyperparameters are read through ``jaxgrad.nn.capture.layers.convert_layer``.

``port`` is one of

- ``(model, params)``: a jaxgrad model (a ``Sequential``, a traced ``GraphModule``,
  a captured ``ExportedModule`` — localised by the torch path of each leaf module,
  ``jaxgrad.doctor.regions`` — or a single layer) with torch-keyed params; pass
  ``buffers=`` where it has some;
- an ``nnx.Module`` of stock layers: read back into torch layouts with
  ``jaxgrad.flax.from_nnx``;
- anything else the user wrote — a custom ``nnx.Module`` with its own ``__call__``, a
  pytree module (equinox style), ``(fn, params)`` for ``fn(params, x)``, a callable
  ``fn(x)``, or ``(fn, params, names)`` with ``names`` ``{port leaf: torch name}``
  overriding the search by value: traced and matched to torch by value
  (``jaxgrad.doctor.anyport``).

For the first two forms, the steps: run torch with hooks and the port with taps (``capture``); check that the
port's params and layers line up with torch's (``localise.check_*``: a ValueError
listing what does not); per layer, the error end to end and with input injection;
for the first layer whose own error exceeds the tier, run every ``CATALOGUE`` entry's
transformations on torch's input and rank them by the error left.

A float32 torch module is run again in float64 (``jaxgrad.doctor.calibrate``): each
layer's output, the model's output and the catalogue's trials are judged with
``jaxgrad.parity.compare(..., reference64=...)``, so a correct float32 port is not
blamed for a layer where torch's own float32 result misses the tier, while a real
float32 mistake still is. Each layer row says which rule passed it where it is not the
tier (``rule``), and so does the report for the output (``output_rule``).
"""

from __future__ import annotations

import numpy as np

from jaxgrad.doctor import calibrate
from jaxgrad.doctor import capture as cap
from jaxgrad.doctor.anyport import diagnose_traced
from jaxgrad.doctor.calls import numpy_copy, numpy_tree
from jaxgrad.doctor.catalogue import CATALOGUE, Case, hwc_to_chw
from jaxgrad.doctor.injection import precision_context, run_layer
from jaxgrad.doctor.localise import (
    check_layers,
    check_params,
    comparison,
    error,
    layer_comparison,
    layer_error,
    rules,
    within_tier,
)
from jaxgrad.doctor.report import Cause, Report
from jaxgrad.nn.module import Module, sub_dict


def _port_parts(port, buffers):
    """``(model, params, buffers, traced)``: a jaxgrad or stock nnx model, or a port
    to trace (``traced``: ``(PortFunction, names)``)."""
    from jaxgrad.doctor.trace import as_function

    if isinstance(port, tuple) and len(port) == 2 and isinstance(port[0], Module):
        return port[0], dict(port[1]), buffers, None
    if isinstance(port, Module):
        raise TypeError(
            "diagnose: `port` must be (model, params) for a jaxgrad model; got "
            f"a bare {type(port).__name__} without its params."
        )
    if isinstance(port, tuple) and len(port) == 3 and callable(port[0]):
        fn, params, names = port
        if not isinstance(names, dict):
            raise TypeError(
                f"diagnose: `port` names must be a dict {{port name: torch name}}, "
                f"got {type(names).__name__}."
            )
        return None, None, buffers, (as_function((fn, params)), dict(names))
    try:
        from flax import nnx
    except ImportError:  # pragma: no cover
        nnx = None
    if nnx is not None and isinstance(port, nnx.Module):
        from jaxgrad.flax import from_nnx

        try:
            read = from_nnx(port)
        except (ValueError, TypeError, NotImplementedError):  # a custom module: trace it
            return None, None, buffers, (as_function(port), None)
        return read[0], dict(read[1]), (read[2] if len(read) == 3 else buffers), None
    traced = as_function(port)
    if traced is None:
        raise TypeError(
            "diagnose: `port` must be (model, params) for a jaxgrad model, an nnx.Module, a "
            "pytree module or other callable, (fn, params) for fn(params, x), or "
            f"(fn, params, names); got {type(port).__name__}."
        )
    return None, None, buffers, (traced, None)


def _check_names(names, traced, torch_names):
    unknown_port = [k for k in names if k not in traced.names]
    unknown_torch = [v for v in names.values() if v not in torch_names]
    if unknown_port or unknown_torch:
        raise ValueError(
            "diagnose: `port` names do not line up: "
            + "; ".join(
                part
                for part in (
                    f"port leaves {', '.join(unknown_port)} not in the port (its leaves: "
                    f"{', '.join(traced.names)})"
                    if unknown_port
                    else "",
                    f"torch names {', '.join(unknown_torch)} not in the torch module (its "
                    f"parameters: {', '.join(torch_names)})"
                    if unknown_torch
                    else "",
                )
                if part
            )
            + "."
        )


def _torch_twin(torch_module, path):
    from jaxgrad.nn.capture.layers import convert_layer

    sub = dict(torch_module.named_modules()).get(path)
    try:
        return convert_layer(sub, path)
    except (ValueError, TypeError, AttributeError):
        return None


def _rank(case, path, ref_call, before, train, answer64=None):
    causes = []
    for entry in CATALOGUE:
        best = None
        for detail, trial in entry.candidates(case):
            try:
                out, new = run_layer(
                    trial.layer or case.layer,
                    case.params if trial.params is None else trial.params,
                    case.buffers,
                    trial.args or case.args,
                    case.kwargs if trial.kwargs is None else trial.kwargs,
                    train,
                    path,
                    jit=True,
                )
                if trial.fix_output is not None:
                    out, new = trial.fix_output(out, new, case)
                after, exceeds = layer_error(ref_call, out, new, train, answer64)
            except (ValueError, TypeError) as failure:  # the transformed layer is invalid
                del failure
                continue
            if best is None or after < best[1]:
                best = (detail, after, not exceeds)
        if best is not None and best[1] < before:
            causes.append(
                Cause(
                    entry.name,
                    entry.description,
                    best[0],
                    before,
                    best[1],
                    best[2],
                    entry.signature,
                )
            )
    causes.sort(key=lambda c: (not c.explains, c.error_after))
    return causes


def diagnose(
    torch_module,
    port,
    example_input,
    *,
    buffers=None,
    train: bool = False,
    kwargs: dict | None = None,
    names: dict | None = None,
) -> Report:
    """Find the first port layer whose own error exceeds the tier and name the cause.

    Args:
      torch_module: the reference ``torch.nn.Module``.
      port: ``(model, params)`` for a jaxgrad model, an ``nnx.Module`` (stock layers or
        custom), a pytree module, ``(fn, params)``, a callable ``fn(x)``, or
        ``(fn, params, names)`` (module docstring). A port that is not a jaxgrad or
        stock nnx model is traced and matched to torch by value
        (``jaxgrad.doctor.anyport``): its report lists where each torch parameter was
        found (``params``) and what could not be matched (``unmatched``).
      example_input: a torch tensor or an array, or a tuple of them for several inputs.
      buffers: the jaxgrad model's buffers (BatchNorm statistics), torch-keyed.
      train: compare in training mode (BatchNorm batch statistics and running-stat
        updates); dropout must then be off (p=0), the doctor cannot replay torch's masks.
      kwargs: keyword inputs of the forward (an attention mask), given to both sides.
      names: ``{port leaf: torch parameter name}`` for a traced port (leaves named by
        their pytree path, ``fc1.kernel``): overrides the search by value for the
        parameters it names (the third item of ``(fn, params, names)`` does the same).

    Returns:
      A ``Report``: ``first_layer`` (torch module path or None), ``layers``, ``causes``.

    Raises:
      ValueError: for a jaxgrad model, unmatched parameter names (both sides listed,
        with suggestions by shape), port layers without a torch twin or in a different
        order; ``names`` naming a leaf or a torch parameter that does not exist;
        ``train=True`` with a traced port; an input the torch module rejects.
      TypeError: a ``port`` of none of the accepted forms.
    """
    inputs = example_input if isinstance(example_input, tuple) else (example_input,)
    kwargs = dict(kwargs or {})
    model, params, buffers, traced = _port_parts(port, buffers)
    torch_params = {k: tuple(v.shape) for k, v in torch_module.named_parameters()}
    if names is not None and traced is None:
        raise ValueError(
            "diagnose: `names` maps a traced port's leaves to torch's names; "
            "a jaxgrad or stock nnx port already has torch's names."
        )
    if traced is not None:
        mapping = {**(traced[1] or {}), **(names or {})} if (traced[1] or names) else None
        if mapping is not None:
            if not isinstance(mapping, dict):
                raise TypeError(
                    f"diagnose: `names` must be a dict {{port leaf: torch name}}, "
                    f"got {type(names).__name__}."
                )
            _check_names(mapping, traced[0], list(torch_params))
        return diagnose_traced(torch_module, traced[0], inputs, kwargs, train=train, names=mapping)
    check_params(torch_params, params)
    ref_out, torch_calls = cap.capture_torch(torch_module, inputs, kwargs, train=train)
    module64 = calibrate.twin64(torch_module) if calibrate.is_float32(ref_out) else None
    out64, e2e64 = (
        calibrate.capture64(module64, inputs, kwargs, train=train)
        if module64 is not None
        else (None, {})
    )
    arrays = [numpy_copy(x) for x in inputs]
    port_kwargs = {k: numpy_copy(v) for k, v in kwargs.items()}  # torch tensors -> numpy
    name = type(torch_module).__name__
    with precision_context([*arrays, *(_flat_arrays(ref_out))]):
        buffers = dict(buffers or {})
        e2e = cap.Recorder()
        try:
            out, _ = cap.tapped(model, e2e).forward_with_state(
                params, *arrays, buffers=buffers, train=train, key=None, path="", **port_kwargs
            )
        except (ValueError, TypeError) as failure:
            check_layers(torch_calls, e2e.started)  # a wrong order explains the failure
            raise ValueError(
                f"diagnose: the port fails on the example input, in layer "
                f"{e2e.started[-1][0] if e2e.started else '?'!r}: {failure}"
            ) from failure
        check_layers(torch_calls, e2e.started)
        ref_calls = {(c.path, c.index): c for c in torch_calls}
        ported = {(c.path, c.index) for c in e2e.calls}
        answers64 = (
            calibrate.replay64(
                module64, [c for c in torch_calls if (c.path, c.index) in ported], train=train
            )
            if module64 is not None
            else {}
        )
        layers: list = []
        first: str | None = None
        case: Case | None = None
        before: tuple | None = None
        note: str | None = None
        for call in e2e.calls:
            key = (call.path, call.index)
            ref = ref_calls[key]
            layer = dict(cap.leaves(model))[call.path]
            lp, lb = _sub(params, call.path), _sub(buffers, call.path)
            own_out, own_new = run_layer(layer, lp, lb, ref.args, ref.kwargs, train, call.path)
            own, exceeds, own_report = layer_comparison(
                ref, own_out, own_new, train, answers64.get(key)
            )
            carried64 = (e2e64[key].output, e2e64[key].buffers) if key in e2e64 else None
            carried, _, carried_report = layer_comparison(
                ref, call.output, call.buffers, train, carried64
            )
            layers.append(
                dict(
                    path=call.path,
                    index=call.index,
                    class_name=ref.class_name,
                    end_to_end=carried,
                    injected=own,
                    exceeds=exceeds,
                    rule="; ".join(
                        filter(
                            None,
                            (
                                rules(own_report),
                                rules(carried_report) and "end to end " + rules(carried_report),
                            ),
                        )
                    ),
                    end_to_end_comparison=carried_report.to_dict(),
                    injected_comparison=own_report.to_dict(),
                )
            )
            if exceeds and first is None:
                first = call.path
                case = Case(
                    layer,
                    lp,
                    _torch_twin(torch_module, call.path),
                    ref.class_name,
                    ref.args,
                    ref.kwargs,
                    train,
                    lb,
                )
                before = (ref, own, own_out, answers64.get(key))
        out = numpy_tree(out)
        total = error(ref_out, out)
        output_report = comparison(ref_out, out, reference64=out64)
        clean = output_report.passed
        causes: list = []
        pattern = glue = None
        if first is not None:
            assert before is not None and case is not None  # set with first
            ref, own, own_out, answer64 = before
            from jaxgrad.doctor.regions import RegionLayer

            # a captured program's region is ATen ops, not a layer the catalogue can vary
            if isinstance(case.layer, RegionLayer):
                causes, note = (
                    [],
                    (
                        "the port is a program captured with torch.export: its "
                        "ATen ops are not a layer the catalogue can vary"
                    ),
                )
            else:
                causes = _rank(case, first, ref, own, train, answer64)
            if not any(c.explains for c in causes):
                from jaxgrad.doctor.report import pattern_of

                pattern = (
                    "not in the output (within the tier): in the updated buffers "
                    "(running statistics)"
                    if within_tier(
                        ref.output, own_out, reference64=None if answer64 is None else answer64[0]
                    )
                    else pattern_of(ref.output, own_out)
                )
        elif not clean:
            glue = _glue(e2e.calls, ref_calls, e2e64)
            causes = _glue_causes(glue, e2e.calls, ref_calls, torch_calls)
    return Report(
        name,
        first,
        layers,
        causes,
        total,
        clean,
        _dtype_name(ref_out),
        train,
        pattern=pattern,
        glue=glue,
        note=note,
        calibrated=module64 is not None,
        output_rule=rules(output_report),
    )


def _sub(tree, path):
    return dict(tree) if not path else sub_dict(tree, path)


def _glue(port_calls, ref_calls, e2e64=None):
    """The first layer whose end-to-end *input* differs though every earlier output
    was within the tier: the error is made by forward code between layers
    (``e2e64``: torch's float64 calls, calibrating float32 verdicts)."""
    for call in port_calls:
        key = (call.path, call.index)
        ref, answer = ref_calls[key], (e2e64 or {}).get(key)
        if not within_tier(
            list(ref.args),
            list(call.args),
            reference64=None if answer is None else list(answer.args),
        ):
            return call.path
        if not within_tier(
            ref.output, call.output, reference64=None if answer is None else answer.output
        ):
            return None
    return "<output>"


def _glue_causes(glue, port_calls, ref_calls, torch_calls):
    """Between-layer conventions: is the port's input to ``glue`` torch's input with
    the features flattened in H,W,C order (NHWC) instead of C,H,W?"""
    call = next((c for c in port_calls if c.path == glue), None)
    if call is None or not call.args:
        return []
    ref_in, port_in = (
        np.asarray(ref_calls[(call.path, call.index)].args[0]),
        np.asarray(call.args[0]),
    )
    if port_in.ndim != 2 or ref_in.shape != port_in.shape:
        return []
    before = error(ref_in, port_in)
    for prior in torch_calls:  # the NCHW activation that was flattened
        out = prior.output
        if isinstance(out, np.ndarray) and out.ndim == 4 and out.size == ref_in.size:
            after = error(ref_in, hwc_to_chw(port_in, out.shape))
            if after < before:
                entry = next(e for e in CATALOGUE if e.name == "flatten_order")
                return [
                    Cause(
                        entry.name,
                        entry.description,
                        f"the input of `{glue}` is flattened H,W,C (flax's NHWC order); "
                        "torch flattens C,H,W",
                        before,
                        after,
                        within_tier(ref_in, hwc_to_chw(port_in, out.shape)),
                        entry.signature,
                    )
                ]
    return []


def _flat_arrays(tree):
    if isinstance(tree, (tuple, list)):
        return [a for t in tree for a in _flat_arrays(t)]
    return [] if tree is None else [tree]


def _dtype_name(tree):
    arrays = [np.asarray(a) for a in _flat_arrays(tree)]
    return arrays[0].dtype.name if arrays else "?"
