"""The documentation site: built with ``mkdocs build --strict``, read in headless Chromium.

One strict build serves the module (``--strict`` turns every warning into a failure: a
link to a page or anchor that does not exist, a reference that resolves to nothing, a
docstring the parser cannot read). On the built site:

- every public name of the documented modules — each module's ``__all__``, or the
  names its ``__init__`` imports — has an entry in its API page, with a rendered
  docstring (read from the source by static analysis: nothing here imports jaxgrad,
  jax or torch);
- the home page (the README, inserted by ``docs/hooks.py``) and one API page, served
  on a local port, open in a real headless Chromium (Debian's ``chromium``, driven by
  ``jaxgrad.html.browser``): the search box finds an API entry, a signature is
  rendered, and the pages ask for nothing outside the site.

Skips, saying why, without mkdocs (the ``docs`` extra) or without Chromium.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import html
import http.server
import os
import re
import subprocess
import sys
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# reference page (docs/reference/NAME.md) -> the module it documents
MODULES = {
    "nn": "jaxgrad.nn",
    "parity": "jaxgrad.parity",
    "gradcheck": "jaxgrad.gradcheck",
    "doctor": "jaxgrad.doctor",
    "flax": "jaxgrad.flax",
    "losses": "jaxgrad.losses",
    "optim": "jaxgrad.optim",
    "train": "jaxgrad.train",
    "data": "jaxgrad.data",
}


def _requires_mkdocs():
    for package in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(
            package,
            reason=f"`{package}` is not installed: the docs extra "
            '(pip install -c constraints.txt -e ".[docs]") builds the site',
        )


def _build(folder):
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The built site: one build per test run, shared by the xdist workers (pytest-xdist's
    recipe: their base temporary folders share a parent, unique to the run)."""
    _requires_mkdocs()
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # one process: nothing to share
        folder = tmp_path_factory.mktemp("site")
        status, log = _build(folder)
    else:
        import filelock

        shared = tmp_path_factory.getbasetemp().parent
        folder, result = shared / "docs_site", shared / "docs_site.status"
        with filelock.FileLock(str(shared / "docs_site.lock")):
            if not result.exists():
                status, log = _build(folder)
                result.write_text(f"{status}\n{log}", encoding="utf-8")
            status, log = result.read_text(encoding="utf-8").split("\n", 1)
            status = int(status)
    assert status == 0, f"mkdocs build --strict failed:\n{log}"
    return folder


def public_names(module: str) -> list[str]:
    """``__all__`` of ``module``'s source, else every name its top level imports or assigns."""
    parts = module.split(".")
    path = os.path.join(ROOT, *parts)
    path = os.path.join(path, "__init__.py") if os.path.isdir(path) else path + ".py"
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    names = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            names += [alias.asname or alias.name for alias in node.names]
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return [n for n in names if not n.startswith("_")]


def test_public_names_are_read_from_the_source():
    assert "compare" in public_names("jaxgrad.parity")  # __all__
    assert "_compare_leaf" not in public_names("jaxgrad.parity")
    nn = public_names("jaxgrad.nn")  # no __all__: what __init__ imports
    assert {"Linear", "from_torch", "init", "fx"} <= set(nn) and "annotations" not in nn
    assert "OPTIMIZERS" in public_names("jaxgrad.optim")


def _entry(page: str, anchor: str) -> str:
    """The HTML from the element with id ``anchor`` (a heading, or an anchor just before
    one) to the end of the first entry's contents ("" if there is no such id)."""
    start = page.find(f'id="{anchor}"')
    if start < 0:
        return ""
    contents = page.find('class="doc doc-contents', start)
    following = page.find('class="doc doc-heading"', contents)
    return page[start : following if following > 0 else len(page)]


@pytest.mark.long  # the site build (~10 s); CI: -m "exhaustive or long", and mkdocs build --strict
@pytest.mark.parametrize("page", sorted(MODULES))
def test_every_public_name_has_a_rendered_reference_entry(site, page):
    module = MODULES[page]
    built = open(site / "reference" / page / "index.html", encoding="utf-8").read()
    missing, undocumented = [], []
    for name in public_names(module):
        entry = _entry(built, f"{module}.{name}")
        if not entry:
            missing.append(name)
        elif not re.search(r'class="doc doc-contents[^"]*"[^>]*>\s*<p>', entry):
            undocumented.append(name)
    assert not missing, f"{module}: no entry in docs/reference/{page}.md for {missing}"
    assert not undocumented, f"{module}: entries without a docstring: {undocumented}"


@pytest.mark.long  # the site build (~10 s); CI: -m "exhaustive or long", and mkdocs build --strict
def test_the_home_page_is_the_readme_and_shows_the_real_quick_start(site):
    home = html.unescape(re.sub(r"<[^>]+>", "", open(site / "index.html", encoding="utf-8").read()))
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    title = readme.split("\n", 1)[0].lstrip("# ")
    assert title == "jaxgrad" and "Set-up: two commands" in home
    # the model the quick start shows is the file its documented command runs
    quick = open(os.path.join(ROOT, "docs", "quickstart.py"), encoding="utf-8").read()
    assert f"```python\n{quick}```" in readme
    assert "python scripts/port.py docs/quickstart.py:Net" in readme
    # README links into docs/ became site links
    assert 'href="docs/' not in open(site / "index.html", encoding="utf-8").read()


@contextlib.contextmanager
def _served(folder):
    """``folder`` over HTTP on a free local port (the search runs in a web worker, which
    a browser refuses to start from a ``file://`` page)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# Types a query into the search box, as a reader does, and waits for the results.
SEARCH = """(async () => {
  const sleep = ms => new Promise(done => setTimeout(done, ms));
  const box = document.querySelector('input.md-search__input');
  if (!box) return null;
  for (let i = 0; i < 200 && box.getBoundingClientRect().width === 0; i++) await sleep(50);
  const shown = [box.getAttribute('placeholder'), box.getBoundingClientRect().width > 0];
  box.focus();
  box.value = 'assert_parity';
  for (const type of ['input', 'keyup']) box.dispatchEvent(new Event(type, {bubbles: true}));
  for (let i = 0; i < 200; i++) {
    const hits = document.querySelectorAll('.md-search-result__item a');
    if (hits.length) return [...shown, [...hits].map(a => a.getAttribute('href'))];
    await sleep(50);
  }
  return [...shown, []];
})()"""

SIGNATURE = """(() => {
  const heading = document.getElementById('jaxgrad.parity.compare');
  const signature = heading && heading.parentElement.querySelector('.doc-signature');
  // one line per argument where the signature is formatted (ruff / black at the page's
  // width): compare it as the one-line signature it is
  return signature
    ? signature.textContent.replace(/\\s+/g, ' ').replace(/\\( /g, '(').replace(/,? \\)/g, ')').trim()
    : null;
})()"""


@pytest.mark.long  # the site build (~10 s); CI: -m "exhaustive or long", and mkdocs build --strict
def test_site_pages_in_headless_chromium(site, browser):
    """The home page's search box finds an API entry; the API page shows a signature."""
    with _served(site) as base:
        browser.open(base)
        assert browser.evaluate("document.querySelector('h1').firstChild.textContent") == "jaxgrad"
        placeholder, visible, hits = browser.evaluate(SEARCH)
        assert placeholder == "Search" and visible, "no search box on the home page"
        assert any("reference/parity/" in hit for hit in hits), hits
        requests = list(browser.requests)

        browser.open(base + "reference/parity/")
        signature = browser.evaluate(SIGNATURE)
        assert signature is not None and signature.startswith(
            "compare(reference, candidate, *, rtol=None, atol=None"
        ), signature
        assert browser.evaluate("document.querySelector('input.md-search__input') !== null")
        requests += browser.requests
    outside = [url for url in requests if not url.startswith((base, "data:"))]
    assert not outside, f"the site asked for something outside itself: {outside}"
