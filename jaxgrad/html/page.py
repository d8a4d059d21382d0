"""Self-contained HTML pages: one file, everything inline, no network request.

``explorer_page(graph)`` wraps the data of ``export_graph`` (plus, optionally, torch's
numbers from ``torchref.replay``) with the explorer's stylesheet and script, read from
this package's ``explorer.css`` / ``explorer.js``. ``write_page(path, text)`` writes a
page atomically (a temporary file in the same folder, then ``os.replace``), so a
failure never leaves half a page behind.
"""

from __future__ import annotations

import html
import json
import os
import tempfile
from importlib import resources


def asset(name: str) -> str:
    """The text of a file shipped in this package (``explorer.js``, ``report.css``…)."""
    return resources.files("jaxgrad.html").joinpath(name).read_text(encoding="utf-8")


def inline_json(data) -> str:
    """JSON safe inside ``<script>``: no ``<`` can close the element early."""
    return json.dumps(data, allow_nan=False).replace("<", "\\u003c")


def check_writable(path: str) -> None:
    """Raise ``ValueError`` naming ``path`` unless a file can be created there."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ValueError(f"`path` (={path!r}) is a directory; give a file name.")
    if not os.path.isdir(folder):
        raise ValueError(f"`path` (={path!r}): the folder {folder!r} does not exist.")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"`path` (={path!r}): the folder {folder!r} is not writable.")


def write_page(path: str, text: str) -> None:
    """Write ``text`` to ``path`` all at once, or not at all."""
    check_writable(path)
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".tmp-", suffix=".html", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp's 0600 would hide the page from others
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


_EXPLORER = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>@TITLE@ — backprop explorer</title>
<style>@CSS@</style></head>
<body>
<h1>@TITLE@</h1>
<p class="sub">The forward graph JAX traced, and its mirror image, the backward pass.
<b>Step</b> walks the backward pass one node at a time: each input of the node receives the
upstream gradient times the node's local derivative. <b>Reset</b> starts from nothing.
Sliders recompute everything in the page (float64); the JAX and torch columns hold the
numbers those frameworks computed at the exported values.</p>
<div class="graphs">
<div class="panel"><h2>forward (jaxpr)</h2><svg id="forward" xmlns="http://www.w3.org/2000/svg"></svg></div>
<div class="panel"><h2>backward (gradient flows right to left)</h2><svg id="backward" xmlns="http://www.w3.org/2000/svg"></svg></div>
</div>
<div class="controls">
<div class="panel"><h2>step through</h2>
<button id="step">Step</button><button id="reset">Reset</button> <span id="position"></span>
<p id="step-text"></p>
<table id="step-table"><thead><tr><th>input</th><th>local</th><th>upstream</th><th>product</th>
<th>JAX</th><th>torch</th><th>grad_fn</th></tr></thead><tbody></tbody></table>
</div>
<div class="panel"><h2>inputs</h2><div id="sliders"></div></div>
</div>
<div class="controls">
<div class="panel"><h2>gradients</h2><div id="loss"></div>
<table id="grads"><thead><tr><th>input</th><th>value</th><th>this page</th><th>jax.grad</th>
<th>torch .grad</th></tr></thead><tbody></tbody></table>
<p id="stale" class="note" hidden>The sliders moved away from the exported values: the
jax.grad and torch columns are shown only there (re-export at new values to compare).</p>
</div>
<div class="panel" id="check"><h2>gradient check</h2>
<p class="note">Central difference (L(v + h) − L(v − h)) / 2h, h = 1e-6, against the
backward pass; they agree when |difference| ≤ 1e-8 + 1e-6·|numeric|.</p>
<table><tr><th>nudge</th><td><select id="check-input"></select></td></tr>
<tr><th>backward pass</th><td id="check-analytic"></td></tr>
<tr><th>numeric</th><td id="check-numeric"></td></tr>
<tr><th>|difference|</th><td id="check-diff"></td></tr>
<tr><th>verdict</th><td id="check-verdict"></td></tr></table>
</div>
</div>
@NOTES@
<p class="note">@FOOTER@</p>
<script id="graph-data" type="application/json">@DATA@</script>
<script>@JS@</script>
</body></html>
"""


def _fill(template: str, **parts: str) -> str:
    for key, value in parts.items():
        template = template.replace(f"@{key}@", value)
    return template


def explorer_page(graph: dict, *, torch: dict | None = None, notes: dict | None = None) -> str:
    """The explorer as one HTML document.

    Args:
      graph: ``export_graph``'s dict.
      torch: ``torchref.replay``'s dict (JSON part), shown beside JAX's numbers.
      notes: ``{title: preformatted text}`` shown folded under the graphs (the jaxpr
        of the VJP, torch's grad_fn graph…).
    """
    data = dict(graph, torch=torch)
    folded = "".join(
        f"<details><summary>{html.escape(title)}</summary><pre>"
        f"{html.escape(text)}</pre></details>\n"
        for title, text in (notes or {}).items()
    )
    versions = f"JAX {graph['jax']['version']}" + (
        f", PyTorch {torch['version']}" if torch else " (no torch numbers in this page)"
    )
    return _fill(
        _EXPLORER,
        TITLE=html.escape(graph["title"]),
        CSS=asset("explorer.css"),
        NOTES=folded,
        FOOTER=html.escape(f"Exported with {versions}; float64."),
        DATA=inline_json(data),
        JS=asset("explorer.js"),
    )


__all__ = ["asset", "check_writable", "explorer_page", "inline_json", "write_page"]
