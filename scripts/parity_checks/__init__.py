"""The checks behind ``scripts/parity.py``: every parity check jaxgrad has.

Each module here (other than ``harness``) defines ``CHECKS``, a list of
``harness.Check``; ``all_checks()`` collects them in module order. A check builds
the same computation in both frameworks on copied weights and returns a
``jaxgrad.parity.ParityReport``. The tests run every check too
(``parity_tests/test_parity_report.py``), so the report and the suite cannot drift.

To add checks for a new area, add a module with a ``CHECKS`` list; nothing else
needs editing.
"""

from __future__ import annotations

import importlib
import pkgutil

from parity_checks.harness import Check

_NOT_CHECKS = {"harness"}


def all_checks() -> list[Check]:
    checks = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name in _NOT_CHECKS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        checks.extend(module.CHECKS)
    return checks
