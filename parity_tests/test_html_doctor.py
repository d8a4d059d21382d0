"""The doctor's HTML page without a browser: its structure, its numbers, the script's
``--html`` flag and bad input (the browser test is in ``test_html_browser.py``).

The numbers in the page must be the doctor's own result objects' floats, exactly
(``diagnose`` and ``diagnose_optimizer`` are validated against torch in
``test_doctor*.py``); two of them are also recomputed here from an independent source:
the LayerNorm eps mistake's error with torch alone, and Adam's first step by hand in
numpy.
"""

from __future__ import annotations

import html.parser
import math
import types

import jax
import numpy as np
import optax
import pytest
import torch

from jaxgrad.doctor import diagnose, diagnose_optimizer
from jaxgrad.html.doctor import Session, doctor_page, write_doctor_report
from jaxgrad.html.report import environment
from parity_tests.test_doctor_script import _USER

D = torch.float64
LR, DECAY = 1e-2, 1e-2


def _user_doc():
    """``test_doctor_script``'s user file (a ``Net`` and its ``good`` and ``bad`` ports,
    the latter with flax's LayerNorm eps in ``body.1``) as a module."""
    module = types.ModuleType("user_doc_page")
    exec(compile(_USER, "user_doc_page.py", "exec"), module.__dict__)
    return module


def doctor_sessions() -> dict:
    """A port with flax's LayerNorm eps (diverging at ``body.1``), the same model ported
    right (the clean bill), and optax's AdamW standing in for torch's coupled Adam."""
    user = _user_doc()
    torch.manual_seed(0)
    module = user.Net().to(D)
    x = torch.from_numpy(np.random.default_rng(0).normal(size=(3, 4)))
    with jax.enable_x64(True):
        diverging = diagnose(module, user.bad(module), x)
        clean = diagnose(module, user.good(module), x)
        rng = np.random.default_rng(1)
        start = [rng.normal(size=(3, 2)), rng.normal(size=(2,))]
        grads = [[rng.normal(size=p.shape) * 0.01 for p in start] for _ in range(3)]
        tensors = [torch.nn.Parameter(torch.tensor(p)) for p in start]
        optimizer = diagnose_optimizer(
            torch.optim.Adam(tensors, lr=LR, weight_decay=DECAY),
            optax.adamw(LR, weight_decay=DECAY),
            grads,
        )
    sessions = [
        Session("LayerNorm eps as flax has it", diverging, "eps=1e-6 in body.1"),
        Session("the same model ported right", clean),
        Session("Adam with weight decay", optimizer, "port: optax.adamw"),
    ]
    return {"sessions": sessions, "module": module, "x": x, "start": start, "grads": grads}


class _Element:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []

    def walk(self):
        for child in self.children:
            if isinstance(child, _Element):
                yield child
                yield from child.walk()

    def find(self, tag, **attrs):
        """Descendants with ``tag`` whose attributes contain ``attrs`` (``class_`` matches
        one of the classes)."""

        def matches(e):
            for key, value in attrs.items():
                if key == "class_":
                    if value not in e.attrs.get("class", "").split():
                        return False
                elif e.attrs.get(key.replace("_", "-")) != value:
                    return False
            return e.tag == tag

        return [e for e in self.walk() if matches(e)]

    def all_text(self):
        return "".join(
            child if isinstance(child, str) else child.all_text() for child in self.children
        )


class _Page(html.parser.HTMLParser):
    VOID = {"meta", "br", "rect", "line", "input", "img"}

    def __init__(self, text):
        super().__init__()
        self.root = self.current = _Element("root", {}, None)
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        element = _Element(tag, {k: ("" if v is None else v) for k, v in attrs}, self.current)
        self.current.children.append(element)
        if tag not in self.VOID:
            self.current = element

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(_Element(tag, dict(attrs), self.current))

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        while self.current.tag != tag:  # tolerate nothing: the page must be well nested
            raise AssertionError(f"</{tag}> closes <{self.current.tag}>")
        self.current = self.current.parent

    def handle_data(self, data):
        self.current.children.append(data)


def parse(text) -> _Element:
    page = _Page(text)
    assert page.current is page.root, "unclosed elements"
    return page.root


def number(text):
    """A ``data-*`` number as JavaScript's ``+text`` reads it (empty: None)."""
    return None if text == "" else float(text)


@pytest.fixture(scope="module")
def built():
    data = doctor_sessions()
    data["text"] = doctor_page(data["sessions"], environment=environment({"torch": "test"}))
    data["page"] = parse(data["text"])
    return data


def _worst(comparison):
    return max(comparison["leaves"], key=lambda leaf: leaf["max_abs_err"])


def test_page_frame_environment_first_then_summary_then_sessions(built):
    text, page = built["text"], built["page"]
    assert "<script" not in text and "http://" not in text and "https://" not in text
    assert "default-src 'none'" in text  # the report page's policy: no request at all
    order = [
        text.index(needle)
        for needle in (
            'id="environment"',
            'id="verdict"',
            'class="summary sessions"',
            'id="session-0"',
            'id="session-1"',
            'id="session-2"',
        )
    ]
    assert order == sorted(order)
    env = page.find("table", id="environment")[0].all_text()
    for needle in ("jax 0.", "torch test", "float64: rtol 1e-10, atol 1e-12", "highest"):
        assert needle in env
    assert page.find("p", id="verdict")[0].all_text() == "1 clean, 2 diverging (3 sessions)"
    assert [r.all_text() for r in page.find("table", class_="summary")[0].find("tr")[1:]] == [
        "LayerNorm eps as flax has itmodellayer body.1norm_eps",
        "the same model ported rightmodelclean bill",
        "Adam with weight decayoptimizerstep 1coupled_vs_decoupled_decay",
    ]


def test_diverging_layer_is_marked_and_its_numbers_are_the_reports(built):
    report = built["sessions"][0].report
    section = built["page"].find("section", id="session-0")[0]
    assert section.attrs["data-first-layer"] == "body.1" == report.first_layer
    assert section.attrs["data-clean"] == "false"
    rows = section.find("table", class_="layers")[0].find("tr")[1:]
    assert (
        [r.attrs["data-layer"] for r in rows]
        == [r["path"] for r in report.layers]
        == ["body.0", "body.1", "head"]
    )
    assert [r.attrs["class"] for r in rows] == ["pass", "first fail", "pass"]
    for row, layer in zip(rows, report.layers):
        assert number(row.attrs["data-injected"]) == layer["injected"]
        assert number(row.attrs["data-end-to-end"]) == layer["end_to_end"]
        bars = {svg.attrs["data-kind"]: svg for svg in row.find("svg")}
        assert number(bars["injected"].attrs["data-error"]) == layer["injected"]
        assert (
            number(bars["injected"].attrs["data-tolerance"])
            == _worst(layer["injected_comparison"])["atol"]
            == 1e-12
        )
        assert number(bars["end_to_end"].attrs["data-error"]) == layer["end_to_end"]
    assert "FIRST OVER THE TIER" in rows[1].all_text()
    # each layer folds to its per-leaf tables; the diverging one (only) is unfolded
    details = section.find("details")
    assert [d.attrs["data-layer"] for d in details] == ["body.0", "body.1", "head"]
    assert ["open" in d.attrs for d in details] == [False, True, False]
    layer = report.layers[1]
    own, carried = details[1].find("table", class_="leaves")
    leaf = own.find("tr", data_leaf="out")[0]
    bars = {svg.attrs["data-kind"]: svg for svg in leaf.find("svg")}
    expected = layer["injected_comparison"]["leaves"][0]
    assert number(bars["abs"].attrs["data-error"]) == expected["max_abs_err"] == layer["injected"]
    assert number(bars["rel"].attrs["data-error"]) == expected["max_rel_err"]
    assert number(bars["rel"].attrs["data-tolerance"]) == expected["rtol"] == 1e-10
    assert bars["abs"].find("rect", class_="over"), "over the tier: a red bar"
    assert "FAIL" in leaf.all_text()
    assert (
        number(carried.find("tr", data_leaf="out")[0].find("svg")[0].attrs["data-error"])
        == layer["end_to_end_comparison"]["leaves"][0]["max_abs_err"]
    )
    # the ranked conventions with their evidence, in the report's order
    causes = section.find("table", class_="causes")[0].find("tr")[1:]
    assert [c.attrs["data-cause"] for c in causes] == [c.name for c in report.causes]
    assert (
        causes[0].attrs["data-cause"] == "norm_eps" and causes[0].attrs["data-explains"] == "true"
    )
    for row, cause in zip(causes, report.causes):
        assert number(row.attrs["data-before"]) == cause.error_before
        assert number(row.attrs["data-after"]) == cause.error_after
        assert cause.detail in row.all_text() and cause.signature in row.all_text()
    assert report.verdict in section.find("p", class_="verdict")[0].all_text()


def test_the_diverging_layers_error_from_torch_alone(built):
    """Independent of jaxgrad: torch's LayerNorm with eps 1e-6 against 1e-5 on the input
    torch's own ``body.1`` receives."""
    module, x = built["module"], built["x"]
    seen = {}
    handle = module.body[1].register_forward_hook(lambda m, args, out: seen.update(x=args[0]))
    with torch.no_grad():
        module(x)
        handle.remove()
        norm = module.body[1]
        flax_eps = torch.nn.functional.layer_norm(seen["x"], (4,), norm.weight, norm.bias, 1e-6)
        expected = float((flax_eps - norm(seen["x"])).abs().max())
    row = built["page"].find("tr", data_layer="body.1")[0]
    assert expected > 1e-8  # far over the tier, so the page's number is the mistake itself
    assert abs(number(row.attrs["data-injected"]) - expected) <= 1e-10 * expected


def test_clean_bill_session(built):
    report = built["sessions"][1].report
    section = built["page"].find("section", id="session-1")[0]
    assert report.clean and section.attrs["data-clean"] == "true"
    verdict = section.find("p", class_="verdict")[0]
    assert verdict.attrs["class"] == "verdict pass" and "clean bill" in verdict.all_text()
    assert not section.find("tr", class_="first") and not section.find("table", class_="causes")
    assert not any("open" in d.attrs for d in section.find("details"))
    assert all(svg.find("rect", class_="under") for svg in section.find("svg"))


def test_optimizer_session_steps_and_conventions(built):
    report = built["sessions"][2].report
    section = built["page"].find("section", id="session-2")[0]
    rows = section.find("table", class_="steps")[0].find("tr")[1:]
    assert [number(r.attrs["data-error"]) for r in rows] == report.errors
    assert [r.attrs["class"].split()[0] for r in rows] == ["first", "fail", "fail"]
    assert section.attrs["data-first-step"] == "1" and report.first_step == 1
    # step 1 by hand: torch's Adam takes g + wd·p, optax.adamw adds wd·p after; the
    # first Adam step of either is lr·g/(|g| + eps)
    p, g = built["start"], built["grads"][0]
    torch_step = [
        pi - LR * (gi + DECAY * pi) / (np.abs(gi + DECAY * pi) + 1e-8) for pi, gi in zip(p, g)
    ]
    optax_step = [pi - LR * (gi / (np.abs(gi) + 1e-8) + DECAY * pi) for pi, gi in zip(p, g)]
    by_hand = max(float(np.max(np.abs(a - b))) for a, b in zip(torch_step, optax_step))
    assert number(rows[0].attrs["data-error"]) == pytest.approx(by_hand, rel=1e-9)
    step = section.find("details", data_step="1")[0]
    assert "open" in step.attrs
    leaves = step.find("tr")
    shown = {
        tr.attrs["data-leaf"]: number(tr.find("svg")[0].attrs["data-error"])
        for tr in leaves
        if "data-leaf" in tr.attrs
    }
    assert shown == {leaf["path"]: leaf["max_abs_err"] for leaf in report.steps[0]["leaves"]}
    assert set(shown) == {"params.0", "params.1"} and max(shown.values()) == report.errors[0]
    causes = section.find("table", class_="causes")[0].find("tr")[1:]
    assert [c.attrs["data-cause"] for c in causes] == [c[0] for c in report.causes]
    assert causes[0].attrs["data-cause"] == "coupled_vs_decoupled_decay"
    assert [number(c.attrs["data-distance"]) for c in causes] == [c[2] for c in report.causes]


def test_no_sessions_is_an_error_and_leaves_an_existing_page_alone(tmp_path):
    path = tmp_path / "doctor.html"
    path.write_text("previous page")
    with pytest.raises(ValueError, match="`sessions` is empty"):
        write_doctor_report(str(path), [])
    assert path.read_text() == "previous page"
    assert [p.name for p in tmp_path.iterdir()] == ["doctor.html"]


# --- scripts/doctor.py --html ----------------------------------------------------------
@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "user_doc.py").write_text(_USER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_script_writes_the_page_of_the_user_session(user_module, capsys, built):
    import doctor

    path = user_module / "out.html"
    argv = ["user_doc:Net", "--port", "user_doc:bad", "--input-shape", "3,4", "--html", str(path)]
    assert doctor.main(argv) == 1
    assert f"wrote {path}" in capsys.readouterr().out
    page = parse(path.read_text())
    # the script seeds as doctor_sessions() does: the same model, input and numbers
    report = built["sessions"][0].report
    row = page.find("tr", class_="first")[0]
    assert row.attrs["data-layer"] == report.first_layer == "body.1"
    assert [
        number(r.attrs["data-injected"]) for r in page.find("tr") if "data-layer" in r.attrs
    ] == [r["injected"] for r in report.layers]
    title = page.find("section", id="session-0")[0].find("h2")[0].all_text()
    assert title == "user_doc:Net ported by user_doc:bad"


def test_script_rejected_input_writes_nothing(user_module, capsys):
    import doctor

    path = user_module / "out.html"
    argv = ["user_doc:Net", "--port", "user_doc:good", "--input-shape", "3,5", "--html", str(path)]
    assert doctor.main(argv) == 2
    assert "rejects the example input" in capsys.readouterr().err
    assert not path.exists()


@pytest.mark.parametrize(
    "where, message",
    [
        ("missing/out.html", "directory missing does not exist"),
        (".", "is a directory; give a file name"),
    ],
)
def test_script_refuses_an_unwritable_path_before_any_work(
    tmp_path, monkeypatch, capsys, where, message
):
    import doctor

    monkeypatch.chdir(tmp_path)

    def no_work(*args):
        raise AssertionError("the demo ran before the path was checked")

    monkeypatch.setattr(doctor, "_optimizer_session", no_work)
    with pytest.raises(SystemExit) as exit_info:
        doctor.main(["--demo", "optimizer", "--html", where])
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0] and "--html" in errors[0]
    assert [p.name for p in tmp_path.iterdir()] == []


def test_unknown_demo_is_refused(capsys):
    import doctor

    with pytest.raises(SystemExit) as exit_info:
        doctor.main(["--demo", "nope", "--html", "x.html"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_finite_numbers_only_where_the_report_has_them():
    from jaxgrad.html.report import data_number

    assert [data_number(v) for v in (None, math.inf, -math.inf, 0.1, 1e-300)] == [
        "",
        "Infinity",
        "-Infinity",
        "0.1",
        "1e-300",
    ]
    assert float(data_number(2.4818263945717963)) == 2.4818263945717963


def test_demo_page(tmp_path, capsys):
    """The optimizer demo through ``--html``. (The ResNet demo, 11 s, is not run here:
    its rounds are drawn by the same model sections the tests above check.)"""
    import doctor

    path = tmp_path / "optimizer.html"
    assert doctor.main(["--demo", "optimizer", "--html", str(path)]) == 0
    printed = capsys.readouterr().out
    page = parse(path.read_text())
    titles = [s.find("h2")[0].all_text() for s in page.find("section", class_="session")]
    assert titles == ["Adam with weight decay", "AdamW defaults", "RMSprop"]
    summary = page.find("table", class_="summary")[0].find("tr")[1:]
    assert all("step 1" in row.all_text() for row in summary)
    # every verdict the demo printed is on the page, in the same order
    verdicts = [
        line[len("verdict: ") :] for line in printed.splitlines() if line.startswith("verdict: ")
    ]
    assert [p.all_text()[len("verdict: ") :] for p in page.find("p", class_="verdict")] == verdicts
