"""``keep_freed_host_memory``: XLA:CPU's per-call buffers reused instead of faulted in.

Page faults are counted, not timed: the kernel's count of minor faults per cycle of
a large block allocated, touched and freed on the main thread. Each check runs in a
fresh process: the setting is process-wide and cannot be undone.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from jaxgrad.train import host_memory, strategy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

glibc_only = pytest.mark.skipif(
    host_memory._glibc()[0] is None, reason="keep_freed_host_memory acts on glibc's malloc only"
)

FLAGS = textwrap.dedent("""
    import argparse, sys
    sys.path.insert(0, "scripts")
    import _cli
    from jaxgrad.train import host_memory

    print("state", host_memory.host_memory_state())
    print("off", _cli.apply_keep_host_memory(argparse.Namespace(keep_host_memory=False)))
    print("state", host_memory.host_memory_state())
    print("on", _cli.apply_keep_host_memory(argparse.Namespace(keep_host_memory=True)))
    print("again", host_memory.keep_freed_host_memory())
    print("state", host_memory.host_memory_state())
""")


@glibc_only
def test_the_flag_and_the_setting_are_what_they_say():
    done = subprocess.run(
        [sys.executable, "-c", FLAGS], cwd=ROOT, text=True, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split(" ", 1) for line in done.stdout.splitlines()]
    result = {
        "states": [value for key, value in lines if key == "state"],
        **{key: value for key, value in lines if key != "state"},
    }
    assert result["states"] == ["default", "default", "kept"]
    assert result["off"] == "default (--no-keep-host-memory)"  # the flag off changes nothing
    assert result["on"].startswith("kept (glibc ")
    assert "applied=True" in result["again"]  # a second call is harmless


CYCLES = textwrap.dedent("""
    import ctypes, resource
    from jaxgrad.train import host_memory

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    size = 40 << 20  # over glibc's largest mmap threshold (32 MB), as XLA's blocks are

    def faults_per_cycle():  # allocate, touch every page, free; the first cycle warms
        counts = []
        for _ in range(6):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            block = libc.malloc(size)
            libc.memset(block, 1, size)
            libc.free(block)
            counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        return min(counts[1:]), max(counts[1:])

    print("before", *faults_per_cycle())
    host_memory.keep_freed_host_memory()
    print("after", *faults_per_cycle())
""")


@glibc_only
def test_kept_memory_ends_the_page_faults_of_each_large_block():
    """The mechanism, on the main thread where nothing else decides which heap serves
    a block: a 40 MB block is mapped afresh on every malloc (every page faulted in on
    first touch) until freed memory is kept, then reused without a fault. (On XLA's
    worker threads the same holds for blocks their heaps hold; see the module's limit.)"""
    done = subprocess.run(
        [sys.executable, "-c", CYCLES], cwd=ROOT, text=True, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    counts = {
        line.split()[0]: [int(v) for v in line.split()[1:]] for line in done.stdout.splitlines()
    }
    pages = (40 << 20) // 4096
    assert counts["before"][0] >= pages * 0.9, counts  # every cycle faulted its pages in
    assert counts["after"][1] < pages / 100, counts  # no cycle after the first did


def test_the_strategy_cache_keys_on_the_setting():
    assert strategy.environment()["host_memory"] == host_memory.host_memory_state()


def test_elsewhere_it_says_why_and_changes_nothing(monkeypatch):
    monkeypatch.setattr(host_memory.sys, "platform", "darwin")
    result = host_memory.keep_freed_host_memory()
    assert not result.applied and result.detail == "not glibc (darwin)"
