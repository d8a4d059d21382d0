"""The parity report: its checks pass, and the script's output is well formed.

The report itself, ``python scripts/parity.py`` (the README's first command, and CI's
first step), runs every row and exits 1 on a failure. Replaying one row in three here
(every third in registration order, so each section is sampled: a second code
generation of each float32 row) is marked ``long``: out of the default run, run by CI
with ``pytest -m "exhaustive or long"``.
"""

from __future__ import annotations

import json

import parity as parity_script
import pytest
from parity_checks import all_checks

ALL_CHECKS = all_checks()
EVERY = 3
CHECKS = ALL_CHECKS[::EVERY]


def test_checks_have_unique_names():
    names = [(c.name, c.dtype) for c in ALL_CHECKS]
    assert len(names) == len(set(names))


@pytest.mark.long  # the README's first command runs every row; CI: pytest -m "exhaustive or long"
@pytest.mark.parametrize("check", CHECKS, ids=[f"{c.name} [{c.dtype}]" for c in CHECKS])
def test_check_passes(check):
    report = check.run()
    assert report.leaves, "a check that compares nothing proves nothing"
    assert report.passed, report.table()


def test_script_prints_table_writes_json_and_exits_zero(tmp_path, capsys):
    path = tmp_path / "report.json"
    code = parity_script.main(["--filter", "lesson example 1:", "--json", str(path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "lesson example 1: tiny_relu" in out and "PASS" in out
    data = json.loads(path.read_text())
    assert data["passed"] is True
    assert [row["check"] for row in data["checks"]] == ["lesson example 1: tiny_relu"]


def test_script_exits_nonzero_on_a_failing_check(monkeypatch, capsys):
    import numpy as np
    from parity_checks.harness import Check

    import jaxgrad

    wrong = Check(
        name="deliberately wrong",
        dtype="float64",
        run=lambda: jaxgrad.compare(np.ones(3), np.ones(3) * (1 + 1e-5)),
    )
    monkeypatch.setattr(parity_script, "all_checks", lambda: [wrong])
    assert parity_script.main([]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "0 passed, 1 failed" in out


def test_unknown_filter_is_a_usage_error():
    with pytest.raises(SystemExit) as info:
        parity_script.main(["--filter", "no such check"])
    assert info.value.code == 2
