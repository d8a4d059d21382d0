"""The convention doctor's sessions as one self-contained HTML page.

``doctor_page(sessions, environment=…)`` draws what ``scripts/doctor.py`` diagnosed,
one ``Session`` each: a model port (``jaxgrad.doctor.Report``) or an optimizer
(``jaxgrad.doctor.OptimizerReport``). It is the parity report's page
(``jaxgrad.html.report``: the same frame, environment table, stylesheet, folded
sections and per-leaf tables with log-scale bars), laid out for the doctor:

- a summary of the sessions (clean bill or where each leaves the tier, the cause);
- per session, the verdict, then the per-layer table in forward order (the first
  layer whose own error exceeds the tier highlighted, ``tr.first``), or for an
  optimizer the per-step table; each error with its bar against the atol of its
  worst leaf;
- the ranked conventions with their evidence: what the port does, the layer's error
  before and after undoing it (bar against the same atol), whether that brings it
  within the tier, the signature to recognise it by;
- every layer (step) folded to its per-leaf tables (``leaf_table``): the layer's own
  error (fed torch's input) and the error carried end to end; layers over the tier
  unfolded, as failures are in the parity report.

Every number the page shows is also in a ``data-*`` attribute as the shortest
round-trip decimal of the report's own float, for tests and scripts to read back.
No script, no network request.
"""

from __future__ import annotations

import html
from typing import NamedTuple

from jaxgrad.html.report import (
    bar,
    data_number,
    document,
    environment,
    folded,
    leaf_table,
    scientific,
)


class Session(NamedTuple):
    """One diagnosis on the page."""

    title: str
    report: object  # jaxgrad.doctor.Report or OptimizerReport
    note: str = ""  # shown under the title: what was planted, fixed, compared


def _worst_atol(comparison: dict | None):
    """The atol of the leaf with the largest absolute error (the bars' tick)."""
    leaves = [leaf for leaf in (comparison or {}).get("leaves", []) if leaf["atol"] is not None]
    if not leaves:
        return None
    return max(leaves, key=lambda leaf: leaf["max_abs_err"] or 0.0)["atol"]


def _details_body(parts) -> str:
    """Per-leaf tables under headings; structure problems (a missing buffer, a
    different tree) as error lines."""
    out = []
    for heading, comparison in parts:
        out.append(f"<h4>{html.escape(heading)}</h4>")
        out.extend(
            f'<p class="error">{html.escape(problem)}</p>'
            for problem in comparison.get("structure_problems", [])
        )
        out.append(leaf_table(comparison.get("leaves", [])))
    return "".join(out)


def _verdict(report) -> str:
    return (
        f'<p class="verdict {"pass" if report.clean else "fail"}">verdict: '
        f"{html.escape(report.verdict)}</p>"
    )


def _correspondence(report) -> str:
    """A traced port: where each torch parameter was found, what could not be matched."""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in report.params or ())
    unused = (
        f"<p>port leaves holding no torch parameter: {html.escape(', '.join(report.unused))}</p>"
        if report.unused
        else ""
    )
    unmatched = "".join(
        f'<li data-unmatched="{html.escape(path)}">could not match '
        f"<b>{html.escape(path or '(the module)')}</b>: {html.escape(why)}</li>"
        for path, why in report.unmatched
    )
    return (
        f"<h3>the port: a {html.escape(report.port_kind)}, traced ({report.values} values "
        "recorded); torch's parameters found in it by value</h3>"
        f'<ul class="correspondence">{items}</ul>{unused}'
        + (f'<ul class="unmatched">{unmatched}</ul>' if unmatched else "")
    )


def _model_section(number: int, session: Session) -> str:
    report = session.report
    anchor = f"session-{number}"
    first_row = next((i for i, r in enumerate(report.layers) if r["exceeds"]), None)
    rows, sections = [], []
    for i, layer in enumerate(report.layers):
        name = layer["path"] + (f" #{layer['index']}" if layer["index"] else "")
        own, carried = layer["injected_comparison"], layer["end_to_end_comparison"]
        classes = ("first " if i == first_row else "") + ("fail" if layer["exceeds"] else "pass")
        result = (
            "FIRST OVER THE TIER"
            if i == first_row
            else "over the tier"
            if layer["exceeds"]
            # a float32 layer torch's own rounding puts outside the tier
            else f"within, by {html.escape(layer['rule'])}"
            if layer.get("rule")
            else "within"
        )
        rows.append(
            f'<tr class="{classes}" data-layer="{html.escape(layer["path"])}" '
            f'data-index="{layer["index"]}" data-end-to-end="{data_number(layer["end_to_end"])}" '
            f'data-injected="{data_number(layer["injected"])}">'
            f'<td><a href="#{anchor}-layer-{i}">{html.escape(name) or "(the module)"}</a></td>'
            f"<td>{html.escape(layer['class_name'])}</td>"
            f"<td>{scientific(layer['end_to_end'])}</td>"
            f"<td>{bar(layer['end_to_end'], _worst_atol(carried), kind='end_to_end')}</td>"
            f"<td>{scientific(layer['injected'])}</td>"
            f"<td>{bar(layer['injected'], _worst_atol(own), kind='injected')}</td>"
            f"<td>{result}</td></tr>"
        )
        sections.append(
            folded(
                f"{anchor}-layer-{i}",
                not layer["exceeds"],
                f"{'FAIL' if layer['exceeds'] else 'PASS'} — {html.escape(name)} "
                f"({html.escape(layer['class_name'])}): own {scientific(layer['injected'])}, "
                f"end to end {scientific(layer['end_to_end'])}",
                _details_body(
                    [
                        ("own error: the port layer fed torch's input", own),
                        ("end to end: the port on the example input, errors carried in", carried),
                    ]
                ),
                layer=layer["path"],
                index=layer["index"],
            )
        )
    body = [
        f'<p class="tier">{html.escape(report.heading)}; output max error '
        f'<span class="output-error" data-value="{data_number(report.output_error)}">'
        f"{scientific(report.output_error)}</span>"
        + (
            f" (passed by {html.escape(report.output_rule)})"
            if getattr(report, "output_rule", "")
            else ""
        )
        + "</p>",
        _verdict(report),
    ]
    if getattr(report, "port_kind", None) is not None:
        body.append(_correspondence(report))
    if rows:
        body.append(
            '<table class="layers"><thead><tr><th>layer</th><th>class</th><th>end to end</th>'
            "<th>vs atol (log scale)</th><th>own</th><th>vs atol</th><th>result</th></tr>"
            f"</thead><tbody>{''.join(rows)}</tbody></table>"
        )
    if report.causes:
        layer = next((r for r in report.layers if r["path"] == report.first_layer), None)
        atol = _worst_atol(layer["injected_comparison"]) if layer else None
        causes = []
        for rank, cause in enumerate(report.causes, 1):
            causes.append(
                f'<tr class="{"pass" if cause.explains else "fail"}" '
                f'data-cause="{html.escape(cause.name)}" data-before="{data_number(cause.error_before)}" '
                f'data-after="{data_number(cause.error_after)}" '
                f'data-explains="{str(cause.explains).lower()}"><td>{rank}</td>'
                f"<td><b>{html.escape(cause.name)}</b>: {html.escape(cause.description)}"
                f'<br><span class="detail">{html.escape(cause.detail)}</span>'
                f'<br><span class="signature">signature: {html.escape(cause.signature)}</span></td>'
                f"<td>{scientific(cause.error_before)}</td><td>{scientific(cause.error_after)}</td>"
                f"<td>{bar(cause.error_after, atol, kind='after')}</td>"
                f"<td>{'yes' if cause.explains else 'no'}</td></tr>"
            )
        where = (
            f"layer {report.first_layer}"
            if report.first_layer is not None
            else f"the input of {report.glue}"
        )
        body.append(
            f"<h3>ranked conventions (the error of {html.escape(where)} with each undone)</h3>"
            '<table class="causes"><thead><tr><th>#</th><th>convention: evidence</th>'
            "<th>error before</th><th>after</th><th>after vs atol</th><th>within the tier</th>"
            f"</tr></thead><tbody>{''.join(causes)}</tbody></table>"
        )
    if sections:
        body.append(f"<h3>per-leaf errors, layer by layer</h3>{''.join(sections)}")
    data = {"kind": "model", "first-layer": report.first_layer or ""}
    return _section(number, session, "".join(body), data)


def _optimizer_section(number: int, session: Session) -> str:
    report = session.report
    anchor = f"session-{number}"
    rows, sections = [], []
    for step, error in enumerate(report.errors, 1):
        comparison = report.steps[step - 1] if report.steps else {"leaves": []}
        passed = comparison.get("passed", True)
        first = step == report.first_step
        rows.append(
            f'<tr class="{"first " if first else ""}{"pass" if passed else "fail"}" '
            f'data-step="{step}" data-error="{data_number(error)}">'
            f'<td><a href="#{anchor}-step-{step}">{step}</a></td><td>{scientific(error)}</td>'
            f"<td>{bar(error, _worst_atol(comparison), kind='params')}</td>"
            f"<td>{'FIRST OVER THE TIER' if first else 'within' if passed else 'over the tier'}"
            f"</td></tr>"
        )
        sections.append(
            folded(
                f"{anchor}-step-{step}",
                passed,
                f"{'PASS' if passed else 'FAIL'} — step {step}: params max abs error {scientific(error)}",
                _details_body([("the port's params after the step against torch's", comparison)]),
                step=step,
            )
        )
    body = [
        f'<p class="tier">{html.escape(report.heading)}</p>',
        _verdict(report),
        '<table class="steps"><thead><tr><th>step</th><th>params max abs err</th>'
        "<th>vs atol (log scale)</th><th>result</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>",
    ]
    if report.first_step is not None:
        body.append(
            f'<p class="twin">the optax twin of torch\'s {html.escape(report.optimizer)}'
            f" (the doctor's reference recipe) against torch: "
            f'<span data-value="{data_number(report.twin_error)}">'
            f"{scientific(report.twin_error)}</span></p>"
        )
    if report.causes:
        atol = _worst_atol(report.steps[report.first_step - 1]) if report.steps else None
        causes = "".join(
            f'<tr class="{"pass" if ok else "fail"}" data-cause="{html.escape(name)}" '
            f'data-distance="{data_number(distance)}" data-explains="{str(ok).lower()}">'
            f"<td>{rank}</td><td><b>{html.escape(name)}</b>: {html.escape(description)}</td>"
            f"<td>{scientific(distance)}</td><td>{bar(distance, atol, kind='distance')}</td>"
            f"<td>{'yes' if ok else 'no'}</td></tr>"
            for rank, (name, description, distance, ok) in enumerate(report.causes, 1)
        )
        body.append(
            "<h3>ranked conventions (the port against torch with each convention flipped)</h3>"
            '<table class="causes"><thead><tr><th>#</th><th>convention</th><th>distance</th>'
            "<th>vs atol</th><th>matches</th></tr></thead>"
            f"<tbody>{causes}</tbody></table>"
        )
    body.append(f"<h3>per-leaf errors, step by step</h3>{''.join(sections)}")
    data = {"kind": "optimizer", "first-step": report.first_step or ""}
    return _section(number, session, "".join(body), data)


def _section(number: int, session: Session, body: str, data: dict) -> str:
    attributes = "".join(f' data-{k}="{html.escape(str(v))}"' for k, v in data.items())
    note = f'<p class="note">{html.escape(session.note)}</p>' if session.note else ""
    return (
        f'<section class="session {"pass" if session.report.clean else "fail"}" '
        f'id="session-{number}" data-clean="{str(session.report.clean).lower()}"'
        f"{attributes}><h2>{html.escape(session.title)}</h2>{note}{body}</section>"
    )


def _where(report) -> str:
    if report.clean:
        return "clean bill"
    if hasattr(report, "first_step"):
        return f"step {report.first_step}"
    if report.first_layer is not None:
        return f"layer {report.first_layer or '(the module)'}"
    return "between layers" if report.glue else "the output"


def _cause(report) -> str:
    if not report.causes:
        return ""
    first = report.causes[0]
    name, explains = (
        (first[0], first[3]) if isinstance(first, tuple) else (first.name, first.explains)
    )
    return name if explains else f"(unexplained; best {name})"


def doctor_page(sessions: list, *, environment: dict, title: str = "jaxgrad doctor report") -> str:
    """The sessions as one HTML document.

    Args:
      sessions: ``Session`` tuples, in the order they ran.
      environment: ``jaxgrad.html.report.environment()``'s dict.
    """
    if not sessions:
        raise ValueError("doctor_page: `sessions` is empty; give at least one Session.")
    summary, sections = [], []
    for number, session in enumerate(sessions):
        report = session.report
        optimizer = hasattr(report, "first_step")
        result = "pass" if report.clean else "fail"
        summary.append(
            f'<tr class="{result}" data-session="{number}"><td><a href="#session-{number}">'
            f"{html.escape(session.title)}</a></td><td>{'optimizer' if optimizer else 'model'}"
            f"</td><td>{html.escape(_where(report))}</td>"
            f"<td>{html.escape(_cause(report))}</td></tr>"
        )
        sections.append((_optimizer_section if optimizer else _model_section)(number, session))
    clean = sum(s.report.clean for s in sessions)
    verdict = (
        f'<p id="verdict" class="{"pass" if clean == len(sessions) else "fail"}">'
        f"{clean} clean, {len(sessions) - clean} diverging ({len(sessions)} "
        f"session{'s' if len(sessions) != 1 else ''})</p>"
    )
    intro = (
        "The doctor runs torch and the port on the same weights and input and compares "
        "every layer twice: <b>end to end</b> (the port on the example input, errors "
        "made earlier carried in) and <b>own</b> (the port layer fed torch's input to "
        "that layer). The first layer whose own error leaves the tier of torch's dtype "
        "is where the port diverges; each convention of the catalogue is then undone on "
        "that layer and ranked by the error left. An element is within the tier when "
        "|port − torch| ≤ atol + rtol·|torch|."
    )
    return document(
        title,
        intro,
        environment,
        (
            f'{verdict}<table class="summary sessions"><thead><tr><th>session</th><th>kind</th>'
            "<th>first over the tier</th><th>convention</th></tr></thead>"
            f"<tbody>{''.join(summary)}</tbody></table>{''.join(sections)}"
        ),
    )


def write_doctor_report(path: str, sessions: list, *, versions: dict | None = None) -> None:
    """Write ``doctor_page`` to ``path`` atomically (nothing half-written on failure)."""
    from jaxgrad.html.page import write_page

    write_page(path, doctor_page(sessions, environment=environment(versions)))


__all__ = ["Session", "doctor_page", "write_doctor_report"]
