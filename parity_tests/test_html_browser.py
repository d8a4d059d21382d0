"""The explorer and the parity report in a real headless Chromium.

One browser serves the whole module. Each page is loaded from a ``file://`` URL and
must ask for nothing else (no network, no CDN). The explorer is driven as a reader
drives it — Step to the end, Reset, sliders moved — and what it shows (the full-
precision ``data-value`` of each cell) is compared with ``jax.grad``.

Tolerances: the page computes in JavaScript doubles. ``+ − × ÷`` are correctly rounded
IEEE-754 operations in both, and the page evaluates them in the order JAX's rules do,
so for graphs of those (tiny_relu) the float64 tier holds with room to spare (in
practice the numbers are identical). ``exp``, ``log``, ``tanh`` come from different
libraries (V8's fdlibm port, XLA's CPU kernels); each is within a couple of ulps
(~4e-16 relative), and the graphs here chain fewer than ten such operations with
condition numbers below 10, so the relative difference stays below ~1e-13 — still
three orders of magnitude inside the float64 tier's rtol 1e-10, which is therefore the
tolerance used for them too. The gradient-check panel's central difference is held to
the finite-difference tier (atol 1e-8, rtol 1e-6) against ``jax.grad``.

Screenshots are taken in every run (into the test's temporary folder; set
``JAXGRAD_SCREENSHOTS=docs`` to refresh the README's images) and checked to be pages
that rendered: the PNG has the document's size and is not blank, and each SVG graph
has the size its layout implies.
"""

from __future__ import annotations

import io
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import parity as parity_script
import pytest
import torch
from parity_checks import all_checks
from parity_checks.harness import Check

from jaxgrad.html import explorer_page, export_graph, write_page
from jaxgrad.html.doctor import write_doctor_report
from jaxgrad.html.examples import EXAMPLES, bind
from jaxgrad.html.report import write_parity_report
from jaxgrad.lessons import two_layer
from jaxgrad.parity import assert_parity, compare
from parity_tests.test_html_doctor import doctor_sessions
from parity_tests.test_html_export import scalar_zoo, vector_loss
from torchref.replay import replay

FD_TIER = dict(atol=1e-8, rtol=1e-6)
VECTOR_POINT = dict(w=[0.3, -0.2, 0.5], x=[1.0, 2.0, -1.5], b=0.25, t=0.1)


def _explorer(folder, name, fn, values, title):
    graph = export_graph(fn, *values, title=title)
    torch_side = replay(graph)
    torch_side.pop("autograd_graph")
    path = folder / f"{name}.html"
    write_page(str(path), explorer_page(graph, torch=torch_side))
    return {"url": path.as_uri(), "graph": graph, "fn": fn}


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pages")
    built = {}
    for key in ("tiny_relu", "neuron"):
        example = EXAMPLES[key]
        built[key] = _explorer(folder, key, example.fn, list(example.point.values()), example.title)
    example = EXAMPLES["two_layer"]
    built["two_layer"] = _explorer(
        folder, "two_layer", example.fn, bind(example.fn, example.point), example.title
    )
    built["zoo"] = _explorer(folder, "zoo", scalar_zoo, [0.7, 1.3], "scalar_zoo")
    built["vector"] = _explorer(
        folder, "vector", vector_loss, bind(vector_loss, VECTOR_POINT), "vector_loss"
    )
    return built


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    """Where screenshots go: a temporary folder, and ``$JAXGRAD_SCREENSHOTS`` if set."""
    return tmp_path_factory.mktemp("screenshots"), os.environ.get("JAXGRAD_SCREENSHOTS")


# --- reading the page -----------------------------------------------------------------
def _open(browser, page):
    browser.open(page["url"])
    assert browser.evaluate("window.explorerReady === true")
    assert browser.requests == [page["url"]], "the page asked for something besides itself"


def _click(browser, button):
    browser.evaluate(f"document.getElementById('{button}').click()")


def _position(browser):
    return browser.evaluate(
        "[+document.getElementById('position').dataset.position, "
        "+document.getElementById('position').dataset.total]"
    )


def _value(text):
    return None if text in ("", None) else json.loads(text)


def _step_rows(browser):
    rows = browser.evaluate("""[...document.querySelectorAll('#step-table tbody tr')].map(tr =>
        Object.fromEntries([['node', tr.dataset.node], ['input', tr.dataset.input],
          ...[...tr.children].map(td => [td.className, [td.dataset.value, td.textContent]])]))""")
    for row in rows:
        for key in ("local", "upstream", "product", "jax", "torch"):
            row[key] = _value(row[key][0])  # "" where the page shows — (or a vjp)
        row["grad-fn"] = row["grad-fn"][1]
    return rows


def _set_sliders(browser, values: dict) -> dict:
    """Move each slider like a reader; returns the values the page actually took."""
    taken = {}
    for label, value in values.items():
        taken[label] = float(
            browser.evaluate(f"""(() => {{
            const range = document.querySelector('input[data-input="{label}"]');
            range.value = "{value!r}"; range.dispatchEvent(new Event('input'));
            return range.value; }})()""")
        )
    return taken


def _shown(browser):
    """Loss, per-input values and gradients, and the gradient-check panel, as shown."""
    state = browser.evaluate("""({
        loss: document.getElementById('loss').dataset.value,
        rows: [...document.querySelectorAll('#grads tbody tr')].map(tr => [tr.dataset.input,
          tr.querySelector('.value').dataset.value, tr.querySelector('.grad').dataset.value,
          tr.querySelector('.jax').dataset.value]),
        check: ['check-input', 'check-analytic', 'check-numeric', 'check-verdict'].map(id =>
          id === 'check-input' ? document.getElementById(id).value
                               : document.getElementById(id).dataset.value),
        stale: !document.getElementById('stale').hidden})""")
    return {
        "loss": _value(state["loss"]),
        "point": {label: _value(v) for label, v, _, _ in state["rows"]},
        "grads": {label: _value(g) for label, _, g, _ in state["rows"]},
        "jax_column": {label: _value(j) for label, _, _, j in state["rows"]},
        "check": dict(zip(("input", "analytic", "numeric", "verdict"), state["check"])),
        "stale": state["stale"],
    }


def _jax(fn, values):
    """``(loss, grads)`` of ``fn`` at ``values`` with jax, float64, every argument."""
    with jax.enable_x64(True):
        args = [jnp.asarray(v, jnp.float64) for v in values]
        loss, grads = jax.value_and_grad(fn, argnums=tuple(range(len(args))))(*args)
    return float(loss), [np.asarray(g) for g in grads]


def _assert_shown_matches_jax(shown, fn, labels):
    loss, grads = _jax(fn, [shown["point"][label] for label in labels])
    assert_parity(
        {"loss": np.float64(loss), **dict(zip(labels, grads))},
        {
            "loss": np.float64(shown["loss"]),
            **{label: np.asarray(shown["grads"][label], np.float64) for label in labels},
        },
    )
    checked = shown["check"]["input"]
    expected = grads[labels.index(checked)]
    report = compare(
        {checked: np.float64(expected)}, {checked: np.float64(shown["check"]["numeric"])}, **FD_TIER
    )
    assert report.passed, report.table()
    assert shown["check"]["verdict"] == "pass"
    return grads


# --- the explorer ---------------------------------------------------------------------
def test_step_walks_the_backward_pass_node_by_node_then_reset(browser, pages, shots):
    page = pages["tiny_relu"]
    _open(browser, page)
    operations = [n for n in page["graph"]["nodes"] if n["op"] != "constant"]
    # the page opens with the forward pass done, as the lesson's explorer does
    assert _position(browser) == [len(operations), 2 * len(operations)]
    steps = []
    while browser.evaluate("!document.getElementById('step').disabled"):
        _click(browser, "step")
        steps.append(_step_rows(browser))
        if len(steps) == 3:
            _screenshot(browser, shots, "explorer.png")
    assert len(steps) == len(operations)
    torch_side = replay(page["graph"])
    for rows in steps:
        assert rows, "each backward step shows at least one input"
        for row in rows:
            # the page's product, JAX's step and torch's grad_fn for the same (node, input)
            assert row["product"] == pytest.approx(row["local"] * row["upstream"], rel=1e-15)
            assert_parity(
                {"jax": np.float64(row["jax"]), "torch": np.float64(row["torch"])},
                {"jax": np.float64(row["product"]), "torch": np.float64(row["product"])},
            )
            assert row["grad-fn"] == torch_side["grad_fn"][row["node"]]
    # the gradients on the backward graph's input nodes are jax.grad's
    labels = list(EXAMPLES["tiny_relu"].point)
    _, grads = _jax(page["fn"], EXAMPLES["tiny_relu"].point.values())
    shown = browser.evaluate("""Object.fromEntries([...document.querySelectorAll(
        '#backward g.node.input')].map(g => [g.querySelector('title').textContent, g.dataset.grad]))""")
    assert_parity(
        {label: np.float64(g) for label, g in zip(labels, grads)},
        {label: np.float64(_value(shown[f"∂L/∂{label}"])) for label in labels},
    )

    _click(browser, "reset")
    assert _position(browser)[0] == 0
    assert _step_rows(browser) == []
    assert browser.evaluate("""[...document.querySelectorAll(`#forward g.node.operation,
        #forward g.node.output, #backward g.node`)].every(g => !g.dataset.value && !g.dataset.grad)""")
    _click(browser, "step")  # the first forward operation: w1 · x = 1
    first = browser.evaluate(
        f"document.querySelector('#forward g[data-id=\"{operations[0]['id']}\"]').dataset.value"
    )
    assert _value(first) == operations[0]["value"] == 1.0


def test_sliders_recompute_values_gradients_and_the_check(browser, pages):
    page = pages["tiny_relu"]
    _open(browser, page)
    labels = list(EXAMPLES["tiny_relu"].point)
    start = _shown(browser)
    assert not start["stale"]
    assert start["jax_column"] == start["grads"]  # at the exported point the columns agree
    _set_sliders(browser, {"w1": -0.37, "b1": 1.23, "x": 1.7, "y": -0.4})
    moved = _shown(browser)
    assert moved["stale"] and all(v is None for v in moved["jax_column"].values())
    assert moved["point"]["w1"] == -0.37
    _assert_shown_matches_jax(moved, page["fn"], labels)
    # relu at exactly 0 (w1·x + b1 = 0.5·2 − 1): jax.nn.relu's rule gives gradient 0, and
    # the central difference straddles the kink, so the check rightly disagrees there
    _set_sliders(browser, {"w1": 0.5, "x": 2.0, "b1": -1.0})
    tie = _shown(browser)
    loss, grads = _jax(page["fn"], [tie["point"][label] for label in labels])
    assert_parity(
        {"loss": np.float64(loss), **dict(zip(labels, grads))},
        {
            "loss": np.float64(tie["loss"]),
            **{label: np.float64(tie["grads"][label]) for label in labels},
        },
    )
    assert tie["grads"]["w1"] == 0.0 == float(grads[0])
    assert tie["check"]["verdict"] == "fail" and tie["check"]["numeric"] != 0.0


def test_neuron_sliders_reproduce_the_lessons_observations(browser, pages):
    page = pages["neuron"]
    _open(browser, page)
    labels = list(EXAMPLES["neuron"].point)
    start = _shown(browser)
    assert start["grads"]["w2"] == 0.0  # x2 = 0: its weight cannot learn from this case
    assert start["grads"]["w1"] == pytest.approx(-0.212, abs=5e-4)  # lesson 001: −0.212
    _assert_shown_matches_jax(start, page["fn"], labels)
    _set_sliders(browser, {"x1": 1.25, "x2": -0.75, "w2": 0.4})
    _assert_shown_matches_jax(_shown(browser), page["fn"], labels)
    # saturate: w1 and b at their maximums, the sigmoid flattens, every gradient shrinks
    high = browser.evaluate("""Object.fromEntries(['w1', 'b'].map(k =>
        [k, document.querySelector(`input[data-input="${k}"]`).max]))""")
    _set_sliders(browser, {k: float(v) for k, v in high.items()})
    saturated = _shown(browser)
    _assert_shown_matches_jax(saturated, page["fn"], labels)
    assert abs(saturated["grads"]["w1"]) < abs(start["grads"]["w1"]) / 10


def test_vector_function_with_transcendentals_matches_jax(browser, pages):
    page = pages["vector"]
    _open(browser, page)
    labels = list(VECTOR_POINT)
    # w and x are vectors (no slider); b and t are scalars (a slider each)
    assert browser.evaluate("document.querySelectorAll('#sliders input').length") == 2
    _assert_shown_matches_jax(_shown(browser), page["fn"], labels)
    _set_sliders(browser, {"b": 0.73, "t": -0.31})
    browser.evaluate("""(() => { const s = document.getElementById('check-input');
        s.value = 't'; s.dispatchEvent(new Event('change')); })()""")
    shown = _shown(browser)
    assert shown["check"]["input"] == "t"
    _assert_shown_matches_jax(shown, page["fn"], labels)


def test_every_other_primitive_matches_jax_including_ties(browser, pages):
    page = pages["zoo"]
    _open(browser, page)
    _assert_shown_matches_jax(_shown(browser), page["fn"], ["a", "b"])
    _set_sliders(browser, {"a": -1.37, "b": 2.91})
    _assert_shown_matches_jax(_shown(browser), page["fn"], ["a", "b"])
    # a == b: min and max split their gradient half and half, in JAX and in the page
    _set_sliders(browser, {"a": 1.5, "b": 1.5})
    shown = _shown(browser)
    loss, grads = _jax(page["fn"], [1.5, 1.5])
    assert_parity(
        {"loss": np.float64(loss), "a": grads[0], "b": grads[1]},
        {
            "loss": np.float64(shown["loss"]),
            "a": np.float64(shown["grads"]["a"]),
            "b": np.float64(shown["grads"]["b"]),
        },
    )


def test_two_layer_matrices_match_the_hand_written_backward(browser, pages):
    page = pages["two_layer"]
    _open(browser, page)
    data = two_layer.lesson_data()
    hand = two_layer.numpy_backward(
        data["X"], data["y"], data["W1"], data["b1"], data["W2"], data["b2"]
    )
    loss = two_layer.numpy_forward(
        data["X"], data["y"], data["W1"], data["b1"], data["W2"], data["b2"]
    )[4]
    # torch's layout on the page: Linear.weight is the lesson's W transposed
    expected = {
        "loss": np.float64(loss),
        "params['0.weight']": hand["W1"].T,
        "params['0.bias']": hand["b1"].reshape(-1),
        "params['2.weight']": hand["W2"].T,
        "params['2.bias']": hand["b2"].reshape(-1),
    }
    shown = _shown(browser)
    assert_parity(
        expected,
        {
            "loss": np.float64(shown["loss"]),
            **{
                k: np.asarray(shown["grads"][k]).reshape(v.shape)
                for k, v in expected.items()
                if k != "loss"
            },
        },
    )
    # no scalar input, so no slider; the gradient check nudges one matrix element
    assert browser.evaluate("document.querySelectorAll('#sliders input').length") == 0
    browser.evaluate("""(() => { const s = document.getElementById('check-input');
        s.value = "params['0.weight']\\u00005"; s.dispatchEvent(new Event('change')); })()""")
    shown = _shown(browser)
    report = compare(
        {"w[1, 2]": np.float64(hand["W1"].T[1, 2])},
        {"w[1, 2]": np.float64(shown["check"]["numeric"])},
        **FD_TIER,
    )
    assert report.passed, report.table()
    assert shown["check"]["verdict"] == "pass"
    steps = 0
    while browser.evaluate("!document.getElementById('step').disabled"):
        _click(browser, "step")
        steps += 1
    operations = [n for n in page["graph"]["nodes"] if n["op"] != "constant"]
    assert steps == len(operations)
    for rows in [_step_rows(browser)]:  # the last step: the first transpose's vjp
        for row in rows:
            assert_parity(
                {"torch": np.asarray(row["torch"])}, {"torch": np.asarray(row["product"])}
            )


# --- rendering and screenshots --------------------------------------------------------
def _screenshot(browser, shots, name, *, keep_height=None):
    """The whole page as a PNG, checked to have rendered; the docs' copy (a 64-colour
    palette keeps it small) is cut to ``keep_height`` pixels when given."""
    folder, keep = shots
    path = folder / name
    width, height = browser.screenshot(str(path))
    from PIL import Image

    with Image.open(path) as image:
        assert image.size == (width, height)
        pixels = np.asarray(image.convert("L"), np.float64)
        if keep:
            kept = image.crop((0, 0, width, min(height, keep_height or height)))
            kept.convert("RGB").quantize(64).save(os.path.join(keep, name), optimize=True)
    assert pixels.std() > 10, f"{name} looks blank"
    return path


@pytest.mark.parametrize("key", ["tiny_relu", "neuron", "vector", "two_layer"])
def test_explorer_graphs_render_at_their_layout_size(browser, pages, key):
    page = pages[key]
    _open(browser, page)
    graph = page["graph"]
    columns = graph["columns"]
    per_column = {}
    for column in columns.values():
        per_column[column] = per_column.get(column, 0) + 1
    # the layout: 16 px padding, boxes 150 × 54 every 176 px across and 66 px down
    width = 2 * 16 + (max(columns.values())) * 176 + 150
    height = 2 * 16 + (max(per_column.values()) - 1) * 66 + 54
    for svg in ("forward", "backward"):
        box = browser.evaluate(f"""(() => {{ const r = document.getElementById('{svg}')
            .getBoundingClientRect(); return [r.width, r.height,
            document.querySelectorAll('#{svg} g.node').length,
            document.querySelectorAll('#{svg} path.edge').length]; }})()""")
        assert box[:2] == [width, height]
        assert box[2] == len(columns)
        assert box[3] > 0


def test_parity_report_page(browser, shots, tmp_path):
    checks = [
        c
        for c in all_checks()
        if c.name in ("lesson example 1: tiny_relu", "explorer square_plus: grad_fn per node")
    ]

    def wrong_backward():
        # the policy's own example: a backward 0.1 % off must be caught
        reference = {"weight": np.linspace(-1.0, 1.0, 6), "bias": np.array([0.5])}
        candidate = {"weight": reference["weight"] * 1.001, "bias": reference["bias"]}
        return compare(reference, candidate, name="backward scaled by 1.001")

    checks.append(
        Check(
            name="deliberately wrong backward (x1.001)",
            dtype="float64",
            run=wrong_backward,
            area="lessons",
        )
    )
    rows = parity_script.run(checks, out=io.StringIO())
    path = tmp_path / "report.html"
    write_parity_report(str(path), rows, versions={"torch": "test"}, seconds=1.0, plots={})
    browser.open(path.as_uri())
    assert browser.requests == [path.as_uri()]
    page = browser.evaluate("""({
        order: [...document.querySelectorAll('table.summary tbody tr')].map(tr => tr.dataset.check),
        verdict: document.getElementById('verdict').textContent,
        open: [...document.querySelectorAll('details')].map(d => d.open),
        env: document.getElementById('environment').textContent,
        bars: [...document.querySelectorAll('details.fail svg.bar')].map(s => [s.dataset.kind,
          +s.dataset.error, +s.dataset.tolerance, s.querySelector('rect.over, rect.under').getAttribute('class'),
          +s.querySelector('rect.over, rect.under').getAttribute('width'),
          s.getBoundingClientRect().width])})""")
    assert page["order"][0] == "deliberately wrong backward (x1.001)"  # failures first
    assert page["verdict"].startswith("2 passed, 1 failed")
    assert page["open"] == [True, False, False]
    for needle in ("jax 0.", "torch test", "float64: rtol 1e-10, atol 1e-12", "highest"):
        assert needle in page["env"]
    weight_abs = [b for b in page["bars"] if b[0] == "abs"][0]
    # the weight's worst error is 0.001 × 1.0; the bar ends at log10(1e-3) on the 1e-18…1 scale
    assert weight_abs[1] == pytest.approx(1e-3, rel=1e-12)
    assert weight_abs[3] == "over" and weight_abs[4] == pytest.approx(240 * 15 / 18, abs=0.1)
    assert weight_abs[5] == 240
    _screenshot(browser, shots, "parity_report.png")


def _bar_x(value):
    """Where ``value`` sits on the bars' scale, 240 px for 1e-18 … 1, computed here."""
    return 0.0 if not value else 240 * (min(max(np.log10(value), -18), 0) + 18) / 18


def test_doctor_page(browser, shots, tmp_path):
    data = doctor_sessions()
    report = data["sessions"][0].report
    path = tmp_path / "doctor.html"
    write_doctor_report(str(path), data["sessions"], versions={"torch": torch.__version__})
    browser.open(path.as_uri())
    assert browser.requests == [path.as_uri()]

    def folds():
        return browser.evaluate("""[...document.querySelectorAll('#session-0 details')].map(d =>
            [d.dataset.layer, d.open, d.getBoundingClientRect().height])""")

    start = folds()
    assert [(layer, opened) for layer, opened, _ in start] == [
        ("body.0", False),
        ("body.1", True),
        ("head", False),
    ]
    # docs/doctor_report.png: the page as it opens, down to the clean bill's verdict
    _screenshot(browser, shots, "doctor_report.png", keep_height=1262)
    first = browser.evaluate("""(() => { const td = document.querySelector('#session-0 tr.first td');
        return [td.closest('tr').dataset.layer, getComputedStyle(td).backgroundColor]; })()""")
    assert first == ["body.1", "rgb(252, 232, 230)"]  # the first diverging layer, highlighted
    # a reader unfolds a layer that stayed within the tier: its per-leaf tables appear
    browser.evaluate("""document.querySelector('#session-0 details[data-layer="body.0"] > summary')
        .click()""")
    unfolded = folds()
    assert unfolded[0][1] and unfolded[0][2] > start[0][2] + 40
    # the diverging layer's bars, read back from the rendered page
    bars = browser.evaluate("""[...document.querySelectorAll(
        '#session-0 details[data-layer="body.1"] table.leaves')].map(table =>
        [...table.querySelectorAll('svg.bar')].map(s => { const r = s.querySelector(
          'rect.over, rect.under'), box = s.getBoundingClientRect();
          return [s.closest('tr').dataset.leaf, s.dataset.kind, +s.dataset.error,
                  +s.dataset.tolerance, r.getAttribute('class'), +r.getAttribute('width'),
                  +s.querySelector('line.tol').getAttribute('x1'), box.width, box.height]; }))""")
    layer = report.layers[1]
    assert len(bars) == 2  # own, then end to end
    for shown, comparison in zip(
        bars, (layer["injected_comparison"], layer["end_to_end_comparison"])
    ):
        (leaf,) = comparison["leaves"]
        assert [b[:2] for b in shown] == [["out", "abs"], ["out", "rel"]]
        for (_, _kind, error, tolerance, verdict, width, tick, box_w, box_h), key, tol in zip(
            shown, ("max_abs_err", "max_rel_err"), ("atol", "rtol")
        ):
            assert error == leaf[key] and tolerance == leaf[tol]
            assert verdict == ("over" if leaf[key] > leaf[tol] else "under")
            assert width == pytest.approx(_bar_x(error), abs=0.06)
            assert tick == pytest.approx(_bar_x(tolerance), abs=0.06)
            assert [box_w, box_h] == [240, 12]
    assert bars[0][0][2] == layer["injected"] and bars[0][0][4] == "over"
    # the ranked conventions: the catalogue's answer, from the report
    causes = browser.evaluate("""[...document.querySelectorAll('#session-0 table.causes tbody tr')]
        .map(tr => [tr.dataset.cause, +tr.dataset.before, +tr.dataset.after])""")
    assert causes == [[c.name, c.error_before, c.error_after] for c in report.causes]
    assert causes[0][0] == "norm_eps"
    steps = browser.evaluate("""[...document.querySelectorAll('#session-2 table.steps tbody tr')]
        .map(tr => +tr.dataset.error)""")
    assert steps == data["sessions"][2].report.errors
