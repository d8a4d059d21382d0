"""The explorer's data and the pages' files, without a browser: export, torch replay,
bad input, atomic writes, and the two scripts' flags (the browser tests are in
``test_html_browser.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

import explore
import jax
import jax.numpy as jnp
import numpy as np
import parity as parity_script
import pytest

from jaxgrad.html import export_graph, write_page
from jaxgrad.html.examples import EXAMPLES, bind, load_function, parse_arguments
from jaxgrad.parity import assert_parity
from torchref.replay import replay

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# functions for `explore.py package.module:function`
def vector_loss(w, x, b, t):
    """A small-vector function using every transcendental the page interprets."""
    z = jnp.tanh(jnp.dot(w, x) + b)
    return (z - t) ** 2 + jnp.log(jnp.exp(b) + 1.0) / 2.0 - jax.nn.sigmoid(t)


def scalar_zoo(a, b):
    """The remaining primitives: sqrt, min, max (and a tie), integer_pow ±, log1p, neg,
    square, div."""
    return (
        jnp.sqrt(a * a + 1.0)
        + jnp.minimum(a, b) ** 3
        + jnp.log1p(b * b)
        - (-a) ** -1
        + jnp.square(b)
        + jnp.maximum(a, b) / b
    )


def vector_valued(w):
    return w * 2.0


def uses_sin(w):
    return jnp.sin(w)


def test_export_matches_jax_and_torch_per_node():
    example = EXAMPLES["tiny_relu"]
    graph = export_graph(example.fn, *example.point.values())
    assert graph["output"]["value"] == pytest.approx(5.5225, abs=5e-5)  # lesson 000 §2: 5.5225
    with jax.enable_x64(True):
        expected = jax.grad(example.fn, argnums=tuple(range(6)))(
            *[jnp.float64(v) for v in example.point.values()]
        )
    assert_parity(
        dict(zip(example.point, np.asarray(expected))),
        {k: np.float64(v) for k, v in graph["jax"]["grads"].items()},
    )
    torch_side = replay(graph)
    assert torch_side["grad_fn"][graph["output"]["id"]] == "PowBackward0"
    assert "ReluBackward0" in torch_side["grad_fn"].values()  # jax.nn.relu's max(x, 0)
    relu = [n for n in graph["nodes"] if n.get("rule") == "relu"]
    assert [n["op"] for n in relu] == ["max"]
    assert_parity(
        {k: np.float64(v) for k, v in torch_side["grads"].items()},
        {k: np.float64(v) for k, v in graph["jax"]["grads"].items()},
    )
    assert len(torch_side["passed"]) == len(graph["jax"]["steps"])


def test_export_of_vectors_and_transcendentals_matches_torch():
    point = dict(w=[0.3, -0.2, 0.5], x=[1.0, 2.0, -1.5], b=0.25, t=0.1)
    graph = export_graph(vector_loss, *bind(vector_loss, point))
    ops = {n["op"] for n in graph["nodes"]}
    assert {"dot_general", "tanh", "exp", "log", "logistic", "div"} <= ops
    torch_side = replay(graph)
    assert_parity(
        {k: np.asarray(v) for k, v in torch_side["grads"].items()},
        {k: np.asarray(v) for k, v in graph["jax"]["grads"].items()},
    )


def test_export_refuses_what_the_page_cannot_compute():
    with pytest.raises(ValueError, match="one floating scalar.*float64\\[3\\]"):
        export_graph(vector_valued, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="primitive 'sin'.*supported: add"):
        export_graph(uses_sin, 1.0)
    with pytest.raises(ValueError, match="custom derivative rule"):
        export_graph(lambda w: jax.nn.softplus(w) + jax.nn.gelu(w), 1.0)
    with pytest.raises(ValueError, match="shape \\(9, 9\\).*at most 64 elements"):
        export_graph(lambda m: jnp.sum(m), np.ones((9, 9)))
    with pytest.raises(ValueError, match="shape \\(2, 2, 2\\)"):
        export_graph(lambda m: jnp.sum(m), np.ones((2, 2, 2)))
    with pytest.raises(TypeError, match="is not a number"):
        export_graph(lambda w: w, "a")


def test_arguments_parse_or_name_the_problem():
    assert parse_arguments(["w=0.5", "x=[1, 2]"]) == {"w": 0.5, "x": [1.0, 2.0]}
    for bad in ("w", "w=abc", "w=nan", "w=[]", 'w=[1, "a"]', "1w=2", "w=true"):
        with pytest.raises(ValueError, match="argument"):
            parse_arguments([bad])
    with pytest.raises(ValueError, match="twice"):
        parse_arguments(["w=1", "w=2"])
    with pytest.raises(ValueError, match="missing t; unknown q"):
        bind(vector_loss, dict(w=1.0, x=1.0, b=1.0, q=1.0))
    with pytest.raises(ValueError, match="package.module:function"):
        load_function("no_colon")
    with pytest.raises(ValueError, match="cannot import"):
        load_function("no_such_module_here:f")
    with pytest.raises(ValueError, match="has no 'nope'"):
        load_function("parity_tests.test_html_export:nope")
    with pytest.raises(ValueError, match="not a function"):
        load_function("parity_tests.test_html_export:ROOT")


def test_write_page_leaves_nothing_behind_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "page.html"

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_page(str(target), "<html></html>")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    write_page(str(target), "<html></html>")
    assert target.read_text() == "<html></html>"
    with pytest.raises(ValueError, match="does not exist"):
        write_page(str(tmp_path / "missing" / "page.html"), "x")
    with pytest.raises(ValueError, match="is a directory"):
        write_page(str(tmp_path), "x")


def test_explore_lists_the_hand_gradients_keys(capsys):
    assert explore.main(["--list"]) == 0
    out = capsys.readouterr().out
    for key in (
        "tiny_relu",
        "dead_relu",
        "two_weight",
        "square_plus",
        "affine_square",
        "two_layer_scalar",
        "sigmoid_neuron",
        "neuron",
        "two_layer",
    ):
        assert key in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["tiny_rleu"], "unknown example 'tiny_rleu'; the examples are tiny_relu, dead_relu"),
        (["tiny_relu", "--set", "w1=abc"], "argument 'w1=abc'"),
        (["tiny_relu", "--set", "q=1"], "--set q: tiny_relu has w1, b1"),
        (["tiny_relu", "w1=1"], "takes no NAME=VALUE arguments"),
        (["parity_tests.test_html_export:vector_valued", "w=[1,2]"], "one floating scalar"),
        (["parity_tests.test_html_export:uses_sin", "w=1"], "primitive 'sin'"),
        (["parity_tests.test_html_export:vector_loss", "w=1"], "missing x, b, t"),
        (["nowhere.module:f"], "cannot import"),
        (
            ["parity_tests.test_html_export:scalar_zoo", "a=1", "b=2", "--set", "a=2"],
            "--set changes an example's start",
        ),
    ],
)
def test_explore_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "page.html"
    with pytest.raises(SystemExit) as exit_info:
        explore.main(argv + ["--out", str(out)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_explore_imports_a_function_from_the_current_directory(tmp_path, capsys, monkeypatch):
    """As port.py and doctor.py do: `module:function` resolves from where the user stands,
    and `file.py:function` from a path."""
    (tmp_path / "my_losses_here.py").write_text("def loss(w):\n    return w * w + 1.0\n")
    monkeypatch.chdir(tmp_path)
    for spec in ("my_losses_here:loss", str(tmp_path / "my_losses_here.py") + ":loss"):
        path = tmp_path / "page.html"
        assert explore.main([spec, "w=1.5", "--no-torch", "--out", str(path)]) == 0
        assert f"wrote {path}: {spec}" in capsys.readouterr().out
        path.unlink()


def test_explore_unwritable_path_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        explore.main(["tiny_relu", "--out", str(tmp_path / "no" / "page.html")])
    assert exit_info.value.code == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        explore.main(["tiny_relu"])  # no --out
    assert exit_info.value.code == 2


def test_explore_help_does_not_import_jax():
    code = (
        "import runpy, sys; sys.argv = ['explore.py', '--help']\n"
        "try:\n    runpy.run_path('scripts/explore.py', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print('JAX' if 'jax' in sys.modules else 'NO JAX')"
    )
    path = os.pathsep.join([ROOT, os.path.join(ROOT, "scripts")])  # as `python scripts/explore.py`
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=path),
    )
    assert "package.module:function" in result.stdout
    assert result.stdout.strip().endswith("NO JAX")


def test_parity_html_refuses_an_unwritable_path_before_running(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parity_script.main(["--html", str(tmp_path / "no" / "r.html"), "--filter", "x"])
    assert exit_info.value.code == 2
    assert "--html" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def test_browser_that_cannot_start_is_a_clear_error(tmp_path, monkeypatch):
    from jaxgrad.html.browser import Browser, BrowserError, find_chromium

    with pytest.raises(BrowserError, match="closed its pipe"):
        Browser(str(tmp_path / "no-such-chromium"), timeout=20)
    monkeypatch.setenv("JAXGRAD_CHROMIUM", str(tmp_path / "no-such-chromium"))
    assert find_chromium() is None
    with pytest.raises(BrowserError, match="no Chromium found"):
        Browser()


def test_parity_page_links_the_plots_that_exist_and_puts_failures_first(tmp_path):
    from jaxgrad.html.report import write_parity_report
    from jaxgrad.parity import compare

    def row(name, area, report):
        return {
            "check": name,
            "area": area,
            "dtype": "float64",
            "passed": report.passed,
            "max_abs_err": report.max_abs_err,
            "max_rel_err": report.max_rel_err,
            "seconds": 0.1,
            "error": None,
            "leaves": report.to_dict()["leaves"],
        }

    same = compare({"w": np.ones(3)}, {"w": np.ones(3)})
    off = compare({"w": np.ones(3)}, {"w": np.ones(3) * 1.001})
    rows = [row("fine", "train", same), row("broken <b>", "diagnostics", off)]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "curve.png").write_bytes(b"png")
    (tmp_path / "out").mkdir()
    path = tmp_path / "out" / "report.html"
    write_parity_report(
        str(path),
        rows,
        versions={"torch": "x"},
        plots={
            "train": (str(tmp_path / "docs" / "curve.png"), "python scripts/train.py --plot c"),
            "diagnostics": (str(tmp_path / "docs" / "missing.png"), "python scripts/vanishing.py"),
        },
    )
    text = path.read_text()
    assert 'href="../docs/curve.png"' in text and "missing.png" not in text
    assert text.index("broken &lt;b&gt;") < text.index(">fine<")  # escaped, and first
    assert "1 passed, 1 failed" in text


def test_parity_html_writes_the_page(tmp_path, capsys):
    path = tmp_path / "report.html"
    assert parity_script.main(["--filter", "lesson example 1:", "--html", str(path)]) == 0
    assert f"wrote {path}" in capsys.readouterr().out
    text = path.read_text()
    assert "1 passed, 0 failed" in text and "lesson example 1: tiny_relu" in text
    assert "<script" not in text and "http://" not in text and "https://" not in text


def test_explore_writes_a_page_with_set_values_and_without_torch(tmp_path, capsys):
    import json

    path = tmp_path / "neuron.html"
    assert explore.main(["neuron", "--set", "x1=1.5", "--no-torch", "--out", str(path)]) == 0
    assert f"wrote {path}" in capsys.readouterr().out
    text = path.read_text()
    data = json.loads(
        text.split('<script id="graph-data" type="application/json">')[1].split("</script>")[0]
    )
    assert data["torch"] is None
    assert {i["label"]: i["value"] for i in data["inputs"]}["x1"] == 1.5
    assert "no torch numbers in this page" in text
