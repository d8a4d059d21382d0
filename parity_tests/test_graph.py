"""jaxgrad.graph and torchref.graph: what each framework records, checked against the lessons."""

from __future__ import annotations

import dataclasses
import io
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxgrad.graph.types as jtypes
import jaxgrad.nn as jnn
import torchref.graph as tgraph
from jaxgrad.graph import (
    as_graph,
    backward_graph,
    render,
    step_through,
    to_dot,
    to_mermaid,
    to_text,
    trace,
)
from jaxgrad.graph.examples import (
    LESSON_EXPRESSION_ARGS,
    SEED_NEURON_ARGS,
    lesson_expression,
    seed_neuron,
)
from jaxgrad.lessons import agrees_to_printed_digits
from jaxgrad.parity import assert_parity

LESSON_000_GRADS = {"w1": 14.1, "b1": 7.05, "w2": -5.17, "b2": -4.7}  # lesson 000 §2


def _args(values):
    return [jnp.asarray(v, jnp.float64) for v in values.values()]


def test_trace_lesson_expression(x64):
    graph = trace(lesson_expression, *_args(LESSON_EXPRESSION_ARGS), output_labels="L")
    assert graph.ops() == ["mul", "add", "max", "mul", "add", "sub", "integer_pow"]
    assert [graph.node(i).label for i in graph.inputs] == ["w1", "b1", "w2", "b2", "x", "y"]
    (maximum,) = [n for n in graph.nodes if n.op == "max"]
    # jax.nn.relu is a custom_jvp wrapping a jit of max(x, 0): expanded, not hidden
    assert any(s.startswith("custom_jvp_call") for s in maximum.scope)
    assert any(s.startswith(("jit", "pjit")) for s in maximum.scope)
    assert maximum.dtype == "float64" and maximum.shape == ()
    np.testing.assert_allclose(maximum.value, 1.1, rtol=1e-15)  # a1 = 1.1
    output = graph.node(graph.outputs[0])
    assert output.label == "L" and output.dtype == "float64"
    assert agrees_to_printed_digits(float(output.value), 5.5225, 4)
    assert graph.edges == jtypes.edges_from_inputs(graph.nodes)
    assert all(e.source in {n.id for n in graph.nodes} for e in graph.edges)


def test_backward_graph_lesson_expression(x64):
    args = _args(LESSON_EXPRESSION_ARGS)
    graph = backward_graph(lesson_expression, *args)
    assert graph.direction == "backward"
    assert graph.node(graph.inputs[0]).label == "seed"
    assert "select_n" in graph.ops()  # relu's backward: a select on the saved mask
    assert any(n.kind == "residual" for n in graph.nodes)
    grads = {graph.node(o).label: graph.node(o).value for o in graph.outputs}
    reference = jax.grad(lesson_expression, argnums=tuple(range(6)))(*args)
    assert_parity(
        {f"d{k}": np.asarray(g) for k, g in zip(LESSON_EXPRESSION_ARGS, reference)}, grads
    )
    for name, expected in LESSON_000_GRADS.items():
        assert agrees_to_printed_digits(float(grads[f"d{name}"]), expected, 4)


def test_step_through_lesson_expression(x64):
    buffer = io.StringIO()
    result = step_through(lesson_expression, *_args(LESSON_EXPRESSION_ARGS), file=buffer)
    printed = buffer.getvalue()
    assert printed.strip() == str(result)
    for name, expected in LESSON_000_GRADS.items():
        assert agrees_to_printed_digits(float(result.grads[name]), expected, 4)
        assert result.grads[name].dtype == np.float64
    assert "upstream 7.05 × local 2 = 14.1" in printed  # dL/dw1 = dL/dz1 · x
    assert "upstream -4.7 × local 1.1 = -5.17" in printed  # dL/dw2 = dL/dz2 · a1
    assert "= 5.5225" in printed


def test_step_through_seed_neuron_matches_lesson_001(x64):
    result = step_through(seed_neuron, *_args(SEED_NEURON_ARGS), verbose=False)
    values = dict(result.forward)
    (sigmoid,) = [n for n in result.graph.nodes if n.op == "logistic"]
    assert agrees_to_printed_digits(float(sigmoid.value), 0.731, 3)
    assert agrees_to_printed_digits(float(values["L"]), 0.072, 3)
    steps = {
        (s.op, result.graph.node(s.input).label if s.input in result.graph.inputs else s.input): s
        for s in result.backward
    }
    (through_sigmoid,) = [s for s in result.backward if s.op == "logistic"]
    assert agrees_to_printed_digits(float(through_sigmoid.upstream), -0.538, 3)  # 2(a − y)
    assert agrees_to_printed_digits(float(through_sigmoid.local), 0.197, 3)  # a(1 − a)
    assert agrees_to_printed_digits(float(result.grads["w1"]), -0.212, 3)
    assert result.grads["w2"] == 0.0  # its input x2 is 0: that weight cannot learn
    assert steps[("mul", "w1")].local == 2.0  # ∂m1/∂w1 = x1


def test_step_through_sums_paths(x64):
    result = step_through(lambda w: w * w + 2 * w, jnp.asarray(3.0), verbose=False)
    assert result.grads["w"] == 8.0  # lesson 004: 2w + 2 at w = 3
    # w reaches the output three times: twice through w·w, once through 2·w
    assert "  dL/dw = 8   (sum over its 3 paths)" in result.lines


def test_step_through_arrays_equals_jax_grad(x64, rng):
    model = jnn.mlp([3, 4, 2], "tanh", dtype="float64")
    params = {k: jnp.asarray(rng.standard_normal(s.shape)) for k, s in model.param_shapes().items()}
    x = jnp.asarray(rng.standard_normal((5, 3)))
    y = jnp.asarray(rng.standard_normal((5, 2)))

    def loss(params, x, y):
        return jnp.mean((model.apply(params, x) - y) ** 2)

    reference = jax.jit(jax.grad(loss))(params, x, y)
    result = step_through(loss, params, x, y, verbose=False)
    assert_parity(
        {f"params['{k}']": v for k, v in reference.items()},
        {k: v for k, v in result.grads.items() if k.startswith("params")},
    )
    assert any(line.count("vjp(") for line in result.lines)


def test_step_through_needs_a_scalar(x64):
    with pytest.raises(ValueError, match="one floating scalar"):
        step_through(jnp.tanh, jnp.ones(3), verbose=False)


def test_renderers(x64):
    graph = trace(lesson_expression, *_args(LESSON_EXPRESSION_ARGS), output_labels="L")
    mermaid = to_mermaid(graph)
    assert mermaid.splitlines()[0] == "flowchart LR"
    assert (
        mermaid.count("subgraph")
        == mermaid.count("\n    end") + mermaid.count("\n        end")
        == 2
    )
    assert all(f"{e.source} --> {e.target}" in mermaid for e in graph.edges)
    dot = to_dot(graph)
    assert dot.startswith('digraph "lesson_expression"') and dot.count("{") == dot.count("}")
    assert "cluster_" in dot and all(f"{e.source} -> {e.target};" in dot for e in graph.edges)
    text = to_text(graph)
    assert "n6 = mul(w1, x)" in text and "= 5.5225" in text
    assert render(graph, "dot") == dot
    with pytest.raises(ValueError, match="`format`"):
        render(graph, "svg")


# --- torchref.graph ------------------------------------------------------------------


def test_graph_types_have_identical_fields():
    for ours, theirs in (
        (jtypes.Graph, tgraph.Graph),
        (jtypes.Node, tgraph.Node),
        (jtypes.Edge, tgraph.Edge),
    ):
        describe = lambda cls: [
            (f.name, str(f.type), f.default, f.compare)  # noqa: E731
            for f in dataclasses.fields(cls)
        ]
        assert describe(ours) == describe(theirs), ours.__name__


def test_torch_graph_of_lesson_002():
    example = tgraph.lesson_002_example()
    graph = tgraph.autograd_graph(example["loss"], {"x": example["x"]})
    assert [n.op for n in graph.nodes if n.kind == "operation"] == [
        "SumBackward0",
        "PowBackward0",
        "ReluBackward0",
        "MulBackward0",
        "AccumulateGrad",
    ]
    (leaf,) = [graph.nodes[int(i[1:])] for i in graph.outputs]
    assert leaf.label == "x" and leaf.kind == "leaf" and leaf.inputs == ("n5",)
    assert example["x"].is_leaf and example["x"].grad_fn is None
    assert example["broken"].grad_fn is None  # .item() left the graph
    with pytest.raises(ValueError, match="no grad_fn"):
        tgraph.autograd_graph(example["broken"])
    # the jaxgrad renderers draw torch's graph too
    mermaid = to_mermaid(graph)
    assert "SumBackward0" in mermaid and "n5 --> n6" in mermaid
    assert to_text(as_graph(graph)) == to_text(graph)


def test_torch_graph_and_jax_backward_agree_on_lesson_expression(x64):
    built = tgraph.lesson_expression()
    graph = tgraph.autograd_graph(built["L"], built["leaves"], label="L")
    ops = [n.op for n in graph.nodes if n.kind == "operation"]
    assert ops.count("AccumulateGrad") == 4 and "ReluBackward0" in ops
    assert {graph.nodes[int(i[1:])].label for i in graph.outputs} == set(LESSON_000_GRADS)
    built["L"].backward()
    jax_graph = backward_graph(lesson_expression, *_args(LESSON_EXPRESSION_ARGS))
    jax_grads = {jax_graph.node(o).label: jax_graph.node(o).value for o in jax_graph.outputs}
    assert_parity(
        {f"d{k}": t.grad for k, t in built["leaves"].items()},
        {f"d{k}": jax_grads[f"d{k}"] for k in built["leaves"]},
    )


def test_graph_script_writes_three_mermaid_graphs(tmp_path, capsys):
    import graph as graph_script  # scripts/graph.py

    out = tmp_path / "graphs.md"
    assert graph_script.main(["--format", "mermaid", "--out", str(out)]) == 0
    written = out.read_text()
    assert written.count("```mermaid\nflowchart LR") == 3
    printed = capsys.readouterr().out
    assert "ReluBackward0" in printed and "AccumulateGrad" in printed
    assert "upstream 7.05 × local 2 = 14.1" in printed
    assert "(.item() left the graph)" in printed and "True, None" in printed


def _imported_packages(package_dir):
    import ast

    for path in package_dir.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                yield path.name, {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                yield path.name, {(node.module or "").split(".")[0]}


def test_graph_modules_keep_to_their_framework():
    """Plain data, no jax in torchref (its Graph twin included); no torch in jaxgrad."""
    import pathlib

    import jaxgrad
    import torchref

    for name, packages in _imported_packages(pathlib.Path(torchref.__file__).parent):
        assert not packages & {"jax", "jaxgrad", "optax", "flax"}, (name, packages)
    for name, packages in _imported_packages(pathlib.Path(jaxgrad.__file__).parent):
        assert "torchref" not in packages, (name, packages)
        # the exceptions: from_torch's two front ends import torch.fx (nn/capture/fx.py)
        # and torch.export (nn/capture/export.py, and nn/capture/export_autograd.py, what
        # the export front end does about autograd in a forward), and zoo_imports.py
        # (torchvision's import on a CPU-only torch) imports torch, lazily, in functions;
        # so does nn/capture/writes.py, which runs torch's own forward inside from_torch
        # to see what state it writes
        assert "torch" not in packages or name in (
            "fx.py",
            "export.py",
            "export_autograd.py",
            "writes.py",
            "zoo_imports.py",
        ), (name, packages)
    for name in (
        "nn/capture/fx.py",
        "nn/capture/export.py",
        "nn/capture/export_autograd.py",
        "nn/capture/writes.py",
        "zoo_imports.py",
    ):
        source = (pathlib.Path(jaxgrad.__file__).parent / name).read_text()
        assert "\n    import torch" in source or "\n    from torch" in source, name
        assert "\nimport torch" not in source and "\nfrom torch" not in source, name


def test_the_development_tools_are_imported_one_way():
    """jaxgrad_dev (what the tests and the scripts share) imports neither of them, and
    jaxgrad never imports jaxgrad_dev."""
    import pathlib

    import jaxgrad
    import jaxgrad_dev

    scripts = pathlib.Path(__file__).resolve().parents[1] / "scripts"
    # the scripts are imported by their file names (pytest's pythonpath holds scripts/)
    script_modules = {p.stem for p in scripts.glob("*.py")} | {"parity_checks"}
    for name, packages in _imported_packages(pathlib.Path(jaxgrad_dev.__file__).parent):
        assert not packages & {"parity_tests", "conftest", "scripts", *script_modules}, (
            name,
            packages,
        )
    for name, packages in _imported_packages(pathlib.Path(jaxgrad.__file__).parent):
        assert "jaxgrad_dev" not in packages, (name, packages)


def _imports_within(package: str) -> dict[str, set]:
    """``{module: modules of the same package it imports}`` for the modules of
    ``package`` (its ``__init__`` left out), every import counted, those inside
    functions too."""
    import ast
    import importlib
    import pathlib

    directory = pathlib.Path(importlib.import_module(package).__file__).parent
    modules = {p.stem for p in directory.glob("*.py")} - {"__init__"}
    prefix = package + "."
    edges = {}
    for module in modules:
        found = set()
        for node in ast.walk(ast.parse((directory / f"{module}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == package:
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(prefix):
                found.add(node.module[len(prefix) :].split(".")[0])
            elif isinstance(node, ast.Import):
                found |= {
                    a.name[len(prefix) :].split(".")[0]
                    for a in node.names
                    if a.name.startswith(prefix)
                }
        edges[module] = (found & modules) - {module}
    return edges


@pytest.mark.parametrize("package", ["jaxgrad.doctor", "jaxgrad.flax"])
def test_the_modules_of_a_package_import_each_other_one_way(package):
    """No import cycle among a package's modules: peel off the modules that import no
    module left; whatever remains imports in a circle (or from one)."""
    left = _imports_within(package)
    while left:
        free = [m for m, imported in left.items() if not imported & left.keys()]
        assert free, f"{package}: import cycle among " + ", ".join(
            f"{m} -> {sorted(imported & left.keys())}" for m, imported in sorted(left.items())
        )
        for module in free:
            del left[module]


def test_custom_vjp_is_expanded_and_its_hand_written_backward_shown(x64):
    from jaxgrad import manual

    x = jnp.asarray([0.3, -1.2])

    def fn(x):
        return jnp.sum(manual.tanh(x))

    (tanh,) = [n for n in trace(fn, x).nodes if n.op == "tanh"]
    assert any(s.startswith("custom_vjp_call") for s in tanh.scope)
    graph = backward_graph(fn, x)
    ops = graph.ops()
    # the hand-written rule g·(1 − t²) over the saved t, not autodiff's rule for tanh
    assert "tanh" not in ops and "sub" in ops and ops.count("mul") >= 2
    assert any(n.kind == "residual" and n.shape == (2,) for n in graph.nodes)
    assert_parity(
        np.asarray(jax.grad(lambda x: jnp.sum(jnp.tanh(x)))(x)), graph.node(graph.outputs[0]).value
    )


def test_control_flow_stays_one_node(x64):
    def fn(x):
        return jax.lax.fori_loop(0, 3, lambda i, v: v * 2.0, x)

    graph = trace(fn, jnp.asarray(1.5))
    loop = [n for n in graph.nodes if n.kind == "operation" and n.op in ("scan", "while")]
    # one primitive, one node per result (the loop counter and the carried value)
    assert {n.params["output"] for n in loop} == {str(i) for i in range(len(loop))}
    assert graph.node(graph.node(graph.outputs[0]).inputs[0]) in loop
    assert float(graph.node(graph.outputs[0]).value) == 12.0
    result = step_through(lambda x: fn(x) ** 2, jnp.asarray(1.5), verbose=False)
    assert float(result.grads["x"]) == 2 * 12.0 * 8.0  # d(8x)²/dx = 128x


def test_integer_inputs_get_no_gradient(x64):
    def fn(x, counts):
        return jnp.sum(x * counts)

    x, counts = jnp.asarray([0.5, -2.0]), jnp.asarray([3, 4])
    graph = backward_graph(fn, x, counts)
    outputs = {graph.node(o).label: graph.node(o) for o in graph.outputs}
    assert outputs["dcounts"].dtype == "float0" and "no gradient" in to_text(graph)
    assert outputs["dx"].value.tolist() == [3.0, 4.0]
    result = step_through(fn, x, counts, verbose=False)
    assert list(result.grads) == ["x"] and result.grads["x"].tolist() == [3.0, 4.0]


# ------------------------------------------------------------- the code's direction
def import_cycles(graph) -> list[list[str]]:
    """The import cycles of a ``grimp`` graph: its strongly connected components of
    more than one module (every import counted, those inside functions too)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):  # Tarjan's algorithm, iterative over each module's imports
        work = [(module, iter(sorted(graph.find_modules_directly_imported_by(module))))]
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        while work:
            node, imported = work[-1]
            child = next(imported, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


@pytest.fixture(scope="module")
def jaxgrad_imports():
    grimp = pytest.importorskip("grimp")
    return grimp.build_graph("jaxgrad")


def test_no_module_of_jaxgrad_imports_one_that_imports_it_back(jaxgrad_imports):
    assert import_cycles(jaxgrad_imports) == []


def test_a_cycle_planted_in_the_graph_is_found():
    """The check above must be able to fail: ``jaxgrad.nn.capture.refs`` importing the
    face that (through the front ends) imports it closes a circle."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("jaxgrad")  # its own: the planted import stays in it
    graph.add_import(importer="jaxgrad.nn.capture.refs", imported="jaxgrad.nn.capture")
    cycles = import_cycles(graph)
    assert len(cycles) == 1
    assert {"jaxgrad.nn.capture", "jaxgrad.nn.capture.refs", "jaxgrad.nn.capture.export"} <= set(
        cycles[0]
    )


def test_the_import_contracts_hold():
    """``lint-imports`` with pyproject.toml's contracts: the layers of jaxgrad, of
    jaxgrad.nn and of capture, and what jaxgrad and torchref never import."""
    import pathlib
    import shutil
    import subprocess

    pytest.importorskip("importlinter")
    root = pathlib.Path(__file__).resolve().parents[1]
    command = shutil.which("lint-imports", path=str(pathlib.Path(sys.executable).parent))
    done = subprocess.run(
        [command or "lint-imports", "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout
