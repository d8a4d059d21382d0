#!/usr/bin/env python
"""Port a torch model to an idiomatic flax.nnx module, prove it, and save it.

Given a model spec (your own class or factory, or a torchvision, timm or Hugging Face
model built with random weights: nothing is downloaded), example input shapes and
an output path, it builds the model (optionally loading a saved ``state_dict``),
converts it with ``jaxgrad.flax.to_nnx``, checks the nnx twin's forward output and
every parameter gradient against torch in float64 and float32 (at the parity tiers;
float32 calibrated by torch's own float32 rounding against its float64 run, as
``jaxgrad.parity.compare(..., reference64=...)`` does, saying which leaves pass by which
rule), prints a per-layer table and the conventions it mapped, saves the nnx state as
safetensors keyed by nnx paths, and reloads the file into a fresh twin of a newly
built model (``jaxgrad.flax.load_nnx``), which must hold every variable and give the
output bit for bit.

A model ``torch.fx`` cannot trace (a Hugging Face transformer, a vision transformer)
is captured with ``torch.export`` on the example input: its nnx twin is a
``TorchProgram`` that runs the torch layers flax has as stock nnx layers (``Linear``,
``Embedding``, ``LayerNorm``, convolutions; named in the per-layer table) and torch's
captured ATen program for the rest, in torch's layout; it is specialised to the
example's shape.

The float64 check follows the zoo's rules (scripts/zoo.py): a float64 model whose own
code computes in float32 (Hugging Face's Mistral and Llama RMSNorm cast to float32,
timm's EdgeNeXt computes its Fourier position encoding in float32) is judged at the
float32 tier, the tier of that arithmetic, and the output says where it casts; a
gradient zero in exact arithmetic (its float64 value at most 1e-11 of its neighbours')
is judged at its neighbours' scale wherever the float32 tier applies. The model
itself is never run: each check takes its own copy, so a forward that fills a cache
(timm's LeViT) changes nothing the next check reads.

Inputs: --input-shape once per positional input (token ids when the model has a
vocabulary, else float32 normals), and/or --inputs with named (keyword) inputs, each
a shape or {"shape": [...], "dtype": "float32" | "int64", "high": N} (int64: ids in
[0, N), N defaulting to the vocabulary); a model given keyword inputs is captured with
torch.export (only its program takes inputs by name). An encoder-decoder:
  --inputs '{"input_ids": [2, 8], "decoder_input_ids": [2, 4]}'

A forward returning a dict is compared on one tensor of it: 'logits' where present,
else its only tensor, else --output-key KEY says which (several tensors and no logits
are refused naming the keys); a Hugging Face ModelOutput is compared field by field
unless --output-key names one.

Model specs:
  path/to/file.py:Name, pkg.module:Name
                        a class, or any callable returning an nn.Module, called with
                        --kwargs (importable from the current directory)
  torchvision.models:NAME (or torchvision:NAME)
                        a torchvision constructor, e.g. resnet18, called with --kwargs
  timm:NAME             timm.create_model(NAME, pretrained=False, **kwargs)
  transformers:CLASS    CLASS(config), config = CLASS.config_class(**CONFIG) from
                        --config JSON, or AutoConfig.for_model(model_type, **CONFIG)
                        when CONFIG names a "model_type" (needed by Auto* classes);
                        use_cache is off unless CONFIG sets it; token ids in
                        [0, vocab_size) unless --int-input says otherwise
torchvision, timm and transformers are the optional zoo extra:
  pip install -c constraints.txt -e ".[zoo]"

Exit status: 0 when the port passes; 1 when a parity check (or the reload) fails;
2 for bad input, found before any work where it can be (a missing file, module,
class, library or model name, a --config that is not a JSON object, that the config
class does not know or refuses (a value of the wrong type), or that builds no model,
bad --inputs, an unreadable --state-dict), each one ``error:`` line; 3 when
the port stopped on an unexpected error (a traceback follows: please report it).

Examples:
  python scripts/port.py mymodels:ResNet --input-shape 2,1,8,8 --out resnet_nnx.safetensors
  python scripts/port.py net.py:Net --input-shape 4,64 --state-dict net.pt --out net.safetensors
  python scripts/port.py mymodels:Tagger --input-shape 2,16 --int-input 100 --out tagger.safetensors
  python scripts/port.py mymodels:Fusion --input-shape 2,3,8,8 --input-shape 2,5 --out fusion.safetensors
  python scripts/port.py torchvision.models:resnet18 --kwargs '{"num_classes": 10}' \
      --input-shape 2,3,32,32 --out resnet18.safetensors
  python scripts/port.py timm:convnext_atto --kwargs '{"num_classes": 10}' \
      --input-shape 2,3,32,32 --out convnext.safetensors
  python scripts/port.py transformers:BertModel --input-shape 2,8 --out bert.safetensors \
      --config '{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                 "intermediate_size": 128, "vocab_size": 1000}'
  python scripts/port.py transformers:T5Model --out t5.safetensors \
      --inputs '{"input_ids": [2, 8], "decoder_input_ids": [2, 4]}' \
      --config '{"d_model": 16, "d_kv": 8, "d_ff": 32, "num_layers": 1, "num_heads": 2,
                 "vocab_size": 50}'
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import traceback
from typing import NamedTuple

import _cli
import _model_spec


def parse_args(argv=None):
    """Parse and check everything that can be told before torch is imported: the
    model spec (file, module, name; the library installed, the timm model or
    transformers class known), --kwargs and --config as JSON objects, the weights
    file's structure, the paths."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "target",
        metavar="MODEL",
        help="the model spec: module:Name or path/to/file.py:Name (a class, "
        "or any callable returning an nn.Module), torchvision.models:NAME, "
        "timm:NAME or transformers:CLASS (see below)",
    )
    parser.add_argument(
        "--input-shape",
        type=_cli.shape,
        action="append",
        default=[],
        metavar="N,C,H,W",
        help="example input shape, torch layout (token ids: N,L); once per "
        "positional input, in order",
    )
    parser.add_argument(
        "--inputs",
        metavar="JSON",
        dest="inputs_json",
        help="named (keyword) inputs as a JSON object, each a shape or "
        '{"shape": [...], "dtype": "float32" | "int64", "high": N}, e.g. '
        '\'{"input_ids": [2, 8], "decoder_input_ids": [2, 4]}\'',
    )
    parser.add_argument("--out", required=True, metavar="PATH", help="nnx state (.safetensors)")
    parser.add_argument(
        "--state-dict",
        metavar="PATH",
        help="weights to load first (.pt/.pth via torch.load, or .safetensors)",
    )
    parser.add_argument(
        "--kwargs",
        default="{}",
        metavar="JSON",
        help="keyword arguments of the class or factory as JSON (default: {}), "
        "e.g. '{\"num_classes\": 10}'",
    )
    parser.add_argument(
        "--config",
        metavar="JSON",
        help="transformers:CLASS only: the config's fields as JSON, e.g. "
        '\'{"hidden_size": 64, "num_hidden_layers": 2}\'',
    )
    parser.add_argument(
        "--layout",
        default="NHWC",
        choices=["NHWC", "NCHW"],
        help="input layout of the nnx module for image models (default NHWC, "
        "flax's idiom; a model captured with torch.export keeps torch's)",
    )
    parser.add_argument(
        "--export",
        metavar="PATH",
        dest="export_path",
        help="also write a torch-free artifact (jaxgrad.nn.save_exported: "
        "the float32 evaluation-mode program with jax.export, symbolic "
        "batch and other sizes torch kept dynamic, and the weights); "
        "it is reloaded and checked against torch at two batch sizes "
        "(token ids as int64 and as int32). "
        "Run it with jaxgrad.nn.load_exported(PATH)(x), no torch needed, "
        "with jax_enable_x64 on or off",
    )
    parser.add_argument(
        "--dynamic",
        choices=["auto", "batch", "none"],
        default="auto",
        help="with --export: the sizes the artifact keeps symbolic: auto "
        "(every size torch does not fix; the default), batch (only each "
        "input's first size: a much faster capture where torch reasons "
        "slowly over image sides, e.g. Swin), none (the example's shapes)",
    )
    parser.add_argument(
        "--int-input",
        type=int,
        metavar="VOCAB",
        help="integer inputs in [0, VOCAB) (token ids) instead of normals "
        "(default for a transformers model taking input_ids: its "
        "config's vocab_size)",
    )
    parser.add_argument(
        "--output-key",
        metavar="KEY",
        help=_model_spec.OUTPUT_KEY_HELP.format(verb="compare")
        + "; without it a ModelOutput is compared whole, every field",
    )
    args = parser.parse_args(argv)
    args.selected_output = None  # the key compared, once the forward has been run
    if args.dynamic != "auto" and not args.export_path:
        parser.error("--dynamic chooses the sizes of the --export artifact; give --export PATH")
    args.kwargs = _model_spec.json_object(parser, "--kwargs", args.kwargs)
    if args.int_input is not None and args.int_input <= 0:
        parser.error(f"--int-input must be positive, got {args.int_input}")
    args.inputs = [InputSpec(None, shape) for shape in args.input_shape]
    if args.inputs_json is not None:
        args.inputs += _named_inputs(parser, args.inputs_json)
    if not args.inputs:
        parser.error(
            "give the example input: --input-shape (once per positional input) "
            "and/or --inputs (named inputs)"
        )
    _cli.output_file(parser, "--out", args.out)
    if args.export_path is not None:
        _cli.output_file(parser, "--export", args.export_path)
    # A model spec is resolved in two steps: here, what can be told without running
    # the user's code or importing torch; in `_model_spec.factory`, the imports.
    args.spec = _model_spec.parse_spec(parser, "MODEL", args.target, args.config)
    _model_spec.check_spec(parser, "MODEL", args.spec, args.kwargs)
    _cli.state_dict_file(parser, "--state-dict", args.state_dict)
    return parser, args


class InputSpec(NamedTuple):
    """One example input: ``name`` (None: positional), its ``shape``, ``dtype``
    (``"float32"``, ``"int64"``, or None: token ids when the model has a vocabulary,
    else float32) and ``high`` (int64: ids in ``[0, high)``; None: the vocabulary)."""

    name: str | None
    shape: tuple
    dtype: str | None = None
    high: int | None = None


_INPUT_DTYPES = ("float32", "int64")


def _named_inputs(parser, text: str) -> list:
    """``--inputs`` JSON -> ``InputSpec`` list, every problem one ``error:`` line."""
    try:
        named = json.loads(text)
    except ValueError as exc:
        parser.error(f"--inputs must be a JSON object, got {text!r}: {exc}")
    if not isinstance(named, dict) or not named:
        parser.error(f"--inputs must be a non-empty JSON object of named inputs, got {text!r}")

    def shape_of(name, value):
        if not (
            isinstance(value, list)
            and value
            and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in value)
        ):
            parser.error(
                f"--inputs: {name!r}: the shape must be a list of positive ints, "
                f"got {json.dumps(value)}"
            )
        return tuple(value)

    specs = []
    for name, value in named.items():
        if not name.isidentifier():
            parser.error(f"--inputs: {name!r} is not a keyword argument name")
        if isinstance(value, list):
            specs.append(InputSpec(name, shape_of(name, value)))
            continue
        if not isinstance(value, dict) or "shape" not in value:
            parser.error(
                f'--inputs: {name!r} must be a shape or an object with a "shape", '
                f"got {json.dumps(value)}"
            )
        unknown = sorted(set(value) - {"shape", "dtype", "high"})
        if unknown:
            parser.error(
                f"--inputs: {name!r}: unknown key {unknown[0]!r} (keys: shape, dtype, high)"
            )
        dtype, high = value.get("dtype"), value.get("high")
        if dtype is not None and dtype not in _INPUT_DTYPES:
            parser.error(
                f"--inputs: {name!r}: dtype must be one of {', '.join(_INPUT_DTYPES)}, "
                f"got {json.dumps(dtype)}"
            )
        if high is not None and (
            dtype == "float32" or not isinstance(high, int) or isinstance(high, bool) or high <= 0
        ):
            parser.error(
                f'--inputs: {name!r}: "high" must be a positive int, for int64 '
                f"inputs only, got {json.dumps(high)}"
            )
        specs.append(InputSpec(name, shape_of(name, value["shape"]), dtype, high))
    return specs


def _draw_inputs(parser, specs, vocab):
    """The example inputs of ``specs``, drawn from one seeded stream in order:
    ``(args, kwargs, descriptions)``, float inputs float32 normals held in float64 (so
    the float64 check computes exactly what float32 approximates), int64 ids in
    ``[0, high)``, and a description of each for the output."""
    import numpy as np

    rng = np.random.default_rng(0)
    args, kwargs, described = [], {}, []
    for index, spec in enumerate(specs):
        label = spec.name or (f"input {index + 1}" if len(specs) > 1 else "input")
        dtype = spec.dtype or ("int64" if vocab else "float32")
        if dtype == "int64":
            high = spec.high or vocab
            if not high:
                parser.error(
                    f'--inputs: {spec.name!r} is int64 and needs "high" (ids in '
                    "[0, high)): neither --int-input nor the model gives a vocabulary"
                )
            value = rng.integers(0, high, spec.shape)
            described.append(
                f"token ids {tuple(spec.shape)} in [0, {high})"
                if len(specs) == 1
                else f"{label}: token ids {tuple(spec.shape)} in [0, {high})"
            )
        else:
            value = rng.standard_normal(spec.shape).astype("float32").astype("float64")
            described.append(
                f"input {tuple(spec.shape)}" if len(specs) == 1 else f"{label} {tuple(spec.shape)}"
            )
        if spec.name is None:
            args.append(value)
        else:
            kwargs[spec.name] = value
    return tuple(args), kwargs, described


def _read_state_dict(parser, path: str):
    """The tensors of ``path`` (safetensors, or ``torch.load(weights_only=True)``); a
    file torch cannot read is a usage error (exit 2), never a traceback."""
    import torch

    try:
        if path.endswith(".safetensors"):
            from safetensors.torch import load_file

            state = load_file(path)
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch's unpickler raises many kinds
        parser.error(
            f"--state-dict {path!r}: cannot be read: {type(exc).__name__}: {_cli._first_line(exc)}"
        )
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        nested = (
            [k for k, v in state.items() if isinstance(v, dict)] if isinstance(state, dict) else []
        )
        hint = (
            f" (it holds dicts under {nested[:3]}: pass the model's state_dict itself)"
            if nested
            else ""
        )
        parser.error(
            f"--state-dict {path!r}: expected a state_dict (names -> tensors), got "
            f"{type(state).__name__}{hint}"
        )
    return state


def build_model(parser, args, factory, state=None, seed: int = 0):
    """``factory.build()`` in eval mode (``_model_spec.build_module``), returning the
    output ``--output-key`` (or its default) chose alone, once ``_port`` has chosen it."""
    module = _model_spec.build_module(
        parser, args.spec, args.kwargs, factory, state=state, seed=seed
    ).eval()
    if args.selected_output is not None:
        _model_spec.select_output(module, args.selected_output)
    return module


def main(argv=None) -> int:
    parser, args = parse_args(argv)
    try:
        return _port(parser, args)
    except SystemExit:
        raise
    except Exception:  # a bug in the port, not bad input and not a parity failure
        traceback.print_exc()
        print(
            f"{parser.prog}: the port stopped on an unexpected error (above), before its "
            "checks completed; exit status 3",
            file=sys.stderr,
        )
        return 3


def _select_output(parser, args, module, outputs) -> tuple:
    """A forward returning a dict or ModelOutput (issue 55): ``pristine`` changed to
    return the one tensor compared (``_model_spec.output_key``'s rule, ``--output-key``),
    ``args.selected_output`` set for the models built later; a ModelOutput without
    ``--output-key`` stays whole (every field compared, as torch.export's program
    returns them). Returns the header's note; a refusal is one ``error:`` line."""
    if args.output_key is None and _model_spec.is_model_output(outputs):
        return ()
    try:
        key = _model_spec.output_key(outputs, args.output_key, args.spec.text, "compare")
    except ValueError as exc:
        parser.error(str(exc))
    if key is None:
        return ()
    args.selected_output = key
    _model_spec.select_output(module, key)
    how = "--output-key" if args.output_key is not None else "the default: --output-key"
    return (
        f"output: its forward's {key!r} alone ({how} chooses another), of the "
        f"{type(outputs).__name__} holding {', '.join(repr(k) for k in outputs)}",
    )


def _copier(parser, args, factory, pristine):
    """A function returning a new copy of ``pristine`` (the model as built, never run):
    ``copy.deepcopy``, or where a tensor attribute is no graph leaf (deepcopy refuses
    it: a cache filled by a forward, ``weight_norm``'s weight) a fresh build holding
    its ``state_dict``."""

    def fresh():
        try:
            return copy.deepcopy(pristine)
        except RuntimeError:
            module = build_model(parser, args, factory)
            module.load_state_dict(pristine.state_dict())
            return module

    return fresh


def _port(parser, args) -> int:
    import torch

    torch.set_num_threads(1)
    label = args.spec.text
    factory = _model_spec.factory(parser, "MODEL", args.spec, args.kwargs)
    state = _read_state_dict(parser, args.state_dict) if args.state_dict else None
    module = build_model(parser, args, factory, state)  # never run: see _copier
    fresh = _copier(parser, args, factory, module)
    vocab = args.int_input or _model_spec.token_vocab(module)
    inputs, named, described = _draw_inputs(parser, args.inputs, vocab)
    try:
        with torch.no_grad():
            outputs = fresh().double()(
                *(torch.from_numpy(a) for a in inputs),
                **{k: torch.from_numpy(v) for k, v in named.items()},
            )
    except Exception as exc:  # the user's model rejects the input: say so, don't guess
        shapes = [
            f"{spec.name}=" * bool(spec.name) + str(tuple(spec.shape)) for spec in args.inputs
        ]
        what = (
            f"an input of shape {shapes[0]}"
            if len(shapes) == 1 and not named
            else f"the inputs {', '.join(shapes)}"
        )
        parser.error(f"{label} rejects {what}: {type(exc).__name__}: {_cli._first_line(exc)}")
    output_notes = _select_output(parser, args, module, outputs)

    import jax  # the heavy part starts here, once the input is known to be good

    jax.config.update("jax_enable_x64", True)
    from parity_checks.nnx_interop import (
        Example,
        float64_leaves,
        is_captured,
        layer_table,
        nnx_port,
        port_parity,
        round_trip,
    )

    from jaxgrad.flax import conversion_notes, load_nnx, save_nnx
    from jaxgrad.parity import compare

    example = Example(inputs, named)
    failed = False
    runs = {}
    for dtype in ("float64", "float32"):
        try:
            run = runs[dtype] = port_parity(module, example, args.layout, dtype, fresh=fresh)
        except ValueError as exc:  # from_torch or to_nnx refuses a layer or an op, naming it
            parser.error(f"cannot convert {label} to flax.nnx: {exc}")
        report, captured = run.report, is_captured(run.model)
        if dtype == "float64":
            notes = (*factory.notes, *output_notes)
            _print_header(args, module, run.model, described, captured, notes)
            _print_conventions(run.model, captured, conversion_notes)
        if dtype == "float32":
            # the float64 run computed exactly what this one approximates (the float32
            # weights, input and cotangents cast up): the float32 verdict is calibrated
            # by torch's own float32 rounding against it
            report = compare(
                run.reference,
                run.candidate,
                reference64=float64_leaves(runs["float64"].reference),
                name=report.name,
            )
        passed = report.passed
        failed |= not passed
        print(
            f"\nparity {dtype}: output and {len(report.leaves) - 1} parameter gradients, "
            f"max abs err {report.max_abs_err:.2e}, max rel err {report.max_rel_err:.2e}: "
            f"{'PASS' if passed else 'FAIL'}"
        )
        if dtype == "float64":
            _print_float32_inside(run.float32_regions)
            _print_zeros(report)
        if dtype == "float32":
            _print_calibrated(report)
        if not passed:
            print(report.table())
        if dtype == "float32":
            break
        if captured:
            twin = run.nnx_module
            left = twin.program_layers()
            print(
                f"  captured with torch.export: {len(twin.layers)} stock nnx layers "
                f"(below), the rest one TorchProgram running torch's ATen program"
                + (f"; known layers left in it: {', '.join(left)}" if left else "")
            )
            if not twin.layers:
                continue
        with jax.default_matmul_precision("highest"):
            rows = layer_table(
                fresh().double(),
                run.nnx_module,
                example,
                run.channels_last,
                computed_in="float32" if run.float32_regions else None,
            )
        width = max([len(row["layer"]) for row in rows] + [5])
        print(f"  {'layer':<{width}} {'type':<18} {'max abs err':>11}  verdict")
        for row in rows:
            print(
                f"  {row['layer']:<{width}} {row['type']:<18} {row['max_abs_err']:>11.2e}  "
                f"{'PASS' if row['passed'] else 'FAIL'}"
            )
    proved, channels_last = runs["float32"].nnx_module, runs["float32"].channels_last
    metadata = {
        "source": label,
        "layout": "torch" if captured else args.layout,
        "kwargs": json.dumps(args.kwargs),
        "capture": "export" if captured else "layers",
    }
    if len(args.inputs) == 1 and args.inputs[0].name is None:
        metadata["input_shape"] = json.dumps(args.input_shape[0])
    else:
        metadata["inputs"] = json.dumps(
            [
                {"name": a.name, "shape": list(a.shape), "dtype": str(value.dtype)}
                for a, value in zip(args.inputs, (*inputs, *named.values()))
            ]
        )
    if args.spec.config is not None:
        metadata["config"] = json.dumps(args.spec.config)
    if args.selected_output is not None:
        metadata["output_key"] = args.selected_output
    save_nnx(proved, args.out, metadata=metadata)
    # reload as a user would: a fresh twin of a newly built model (other weights; a
    # captured program rebuilt from the same spec, its constants with it), then
    # load_nnx; it must hold every variable and compute the output bit for bit
    example32 = example.astype("float32")
    torch_args, torch_kwargs = example32.torch()
    fresh_twin, _, _ = nnx_port(
        build_model(parser, args, factory, seed=1).float(),
        args.layout,
        torch_args if captured else None,
        torch_kwargs if captured else None,
    )
    load_nnx(fresh_twin, args.out)
    reloaded = round_trip(proved, fresh_twin, example32.feed(channels_last))
    failed |= not reloaded.passed
    variables = sum(leaf.path.startswith("['variables']") for leaf in reloaded.leaves)
    print(
        f"\nsaved the float32 nnx state to {args.out}; reloaded into a fresh twin: "
        f"{variables} variables and the output bit-identical: "
        f"{'PASS' if reloaded.passed else 'FAIL'}"
    )
    if not reloaded.passed:
        print(reloaded.table())
    _print_load_lines(args, factory, example, captured)
    if args.export_path is not None:
        failed |= not _export_artifact(parser, args, fresh, vocab)
    return 1 if failed else 0


def _export_artifact(parser, args, fresh, vocab) -> bool:
    """``--export``: the float32 evaluation-mode program as a torch-free artifact,
    reloaded with ``load_exported`` and compared with torch at the example's batch size
    and one more (float32 verdicts calibrated by torch's float64 answer)."""
    import numpy as np
    import torch

    from jaxgrad.nn import from_torch, load_exported, save_exported
    from jaxgrad.parity import compare

    module = fresh().float().eval()
    inputs, named, _ = _draw_inputs(parser, args.inputs, vocab)
    as_torch = lambda v: torch.from_numpy(v.astype("float32") if v.dtype.kind == "f" else v)  # noqa: E731
    try:
        model, params, buffers = from_torch(
            module,
            tuple(as_torch(v) for v in inputs),
            capture="export",
            with_buffers=True,
            example_kwargs={k: as_torch(v) for k, v in named.items()} or None,
            dynamic_shapes=None if args.dynamic == "none" else args.dynamic,
        )
        save_exported(args.export_path, model, params, buffers or None)
    except (TypeError, ValueError) as exc:
        print(f"\n--export: cannot write the artifact: {exc}")
        return False
    artifact = load_exported(args.export_path)
    batch = args.inputs[0].shape[0] if args.inputs[0].shape else None
    sizes = [batch, batch + 1] if batch else [None]
    ok = True
    dynamic = (
        "every size torch kept dynamic symbolic"
        if args.dynamic == "auto"
        else "each input's first size symbolic, the others the example's"
    )
    if model.shapes.static:
        dynamic = f"static shapes: {model.shapes.static}"
    print(
        f"\nexported the float32 evaluation program to {args.export_path} ({dynamic}; "
        f"platforms {', '.join(artifact.platforms)}); reloaded with load_exported:"
    )
    for size in sizes:
        specs = [
            spec._replace(shape=(size, *spec.shape[1:]))
            if size and spec.shape and spec.shape[0] == batch
            else spec
            for spec in args.inputs
        ]
        x_args, x_named, _ = _draw_inputs(parser, specs, vocab)
        x32 = [as_torch(v) for v in x_args]
        k32 = {k: as_torch(v) for k, v in x_named.items()}
        with torch.no_grad():
            reference = module(*x32, **k32)
            module64 = fresh().double().eval()
            reference64 = module64(
                *(t.double() if t.is_floating_point() else t for t in x32),
                **{k: t.double() if t.is_floating_point() else t for k, t in k32.items()},
            )
        flat = lambda out: [
            np.asarray(v, dtype=np.float64)
            for v in (  # noqa: E731
                out.values()
                if isinstance(out, dict)
                else out
                if isinstance(out, (tuple, list))
                else [out]
            )
            if v is not None and hasattr(v, "shape")
        ]
        to_np = lambda out: (
            out.detach().numpy()
            if hasattr(out, "detach")
            # noqa: E731
            else {k: to_np(v) for k, v in out.items()}  # noqa: B023
            if isinstance(out, dict)
            else [to_np(v) for v in out]  # noqa: B023
            if isinstance(out, (tuple, list))
            else out
        )
        try:
            got = artifact(*(v.numpy() for v in x32), **{k: v.numpy() for k, v in k32.items()})
        except ValueError as exc:
            print(f"  batch {size}: refused: {exc}")
            ok = False
            continue
        report = compare(
            flat(to_np(reference)),
            flat(got),
            reference64=flat(to_np(reference64)),
            name=f"batch {size}",
        )
        ok &= report.passed
        print(
            f"  batch {size}: output max abs err {report.max_abs_err:.2e} against torch "
            f"float32: {'PASS' if report.passed else 'FAIL'}"
        )
        if not report.passed:
            print(report.table())
        if any(v.dtype.kind in "iu" for v in (*x_args, *x_named.values())):
            # the ids as a process with x64 off holds them: the artifact takes either
            ok &= _same_with_int32_ids(artifact, x32, k32, got, size, flat)
    print(f"  run it without torch: jaxgrad.nn.load_exported({args.export_path!r})(x)")
    return ok


def _same_with_int32_ids(artifact, x32, k32, got, size, flat) -> bool:
    """``--export`` of a token-id model: the artifact called with the ids as int32 (what
    a process with ``jax_enable_x64`` off makes of them) gives the int64 call's output
    bit for bit."""
    import numpy as np

    narrow = lambda t: t.numpy().astype(np.int32) if not t.is_floating_point() else t.numpy()  # noqa: E731
    try:
        again = artifact(*(narrow(v) for v in x32), **{k: narrow(v) for k, v in k32.items()})
    except (TypeError, ValueError) as exc:
        print(f"  batch {size}: int32 ids refused: {exc}")
        return False
    same = all(np.array_equal(a, b) for a, b in zip(flat(got), flat(again)))
    print(
        f"  batch {size}: int32 ids give the int64 ids' output bit for bit: "
        f"{'PASS' if same else 'FAIL'}"
    )
    return same


def _print_float32_inside(regions) -> None:
    """Where a float64 model's own code computes in float32, and the tier that follows
    (the zoo's rule and wording)."""
    if not regions:
        return
    regions = [path or "its top-level forward" for path in regions]
    shown = ", ".join(regions[:3]) + (f" and {len(regions) - 3} more" if len(regions) > 3 else "")
    print(
        f"  the float64 model computes in float32 where its own code casts (at {shown}): "
        "its float64 leaves are judged at the float32 tier, the tier of that arithmetic"
    )


def _print_zeros(report) -> None:
    """The float64 run's float32-tier leaves that are zero in exact arithmetic, passed
    at their neighbours' scale, each with its distance in units of that tier."""
    from jaxgrad.parity import RULE_ZERO, ZERO_IN_EXACT

    zeros = [leaf for leaf in report.leaves if leaf.passed and leaf.rule == RULE_ZERO]
    if not zeros:
        return
    count = "1 gradient" if len(zeros) == 1 else f"{len(zeros)} gradients"
    print(
        f"  {count} zero in exact arithmetic (float64 noise, at most {ZERO_IN_EXACT:g} of "
        "the neighbours' largest value) judged at the float32 tier of the neighbours' scale:"
    )
    width = max(len(leaf.path) for leaf in zeros)
    for leaf in zeros:
        print(f"    {leaf.path:<{width}}  twin {leaf.headroom:.1e} of the tier")


def _print_calibrated(report) -> None:
    """The float32 leaves outside the tier against torch's float32 that passed by
    ``compare``'s calibrated rule, by rule, each with both distances from float64."""
    from jaxgrad.parity import CALIBRATION_MULTIPLE

    calibrated = [leaf for leaf in report.leaves if leaf.passed and leaf.rule != "tier"]
    if not calibrated:
        return
    count = "1 float32 leaf" if len(calibrated) == 1 else f"{len(calibrated)} float32 leaves"
    print(
        f"  {count} outside the tier against torch's float32 "
        f"{'passes' if len(calibrated) == 1 else 'pass'} against torch's float64 answer on the same values (distances in units of "
        "the float32 tier): within the tier of it (float64 answer), or within "
        f"{CALIBRATION_MULTIPLE:g}x torch's own float32 distance (reference rounding); "
        "a gradient zero in exact arithmetic at its neighbours' scale:"
    )
    width = max(len(leaf.path) for leaf in calibrated)

    def tiers(value):  # two decimals, or two digits below 0.01 (a zero in exact arithmetic)
        return f"{value:.2f}" if value >= 0.01 or value == 0 else f"{value:.1e}"

    for leaf in calibrated:
        print(
            f"    {leaf.path:<{width}}  {leaf.rule:<24}  twin {tiers(leaf.headroom)}, "
            f"torch {tiers(leaf.reference_headroom)}"
        )


def _print_header(args, module, model, described, captured: bool, notes) -> None:
    if captured:
        nodes = len(model.train_program.nodes)
        modes = (
            "one program for both modes"
            if model.eval_program is model.train_program
            else f"{len(model.eval_program.nodes)} in eval mode"
        )
        how = (
            f"captured with torch.export: {nodes} ATen ops in train mode, {modes}; "
            "nnx layout: torch's"
        )
    else:
        how = f"nnx layout {args.layout}"
    inputs = described[0] if len(described) == 1 else f"inputs {', '.join(described)}"
    print(
        f"{args.spec.text}: {type(module).__name__}, {model.num_parameters():,} parameters, "
        f"{inputs}, {how}"
    )
    for note in notes:
        print(f"  {note}")
    print()


def _print_conventions(model, captured: bool, conversion_notes) -> None:
    if captured:
        print(
            "conventions mapped: none by layer: the captured program is torch's own core "
            "ATen ops, each mapped to JAX with torch's semantics"
        )
        return
    notes = conversion_notes(model)
    width = max([len(path) for path, _, _ in notes] + [5])
    print("conventions mapped:")
    for path, name, note in notes:
        print(f"  {path:<{width}} {name:<18} {note}")


def _print_load_lines(args, factory, example, captured: bool) -> None:
    target = args.spec.target
    imports = {"timm": "import timm", "transformers": "import transformers"}.get(
        args.spec.kind,
        "" if target.is_file else f"from {target.where} import {target.name.split('.')[0]}",
    )
    build = f"{factory.code}.eval()"
    if captured:

        def kind(value):
            return "int64 token ids" if value.dtype.kind in "iu" else "a float32 input"

        if len(example.args) == 1 and not example.kwargs:
            (value,) = example.args
            print(
                f"to load it (example: {kind(value)} of shape {tuple(value.shape)}, the "
                "shape it was captured for):"
            )
            call = "example=(example,)"
        else:
            names = [f"x{i + 1}" for i in range(len(example.args))]
            listed = [
                f"{name}: {kind(v)} of shape {tuple(v.shape)}"
                for name, v in (*zip(names, example.args), *example.kwargs.items())
            ]
            print(f"to load it (examples: {'; '.join(listed)}; the shapes it was captured for):")
            parts = [f"example=({', '.join(names)}{',' * (len(names) == 1)})"] if names else []
            if example.kwargs:
                parts.append(
                    "example_kwargs={" + ", ".join(f"{k!r}: {k}" for k in example.kwargs) + "}"
                )
            call = ", ".join(parts)
        build = _print_build(imports, build, args.selected_output)
        print(f"  nnx_module = jaxgrad.flax.to_nnx({build}, {call})")
    else:
        print("to load it:")
        build = _print_build(imports, build, args.selected_output)
        print(f"  nnx_module = jaxgrad.flax.to_nnx({build}, layout={args.layout!r})")
    print(f"  jaxgrad.flax.load_nnx(nnx_module, {args.out!r})")


def _print_build(imports: str, build: str, key: str | None) -> str:
    """The load lines' imports, and with a selected output (issue 55) the lines that
    make the module's forward return ``outputs[key]`` alone, as the port proved it;
    returns the expression ``to_nnx`` takes."""
    for line in (imports, "import functools" if key is not None else ""):
        if line:
            print(f"  {line}")
    if key is None:
        return build
    print(f"  module = {build}")
    for line in _model_spec.SELECT_CODE:
        print(f"  {line.format(key=key)}")
    return "module"


if __name__ == "__main__":
    sys.exit(main())
