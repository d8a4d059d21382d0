"""Each framework reproduces its own float32 bits, run after run, under CPU load.

Bits may differ *between* frameworks and between CPUs (the parity tiers absorb that);
they must not differ between two runs of one framework on one machine, or a verdict
could change with the load. A sample of the report's float32 rows (one or two per
area; the whole set costs minutes) runs here and, at the same time, in a fresh
subprocess, while a third process burns a core; every leaf either side compared must
come out bit-identical in both runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from parity_checks import all_checks
from parity_checks._determinism import fingerprints, select

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# torch and JAX float32 arithmetic of three areas: autograd, clipping, a whole MLP
ROWS = ["detach: target network", "clip_grad_value_", "mlp relu (cross_entropy)"]


def _differences(first: dict, second: dict) -> list:
    problems = []
    for row, result in first.items():
        other = second[row]
        for a, b in zip(result["comparisons"], other["comparisons"]):
            for side in ("reference", "candidate"):
                changed = [p for p in a[side] if a[side][p] != b[side].get(p)]
                if changed:
                    problems.append(f"{row}: {side} leaves changed bits: {', '.join(changed)}")
        if len(result["comparisons"]) != len(other["comparisons"]):
            problems.append(
                f"{row}: {len(result['comparisons'])} comparisons, then {len(other['comparisons'])}"
            )
    return problems


@pytest.mark.long  # CI: pytest -m "exhaustive or long"
def test_float32_rows_reproduce_their_own_bits_under_load(tmp_path):
    checks = select(all_checks(), "float32", ROWS)
    assert len(checks) == len(ROWS)
    out = tmp_path / "fingerprints.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "scripts")]))
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        command = [
            sys.executable,
            "-m",
            "parity_checks._determinism",
            str(out),
            "--dtype",
            "float32",
        ]
        for row in ROWS:
            command += ["--filter", row]
        other = subprocess.Popen(command, env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
        here = fingerprints(checks)
        _, stderr = other.communicate(timeout=300)
    finally:
        burner.kill()
        burner.wait()
    assert other.returncode == 0, stderr[-2000:]
    there = json.loads(out.read_text())
    assert set(here) == set(there) and all(row["passed"] for row in here.values())
    assert all(row["comparisons"] for row in here.values())
    assert _differences(here, there) == []


def test_fingerprints_see_a_changed_bit_should_fail():
    """_should_fail: one ulp in one leaf is reported, on the side where it happened."""
    import numpy as np

    from jaxgrad.parity import leaf_digests

    leaf = np.float32([0.1, 0.2])
    nudged = np.nextafter(leaf, np.float32(1))
    run = {
        "row": {
            "comparisons": [
                {"reference": leaf_digests({"w": leaf}), "candidate": leaf_digests({"w": leaf})}
            ]
        }
    }
    other = {
        "row": {
            "comparisons": [
                {"reference": leaf_digests({"w": leaf}), "candidate": leaf_digests({"w": nudged})}
            ]
        }
    }
    assert _differences(run, run) == []
    assert _differences(run, other) == ["row: candidate leaves changed bits: w"]
    assert leaf_digests({"w": leaf})["w"] != leaf_digests({"w": leaf.astype(np.float64)})["w"]
