#!/usr/bin/env python
"""Port a torch model to an idiomatic flax.nnx module, prove it, and save it.

Given a model spec (your own class or factory, or a torchvision, timm or Hugging Face
model built with random weights: nothing is downloaded), an example input shape and
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
class, library or model name, a --config that is not a JSON object or the config
class does not know, an unreadable --state-dict), each one ``error:`` line; 3 when
the port stopped on an unexpected error (a traceback follows: please report it).

Examples:
  python scripts/port.py mymodels:ResNet --input-shape 2,1,8,8 --out resnet_nnx.safetensors
  python scripts/port.py net.py:Net --input-shape 4,64 --state-dict net.pt --out net.safetensors
  python scripts/port.py mymodels:Tagger --input-shape 2,16 --int-input 100 --out tagger.safetensors
  python scripts/port.py torchvision.models:resnet18 --kwargs '{"num_classes": 10}' \
      --input-shape 2,3,32,32 --out resnet18.safetensors
  python scripts/port.py timm:convnext_atto --kwargs '{"num_classes": 10}' \
      --input-shape 2,3,32,32 --out convnext.safetensors
  python scripts/port.py transformers:BertModel --input-shape 2,8 --out bert.safetensors \
      --config '{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                 "intermediate_size": 128, "vocab_size": 1000}'
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback

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
    parser.add_argument("target", metavar="MODEL",
                        help="the model spec: module:Name or path/to/file.py:Name (a class, "
                        "or any callable returning an nn.Module), torchvision.models:NAME, "
                        "timm:NAME or transformers:CLASS (see below)")
    parser.add_argument("--input-shape", type=_cli.shape, required=True, metavar="N,C,H,W",
                        help="example input shape, torch layout (token ids: N,L)")
    parser.add_argument("--out", required=True, metavar="PATH", help="nnx state (.safetensors)")
    parser.add_argument("--state-dict", metavar="PATH",
                        help="weights to load first (.pt/.pth via torch.load, or .safetensors)")
    parser.add_argument("--kwargs", default="{}", metavar="JSON",
                        help="keyword arguments of the class or factory as JSON (default: {}), "
                             'e.g. \'{"num_classes": 10}\'')
    parser.add_argument("--config", metavar="JSON",
                        help="transformers:CLASS only: the config's fields as JSON, e.g. "
                             '\'{"hidden_size": 64, "num_hidden_layers": 2}\'')
    parser.add_argument("--layout", default="NHWC", choices=["NHWC", "NCHW"],
                        help="input layout of the nnx module for image models (default NHWC, "
                             "flax's idiom; a model captured with torch.export keeps torch's)")
    parser.add_argument("--int-input", type=int, metavar="VOCAB",
                        help="integer inputs in [0, VOCAB) (token ids) instead of normals "
                             "(default for a transformers model taking input_ids: its "
                             "config's vocab_size)")
    args = parser.parse_args(argv)
    try:
        args.kwargs = json.loads(args.kwargs)
        if not isinstance(args.kwargs, dict):
            raise ValueError
    except ValueError:
        parser.error(f"--kwargs must be a JSON object, got {args.kwargs!r}")
    if args.int_input is not None and args.int_input <= 0:
        parser.error(f"--int-input must be positive, got {args.int_input}")
    _cli.output_file(parser, "--out", args.out)
    # A model spec is resolved in two steps: here, what can be told without running
    # the user's code or importing torch; in `_model_spec.factory`, the imports.
    args.spec = _model_spec.parse_spec(parser, "MODEL", args.target, args.config)
    _model_spec.check_spec(parser, "MODEL", args.spec, args.kwargs)
    _cli.state_dict_file(parser, "--state-dict", args.state_dict)
    return parser, args


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
        parser.error(f"--state-dict {path!r}: cannot be read: {type(exc).__name__}: "
                     f"{_cli._first_line(exc)}")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        nested = [k for k, v in state.items() if isinstance(v, dict)] if isinstance(
            state, dict) else []
        hint = (f" (it holds dicts under {nested[:3]}: pass the model's state_dict itself)"
                if nested else "")
        parser.error(f"--state-dict {path!r}: expected a state_dict (names -> tensors), got "
                     f"{type(state).__name__}{hint}")
    return state


def build_model(parser, args, factory, state=None, seed: int = 0):
    """``factory.build()`` in eval mode, its weights from ``state`` when given (else
    the library's initialisation under ``torch.manual_seed(seed)``)."""
    import torch

    torch.manual_seed(seed)
    label = args.spec.text
    try:
        module = factory.build()
    except TypeError as exc:
        parser.error(f"cannot build {label} with --kwargs {args.kwargs}: {exc}")
    if not isinstance(module, torch.nn.Module):
        parser.error(f"{label}() returned a {type(module).__name__}, not a torch.nn.Module")
    if state is not None:
        try:
            module.load_state_dict(state)
        except RuntimeError as exc:  # torch lists every problem, one per line: keep one line
            problems = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            parser.error(f"--state-dict does not fit {label}: {problems}")
    return module.eval()


def main(argv=None) -> int:
    parser, args = parse_args(argv)
    try:
        return _port(parser, args)
    except SystemExit:
        raise
    except Exception:  # a bug in the port, not bad input and not a parity failure
        traceback.print_exc()
        print(f"{parser.prog}: the port stopped on an unexpected error (above), before its "
              "checks completed; exit status 3", file=sys.stderr)
        return 3


def _describe_input(x, vocab) -> str:
    shape = tuple(x.shape)
    return f"token ids {shape} in [0, {vocab})" if vocab else f"input {shape}"


def _port(parser, args) -> int:
    import numpy as np
    import torch

    torch.set_num_threads(1)
    label = args.spec.text
    factory = _model_spec.factory(parser, "MODEL", args.spec, args.kwargs)
    state = _read_state_dict(parser, args.state_dict) if args.state_dict else None
    module = build_model(parser, args, factory, state)
    vocab = args.int_input or _model_spec.token_vocab(module)
    rng = np.random.default_rng(0)
    if vocab:
        x = rng.integers(0, vocab, args.input_shape)
    else:  # float32 values: the float64 check computes exactly what float32 approximates
        x = rng.standard_normal(args.input_shape).astype("float32").astype("float64")
    try:
        with torch.no_grad():
            module.double()(torch.from_numpy(x if vocab else x.astype("float64")))
    except Exception as exc:  # the user's model rejects the input: say so, don't guess
        parser.error(f"{label} rejects an input of shape {args.input_shape}: "
                     f"{type(exc).__name__}: {_cli._first_line(exc)}")

    import jax  # the heavy part starts here, once the input is known to be good

    jax.config.update("jax_enable_x64", True)
    from jaxgrad.flax import conversion_notes, load_nnx, save_nnx
    from jaxgrad.parity import compare
    from parity_checks.nnx_interop import (is_captured, layer_table, nnx_port, port_parity,
                                           round_trip)

    failed = False
    runs = {}
    for dtype in ("float64", "float32"):
        try:
            run = runs[dtype] = port_parity(module, x, args.layout, dtype)
        except ValueError as exc:  # from_torch or to_nnx refuses a layer or an op, naming it
            parser.error(f"cannot convert {label} to flax.nnx: {exc}")
        report, captured = run.report, is_captured(run.model)
        if dtype == "float64":
            _print_header(args, module, run.model, x, vocab, captured, factory.notes)
            _print_conventions(run.model, captured, conversion_notes)
        if dtype == "float32":
            # the float64 run computed exactly what this one approximates (the float32
            # weights, input and cotangents cast up): the float32 verdict is calibrated
            # by torch's own float32 rounding against it
            report = compare(run.reference, run.candidate,
                             reference64=runs["float64"].reference, name=report.name)
        passed = report.passed
        failed |= not passed
        print(f"\nparity {dtype}: output and {len(report.leaves) - 1} parameter gradients, "
              f"max abs err {report.max_abs_err:.2e}, max rel err {report.max_rel_err:.2e}: "
              f"{'PASS' if passed else 'FAIL'}")
        if dtype == "float32":
            _print_calibrated(report)
        if not passed:
            print(report.table())
        if dtype == "float32":
            break
        if captured:
            twin = run.nnx_module
            left = twin.program_layers()
            print(f"  captured with torch.export: {len(twin.layers)} stock nnx layers "
                  f"(below), the rest one TorchProgram running torch's ATen program"
                  + (f"; known layers left in it: {', '.join(left)}" if left else ""))
            if not twin.layers:
                continue
        with jax.default_matmul_precision("highest"):
            rows = layer_table(module.double(), run.nnx_module, x, run.channels_last)
        width = max([len(row["layer"]) for row in rows] + [5])
        print(f"  {'layer':<{width}} {'type':<18} {'max abs err':>11}  verdict")
        for row in rows:
            print(f"  {row['layer']:<{width}} {row['type']:<18} {row['max_abs_err']:>11.2e}  "
                  f"{'PASS' if row['passed'] else 'FAIL'}")
    proved, channels_last = runs["float32"].nnx_module, runs["float32"].channels_last
    metadata = {"source": label, "layout": "torch" if captured else args.layout,
                "input_shape": json.dumps(args.input_shape), "kwargs": json.dumps(args.kwargs),
                "capture": "export" if captured else "layers"}
    if args.spec.config is not None:
        metadata["config"] = json.dumps(args.spec.config)
    save_nnx(proved, args.out, metadata=metadata)
    # reload as a user would: a fresh twin of a newly built model (other weights; a
    # captured program rebuilt from the same spec, its constants with it), then
    # load_nnx; it must hold every variable and compute the output bit for bit
    feed = x.astype("float32") if np.issubdtype(x.dtype, np.floating) else x
    fresh, _, _ = nnx_port(build_model(parser, args, factory, seed=1).float(), args.layout,
                           (torch.from_numpy(feed),) if captured else None)
    load_nnx(fresh, args.out)
    feed = jax.device_put(np.moveaxis(feed, 1, -1) if channels_last else feed)
    reloaded = round_trip(proved, fresh, feed)
    failed |= not reloaded.passed
    variables = sum(leaf.path.startswith("['variables']") for leaf in reloaded.leaves)
    print(f"\nsaved the float32 nnx state to {args.out}; reloaded into a fresh twin: "
          f"{variables} variables and the output bit-identical: "
          f"{'PASS' if reloaded.passed else 'FAIL'}")
    if not reloaded.passed:
        print(reloaded.table())
    _print_load_lines(args, factory, x, captured)
    return 1 if failed else 0


def _print_calibrated(report) -> None:
    """The float32 leaves outside the tier against torch's float32 that passed by
    ``compare``'s calibrated rule, by rule, each with both distances from float64."""
    from jaxgrad.parity import CALIBRATION_MULTIPLE

    calibrated = [leaf for leaf in report.leaves if leaf.passed and leaf.rule != "tier"]
    if not calibrated:
        return
    count = ("1 float32 leaf" if len(calibrated) == 1
             else f"{len(calibrated)} float32 leaves")
    print(f"  {count} outside the tier against torch's float32 "
          f"{'passes' if len(calibrated) == 1 else 'pass'} against torch's float64 answer on the same values (distances in units of "
          "the float32 tier): within the tier of it (float64 answer), or within "
          f"{CALIBRATION_MULTIPLE:g}x torch's own float32 distance (reference rounding); "
          "a gradient zero in exact arithmetic at its neighbours' scale:")
    width = max(len(leaf.path) for leaf in calibrated)

    def tiers(value):  # two decimals, or two digits below 0.01 (a zero in exact arithmetic)
        return f"{value:.2f}" if value >= 0.01 or value == 0 else f"{value:.1e}"

    for leaf in calibrated:
        print(f"    {leaf.path:<{width}}  {leaf.rule:<24}  twin {tiers(leaf.headroom)}, "
              f"torch {tiers(leaf.reference_headroom)}")


def _print_header(args, module, model, x, vocab, captured: bool, notes) -> None:
    if captured:
        nodes = len(model.train_program.nodes)
        modes = ("one program for both modes" if model.eval_program is model.train_program
                 else f"{len(model.eval_program.nodes)} in eval mode")
        how = (f"captured with torch.export: {nodes} ATen ops in train mode, {modes}; "
               "nnx layout: torch's")
    else:
        how = f"nnx layout {args.layout}"
    print(f"{args.spec.text}: {type(module).__name__}, {model.num_parameters():,} parameters, "
          f"{_describe_input(x, vocab)}, {how}")
    for note in notes:
        print(f"  {note}")
    print()


def _print_conventions(model, captured: bool, conversion_notes) -> None:
    if captured:
        print("conventions mapped: none by layer: the captured program is torch's own core "
              "ATen ops, each mapped to JAX with torch's semantics")
        return
    notes = conversion_notes(model)
    width = max([len(path) for path, _, _ in notes] + [5])
    print("conventions mapped:")
    for path, name, note in notes:
        print(f"  {path:<{width}} {name:<18} {note}")


def _print_load_lines(args, factory, x, captured: bool) -> None:
    target = args.spec.target
    imports = {"timm": "import timm", "transformers": "import transformers"}.get(
        args.spec.kind, "" if target.is_file else
        f"from {target.where} import {target.name.split('.')[0]}")
    build = f"{factory.code}.eval()"
    if captured:
        kind = "int64 token ids" if x.dtype.kind in "iu" else "a float32 input"
        print(f"to load it (example: {kind} of shape {tuple(x.shape)}, the shape it was "
              "captured for):")
        if imports:
            print(f"  {imports}")
        print(f"  nnx_module = jaxgrad.flax.to_nnx({build}, example=(example,))")
    else:
        print("to load it:")
        if imports:
            print(f"  {imports}")
        print(f"  nnx_module = jaxgrad.flax.to_nnx({build}, layout={args.layout!r})")
    print(f"  jaxgrad.flax.load_nnx(nnx_module, {args.out!r})")


if __name__ == "__main__":
    sys.exit(main())
