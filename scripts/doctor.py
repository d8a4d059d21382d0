#!/usr/bin/env python
"""The convention doctor: find the first layer where a JAX port leaves torch, name why.

Demo sessions (float64, tiny models):

  --demo resnet     a ResNet port (jaxgrad, torch.fx-traced) with three planted
                    mistakes, diagnosed and fixed one after another;
  --demo optimizer  torch optimizers vs optax transformations that disagree on the
                    same gradients.

From Python: ``jaxgrad.doctor.diagnose(torch_module, port, example_input)``,
``jaxgrad.doctor.diagnose_optimizer(torch_optimizer, tx, grads)`` and
``jaxgrad.doctor.training_drift(reference_steps, port_steps)``.

Exit status: 0 when the session ends clean (or the demo ran), 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", choices=("resnet", "optimizer"), required=True,
                        help="which demo session to run")
    return parser.parse_args(argv)


def _resnet_session():
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
    print("Planted: conv1 kernel reshaped from HWIO; layer1.0.bn2 eps=1e-6; "
          "layer2.0.bn1 momentum=0.9 (flax's meaning).\n")
    train = False
    for round_ in range(1, 7):
        report = diagnose(tm, (port, params), x, buffers=buffers, train=train)
        print(f"--- round {round_} ({'train' if report.train else 'eval'} mode)")
        print(report)
        if report.clean:
            if not report.train:
                print("\n(eval mode is clean; BatchNorm's running statistics only move in "
                      "training: diagnose again with train=True)\n")
                train = True
                continue
            break
        path = report.first_layer
        print(f"\nfix: {path} as torch has it\n")
        planted[path] = layers[path]
        params.update({k: v for k, v in good_params.items() if k.startswith(path + ".")})
        port = dataclasses.replace(model, layers=tuple(planted.items()))
    return 0


def _optimizer_session():
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
        print(diagnose_optimizer(make(ps), tx, grads))
        print()

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
    args = parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_default_matmul_precision", "highest")
    import torch

    torch.set_num_threads(1)
    return _resnet_session() if args.demo == "resnet" else _optimizer_session()


if __name__ == "__main__":
    sys.exit(main())
