"""jaxgrad.graph and torchref.graph: what each framework records, checked against the lessons."""

from __future__ import annotations

import dataclasses
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxgrad.graph.types as jtypes
import jaxgrad.nn as jnn
import torchref.graph as tgraph
from jaxgrad.graph import as_graph, backward_graph, render, step_through, to_dot, to_mermaid
from jaxgrad.graph import to_text, trace
from jaxgrad.graph.examples import (LESSON_EXPRESSION_ARGS, SEED_NEURON_ARGS,
                                    lesson_expression, seed_neuron)
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
    assert_parity({f"d{k}": np.asarray(g) for k, g in zip(LESSON_EXPRESSION_ARGS, reference)},
                  grads)
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
    steps = {(s.op, result.graph.node(s.input).label if s.input in result.graph.inputs
              else s.input): s for s in result.backward}
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
    params = model.init(jax.random.key(1))
    x = jnp.asarray(rng.standard_normal((5, 3)))
    y = jnp.asarray(rng.standard_normal((5, 2)))

    def loss(params, x, y):
        return jnp.mean((model.apply(params, x) - y) ** 2)

    reference = jax.jit(jax.grad(loss))(params, x, y)
    result = step_through(loss, params, x, y, verbose=False)
    assert_parity({f"params['{k}']": v for k, v in reference.items()},
                  {k: v for k, v in result.grads.items() if k.startswith("params")})
    assert any(line.count("vjp(") for line in result.lines)


def test_step_through_needs_a_scalar(x64):
    with pytest.raises(ValueError, match="one floating scalar"):
        step_through(jnp.tanh, jnp.ones(3), verbose=False)


def test_renderers(x64):
    graph = trace(lesson_expression, *_args(LESSON_EXPRESSION_ARGS), output_labels="L")
    mermaid = to_mermaid(graph)
    assert mermaid.splitlines()[0] == "flowchart LR"
    assert mermaid.count("subgraph") == mermaid.count("\n    end") + mermaid.count(
        "\n        end") == 2
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
    for ours, theirs in ((jtypes.Graph, tgraph.Graph), (jtypes.Node, tgraph.Node),
                         (jtypes.Edge, tgraph.Edge)):
        describe = lambda cls: [(f.name, str(f.type), f.default, f.compare)  # noqa: E731
                                for f in dataclasses.fields(cls)]
        assert describe(ours) == describe(theirs), ours.__name__


def test_torch_graph_of_lesson_002():
    example = tgraph.lesson_002_example()
    graph = tgraph.autograd_graph(example["loss"], {"x": example["x"]})
    assert [n.op for n in graph.nodes if n.kind == "operation"] == [
        "SumBackward0", "PowBackward0", "ReluBackward0", "MulBackward0", "AccumulateGrad"]
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
    assert_parity({f"d{k}": t.grad for k, t in built["leaves"].items()},
                  {f"d{k}": jax_grads[f"d{k}"] for k in built["leaves"]})


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


def test_torchref_graph_imports_no_jax():
    import subprocess
    import sys

    code = "import sys, torchref.graph; assert 'jax' not in sys.modules, 'jax imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
