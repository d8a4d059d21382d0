#!/usr/bin/env python
"""Port a torch model to an idiomatic flax.nnx module, prove it, and save it.

Given ``module:Class`` of your torch model (importable from the current directory,
or ``path/to/file.py:Class``), an example input shape and an output path, it builds
the model (optionally loading a saved ``state_dict``), converts it with
``jaxgrad.flax.to_nnx``, checks the nnx twin's forward output and every
parameter gradient against torch in float64 and float32 (at the parity tiers),
prints a per-layer table and the conventions it mapped, saves the nnx state as
safetensors keyed by nnx paths, and reloads the file into a fresh twin
(``jaxgrad.flax.load_nnx``), which must hold every variable and give the output
bit for bit.

Exit status: 0 when the port passes; 1 when a parity check (or the reload) fails;
2 for bad input, found before any work where it can be (a missing file, module or
class, an unreadable --state-dict), each one ``error:`` line; 3 when the port
stopped on an unexpected error (a traceback follows: please report it).

Examples:
  python scripts/port.py mymodels:ResNet --input-shape 2,1,8,8 --out resnet_nnx.safetensors
  python scripts/port.py net.py:Net --input-shape 4,64 --state-dict net.pt --out net.safetensors
  python scripts/port.py mymodels:Tagger --input-shape 2,16 --int-input 100 --out tagger.safetensors
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback

import _cli


def parse_args(argv=None):
    """Parse and check everything the standard library can check, in a fraction of a
    second: the target (file, module, name), the weights file's structure, the paths."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", help="module:Class or path/to/file.py:Class of the torch "
                        "model (a class, or any callable returning an nn.Module)")
    parser.add_argument("--input-shape", type=_cli.shape, required=True, metavar="N,C,H,W",
                        help="example input shape, torch layout")
    parser.add_argument("--out", required=True, metavar="PATH", help="nnx state (.safetensors)")
    parser.add_argument("--state-dict", metavar="PATH",
                        help="weights to load first (.pt/.pth via torch.load, or .safetensors)")
    parser.add_argument("--kwargs", default="{}", metavar="JSON",
                        help="constructor keyword arguments as JSON (default: {})")
    parser.add_argument("--layout", default="NHWC", choices=["NHWC", "NCHW"],
                        help="input layout of the nnx module for image models (default NHWC, "
                             "flax's idiom)")
    parser.add_argument("--int-input", type=int, metavar="VOCAB",
                        help="integer inputs in [0, VOCAB) (token ids) instead of normals")
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
    # the user's code; in `build_model`, the import and the call. A factory namespace
    # (`pkg:name` resolved by a registry rather than an attribute) slots in at both.
    args.target = _cli.parse_target(parser, "target", args.target)
    _cli.check_target(parser, "target", args.target)
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
    """``factory(**kwargs)`` in eval mode, its weights from ``state`` when given
    (else torch's initialisation under ``torch.manual_seed(seed)``)."""
    import torch

    torch.manual_seed(seed)
    label = f"{args.target.where}:{args.target.name}"
    try:
        module = factory(**args.kwargs)
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


def _port(parser, args) -> int:
    import numpy as np
    import torch

    torch.set_num_threads(1)
    label = f"{args.target.where}:{args.target.name}"
    factory = _cli.load_object(parser, args.target)
    state = _read_state_dict(parser, args.state_dict) if args.state_dict else None
    module = build_model(parser, args, factory, state)
    rng = np.random.default_rng(0)
    if args.int_input:
        x = rng.integers(0, args.int_input, args.input_shape)
    else:
        x = rng.standard_normal(args.input_shape)
    try:
        with torch.no_grad():
            module.double()(torch.from_numpy(x if args.int_input else x.astype("float64")))
    except Exception as exc:  # the user's model rejects the input: say so, don't guess
        parser.error(f"{label} rejects an input of shape {args.input_shape}: {exc}")

    import jax  # the heavy part starts here, once the input is known to be good

    jax.config.update("jax_enable_x64", True)
    from jaxgrad.flax import conversion_notes, load_nnx, save_nnx
    from jaxgrad.nn import from_torch
    from parity_checks.nnx_interop import layer_table, nnx_port, port_parity, round_trip

    try:
        model, _ = from_torch(module)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"{label}: {type(module).__name__}, {model.num_parameters():,} parameters, "
          f"input {args.input_shape}, nnx layout {args.layout}\n")
    notes = conversion_notes(model)
    width = max([len(path) for path, _, _ in notes] + [5])
    print("conventions mapped:")
    for path, name, note in notes:
        print(f"  {path:<{width}} {name:<18} {note}")
    failed = False
    proved = channels_last = None
    for dtype in ("float64", "float32"):
        try:
            report, nnx_module, channels_last = port_parity(module, x, args.layout, dtype)
        except ValueError as exc:  # to_nnx refuses a layer, naming it
            parser.error(f"cannot convert {label} to flax.nnx: {exc}")
        failed |= not report.passed
        print(f"\nparity {dtype}: output and {len(report.leaves) - 1} parameter gradients, "
              f"max abs err {report.max_abs_err:.2e}, max rel err {report.max_rel_err:.2e}: "
              f"{'PASS' if report.passed else 'FAIL'}")
        if not report.passed:
            print(report.table())
        if dtype == "float64":
            with jax.default_matmul_precision("highest"):
                rows = layer_table(module.double(), nnx_module, x, channels_last)
            width = max([len(row["layer"]) for row in rows] + [5])
            print(f"  {'layer':<{width}} {'type':<18} {'max abs err':>11}  verdict")
            for row in rows:
                print(f"  {row['layer']:<{width}} {row['type']:<18} {row['max_abs_err']:>11.2e}  "
                      f"{'PASS' if row['passed'] else 'FAIL'}")
        else:
            proved = nnx_module
    save_nnx(proved, args.out, metadata={"source": label, "layout": args.layout,
                                         "input_shape": json.dumps(args.input_shape)})
    # reload as a user would: a fresh twin of a newly built model (other weights), then
    # load_nnx; it must hold every variable and compute the output bit for bit
    fresh, _ = nnx_port(build_model(parser, args, factory, seed=1).float(), args.layout)
    load_nnx(fresh, args.out)
    feed = x.astype("float32") if np.issubdtype(x.dtype, np.floating) else x
    feed = jax.device_put(np.moveaxis(feed, 1, -1) if channels_last else feed)
    reloaded = round_trip(proved, fresh, feed)
    failed |= not reloaded.passed
    variables = sum(leaf.path.startswith("['variables']") for leaf in reloaded.leaves)
    print(f"\nsaved the float32 nnx state to {args.out}; reloaded into a fresh twin: "
          f"{variables} variables and the output bit-identical: "
          f"{'PASS' if reloaded.passed else 'FAIL'}")
    if not reloaded.passed:
        print(reloaded.table())
    call = ", ".join(f"{k}={v!r}" for k, v in args.kwargs.items())
    print(f"to load it:\n"
          f"  nnx_module = jaxgrad.flax.to_nnx({args.target.name}({call}).eval(), "
          f"layout={args.layout!r})\n"
          f"  jaxgrad.flax.load_nnx(nnx_module, {args.out!r})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
