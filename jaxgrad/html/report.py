"""The parity report as one self-contained HTML page.

``parity_page(rows, environment=…)`` draws the rows ``scripts/parity.py`` collects (one
dict per check: ``check``, ``area``, ``dtype``, ``max_abs_err``, ``max_rel_err``,
``passed``, ``seconds``, ``error``, ``leaves``): the environment first (versions, the
dtype tiers, matmul precision), then the summary table with failures first, then
every check folded (``<details>``, failures unfolded) to its per-leaf table. Each
leaf gets two bars on one log scale: its largest absolute error against its ``atol``
and its largest relative error against its ``rtol``. The page is static HTML and
inline SVG: no script, no network request.

``leaf_table(leaves)`` renders any list of per-leaf dicts (``jaxgrad.parity
.ParityReport.to_dict()["leaves"]``), so per-layer tables of other tools render the
same way.
"""

from __future__ import annotations

import html
import importlib.metadata
import math
import os
import platform
import sys

import jax

from jaxgrad.html.page import asset
from jaxgrad.parity import TOLERANCES

LOG_MIN, LOG_MAX = -18, 0  # the bars' scale: 1e-18 … 1
BAR_WIDTH, BAR_HEIGHT = 240, 12
PACKAGES = ("jax", "jaxlib", "numpy", "optax", "flax")


def environment(extra: dict | None = None) -> dict:
    """Versions and numeric settings a reader needs to trust (or reproduce) the numbers.

    Args:
      extra: more entries, e.g. ``{"torch": torch.__version__}`` (jaxgrad never
        imports torch itself).
    """
    versions = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    versions.update(extra or {})
    tiers = {
        name: f"rtol {tier.rtol:g}, atol {tier.atol:g}"
        + (" × max|reference|" if tier.atol_scaled else "")
        for name, tier in TOLERANCES.items()
    }
    tiers["finite differences"] = "float64, eps 1e-6: atol 1e-8, rtol 1e-6"
    return {
        "versions": versions,
        "platform": f"{platform.platform()} ({platform.machine()})",
        "jax backend": f"{jax.default_backend()}, {jax.device_count()} device(s)",
        "matmul precision": "highest (every check pins it); float64 checks run with jax_enable_x64",
        "tiers": tiers,
    }


def _position(value) -> float:
    """x of ``value`` on the bars' log scale; 0 for zero, the right end beyond 1."""
    if value is None or value <= 0:
        return 0.0
    exponent = min(max(math.log10(value), LOG_MIN), LOG_MAX)
    return (exponent - LOG_MIN) / (LOG_MAX - LOG_MIN) * BAR_WIDTH


def data_number(value) -> str:
    """``value`` for a ``data-*`` attribute: the shortest round-trip decimal (``+text`` in
    JavaScript is the same double), ``Infinity`` for inf, empty for None."""
    if value is None:
        return ""
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(float(value))


def bar(error, tolerance, *, kind: str) -> str:
    """An inline SVG: ``error`` as a bar, ``tolerance`` as a tick, on the log scale."""
    over = error is not None and tolerance is not None and error > tolerance
    width = _position(error)
    tick = _position(tolerance)
    text = scientific(error)
    limit = "—" if tolerance is None else f"{tolerance:.0e}"
    return (
        f'<svg class="bar" width="{BAR_WIDTH}" height="{BAR_HEIGHT}" '
        f'data-kind="{kind}" data-error="{data_number(error)}" '
        f'data-tolerance="{data_number(tolerance)}">'
        f"<title>{kind} error {text} against {limit}</title>"
        f'<rect class="track" width="{BAR_WIDTH}" height="{BAR_HEIGHT}"/>'
        f'<rect class="{"over" if over else "under"}" width="{width:.1f}" '
        f'height="{BAR_HEIGHT}"/>'
        f'<line class="tol" x1="{tick:.1f}" x2="{tick:.1f}" y1="0" y2="{BAR_HEIGHT}"/></svg>'
    )


def scientific(value) -> str:
    """``1.23e-04``; ``—`` for None."""
    return "—" if value is None else f"{value:.2e}"


def leaf_table(leaves: list) -> str:
    """A per-leaf table: path, shape, dtype, errors, bars against tolerance, verdict."""
    rows = []
    for leaf in sorted(leaves, key=lambda leaf: leaf["passed"]):
        verdict = "PASS" if leaf["passed"] else f"FAIL: {leaf['problem']}"
        shape = "×".join(map(str, leaf["shape"])) or "scalar"
        rows.append(
            f'<tr class="{"pass" if leaf["passed"] else "fail"}" '
            f'data-leaf="{html.escape(leaf["path"])}"><td>{html.escape(leaf["path"])}</td>'
            f"<td>{shape}</td><td>{leaf['dtype']}</td>"
            f"<td>{scientific(leaf['max_abs_err'])}</td><td>{bar(leaf['max_abs_err'], leaf['atol'], kind='abs')}</td>"
            f"<td>{scientific(leaf['max_rel_err'])}</td><td>{bar(leaf['max_rel_err'], leaf['rtol'], kind='rel')}</td>"
            f"<td>{html.escape(verdict)}</td></tr>"
        )
    scale = f"log scale 1e{LOG_MIN} … 1; tick = tolerance"
    return (
        '<table class="leaves"><thead><tr><th>leaf</th><th>shape</th><th>dtype</th>'
        f"<th>max abs err</th><th>vs atol ({scale})</th><th>max rel err</th>"
        f"<th>vs rtol</th><th>verdict</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _environment_block(env: dict) -> str:
    versions = ", ".join(
        f"{html.escape(k)} {html.escape(str(v))}" for k, v in env["versions"].items()
    )
    tiers = "".join(
        f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in env["tiers"].items()
    )
    other = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in env.items()
        if k not in ("versions", "tiers")
    )
    return (
        f'<table class="env" id="environment"><tr><th>versions</th><td>{versions}</td></tr>'
        f"{other}<tr><th>tolerance tiers</th><td><ul>{tiers}</ul></td></tr></table>"
    )


def folded(anchor: str, passed: bool, summary: str, body: str, **data) -> str:
    """A ``<details>`` section (unfolded when it failed) with ``summary`` (HTML) as its
    always-visible line; ``data`` become ``data-*`` attributes."""
    attributes = "".join(
        f' data-{key.replace("_", "-")}="{html.escape(str(value))}"' for key, value in data.items()
    )
    result = "pass" if passed else "fail"
    return (
        f'<details id="{anchor}" class="{result}"{attributes}{"" if passed else " open"}>'
        f"<summary>{summary}</summary>{body}</details>"
    )


def plot_link(href: str, command: str) -> str:
    """A paragraph linking a PNG another script draws, with the command that draws it."""
    return (
        f'<p class="plot">Plot: <a href="{html.escape(href)}">'
        f"{html.escape(os.path.basename(href))}</a> (drawn by "
        f"<code>{html.escape(command)}</code>)</p>"
    )


def document(title: str, intro: str, environment: dict, body: str) -> str:
    """A whole report page: the heading, ``intro`` (HTML), the environment table, then
    ``body``; ``report.css`` inline and a policy that forbids every request."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{html.escape(title)}</title><style>{asset('report.css')}</style></head><body>"
        f'<h1>{html.escape(title)}</h1><p class="sub">{intro}</p>'
        f"{_environment_block(environment)}{body}</body></html>\n"
    )


def parity_page(
    rows: list,
    *,
    environment: dict,
    plots: dict | None = None,
    seconds: float | None = None,
    title: str = "jaxgrad parity report",
) -> str:
    """The report as one HTML document.

    Args:
      rows: one dict per check, as ``scripts/parity.py`` collects them.
      environment: ``environment()``'s dict.
      plots: ``{area: (href, command)}``: a PNG to link from that area's checks and the
        command that draws it.
      seconds: the report's wall time, for the summary line.
    """
    ordered = sorted(range(len(rows)), key=lambda i: rows[i]["passed"])  # failures first
    failed = sum(not r["passed"] for r in rows)
    summary, sections = [], []
    for index in ordered:
        row = rows[index]
        anchor = f"check-{index}"
        result = "PASS" if row["passed"] else "FAIL"
        summary.append(
            f'<tr class="{result.lower()}" data-check="{html.escape(row["check"])}">'
            f'<td><a href="#{anchor}">{html.escape(row["check"])}</a></td>'
            f"<td>{html.escape(row.get('area') or '')}</td><td>{row['dtype']}</td>"
            f"<td>{scientific(row['max_abs_err'])}</td><td>{scientific(row['max_rel_err'])}</td>"
            f"<td>{result}</td><td>{row.get('seconds', 0):.2f}</td></tr>"
        )
        body = (
            f'<p class="error">{html.escape(row["error"])}</p>'
            if row.get("error")
            else leaf_table(row["leaves"] or [])
        )
        plot = (plots or {}).get(row.get("area"))
        if plot:
            body += plot_link(*plot)
        sections.append(
            folded(
                anchor,
                row["passed"],
                f"{result} — {html.escape(row['check'])} ({row['dtype']}, "
                f"{len(row['leaves'] or [])} leaves)",
                body,
            )
        )
    took = "" if seconds is None else f" in {seconds:.1f} s"
    verdict = (
        f'<p id="verdict" class="{"fail" if failed else "pass"}">'
        f"{len(rows) - failed} passed, {failed} failed ({len(rows)} checks{took})</p>"
    )
    intro = (
        "Every check builds the same computation in PyTorch and in jaxgrad on "
        "copied weights and compares every leaf: structure, shape, dtype and NaN mask "
        "first, then values, at the tier of the dtype. An element passes when "
        "|candidate − reference| ≤ atol + rtol·|reference|."
    )
    return document(
        title,
        intro,
        environment,
        (
            f'{verdict}<table class="summary"><thead><tr><th>check</th><th>area</th><th>dtype</th>'
            "<th>max abs err</th><th>max rel err</th><th>result</th><th>s</th></tr></thead>"
            f"<tbody>{''.join(summary)}</tbody></table>"
            f"<h2>per-leaf errors</h2>{''.join(sections)}"
        ),
    )


# The PNGs other scripts draw, linked from the checks of the same area when they exist.
PLOTS = {
    "diagnostics": ("docs/vanishing.png", "python scripts/vanishing.py --plot docs/vanishing.png"),
    "train": (
        "docs/loss_curve.png",
        "python scripts/train.py --framework both --plot docs/loss_curve.png",
    ),
}


def write_parity_report(
    path: str,
    rows: list,
    *,
    versions: dict | None = None,
    seconds: float | None = None,
    plots: dict | None = None,
) -> None:
    """Write ``parity_page`` to ``path`` atomically, linking the ``plots`` that exist
    (paths relative to the working directory; links relative to ``path``'s folder)."""
    from jaxgrad.html.page import write_page

    folder = os.path.dirname(os.path.abspath(path))
    links = {
        area: (os.path.relpath(os.path.abspath(png), folder), command)
        for area, (png, command) in (PLOTS if plots is None else plots).items()
        if os.path.isfile(png)
    }
    write_page(
        path, parity_page(rows, environment=environment(versions), plots=links, seconds=seconds)
    )


__all__ = [
    "PLOTS",
    "bar",
    "data_number",
    "document",
    "environment",
    "folded",
    "leaf_table",
    "parity_page",
    "plot_link",
    "scientific",
    "write_parity_report",
]
