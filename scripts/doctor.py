#!/usr/bin/env python
"""The convention doctor: find the first layer where a JAX port leaves torch, name why.

Demo sessions (float64, tiny models):

  --demo resnet     a ResNet port (jaxgrad, torch.fx-traced) with three planted
                    mistakes, diagnosed and fixed one after another;
  --demo optimizer  torch optimizers vs optax transformations that disagree on the
                    same gradients.

Your own model: ``REFERENCE`` is ``module:Class`` or ``path/to/file.py:Class`` of the
torch model (built with no arguments, seeded), ``--port`` a function
``module:function`` called with the torch module that returns the port:
``(model, params)`` or ``(model, params, buffers)`` for a jaxgrad model, an
``nnx.Module``, or ``(fn, params, names)``.

  python scripts/doctor.py mymodels:Net --port myport:build --input-shape 2,1,8,8

``--html PATH`` also writes what was diagnosed as one self-contained page: the
per-layer table (first diverging layer highlighted, each layer folded to its
per-leaf errors with log-scale bars against the tolerance), the ranked conventions
with their evidence, the environment.

  python scripts/doctor.py --demo resnet --html doctor.html

From Python: ``jaxgrad.doctor.diagnose(torch_module, port, example_input)``,
``jaxgrad.doctor.diagnose_optimizer(torch_optimizer, tx, grads)`` and
``jaxgrad.doctor.training_drift(reference_steps, port_steps)``.

Exit status: 0 when the port is clean (or the demo ran), 1 when it disagrees, 2 for
bad input.
"""

from __future__ import annotations

import argparse
import sys

import _cli


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reference", nargs="?",
                        help="module:Class or file.py:Class of the torch model")
    parser.add_argument("--port", metavar="MODULE:FUNCTION",
                        help="builds the port from the torch module")
    parser.add_argument("--input-shape", type=_cli.shape, metavar="N,C,H,W",
                        help="example input shape (normal samples, seed 0)")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                        help="the torch model's dtype and the tier (default float64)")
    parser.add_argument("--train", action="store_true",
                        help="compare in training mode (BatchNorm statistics)")
    parser.add_argument("--demo", choices=("resnet", "optimizer"), help="run a demo session")
    parser.add_argument("--html", metavar="PATH", help="also write the diagnosis as one "
                        "self-contained HTML page to PATH")
    args = parser.parse_args(argv)
    _cli.output_file(parser, "--html", args.html)
    if args.demo and (args.reference or args.port):
        parser.error("--demo takes no REFERENCE or --port")
    if not args.demo:
        if not args.reference or not args.port or not args.input_shape:
            parser.error("give --demo NAME, or REFERENCE with --port and --input-shape")
        targets = [(name, _cli.parse_target(parser, name, value))
                   for name, value in (("REFERENCE", args.reference), ("--port", args.port))]
        for name, target in targets:  # the forms first, then whether they exist
            _cli.check_target(parser, name, target)
    return parser, args


def _user_session(parser, args, sessions):
    import numpy as np
    import torch

    from jaxgrad.doctor import diagnose

    cls = _cli.load_object(parser, args.reference, "REFERENCE")
    build = _cli.load_object(parser, args.port, "--port")
    torch.manual_seed(0)
    module = cls().to(getattr(torch, args.dtype))
    port = build(module)
    buffers = None
    if isinstance(port, tuple) and len(port) == 3 and not callable(port[0]):
        port, buffers = port[:2], port[2]
    x = torch.from_numpy(np.random.default_rng(0).normal(size=args.input_shape)).to(
        getattr(torch, args.dtype))
    try:
        report = diagnose(module, port, x, buffers=buffers, train=args.train)
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report)
    sessions.append(_session(f"{args.reference} ported by {args.port}", report,
                             f"example input {args.input_shape}, {args.dtype}, normal "
                             f"samples (seed 0), {'train' if args.train else 'eval'} mode"))
    return 0 if report.clean else 1


def _session(title, report, note=""):
    from jaxgrad.html.doctor import Session

    return Session(title, report, note)


def _resnet_session(sessions):
    import dataclasses

    import numpy as np
    import torch

    import jaxgrad.nn as jnn
    from jaxgrad.doctor import diagnose
    from torchref.models import resnet

    torch.manual_seed(0)
    tm = resnet(dtype=torch.float64).eval()
    with torch.no_grad():  # non-trivial running statistics, as after training
        for m in tm.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.05, 0.2)
    model, params, buffers = jnn.from_torch(tm, with_buffers=True)
    x = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    layers = dict(model.layers)
    good_params = dict(params)
    # three planted mistakes, as a hand port from flax would make them
    w = np.asarray(params["conv1.weight"])
    params["conv1.weight"] = w.transpose(2, 3, 1, 0).reshape(w.shape)  # HWIO reshaped
    planted = dict(layers)
    planted["layer1.0.bn2"] = jnn.BatchNorm2d(8, eps=1e-6, dtype="float64")  # flax's eps
    planted["layer2.0.bn1"] = jnn.BatchNorm2d(16, momentum=0.9, dtype="float64")
    port = dataclasses.replace(model, layers=tuple(planted.items()))
    note = ("Planted: conv1 kernel reshaped from HWIO; layer1.0.bn2 eps=1e-6; "
            "layer2.0.bn1 momentum=0.9 (flax's meaning).")
    print(note + "\n")
    train = False
    for round_ in range(1, 7):
        report = diagnose(tm, (port, params), x, buffers=buffers, train=train)
        title = f"round {round_} ({'train' if report.train else 'eval'} mode)"
        print(f"--- {title}")
        print(report)
        sessions.append(_session(title, report, note))
        if report.clean:
            if not report.train:
                note = ("eval mode is clean; BatchNorm's running statistics only move in "
                        "training: diagnose again with train=True")
                print(f"\n({note})\n")
                train = True
                continue
            break
        path = report.first_layer
        note = f"fix: {path} as torch has it"
        print(f"\n{note}\n")
        planted[path] = layers[path]
        params.update({k: v for k, v in good_params.items() if k.startswith(path + ".")})
        port = dataclasses.replace(model, layers=tuple(planted.items()))
    return 0


def _optimizer_session(sessions):
    import numpy as np
    import optax
    import torch

    from jaxgrad.doctor import diagnose_optimizer

    rng = np.random.default_rng(0)
    shapes = [(3, 2), (2,)]
    start = [rng.normal(size=s) for s in shapes]
    grads = [[rng.normal(size=s) * 0.01 for s in shapes] for _ in range(5)]

    def session(title, make, tx, code):
        ps = [torch.nn.Parameter(torch.tensor(s)) for s in start]
        print(f"--- {title}\n    torch: {make.__doc__}\n    port:  {code}")
        report = diagnose_optimizer(make(ps), tx, grads)
        print(report)
        print()
        sessions.append(_session(title, report, f"torch: {make.__doc__}; port: {code}"))

    def adam(ps):
        """torch.optim.Adam(params, lr=1e-2, weight_decay=1e-2)"""
        return torch.optim.Adam(ps, lr=1e-2, weight_decay=1e-2)

    def adamw(ps):
        """torch.optim.AdamW(params, lr=1e-2)"""
        return torch.optim.AdamW(ps, lr=1e-2)

    def rmsprop(ps):
        """torch.optim.RMSprop(params, lr=1e-2, eps=1e-4)"""
        return torch.optim.RMSprop(ps, lr=1e-2, eps=1e-4)

    session("Adam with weight decay", adam, optax.adamw(1e-2, weight_decay=1e-2),
            "optax.adamw(1e-2, weight_decay=1e-2)")
    session("AdamW defaults", adamw, optax.adamw(1e-2), "optax.adamw(1e-2)")
    session("RMSprop", rmsprop, optax.rmsprop(1e-2, decay=0.99, eps=1e-4),
            "optax.rmsprop(1e-2, decay=0.99, eps=1e-4)")
    return 0


def main(argv=None) -> int:
    parser, args = parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_default_matmul_precision", "highest")
    import torch

    torch.set_num_threads(1)
    sessions = []
    if args.demo is None:
        code = _user_session(parser, args, sessions)
    else:
        code = (_resnet_session if args.demo == "resnet" else _optimizer_session)(sessions)
    if args.html and sessions:
        from jaxgrad.html.doctor import write_doctor_report

        write_doctor_report(args.html, sessions, versions={"torch": torch.__version__})
        print(f"wrote {args.html}")
    return code


if __name__ == "__main__":
    sys.exit(main())
