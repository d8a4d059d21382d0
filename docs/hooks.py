"""MkDocs build hook (mkdocs.yml, ``hooks:``): the site's home page is README.md.

The README links to the pages as ``docs/NAME.md`` (right on GitHub, where it is read
from the repository root); on the site the pages sit beside the home page, so those
links lose their ``docs/`` prefix. Nothing else is changed: the README is the one copy.
"""

from __future__ import annotations

import os
import re

from mkdocs.structure.files import File

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
_DOCS_LINK = re.compile(r"\]\(docs/")


def home_page_text() -> str:
    """README.md as the site's ``index.md``: links into ``docs/`` made site-relative."""
    with open(README, encoding="utf-8") as handle:
        return _DOCS_LINK.sub("](", handle.read())


def on_files(files, config):
    """Add README.md to the site as its home page, ``index.md``."""
    if files.get_file_from_path("index.md") is not None:
        raise ValueError("docs/index.md would replace the home page, which is README.md")
    files.append(File.generated(config, "index.md", content=home_page_text()))
    return files


def on_serve(server, config, builder):
    """`mkdocs serve`: rebuild when README.md changes too."""
    server.watch(README)
    return server
