"""``keep_freed_host_memory``: XLA:CPU's per-call buffers reused instead of faulted in.

Page faults are counted, not timed: the kernel's count of minor faults per call (the
median of 7 calls; now and then a call lands on a worker thread whose heap has not
grown yet) of a jitted function whose temporaries glibc would map afresh each call.
Each check runs in a fresh process: the setting is process-wide and cannot be undone.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from jaxgrad.train import host_memory, strategy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

glibc_only = pytest.mark.skipif(host_memory._glibc()[0] is None,
                                reason="keep_freed_host_memory acts on glibc's malloc only")

FAULTS = textwrap.dedent("""
    import argparse, resource, sys
    import jax, jax.numpy as jnp
    sys.path.insert(0, "scripts")
    import _cli
    from jaxgrad.train import host_memory

    x = jnp.ones(({n}, {n}), jnp.float32)
    f = jax.jit({function})

    def faults_per_call():  # the median over 7 calls, after a warm one
        f(x).block_until_ready()
        counts = []
        for _ in range(7):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            f(x).block_until_ready()
            counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        return sorted(counts)[3]

    print("state", host_memory.host_memory_state())
    print("off", _cli.apply_keep_host_memory(argparse.Namespace(keep_host_memory=False)))
    print("state", host_memory.host_memory_state())
    print("before", faults_per_call())
    print("on", _cli.apply_keep_host_memory(argparse.Namespace(keep_host_memory=True)))
    print("again", host_memory.keep_freed_host_memory())
    print("state", host_memory.host_memory_state())
    print("after", faults_per_call())
""")


SORTS = "lambda x: jnp.sum(jnp.sort(x * 2.0, axis=0) + jnp.sort(x * 3.0, axis=1))"
CUMSUMS = "lambda x: jnp.sum(jnp.cumsum(x, 0) * jnp.cumsum(x, 1))"


def run(n: int, function: str) -> dict:
    done = subprocess.run([sys.executable, "-c", FAULTS.format(n=n, function=function)],
                          cwd=ROOT, text=True,
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split(" ", 1) for line in done.stdout.splitlines()]
    return {"states": [value for key, value in lines if key == "state"],
            **{key: value for key, value in lines if key != "state"}}


@glibc_only
def test_the_flag_and_the_setting_are_what_they_say():
    result = run(64, CUMSUMS)
    assert result["states"] == ["default", "default", "kept"]
    assert result["off"] == "default (--no-keep-host-memory)"  # the flag off changes nothing
    assert result["on"].startswith("kept (glibc ")
    assert "applied=True" in result["again"]  # a second call is harmless


@glibc_only
@pytest.mark.long
def test_kept_memory_ends_the_page_faults_of_each_call():
    result = run(2400, SORTS)  # ~45 MB of temporaries: over mmap's threshold, in one heap
    before, after = float(result["before"]), float(result["after"])
    assert before > 1000, f"the function no longer maps a fresh block per call ({before})"
    assert after < before / 100, (before, after)


def test_the_strategy_cache_keys_on_the_setting():
    assert strategy.environment()["host_memory"] == host_memory.host_memory_state()


def test_elsewhere_it_says_why_and_changes_nothing(monkeypatch):
    monkeypatch.setattr(host_memory.sys, "platform", "darwin")
    result = host_memory.keep_freed_host_memory()
    assert not result.applied and result.detail == "not glibc (darwin)"
