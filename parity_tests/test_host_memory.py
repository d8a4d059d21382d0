"""``keep_freed_host_memory``: XLA:CPU's per-call buffers reused instead of faulted in.

Page faults are counted, not timed: the kernel's count of minor faults per call (the
median of 7 calls; now and then a call lands on a worker thread whose heap has not
grown yet) of a jitted function whose temporaries glibc would map afresh each call. Each check runs
in a fresh process, since the setting is process-wide and cannot be undone.
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


def run(n: int, function: str, env: dict | None = None) -> dict:
    done = subprocess.run([sys.executable, "-c", FAULTS.format(n=n, function=function)],
                          cwd=ROOT, text=True,
                          capture_output=True, timeout=300, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split(" ", 1) for line in done.stdout.splitlines()]
    return {"states": [value for key, value in lines if key == "state"],
            **{key: value for key, value in lines if key != "state"}}


@glibc_only
def test_the_scripts_tunables_end_the_page_faults_of_each_call():
    """What ``scripts/train.py`` and ``bench.py`` start with (GLIBC_TUNABLES): a block
    mapped afresh every call in a plain process is reused. (``mallopt`` alone, in a
    running process, reaches it or not depending on which worker heap serves it.)"""
    plain = run(1800, CUMSUMS)
    assert plain["states"] == ["default", "default", "kept"]
    assert plain["off"] == "default (--no-keep-host-memory)"  # the flag off changes nothing
    assert "still mapped per call" in plain["on"]  # the limit, said
    assert "applied=True" in plain["again"]  # a second call is harmless
    before = float(plain["before"])
    assert before > 1000, f"the function no longer maps a fresh block per call ({before})"
    tuned = run(1800, CUMSUMS, {"GLIBC_TUNABLES": host_memory.TUNABLES})
    assert "GLIBC_TUNABLES from the start" in tuned["on"]
    assert float(tuned["before"]) < before / 100 and float(tuned["after"]) < before / 100


@glibc_only
@pytest.mark.long
def test_mallopt_alone_keeps_a_block_a_worker_heap_holds():
    result = run(2400, SORTS)  # ~45 MB of temporaries: over mmap's threshold, in one heap
    before, after = float(result["before"]), float(result["after"])
    assert before > 1000 and after < before / 100, (before, after)


def test_the_scripts_restart_with_the_library_setting_unless_told_not_to():
    import _cli

    assert _cli.KEEP_HOST_MEMORY_TUNABLES == host_memory.TUNABLES
    calls = []

    def restart(argv, environ):
        _cli.restart_keeping_host_memory(argv, environ=environ,
                                         execve=lambda *call: calls.append(call))
        return calls.pop() if calls else None

    if not sys.platform.startswith("linux") or host_memory._glibc()[0] is None:
        assert restart([], {}) is None
        return
    executable, argv, env = restart(["--quick"], {"GLIBC_TUNABLES": "glibc.pthread.rseq=0"})
    assert executable == sys.executable and argv[0] == sys.executable
    assert env["GLIBC_TUNABLES"] == "glibc.pthread.rseq=0:" + host_memory.TUNABLES
    assert restart(["--no-keep-host-memory"], {}) is None
    assert restart(["--help"], {}) is None
    assert restart([], {"GLIBC_TUNABLES": host_memory.TUNABLES}) is None  # restarted already
    assert restart([], {"GLIBC_TUNABLES": "glibc.malloc.arena_max=4"}) is None  # theirs stands


def test_the_strategy_cache_keys_on_the_setting():
    assert strategy.environment()["host_memory"] == host_memory.host_memory_state()


def test_elsewhere_it_says_why_and_changes_nothing(monkeypatch):
    monkeypatch.setattr(host_memory.sys, "platform", "darwin")
    result = host_memory.keep_freed_host_memory()
    assert not result.applied and result.detail == "not glibc (darwin)"
