#!/usr/bin/env python
"""The computational graph made visible: what PyTorch records and what JAX traces.

For lesson 000's expression L = ((w2 * relu(w1 * x + b1) + b2) - y) ** 2 at
x=2, y=1, w1=0.5, b1=0.1, w2=-1.5, b2=0.3 (or, with --example neuron, lesson 001's
two-input sigmoid neuron), prints:

1. PyTorch's autograd graph (grad_fn / next_functions: the loss, PowBackward0, ...,
   AccumulateGrad, the leaves) beside JAX's backward graph (the primitives of the
   VJP, with the values the forward pass saved), then JAX's forward graph (the
   jaxpr's primitives, jax.nn.relu's custom_jvp and jit expanded);
2. the gradients each framework computes, and their difference;
3. the step-through: every forward value, then each backward step as
   `upstream × local = gradient`, node by node;
4. lesson 002's grad_fn facts: loss.grad_fn, its next_functions, is_leaf, the
   grad_fn of a leaf (None), and a tensor rebuilt from .item() (no grad_fn: the
   graph is cut there).

Examples:
  python scripts/graph.py
  python scripts/graph.py --format mermaid --out graphs.md
  python scripts/graph.py --example neuron --format dot --out graphs.dot
"""

from __future__ import annotations

import argparse
import sys

import _cli

# jaxgrad.graph.FORMATS, spelled out so that --help needs no jax import (a test
# keeps the two equal).
FORMATS = ("text", "mermaid", "dot")
EXAMPLES = {
    "expression": "lesson 000 §2: L = ((w2 * relu(w1 * x + b1) + b2) - y) ** 2",
    "neuron": "lesson 001: L = (sigmoid(w1*x1 + w2*x2 + b) - y) ** 2",
}


def _example(name: str):
    """``(jax function, its arguments, the torch builder)`` of an ``EXAMPLES`` key."""
    from jaxgrad.graph import examples
    from torchref import graph as tgraph

    if name == "expression":
        return examples.lesson_expression, examples.LESSON_EXPRESSION_ARGS, tgraph.lesson_expression
    return examples.seed_neuron, examples.SEED_NEURON_ARGS, tgraph.seed_neuron


def _parse(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="how to draw the three graphs: plain text (default), Mermaid "
        "(flowchart LR; paste into Markdown) or Graphviz DOT",
    )
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="also write the three graphs to FILE (a .md file gets ```mermaid fences)",
    )
    parser.add_argument(
        "--example",
        choices=EXAMPLES,
        default="expression",
        help="expression: lesson 000's tiny ReLU network (default); "
        "neuron: lesson 001's two-input sigmoid neuron",
    )
    args = parser.parse_args(argv)
    _cli.output_file(parser, "--out", args.out)
    return args


def _write(path, graphs, fmt):
    fenced = fmt == "mermaid" and path.endswith(".md")
    parts = []
    for title, text in graphs.items():
        if fenced:
            parts.append(f"### {title}\n\n```mermaid\n{text}\n```\n")
        else:
            comment = "%%" if fmt == "mermaid" else ("//" if fmt == "dot" else "#")
            parts.append(f"{comment} {title}\n{text}\n")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(parts))


def _lesson_002_facts():
    from jaxgrad.graph import render
    from torchref import graph as tgraph

    example = tgraph.lesson_002_example()
    loss, x = example["loss"], example["x"]
    print("x = torch.tensor([2.0], requires_grad=True); h = (x * 3).relu(); loss = (h ** 2).sum()")
    print(f"  loss.grad_fn                        -> {type(loss.grad_fn).__name__}")
    print(
        f"  loss.grad_fn.next_functions[0][0]   -> "
        f"{type(loss.grad_fn.next_functions[0][0]).__name__}"
    )
    print(f"  x.is_leaf, x.grad_fn                -> {x.is_leaf}, {x.grad_fn}")
    print(
        f"  h.is_leaf, h.grad_fn                -> {example['h'].is_leaf}, "
        f"{type(example['h'].grad_fn).__name__}"
    )
    print(
        f"  torch.tensor([(x * 3).item()], requires_grad=True).grad_fn -> "
        f"{example['broken'].grad_fn}   (.item() left the graph)"
    )
    print(render(tgraph.autograd_graph(loss, {"x": x}), "text"))
    print(
        "JAX has no is_leaf or grad_fn: arrays carry no graph. jax.grad re-traces the "
        "function instead, and float()/.item() on a traced value raises "
        "ConcretizationTypeError rather than silently cutting the graph."
    )


def main(argv=None) -> int:
    args = _parse(argv)
    import jax
    import jax.numpy as jnp

    from jaxgrad.graph import backward_graph, render, side_by_side, step_through, trace
    from jaxgrad.parity import compare
    from torchref import graph as tgraph

    fn, values, torch_builder = _example(args.example)
    title = EXAMPLES[args.example]
    print(f"{title}   at " + ", ".join(f"{k}={v}" for k, v in values.items()))
    built = torch_builder(**values)
    with jax.enable_x64(True):
        jax_args = [jnp.asarray(v, jnp.float64) for v in values.values()]
        graphs = {
            "PyTorch autograd graph (grad_fn / next_functions)": tgraph.autograd_graph(
                built["L"], built["leaves"], label="L"
            ),
            "JAX backward graph (jax.vjp)": backward_graph(fn, *jax_args),
            "JAX forward graph (jaxpr)": trace(fn, *jax_args, output_labels="L"),
        }
    rendered = {name: render(graph, args.format) for name, graph in graphs.items()}
    names = list(rendered)
    print("\n== 1. the graphs ==")
    if args.format == "text":
        print(side_by_side(rendered[names[0]], rendered[names[1]], titles=names[:2]))
        print(f"\n{names[2]}\n{'-' * len(names[2])}\n{rendered[names[2]]}")
    else:
        for name, text in rendered.items():
            print(f"\n{name}:\n{text}")
    if args.out:
        _write(args.out, rendered, args.format)
        print(f"\n(wrote the three graphs to {args.out})")

    print("\n== 2. the gradients ==")
    built["L"].backward()
    jax_backward = graphs[names[1]]
    jax_grads = {
        jax_backward.node(o).label[1:]: jax_backward.node(o).value for o in jax_backward.outputs
    }
    print(f"  {'':<4} {'torch .grad':>14} {'JAX vjp':>14} {'|diff|':>10}")
    for name, leaf in built["leaves"].items():
        diff = abs(leaf.grad.item() - float(jax_grads[name]))
        print(
            f"  {name:<4} {leaf.grad.item():>14.6g} {float(jax_grads[name]):>14.6g} {diff:>10.2e}"
        )
    report = compare(
        {k: t.grad for k, t in built["leaves"].items()}, {k: jax_grads[k] for k in built["leaves"]}
    )
    print(f"  float64 parity tier: {'PASS' if report.passed else 'FAIL'}")

    print("\n== 3. step-through (JAX) ==")
    with jax.enable_x64(True):
        step_through(fn, *[jnp.asarray(v, jnp.float64) for v in values.values()])

    print("\n== 4. lesson 002: grad_fn, leaves, and .item() ==")
    _lesson_002_facts()
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
