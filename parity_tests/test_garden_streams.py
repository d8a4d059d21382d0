"""``scripts/zoo.py --garden`` streams (issue 55): each model's line reaches stdout as the
model finishes, through a pipe (``| tee log``), after a ``startup:`` line; a sweep
started again takes the garden's list from the cache instead of importing torchvision,
timm and transformers and enumerating them (minutes the first time).

The sweep here runs two models whose children sleep until the parent's ``--timeout``
kills them (a ``sitecustomize`` on their ``PYTHONPATH``: nothing is built or imported),
from a list seeded in the enumeration cache, so it costs seconds and needs no zoo extra.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import _garden
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 2  # each child's limit: the second model keeps the sweep alive this long
MODELS = [
    _garden.GardenModel("timm:test_a", "timm", "a", "image", 10),
    _garden.GardenModel("timm:test_b", "timm", "b", "image", 20),
]
SLEEPING_CHILD = (
    "import sys, time\n"
    "if '--child' in sys.argv:  # the garden's child process: hang until it is killed\n"
    "    time.sleep(600)\n"
)


def _seed_cache(folder) -> None:
    """The list ``enumerate_cached`` would have written after enumerating."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"garden-enumeration-{_garden.enumeration_key()}.json")
    with open(path, "w") as handle:
        json.dump({"models": [m.to_dict() for m in MODELS]}, handle)


# slow: ~5 s (zoo.py's start, then two children killed after TIMEOUT s each)
@pytest.mark.slow
def test_each_models_line_arrives_through_a_pipe_before_the_sweep_ends(tmp_path):
    cache, site = tmp_path / "cache", tmp_path / "site"
    _seed_cache(cache)
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLEEPING_CHILD)
    env = dict(
        os.environ,
        JAXGRAD_CACHE_DIR=str(cache),
        PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep),
    )
    env.pop("PYTHONUNBUFFERED", None)  # as a user's shell runs it: stdout to a pipe buffers
    records = tmp_path / "records.jsonl"
    argv = [sys.executable, os.path.join(ROOT, "scripts", "zoo.py"), "--garden"]
    argv += ["--records", str(records), "--timeout", str(TIMEOUT)]
    process = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    lines, alive_at_first_result = [], None
    try:
        for line in process.stdout:  # a pipe: block-buffered unless the sweep flushes
            lines.append((time.monotonic(), line.rstrip("\n")))
            if line.startswith("[1/2] timm:test_a: ") and alive_at_first_result is None:
                alive_at_first_result = process.poll() is None
        status = process.wait(timeout=120)
    finally:
        process.kill()
    ended = time.monotonic()
    text = [line for _, line in lines]
    assert status == 0, text
    assert text[0] == "startup: " + text[0].split("startup: ")[1]  # the first line
    assert "(the list from the cache, no library imported)" in text[0], text
    first = next(i for i, line in enumerate(text) if line.startswith("[1/2] timm:test_a: "))
    assert text[first].startswith(f"[1/2] timm:test_a: TIMEOUT: over {TIMEOUT} s"), text
    assert any(line.startswith("[2/2] timm:test_b: TIMEOUT") for line in text[first:]), text
    # the first model's line came while the second model still ran (its child sleeps
    # until the parent kills it, TIMEOUT s later), not with the rest at the end
    assert alive_at_first_result is True
    assert ended - lines[first][0] >= TIMEOUT - 0.5, (ended - lines[first][0], text)
    outcomes = [json.loads(line)["outcome"] for line in records.read_text().splitlines()]
    assert outcomes == ["TIMEOUT", "TIMEOUT"]


def test_the_list_is_enumerated_once_then_read_back(tmp_path, monkeypatch):
    """``enumerate_cached``: the first call enumerates (and times each library), the
    second reads the cache; new versions of the libraries are a new key."""
    monkeypatch.setenv("JAXGRAD_CACHE_DIR", str(tmp_path))
    calls = []

    def enumerate_models(*, timings):
        calls.append(1)
        timings["timm"] = 0.5
        return MODELS

    monkeypatch.setattr(_garden, "enumerate_models", enumerate_models)
    timings: dict = {}
    assert _garden.enumerate_cached(timings=timings) == (MODELS, False)
    assert timings == {"timm": 0.5}
    assert _garden.enumerate_cached(timings={}) == (MODELS, True)
    assert len(calls) == 1
    versions = {"torch": "2.13.0", "torchvision": "0.28.0", "timm": "1.0", "transformers": "5"}
    assert _garden.enumeration_key(versions) != _garden.enumeration_key(dict(versions, timm="1.1"))
    line = _garden.startup_line(42.04, {"torchvision": 30.0, "timm": 12.0}, False)
    assert line == (
        "startup: 42.0 s (enumerating: torchvision 30.0 s, timm 12.0 s (each with its "
        "import); cached for the next run)"
    )
