#!/usr/bin/env python
"""Port a torch model to an idiomatic flax.nnx module, prove it, and save it.

Given ``module:Class`` of your torch model (importable from the current directory,
or ``path/to/file.py:Class``), an example input shape and an output path, it builds
the model (optionally loading a saved ``state_dict``), converts it with
``jaxgrad.flax.to_nnx``, checks the nnx twin's forward output and every
parameter gradient against torch in float64 and float32 (at the parity tiers),
prints a per-layer table and the conventions it mapped, and saves the nnx state
as safetensors keyed by nnx paths (``jaxgrad.flax.load_nnx`` reads it back).

Exit status: 0 when the port passes, 1 when a parity check fails, 2 for bad input.

Examples:
  python scripts/port.py mymodels:ResNet --input-shape 2,1,8,8 --out resnet_nnx.safetensors
  python scripts/port.py net.py:Net --input-shape 4,64 --state-dict net.pt --out net.safetensors
  python scripts/port.py mymodels:Tagger --input-shape 2,16 --int-input 100 --out tagger.safetensors
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import _cli




def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", help="module:Class or path/to/file.py:Class of the torch model")
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
    if ":" not in args.target:
        parser.error(f"target {args.target!r} must be module:Class or file.py:Class")
    try:
        args.kwargs = json.loads(args.kwargs)
        if not isinstance(args.kwargs, dict):
            raise ValueError
    except ValueError:
        parser.error(f"--kwargs must be a JSON object, got {args.kwargs!r}")
    if args.state_dict and not os.path.isfile(args.state_dict):
        parser.error(f"--state-dict {args.state_dict!r} does not exist")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
        parser.error(f"--out {args.out!r}: directory {out_dir!r} does not exist or is not writable")
    if args.int_input is not None and args.int_input <= 0:
        parser.error(f"--int-input must be positive, got {args.int_input}")
    return parser, args




def main(argv=None) -> int:
    parser, args = parse_args(argv)
    import numpy as np
    import torch

    torch.set_num_threads(1)
    import jax

    jax.config.update("jax_enable_x64", True)
    from jaxgrad.flax import conversion_notes, save_nnx
    from jaxgrad.nn import from_torch
    from parity_checks.nnx_interop import layer_table, port_parity

    cls = _cli.load_object(parser, args.target)
    torch.manual_seed(0)  # reproducible weights when no --state-dict replaces them
    try:
        module = cls(**args.kwargs)
    except TypeError as exc:
        parser.error(f"cannot build {args.target} with --kwargs {args.kwargs}: {exc}")
    if args.state_dict:
        if args.state_dict.endswith(".safetensors"):
            from safetensors.torch import load_file
            state = load_file(args.state_dict)
        else:
            state = torch.load(args.state_dict, map_location="cpu", weights_only=True)
        try:
            module.load_state_dict(state)
        except RuntimeError as exc:
            parser.error(f"--state-dict does not fit {args.target}: {exc}")
    module.eval()
    rng = np.random.default_rng(0)
    if args.int_input:
        x = rng.integers(0, args.int_input, args.input_shape)
    else:
        x = rng.standard_normal(args.input_shape)
    try:
        with torch.no_grad():
            module.double()(torch.from_numpy(x if args.int_input else x.astype("float64")))
    except Exception as exc:  # the user's model rejects the input: say so, don't guess
        parser.error(f"{args.target} rejects an input of shape {args.input_shape}: {exc}")
    try:
        model, _ = from_torch(module)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"{args.target}: {type(module).__name__}, {model.num_parameters():,} parameters, "
          f"input {args.input_shape}, nnx layout {args.layout}\n")
    notes = conversion_notes(model)
    width = max([len(path) for path, _, _ in notes] + [5])
    print("conventions mapped:")
    for path, name, note in notes:
        print(f"  {path:<{width}} {name:<18} {note}")
    failed = False
    nnx_float32 = None
    for dtype in ("float64", "float32"):
        report, nnx_module = port_parity(module, x, args.layout, dtype)
        failed |= not report.passed
        print(f"\nparity {dtype}: output and {len(report.leaves) - 1} parameter gradients, "
              f"max abs err {report.max_abs_err:.2e}, max rel err {report.max_rel_err:.2e}: "
              f"{'PASS' if report.passed else 'FAIL'}")
        if not report.passed:
            print(report.table())
        if dtype == "float64":
            import jax.numpy as jnp  # noqa: F401
            with jax.default_matmul_precision("highest"):
                rows = layer_table(module.double(), nnx_module, x, args.layout)
            width = max([len(row["layer"]) for row in rows] + [5])
            print(f"  {'layer':<{width}} {'type':<18} {'max abs err':>11}  verdict")
            for row in rows:
                print(f"  {row['layer']:<{width}} {row['type']:<18} {row['max_abs_err']:>11.2e}  "
                      f"{'PASS' if row['passed'] else 'FAIL'}")
        else:
            nnx_float32 = nnx_module
    save_nnx(nnx_float32, args.out, metadata={"source": args.target, "layout": args.layout,
                                              "input_shape": json.dumps(args.input_shape)})
    cls_name = args.target.rpartition(":")[2]
    print(f"\nsaved the float32 nnx state to {args.out}; to load it:\n"
          f"  nnx_module = jaxgrad.flax.to_nnx({cls_name}(), layout={args.layout!r})\n"
          f"  jaxgrad.flax.load_nnx(nnx_module, {args.out!r})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
