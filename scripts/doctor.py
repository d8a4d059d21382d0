#!/usr/bin/env python
"""The convention doctor: find the first layer where a JAX port leaves torch, name why.

Demo sessions (float64, tiny models):

  --demo resnet     a ResNet port (jaxgrad, torch.fx-traced) with three planted
                    mistakes, diagnosed and fixed one after another;
  --demo ports      a transformer block ported by hand as a plain JAX function with
                    flax's names and defaults (eps 1e-6, the tanh GELU): the doctor
                    finds torch's parameters and modules among its values;
  --demo optimizer  torch optimizers vs optax transformations that disagree on the
                    same gradients.

Your own model: ``REFERENCE`` is ``module:Class`` or ``path/to/file.py:Class`` of the
torch model (built with no arguments, seeded), ``--port`` one of

- a function ``module:build`` called with the torch module that returns the port:
  ``(model, params)`` or ``(model, params, buffers)`` for a jaxgrad model, an
  ``nnx.Module`` (stock layers or a custom one with its own ``__call__``), an
  equinox-style pytree module, ``(fn, params)`` for ``fn(params, x)``, any callable
  ``fn(x)``, or ``(fn, params, names)``;
- a plain ``fn(params, x)`` with ``--params module:convert``: ``convert(torch_module)``
  returns its params pytree (or ``--params`` names the pytree itself);
- an ``nnx.Module`` or pytree module instance, used as it is.

A port that is not a jaxgrad model is traced: its parameters are found by value
among torch's and each torch module's output among the port's values (docs/doctor.md).

  python scripts/doctor.py mymodels:Net --port myport:build --input-shape 2,1,8,8
  python scripts/doctor.py mymodels:Net --port myport:forward --params myport:convert \
      --input-shape 2,8
  python scripts/doctor.py mymodels:TokenNet --port myport:build --input-shape 2,16 \
      --int-input 1000                       # token ids in [0, 1000), int64

``--html PATH`` also writes what was diagnosed as one self-contained page: the
per-layer table (first diverging layer highlighted, each layer folded to its
per-leaf errors with log-scale bars against the tolerance), the ranked conventions
with their evidence, the environment.

  python scripts/doctor.py --demo resnet --html doctor.html

From Python: ``jaxgrad.doctor.diagnose(torch_module, port, example_input)``,
``jaxgrad.doctor.diagnose_optimizer(torch_optimizer, tx, grads)`` and
``jaxgrad.doctor.training_drift(reference_steps, port_steps)``.

``--env`` checks the environment instead: the installed jax/jaxlib against the
canaries for their known bugs (wrong results, crashes: ``jaxgrad.backend_canaries``,
each in a child process), one line per bug found with its issue and what to do
(docs/measurements.md, "The backend's known bugs"):

  .venv/bin/python scripts/doctor.py --env

Exit status: 0 when the port is clean (or the demo ran, or --env found no known
bug), 1 when it disagrees (or --env found one), 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys

import _cli


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "reference", nargs="?", help="module:Class or file.py:Class of the torch model"
    )
    parser.add_argument(
        "--port",
        metavar="MODULE:NAME",
        help="builds the port from the torch module; or fn(params, x) with "
        "--params; or an nnx.Module / pytree module instance",
    )
    parser.add_argument(
        "--params",
        metavar="MODULE:NAME",
        help="the params of a --port fn(params, x): a function called with "
        "the torch module that returns them, or the pytree itself",
    )
    parser.add_argument(
        "--input-shape",
        type=_cli.shape,
        metavar="N,C,H,W",
        help="example input shape (normal samples, seed 0)",
    )
    parser.add_argument(
        "--int-input",
        type=int,
        metavar="VOCAB",
        help="integer inputs in [0, VOCAB) (int64 token ids, seed 0) instead "
        "of normals (default for a transformers model taking input_ids: "
        "its config's vocab_size), as scripts/port.py takes them",
    )
    parser.add_argument(
        "--dtype",
        choices=("float64", "float32"),
        default="float64",
        help="the torch model's dtype and the tier (default float64)",
    )
    parser.add_argument(
        "--train", action="store_true", help="compare in training mode (BatchNorm statistics)"
    )
    parser.add_argument(
        "--demo", choices=("resnet", "ports", "optimizer"), help="run a demo session"
    )
    parser.add_argument(
        "--env",
        action="store_true",
        help="check the environment: run the canaries for the installed jax/jaxlib's "
        "known bugs and name any found (exit 1 when one is)",
    )
    parser.add_argument(
        "--html",
        metavar="PATH",
        help="also write the diagnosis as one self-contained HTML page to PATH",
    )
    args = parser.parse_args(argv)
    _cli.output_file(parser, "--html", args.html)
    _cli.at_least(parser, args, 1, "int_input")
    if args.env:
        if args.demo or args.reference or args.port or args.params or args.html:
            parser.error("--env takes no REFERENCE, --port, --params, --demo or --html")
        return parser, args
    if args.demo and (args.reference or args.port or args.params):
        parser.error("--demo takes no REFERENCE, --port or --params")
    if args.demo and args.int_input:
        parser.error("--demo takes no --int-input (a demo makes its own inputs)")
    if not args.demo:
        if not args.reference or not args.port or not args.input_shape:
            parser.error("give --demo NAME, or REFERENCE with --port and --input-shape")
        targets = [
            (name, _cli.parse_target(parser, name, value))
            for name, value in (
                ("REFERENCE", args.reference),
                ("--port", args.port),
                ("--params", args.params),
            )
            if value is not None
        ]
        for name, target in targets:  # the forms first, then whether they exist
            _cli.check_target(parser, name, target)
    return parser, args


def _user_session(parser, args, sessions):
    import numpy as np
    import torch

    from jaxgrad.doctor import diagnose

    cls = _cli.load_object(parser, args.reference, "REFERENCE")
    target = _cli.load_object(parser, args.port, "--port")
    torch.manual_seed(0)
    module = cls().to(getattr(torch, args.dtype))
    port = _build_port(parser, args, target, module)
    buffers = None
    # (model, params, buffers), not (fn, params, names): a jaxgrad model is callable too,
    # but its third item holds arrays where names holds strings
    if (
        isinstance(port, tuple)
        and len(port) == 3
        and (
            not callable(port[0])
            or (isinstance(port[2], dict) and not all(isinstance(v, str) for v in port[2].values()))
        )
    ):
        port, buffers = port[:2], port[2]
    import _model_spec

    vocab = args.int_input or _model_spec.token_vocab(module)
    rng = np.random.default_rng(0)
    if vocab:  # token ids: torch's embeddings take int64 (Long) indices
        x = torch.from_numpy(rng.integers(0, vocab, args.input_shape, dtype=np.int64))
    else:
        x = torch.from_numpy(rng.normal(size=args.input_shape)).to(getattr(torch, args.dtype))
    try:
        report = diagnose(module, port, x, buffers=buffers, train=args.train)
    except (ValueError, TypeError) as exc:
        hint = (
            " (token ids? give --int-input VOCAB for int64 inputs in [0, VOCAB))"
            if not vocab
            and "rejects the example input" in str(exc)
            and ("Long" in str(exc) or "indices" in str(exc))
            else ""
        )
        print(f"error: {exc}{hint}", file=sys.stderr)
        return 2
    print(report)
    sessions.append(
        _session(
            f"{args.reference} ported by {args.port}",
            report,
            f"example input {args.input_shape}, "
            + (f"int64 token ids in [0, {vocab})" if vocab else f"{args.dtype}, normal samples")
            + f" (seed 0), {'train' if args.train else 'eval'} mode",
        )
    )
    return 0 if report.clean else 1


def _build_port(parser, args, target, module):
    """The port ``--port`` (and ``--params``) name: see the module docstring."""
    import inspect

    if args.params:
        params = _cli.load_object(parser, args.params, "--params")
        if inspect.isfunction(params) or inspect.ismethod(params):
            params = params(module)
        return target, params
    if inspect.isfunction(target) or inspect.isclass(target) or inspect.ismethod(target):
        return target(module)  # a builder
    return target  # an nnx.Module or pytree module instance


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
    note = (
        "Planted: conv1 kernel reshaped from HWIO; layer1.0.bn2 eps=1e-6; "
        "layer2.0.bn1 momentum=0.9 (flax's meaning)."
    )
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
                note = (
                    "eval mode is clean; BatchNorm's running statistics only move in "
                    "training: diagnose again with train=True"
                )
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


def _ports_session(sessions):
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from jaxgrad.doctor import diagnose

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = torch.nn.LayerNorm(8)
            self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)
            self.ln2, self.fc1 = torch.nn.LayerNorm(8), torch.nn.Linear(8, 16)
            self.act, self.fc2 = torch.nn.GELU(), torch.nn.Linear(16, 8)

        def forward(self, x):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            return x + self.fc2(self.act(self.fc1(self.ln2(x))))

    torch.manual_seed(0)
    tm = Block().to(torch.float64).eval()
    sd = {k: v.detach().numpy() for k, v in tm.state_dict().items()}

    def dense(w, b):  # flax's DenseGeneral: kernel (in, heads, head_dim)
        return {"kernel": w.T.reshape(8, 2, 4), "bias": b.reshape(2, 4)}

    q, k, v = np.split(sd["attn.in_proj_weight"], 3)
    bq, bk, bv = np.split(sd["attn.in_proj_bias"], 3)
    params = {
        "ln_1": {"scale": sd["ln1.weight"], "bias": sd["ln1.bias"]},
        "attn": {
            "query": dense(q, bq),
            "key": dense(k, bk),
            "value": dense(v, bv),
            "out": {
                "kernel": sd["attn.out_proj.weight"].T.reshape(2, 4, 8),
                "bias": sd["attn.out_proj.bias"],
            },
        },
        "ln_2": {"scale": sd["ln2.weight"], "bias": sd["ln2.bias"]},
        "mlp": {
            "wi": {"kernel": sd["fc1.weight"].T, "bias": sd["fc1.bias"]},
            "wo": {"kernel": sd["fc2.weight"].T, "bias": sd["fc2.bias"]},
        },
    }

    def port(eps, approximate):
        def layer_norm(x, p):
            mean = x.mean(-1, keepdims=True)
            return (x - mean) * jax.lax.rsqrt(x.var(-1, keepdims=True) + eps) * p["scale"] + p[
                "bias"
            ]

        def forward(p, x):
            h, a = layer_norm(x, p["ln_1"]), p["attn"]
            q, k, v = (
                jnp.einsum("ble,ehd->blhd", h, a[n]["kernel"]) + a[n]["bias"]
                for n in ("query", "key", "value")
            )
            weights = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / 2.0)
            out = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
            x = x + jnp.einsum("bqhd,hde->bqe", out, a["out"]["kernel"]) + a["out"]["bias"]
            m = p["mlp"]
            h = jax.nn.gelu(
                layer_norm(x, p["ln_2"]) @ m["wi"]["kernel"] + m["wi"]["bias"],
                approximate=approximate,
            )
            return x + h @ m["wo"]["kernel"] + m["wo"]["bias"]

        return forward

    x = torch.randn(2, 3, 8, dtype=torch.float64)
    note = (
        "A plain function forward(params, x) with flax's names and layouts; planted: "
        "eps=1e-6 (flax's LayerNorm default), jax.nn.gelu's default approximate=True."
    )
    print(note + "\n")
    eps, approximate = 1e-6, True
    for round_ in range(1, 4):
        report = diagnose(tm, (port(eps, approximate), params), x)
        title = f"round {round_}"
        print(f"--- {title}")
        print(report)
        sessions.append(_session(title, report, note))
        if report.clean:
            break
        name = report.causes[0].name if report.causes else None
        note = {"norm_eps": "fix: eps=1e-5", "gelu_variant": "fix: approximate=False"}.get(
            name, "no fix known"
        )
        print(f"\n{note}\n")
        eps = 1e-5 if name == "norm_eps" else eps
        approximate = False if name == "gelu_variant" else approximate
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

    session(
        "Adam with weight decay",
        adam,
        optax.adamw(1e-2, weight_decay=1e-2),
        "optax.adamw(1e-2, weight_decay=1e-2)",
    )
    session("AdamW defaults", adamw, optax.adamw(1e-2), "optax.adamw(1e-2)")
    session(
        "RMSprop",
        rmsprop,
        optax.rmsprop(1e-2, decay=0.99, eps=1e-4),
        "optax.rmsprop(1e-2, decay=0.99, eps=1e-4)",
    )
    return 0


def _env_check() -> int:
    """``--env``: versions, XLA_FLAGS, and one line per known backend bug found."""
    import importlib.metadata
    import os

    import jaxgrad  # noqa: F401  (its XLA settings, as a user's program gets them)
    from jaxgrad import _xla_flags
    from jaxgrad.backend_canaries import check_backend, format_findings

    versions = []
    for name in ("jax", "jaxlib"):
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name} not installed")
    flags = os.environ.get("XLA_FLAGS", "")
    print(f"{', '.join(versions)}; XLA_FLAGS={flags or '(unset)'}")
    if _xla_flags.user_sets_ynn_fusion(flags) and _xla_flags.YNN_WORKAROUND not in flags.split():
        print(f"(your XLA_FLAGS sets {_xla_flags.YNN_FLAG} itself; jaxgrad leaves it as it is)")
    findings = check_backend()
    print(format_findings(findings))
    return 0 if all(f.ok for f in findings) else 1


def main(argv=None) -> int:
    parser, args = parse_args(argv)
    if args.env:
        return _env_check()
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_default_matmul_precision", "highest")
    import torch

    torch.set_num_threads(1)
    sessions = []
    if args.demo is None:
        code = _user_session(parser, args, sessions)
    else:
        code = {
            "resnet": _resnet_session,
            "ports": _ports_session,
            "optimizer": _optimizer_session,
        }[args.demo](sessions)
    if args.html and sessions:
        from jaxgrad.html.doctor import write_doctor_report

        write_doctor_report(args.html, sessions, versions={"torch": torch.__version__})
        print(f"wrote {args.html}")
    return code


if __name__ == "__main__":
    sys.exit(main())
