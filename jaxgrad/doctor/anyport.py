"""Diagnosing a port the doctor knows nothing about: by its values alone.

``diagnose`` sends here every port that is not a jaxgrad model or a stock ``nnx``
model: a custom ``nnx.Module``, a pytree module, ``(fn, params)``, a closure, or
``(fn, params, names)`` (``names`` then overrides the parameter search).

1. torch runs with forward hooks (``capture.capture_torch``); the port is traced and
   every equation's output recorded (``trace.record``).
2. Each torch parameter is looked for among the port's leaves by value, up to the
   layouts the catalogue knows (``match.match_params``): the report lists where each
   one lives, and the ones not found or found ambiguously.
3. Each torch leaf module's output (in the order the calls finish) is looked for
   among the port's values, up to the activation layouts (``match.Pool``). The first
   module whose output no port value reproduces within the tier, while its inputs
   were reproduced, is the first diverging layer. A module whose inputs were not
   reproduced either means the error is made between modules (``glue``).
   For a float32 torch module, torch's float64 run (``jaxgrad.doctor.calibrate``:
   a float64 copy, the same hooks) gives each module's float64 answer, and a port
   value outside the tier of torch's float32 value still reproduces it when the
   calibrated float32 rule passes it (``match.calibrated``; the row's ``rule``).
4. On that layer, every catalogue entry's ``mistakes`` — torch's layer made with the
   mistake — is run on torch's input and looked for among the port's values; the
   entries are ranked by the error left.
"""

from __future__ import annotations

import numpy as np

from jaxgrad.doctor import calibrate
from jaxgrad.doctor import capture as cap
from jaxgrad.doctor.calls import numpy_copy, numpy_tree
from jaxgrad.doctor.catalogue import CATALOGUE, Case
from jaxgrad.doctor.injection import precision_context, run_layer
from jaxgrad.doctor.localise import comparison, rules
from jaxgrad.doctor.match import Pool, match_params, unused_leaves
from jaxgrad.doctor.report import Cause, Report
from jaxgrad.doctor.trace import record


def _primary(value):
    """The first array of a module's output (MultiheadAttention: the attention output)."""
    if isinstance(value, (tuple, list)):
        for v in value:
            found = _primary(v)
            if found is not None:
                return found
        return None
    return None if value is None else np.asarray(value)


def _float_args(args):
    return [np.asarray(a) for a in args if isinstance(a, np.ndarray) and a.dtype.kind in "fc"]


def _layer_calls(calls):
    """Indices of the calls of modules none of whose submodules ran (a
    MultiheadAttention, whose ``out_proj`` is never called, is one)."""
    called = {c.path for c in calls}
    return [
        i
        for i, c in enumerate(calls)
        if not any(p != c.path and (c.path == "" or p.startswith(c.path + ".")) for p in called)
    ]


def _residuals(inputs, calls):
    """Torch's values a port may add a module's output to: the inputs, and every
    module's inputs and outputs (distinct arrays)."""
    out = []
    for value in [
        *inputs,
        *(a for c in calls for a in _float_args(c.args)),
        *(_primary(c.output) for c in calls),
    ]:
        if (
            value is not None
            and value.dtype.kind in "fc"
            and not any(v.shape == value.shape and np.array_equal(v, value) for v in out)
        ):
            out.append(np.asarray(value))
    return out


def _consumed_fine(index, value, calls, found_of):
    """Whether a later call takes ``value`` (torch's output of call ``index``) as an
    input and the port reproduces that call's output: the port then computes the
    value fused with what follows, it does not diverge there."""
    for j in range(index + 1, len(calls)):
        if (
            any(np.array_equal(a, value) for a in _float_args(calls[j].args))
            and j in found_of
            and found_of[j].ok
        ):
            return True
    return False


def _chw(calls):
    shapes = []
    for call in calls:
        for value in (*_float_args(call.args), _primary(call.output)):
            if value is not None and value.ndim == 4 and tuple(value.shape[1:]) not in shapes:
                shapes.append(tuple(value.shape[1:]))
    return tuple(shapes)


def _twin(torch_module, path):
    from jaxgrad.nn.capture.layers import convert_layer

    sub = dict(torch_module.named_modules()).get(path)
    try:
        layer = convert_layer(sub, path)
    except (ValueError, TypeError, AttributeError, KeyError):
        return None, {}, {}
    params = {k: numpy_copy(v) for k, v in sub.named_parameters()}
    buffers = {k: numpy_copy(v) for k, v in sub.named_buffers()}
    return layer, params, buffers


def diagnose_traced(
    torch_module, port, inputs: tuple, kwargs: dict, *, train: bool, names: dict | None
) -> Report:
    """The steps of the module docstring; ``port`` is a ``trace.PortFunction``."""
    if train:
        raise ValueError(
            "diagnose: `train`=True needs a jaxgrad model or a stock nnx model "
            "(the running statistics of a traced port are not compared); "
            "diagnose this port in eval mode."
        )
    ref_out, calls = cap.capture_torch(torch_module, inputs, kwargs, train=False)
    module64 = calibrate.twin64(torch_module) if calibrate.is_float32(ref_out) else None
    out64, calls64 = (
        calibrate.capture64(module64, inputs, kwargs, train=False)
        if module64 is not None
        else (None, {})
    )

    def output64(call):  # torch's float64 answer for the call's (main) output
        twin = calls64.get((call.path, call.index))
        return None if twin is None else _primary(twin.output)

    def args64(call):  # ... and for its floating inputs, position by position
        twin = calls64.get((call.path, call.index))
        found = _float_args(twin.args) if twin is not None else []
        return (
            found
            if len(found) == len(_float_args(call.args))
            else [None] * len(_float_args(call.args))
        )

    arrays = [numpy_copy(x) for x in inputs]
    port_kwargs = {k: numpy_copy(v) for k, v in kwargs.items()}
    name = type(torch_module).__name__
    ref_main = _primary(ref_out)
    dtype = ref_main.dtype.name if ref_main is not None else "?"
    with precision_context([*arrays, ref_main]):
        try:
            outs, values, constants = record(port, tuple(arrays), port_kwargs)
        except Exception as failure:  # noqa: BLE001 - untraceable: the output only
            out = numpy_tree(port.fn(port.leaves, *arrays, **port_kwargs))
            found = Pool([_value(a) for a in _flat(out)], ()).find(ref_main)
            return Report(
                name,
                None,
                [],
                [],
                found.error,
                found.ok,
                dtype,
                False,
                note=f"the port cannot be traced with jax.make_jaxpr "
                f"({type(failure).__name__}: {str(failure).splitlines()[0]}): "
                "compared at the output only",
                port_kind=port.kind,
            )
    chw = _chw(calls)
    leaf_names, leaves = list(port.names), list(port.leaves)
    if not leaves and constants:  # a closure: the arrays it closes over
        leaf_names = [f"constant {i}" for i in range(len(constants))]
        leaves = constants
    pool = Pool(values, chw, _residuals(arrays, calls))
    output = Pool([_value(o) for o in outs], chw).find(
        ref_main, None if out64 is None else _primary(out64)
    )
    hints = {}
    for call in calls:  # the leaves each module brings in, from the values it reproduces
        main = _primary(call.output)
        found = pool.find(main, output64(call)) if main is not None else None
        if found is not None and found.ok:
            before = frozenset().union(
                *(pool.find(a, a64).leaves for a, a64 in zip(_float_args(call.args), args64(call)))
            )
            hints[call.path] = found.leaves - before
    torch_params = {k: numpy_copy(v) for k, v in torch_module.named_parameters()}
    torch_params.update(
        {k: numpy_copy(v) for k, v in torch_module.named_buffers() if v.dtype.is_floating_point}
    )  # running statistics
    params = match_params(torch_params, leaf_names, leaves, chw, names, hints)
    layers = _layer_calls(calls)
    rows, first, glue, fused = [], None, None, []
    found_of = {}
    for i, call in enumerate(calls):
        main = _primary(call.output)
        if main is not None and main.dtype.kind in "fc":
            found_of[i] = pool.find(main, output64(call))
    for i in layers:
        call = calls[i]
        if i not in found_of:
            continue
        found, main = found_of[i], _primary(call.output)
        inputs_ok = all(
            pool.find(a, a64).ok or any(np.array_equal(a, f) for f in fused)
            for a, a64 in zip(_float_args(call.args), args64(call))
        )
        report = (
            comparison(found.reference, found.value, reference64=found.reference64)
            if found.value is not None
            else comparison(main, np.full(main.shape, np.nan))
        )
        rows.append(
            dict(
                path=call.path,
                index=call.index,
                class_name=call.class_name,
                end_to_end=found.error,
                injected=found.error if inputs_ok else None,
                exceeds=False,
                port=_where(found),
                reproduced=found.ok,
                rule=rules(report) if found.ok else "",
                end_to_end_comparison=report.to_dict(),
                injected_comparison=report.to_dict(),
            )
        )
        if found.ok or first is not None or glue is not None:
            continue
        if output.ok or _consumed_fine(i, main, calls, found_of):
            fused.append(main)  # the port computes it fused with what follows
            continue
        rows[-1]["exceeds"] = inputs_ok
        if inputs_ok:
            first, case_call, counterpart = call.path, call, found
        else:
            glue = call.path
    if first is None and glue is None and not output.ok:
        glue = "<output>"
    unmatched = _unmatched(params, rows, first, glue, output.ok)
    causes, note, pattern = [], None, None
    if first is not None:
        causes, note = _rank(
            torch_module,
            case_call,
            counterpart,
            pool,
            chw,
            run_layer,
            module64,
            calls64.get((case_call.path, case_call.index)),
        )
        if not any(c.explains for c in causes) and counterpart.value is not None:
            from jaxgrad.doctor.report import pattern_of

            pattern = pattern_of(counterpart.reference, counterpart.value)
    output_rule = (
        ""
        if output.value is None or not output.ok
        else rules(comparison(output.reference, output.value, reference64=output.reference64))
    )
    return Report(
        name,
        first,
        rows,
        causes,
        output.error,
        output.ok and first is None,
        dtype,
        False,
        pattern=pattern,
        glue=glue,
        note=note,
        calibrated=module64 is not None,
        output_rule=output_rule,
        params=[m.describe() for m in params],
        unused=unused_leaves(params, leaf_names),
        unmatched=unmatched,
        port_kind=port.kind,
        values=len(values),
    )


def _value(array):
    from jaxgrad.doctor.trace import Value

    return Value(np.asarray(array), "output", 0, frozenset())


def _flat(tree):
    if isinstance(tree, (tuple, list)):
        return [a for t in tree for a in _flat(t)]
    if isinstance(tree, dict):
        return [a for t in tree.values() for a in _flat(t)]
    return [] if tree is None else [np.asarray(tree)]


def _where(found):
    if found.where is None:
        return "-"
    return found.where + (f" ({found.layout})" if found.layout else "")


def _unmatched(params, rows, first, glue, output_ok):
    """``[(torch module path, why), ...]``: the modules the doctor could not pair."""
    out = []
    by_module: dict[str, list] = {}
    for m in params:
        name = m.torch_name.split("[")[0]
        by_module.setdefault(name.rsplit(".", 1)[0] if "." in name else "", []).append(m)
    reproduced = {row["path"] for row in rows if row["reproduced"]}
    after = set()  # modules at or after the first divergence: unmatched because of it
    for row in rows:
        if after or row["path"] in (first, glue):
            after.add(row["path"])
    for module, found in by_module.items():
        missing = [m.torch_name for m in found if m.port_name is None]
        settled = reproduced | after
        shared = [
            m.torch_name
            for m in found
            if m.ambiguous
            and module not in settled
            and not any(module.startswith(r + ".") for r in settled)
        ]
        if missing:
            out.append(
                (
                    module,
                    f"{', '.join(missing)} not found among the port's leaves by "
                    "value (as is, transposed, HWIO, reshaped, q/k/v or gate "
                    "blocks, H,W,C columns): the port holds it changed, or "
                    "computes it",
                )
            )
        elif shared:
            out.append(
                (
                    module,
                    f"{', '.join(shared)} ambiguous: several port leaves hold the "
                    "same values, and no port value reproduces the module's output "
                    "to tell them apart",
                )
            )
    for row in rows:
        if row["path"] in (first, glue):
            break
        if row["port"] != "-" and not row["reproduced"]:
            out.append(
                (
                    row["path"],
                    "its output is not among the port's values, though "
                    + ("the model's output is" if output_ok else "what follows it is")
                    + ": the port computes it fused with other operations (or in a "
                    "layout the doctor does not know)",
                )
            )
        elif row["port"] == "-":
            out.append((row["path"], "no port value has its output's size"))
    return out


def _variants64(module64, call64, chw, run_layer) -> dict:
    """``{(entry name, trial number, detail): output}``: each catalogue mistake made on
    torch's float64 layer and run on its float64 end-to-end input: the float64 answer
    a port value making that mistake approximates (``Pool.find``'s ``reference64``)."""
    import jax

    layer, params, buffers = _twin(module64, call64.path)
    if layer is None:
        return {}
    case = Case(
        layer,
        params,
        layer,
        call64.class_name,
        call64.args,
        call64.kwargs,
        False,
        buffers,
        chw=chw,
        port_dtype=None,
    )
    found = {}
    with jax.enable_x64(True):
        for entry in CATALOGUE:
            if entry.mistakes is None:
                continue
            try:
                trials = list(entry.mistakes(case))
            except (ValueError, TypeError):
                continue
            for number, (detail, trial) in enumerate(trials):
                out = _run_trial(run_layer, trial, layer, params, buffers, call64, case)
                if out is None:
                    continue
                variant = _primary(out)
                if variant is not None and variant.dtype == np.float64:
                    found[(entry.name, number, detail)] = variant
    return found


def _run_trial(run_layer, trial, layer, params, buffers, call, case):
    """A catalogue trial's output on torch's layer at ``call`` (its input), or None when
    the variant is not a valid layer."""
    try:
        out, new = run_layer(
            trial.layer or layer,
            params if trial.params is None else trial.params,
            buffers,
            trial.args or call.args,
            call.kwargs if trial.kwargs is None else trial.kwargs,
            False,
            call.path,
        )
        if trial.fix_output is not None:
            out, _ = trial.fix_output(out, new, case)
    except (ValueError, TypeError):
        return None
    return out


def _rank(torch_module, call, counterpart, pool, chw, run_layer, module64=None, call64=None):
    """The catalogue's mistakes on torch's layer, looked for among the port's values
    (for a float32 module, each calibrated by the same mistake made in float64 on
    torch's float64 run: ``_variants64``)."""
    layer, params, buffers = _twin(torch_module, call.path)
    if layer is None:
        return [], (
            f"torch's {call.class_name} has no jaxgrad twin: the catalogue's "
            "mistakes cannot be made on it"
        )
    case = Case(
        layer,
        params,
        layer,
        call.class_name,
        call.args,
        call.kwargs,
        False,
        buffers,
        chw=chw,
        port_dtype=None if counterpart.value is None else counterpart.value.dtype,
    )
    before = counterpart.error
    variants64 = (
        {} if module64 is None or call64 is None else _variants64(module64, call64, chw, run_layer)
    )
    causes = []
    for entry in CATALOGUE:
        if entry.mistakes is None:
            continue
        best = None
        for number, (detail, trial) in enumerate(entry.mistakes(case)):
            out = _run_trial(run_layer, trial, layer, params, buffers, call, case)
            if out is None:  # the variant is not a valid layer
                continue
            variant = _primary(out)
            if variant is None:
                continue
            found = pool.find(variant, variants64.get((entry.name, number, detail)))
            if best is None or (found.ok, -found.error) > (best[2], -best[1]):
                best = (detail, found.error, found.ok)
        if best is not None and (best[1] < before or best[2]):
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
    return causes, None
