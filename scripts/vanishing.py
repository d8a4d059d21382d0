"""Vanishing and exploding gradients, measured in JAX and PyTorch side by side.

Reproduces the lessons' depth measurements on the same weights (torch's init, copied
into JAX with ``jaxgrad.nn.from_torch``) and the same batch:

1. lesson 000 — 6 hidden layers of 128 units, one batch, one backward: the weight-
   gradient norm of each of the 7 layers for ReLU and for sigmoid, JAX and torch
   columns with their difference, and the last/first ratio (the lesson measured
   ≈4× for ReLU and 33,585× for sigmoid on FashionMNIST);
2. lesson 002 — 12 sigmoid layers of width 64 (layer 0 orders of magnitude below 11);
3. lesson 004 example 6 — a 10-layer sigmoid network (lesson: first 1.2e-09, last
   1.2e-01), 20 sigmoids in a row (1.14e-13 at the input x = 0.5), ×3 twenty times
   (exactly 3²⁰);
4. lessons 000/001 — the bound 0.25ⁿ for n = 6 and 10.

Examples:
  python scripts/vanishing.py
  python scripts/vanishing.py --plot docs/vanishing.png --json vanishing.json
  python scripts/vanishing.py --dataset fashion-mnist --data-dir ~/data/fashion
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

import _cli
import numpy as np

if TYPE_CHECKING:  # the annotations only; both are imported where they run
    from torch import nn

    from jaxgrad import data

# lesson 000, section 4: FashionMNIST, 6×128, weight-gradient norm of layers 1…7
LESSON_000 = {
    "relu": [7.5e-3, 2.6e-3, 2.3e-3, 2.6e-3, 4.8e-3, 1.0e-2, 2.7e-2],
    "sigmoid": [1.5e-5, 2.7e-5, 2.0e-4, 1.4e-3, 1.0e-2, 6.8e-2, 4.9e-1],
    "ratio": {"relu": 4.0, "sigmoid": 33585.0},
}
LESSON_004 = {
    "sigmoid_net_first": 1.2e-9,
    "sigmoid_net_last": 1.2e-1,
    "sigmoid_chain": 1.14e-13,
    "times3": 3.49e9,
}


def both_frameworks(module: nn.Module, x: np.ndarray, y: np.ndarray, loss: str) -> dict:
    """Per-layer weight-gradient norms of ``module`` and of its JAX twin, same weights."""
    import jax
    import jax.numpy as jnp
    import torch

    import jaxgrad.nn
    from jaxgrad.diagnostics import report_from_norms
    from jaxgrad.lessons import depth as jdepth
    from torchref import depth as tdepth

    model, params = jaxgrad.nn.from_torch(module)
    with jax.default_matmul_precision("highest"):
        jax_norms = jdepth.weight_grad_norms(
            model, params, jnp.asarray(x), jnp.asarray(y), loss=loss
        )
    torch_norms = tdepth.weight_grad_norms(
        module, torch.from_numpy(x), torch.from_numpy(y), loss=loss
    )
    assert list(jax_norms) == list(torch_norms), (list(jax_norms), list(torch_norms))
    jax_values, torch_values = list(jax_norms.values()), list(torch_norms.values())
    report = report_from_norms(torch_norms)
    return {
        "layers": list(torch_norms),
        "jax": jax_values,
        "torch": torch_values,
        "difference": [a - b for a, b in zip(jax_values, torch_values)],
        "ratio_jax": jax_values[-1] / jax_values[0],
        "ratio_torch": torch_values[-1] / torch_values[0],
        "verdict": report.verdict,
    }


def lesson_table(
    dataset: data.Dataset, activation: str, *, width: int, depth: int, batch_size: int, seed: int
) -> dict:
    import torch

    import torchref.models
    from jaxgrad import data

    torch.manual_seed(seed)
    module = torchref.models.mlp(
        [dataset.num_features] + [width] * depth + [dataset.num_classes], activation
    )
    batch = data.batch_indices(len(dataset.y_train), batch_size, seed=seed, epoch=0)[0]
    return both_frameworks(module, dataset.x_train[batch], dataset.y_train[batch], "cross_entropy")


def sigmoid_stack(n_layers: int, *, width: int = 64, batch_size: int = 32, seed: int = 0) -> dict:
    """Lesson 002's net: ``Sequential(Sequential(Linear(w, w), Sigmoid()) × n)``, MSE to 0."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    module = nn.Sequential(
        *[nn.Sequential(nn.Linear(width, width), nn.Sigmoid()) for _ in range(n_layers)]
    )
    x = torch.randn(batch_size, width).numpy()
    return both_frameworks(module, x, np.zeros_like(x), "mse")


def scalar_chains() -> dict:
    import jax
    import jax.numpy as jnp
    import torch

    from jaxgrad.lessons import depth as jdepth
    from torchref import depth as tdepth

    with jax.enable_x64(True):
        result = {
            "sigmoid_chain_20": {
                "input": jdepth.SIGMOID_CHAIN_INPUT,
                "jax": jdepth.sigmoid_chain_grad(),
                "torch": tdepth.sigmoid_chain_grad(),
                "lesson": LESSON_004["sigmoid_chain"],
            },
            "times3_20": {
                "jax": jdepth.repeated_multiply_grad(),
                "torch": tdepth.repeated_multiply_grad(),
                "jax_float32": jdepth.repeated_multiply_grad(dtype=jnp.float32),
                "torch_float32": tdepth.repeated_multiply_grad(dtype=torch.float32),
                "exact": 3**20,
            },
        }
    result["sigmoid_bound"] = {
        str(n): {"jax": jdepth.sigmoid_bound(n), "torch": tdepth.sigmoid_bound(n), "exact": 0.25**n}
        for n in (6, 10)
    }
    return result


def print_table(title: str, rows: dict, lesson: list | None = None) -> None:
    print(f"\n{title}")
    header = f"{'layer':>6} {'key':>6} {'JAX':>11} {'PyTorch':>11} {'JAX-torch':>11}"
    print(header + (f" {'lesson 000':>11}" if lesson else ""))
    for i, layer in enumerate(rows["layers"]):
        line = (
            f"{i + 1:>6} {layer:>6} {rows['jax'][i]:>11.3e} {rows['torch'][i]:>11.3e} "
            f"{rows['difference'][i]:>11.1e}"
        )
        print(line + (f" {lesson[i]:>11.1e}" if lesson else ""))
    print(
        f"last/first: JAX {rows['ratio_jax']:,.1f}  PyTorch {rows['ratio_torch']:,.1f}"
        f"  -> {rows['verdict']}"
    )


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = {"relu": "tab:blue", "sigmoid": "tab:red"}
    for activation, rows in results["table"].items():
        layers = np.arange(1, len(rows["layers"]) + 1)
        ax.plot(
            layers, rows["torch"], "o-", color=colours[activation], label=f"{activation} PyTorch"
        )
        ax.plot(
            layers,
            rows["jax"],
            "x--",
            color=colours[activation],
            markersize=9,
            label=f"{activation} JAX",
        )
        ax.plot(
            np.arange(1, 8),
            LESSON_000[activation],
            ":",
            color=colours[activation],
            alpha=0.5,
            label=f"{activation} lesson 000 (FashionMNIST)",
        )
    ax.set_yscale("log")
    ax.set_xlabel("layer (1 = first, 7 = output)")
    ax.set_ylabel("weight-gradient norm")
    ax.set_title(f"One backward, 6×128 MLP, {results['dataset']} batch of {results['batch_size']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dataset",
        choices=["digits", "fashion-mnist"],
        default="digits",
        help="digits (bundled with scikit-learn, default) or fashion-mnist (local IDX files)",
    )
    parser.add_argument(
        "--data-dir", help="FashionMNIST directory (default: $JAXGRAD_FASHION_MNIST_DIR)"
    )
    parser.add_argument(
        "--batch-size", type=int, default=64, help="examples in the one batch (default 64)"
    )
    parser.add_argument("--seed", type=int, default=0, help="torch init seed and batch order seed")
    parser.add_argument("--quick", action="store_true", help="width 32 and batch 16 (for tests)")
    parser.add_argument("--plot", metavar="PATH", help="write a log-scale PNG of norm by layer")
    parser.add_argument("--json", metavar="PATH", help="write every number as JSON")
    return parser


def parse_args(parser: argparse.ArgumentParser, argv) -> argparse.Namespace:
    args = parser.parse_args(argv)
    _cli.at_least(parser, args, 1, "batch_size")
    _cli.existing_dir(parser, "--data-dir", args.data_dir)
    _cli.output_files(parser, args, "plot", "json")
    return args


def main(argv=None) -> dict:
    parser = build_parser()
    args = parse_args(parser, argv)
    from jaxgrad import data

    width, batch_size = (32, 16) if args.quick else (128, args.batch_size)
    try:
        dataset = data.load_dataset(args.dataset, data_dir=args.data_dir)
    except (OSError, ValueError) as error:
        parser.error(f"cannot load {args.dataset}: {error}")
    results = {"dataset": dataset.name, "batch_size": batch_size, "width": width, "table": {}}
    for activation in ("relu", "sigmoid"):
        rows = lesson_table(
            dataset, activation, width=width, depth=6, batch_size=batch_size, seed=args.seed
        )
        results["table"][activation] = rows
        print_table(
            f"{activation}: 6 hidden layers of {width}, {dataset.name}, one batch of {batch_size}",
            rows,
            LESSON_000[activation],
        )
    print(
        f"\nlesson 000 (FashionMNIST) last/first: ReLU ≈{LESSON_000['ratio']['relu']:g}×, "
        f"sigmoid {LESSON_000['ratio']['sigmoid']:,.0f}×; measured here ({dataset.name}): "
        f"ReLU {results['table']['relu']['ratio_torch']:,.1f}×, "
        f"sigmoid {results['table']['sigmoid']['ratio_torch']:,.0f}×"
    )
    results["lesson_000"] = LESSON_000

    results["sigmoid_stack_12"] = sigmoid_stack(12, seed=args.seed)
    print_table(
        "lesson 002: 12 × (Linear(64, 64), Sigmoid), randn(32, 64), MSE to zeros",
        results["sigmoid_stack_12"],
    )
    results["sigmoid_net_10"] = sigmoid_stack(10, seed=args.seed)
    net = results["sigmoid_net_10"]
    print(
        f"\nlesson 004 ex. 6: 10-layer sigmoid network (the same stack, 10 layers): first-layer "
        f"grad norm JAX {net['jax'][0]:.2e} / torch {net['torch'][0]:.2e}, last-layer "
        f"{net['jax'][-1]:.2e} / {net['torch'][-1]:.2e}, first/last {1 / net['ratio_torch']:.1e} "
        f"(lesson: {LESSON_004['sigmoid_net_first']:.1e}, {LESSON_004['sigmoid_net_last']:.1e}, ≈1e-8)"
    )

    results.update(scalar_chains())
    chain, times3 = results["sigmoid_chain_20"], results["times3_20"]
    print(
        f"20 sigmoids in a row, d/dx at x = {chain['input']} (float64): JAX {chain['jax']:.4e}, "
        f"torch {chain['torch']:.4e} (lesson: {chain['lesson']:.2e})"
    )
    print(
        f"x·3 twenty times, d/dx (float64): JAX {times3['jax']:,.0f}, torch {times3['torch']:,.0f}, "
        f"3^20 = {times3['exact']:,} (float32: {times3['jax_float32']:,.0f} in both — 3^20 > 2^24)"
    )
    for n, row in results["sigmoid_bound"].items():
        print(
            f"sigmoid'(0)^{n} from autodiff: JAX {row['jax']:.4e}, torch {row['torch']:.4e}, "
            f"0.25^{n} = {row['exact']:.4e}"
        )
    if args.plot:
        plot(results, args.plot)
        print(f"\nplot written to {args.plot}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
        print(f"JSON written to {args.json}")
    return results


if __name__ == "__main__":
    main()
