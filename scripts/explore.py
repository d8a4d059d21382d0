#!/usr/bin/env python
"""The backprop explorer: one self-contained HTML page per example, to open in a browser.

The page draws the forward graph JAX traced and the backward graph beside it. Step
walks the backward pass one node at a time (local derivative × upstream gradient =
product, with JAX's and torch's grad_fn numbers for the same node beside the page's);
Reset starts again; a slider for every scalar input recomputes forward values,
gradients and a finite-difference gradient check inside the page (float64). The file
makes no network request: script, style and data are inline.

EXAMPLE is a key of scripts/hand_gradients.py (tiny_relu, sigmoid_neuron, … ; see
--list), `neuron` (lesson 001's two-input neuron), or a function of yours as
package.module:function (importable from the current directory) or
path/to/file.py:function, with its arguments given as NAME=VALUE (a number, or a JSON
list of numbers for a small vector). --set NAME=VALUE changes an example's start.

Exit status 2 for bad input (unknown example, unparsable argument, a function that is
not scalar-valued or uses an operation the page cannot compute, an unwritable path);
nothing is written then.

Examples:
  python scripts/explore.py --list
  python scripts/explore.py tiny_relu --out explorer.html
  python scripts/explore.py neuron --set x1=1.5 --out neuron.html
  python scripts/explore.py mypackage.losses:loss w=0.5 x=[1,2,3] --out loss.html
"""

from __future__ import annotations

import argparse
import sys

import _cli


def _parse(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "example", nargs="?", help="an example key (see --list) or package.module:function"
    )
    parser.add_argument(
        "arguments",
        nargs="*",
        metavar="NAME=VALUE",
        help="the function's arguments (for package.module:function)",
    )
    parser.add_argument("--out", metavar="PATH", help="the HTML file to write")
    parser.add_argument(
        "--set",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="start an example at another value (repeatable)",
    )
    parser.add_argument("--list", action="store_true", help="list the examples and exit")
    parser.add_argument(
        "--no-torch", action="store_true", help="leave torch's numbers out of the page"
    )
    args = parser.parse_args(argv)
    if not args.list and (args.example is None or args.out is None):
        parser.error("give an EXAMPLE and --out PATH (or --list)")
    if not args.list and ":" in args.example:  # a missing module or name: said before jax loads
        args.example = _cli.parse_target(parser, "EXAMPLE", args.example)
        _cli.check_target(parser, "EXAMPLE", args.example)
    return parser, args


def main(argv=None) -> int:
    parser, args = _parse(argv)
    from jaxgrad.html import examples  # jax loads here, after the arguments parse

    if args.list:
        for key, example in examples.EXAMPLES.items():
            print(f"{key:<18} {example.title}")
        return 0
    try:
        from jaxgrad.html import check_writable

        check_writable(args.out)
        if isinstance(args.example, _cli.Target):
            if args.set:
                raise ValueError(
                    "--set changes an example's start; give a function's "
                    "arguments as NAME=VALUE after it"
                )
            fn = _cli.load_object(parser, args.example, "EXAMPLE")
            if not callable(fn):
                raise ValueError(
                    f"EXAMPLE {args.example.where}:{args.example.name} is a "
                    f"{type(fn).__name__}, not a function"
                )
            title = f"{args.example.where}:{args.example.name}"
            point = examples.parse_arguments(args.arguments)
        elif args.example in examples.EXAMPLES:
            if args.arguments:
                raise ValueError(f"{args.example} takes no NAME=VALUE arguments; use --set")
            chosen = examples.EXAMPLES[args.example]
            fn, title, point = chosen.fn, chosen.title, dict(chosen.point)
            changes = examples.parse_arguments(args.set)
            unknown = sorted(set(changes) - set(point))
            if unknown:
                raise ValueError(
                    f"--set {', '.join(unknown)}: {args.example} has {', '.join(point)}"
                )
            point.update(changes)
        else:
            raise ValueError(
                f"unknown example {args.example!r}; the examples are "
                f"{', '.join(examples.EXAMPLES)}, or give package.module:function"
            )
        values = examples.bind(fn, point)
        return _write(fn, values, title, args)
    except (ValueError, TypeError) as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")


def _write(fn, values, title, args) -> int:
    import jax

    from jaxgrad.graph import backward_graph, to_text
    from jaxgrad.html import explorer_page, export_graph, write_page
    from jaxgrad.html.export import as_float64

    graph = export_graph(fn, *values, title=title)
    notes = {}
    with jax.enable_x64(True):
        arrays = as_float64(values)
        notes["what JAX records for the backward pass (the jaxpr of jax.vjp)"] = to_text(
            backward_graph(fn, *arrays)
        )
    torch_values = None
    if not args.no_torch:
        import torch

        from torchref.replay import replay

        torch.set_num_threads(1)
        torch_values = replay(graph)
        notes["what PyTorch records (grad_fn / next_functions)"] = to_text(
            torch_values.pop("autograd_graph")
        )
    write_page(args.out, explorer_page(graph, torch=torch_values, notes=notes))
    operations = sum(node["op"] != "constant" for node in graph["nodes"])
    print(
        f"wrote {args.out}: {title}, {operations} operations, "
        f"{graph['output']['label']} = {graph['output']['value']:.6g}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
