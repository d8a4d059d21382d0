"""How pytest runs the suite (issue 55): a plain ``pytest`` on xdist's workers
(``-n auto --maxprocesses=4 --dist worksteal``, added by ``conftest.pytest_cmdline_main``),
and ``-p no:xdist`` or ``-n 0`` in one process. In ``addopts`` the worker options made
``-p no:xdist`` a usage error (``unrecognized arguments: -n``).

Each test runs pytest in a subprocess on ``test_the_subprocess_runs_this`` below.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from parity_tests import conftest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = "parity_tests/test_pytest_workers.py::test_the_subprocess_runs_this"


def test_the_subprocess_runs_this():
    """The tiny selection the tests below run (does nothing)."""


def _pytest(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args, TINY],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


# slow: a pytest process that imports jax and torch (conftest's set-up)
@pytest.mark.slow
def test_p_no_xdist_collects_in_one_process():
    run = _pytest("-p", "no:xdist", "--collect-only", "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    assert TINY in run.stdout.splitlines()
    assert "1 test collected" in run.stdout


# slow: three processes (the controller and two workers that import jax and torch)
@pytest.mark.slow
def test_a_plain_run_uses_two_workers_stealing_work():
    """xdist's ``auto`` count comes from ``PYTEST_XDIST_AUTO_NUM_WORKERS`` when it is set
    (xdist's documented rule), so the expected count does not depend on this machine."""
    run = _pytest("-v", "-p", "no:cacheprovider", PYTEST_XDIST_AUTO_NUM_WORKERS="2")
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"\bcreated: 2/2 workers\b", run.stdout), run.stdout
    assert "WorkStealingScheduling" in run.stdout, run.stdout
    assert "1 passed" in run.stdout, run.stdout


class _Options(SimpleNamespace):
    pass


class _Config:
    """What ``wants_default_workers`` reads of a pytest config: its plugins and options."""

    def __init__(self, xdist=True, worker=False, **options):
        self._xdist = xdist
        if worker:
            self.workerinput = {"workerid": "gw0"}
        self.option = _Options(**{"numprocesses": None, "tx": [], **options})
        self.pluginmanager = SimpleNamespace(hasplugin=lambda name: name == "xdist" and xdist)

    def getoption(self, name, default=None):
        return getattr(self.option, name, default)


@pytest.mark.parametrize(
    "config, expected",
    [
        (_Config(), True),  # `pytest`: the default workers
        (_Config(numprocesses=0), False),  # `-n 0`: one process
        (_Config(numprocesses=3), False),  # `-n 3`: the user's count
        (_Config(numprocesses="logical"), False),
        (_Config(tx=["popen", "popen"]), False),  # `--tx`: the user's workers
        (_Config(xdist=False), False),  # `-p no:xdist`, or xdist not installed
        (_Config(worker=True), False),  # one of xdist's workers: it must not start more
    ],
    ids=["plain", "n0", "n3", "logical", "tx", "no-xdist", "worker"],
)
def test_the_default_workers_only_where_the_user_chose_none(config, expected):
    assert conftest.wants_default_workers(config) is expected
