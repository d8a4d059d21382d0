"""Host memory kept for reuse: XLA:CPU's per-call buffers without a page fault each step.

Contract: ``keep_freed_host_memory()`` tells the C library's allocator (glibc's
``malloc``, through ``mallopt``) to serve large blocks from its heap instead of fresh
``mmap`` regions and to keep freed memory instead of returning it to the kernel. It
acts on the whole process, torch's allocations included, and returns a
``HostMemory`` saying what it did (``applied``) and, where it did nothing, why
(not glibc: musl, macOS, Windows). ``host_memory_state()`` reads the setting back
without changing it; the strategy cache keys on it.

Why: XLA:CPU gives each call of a compiled program one block for all its temporaries
(54 MB for the digits transformer's train step at batch 128). glibc serves any block
above its mmap threshold (128 KB, rising with use to at most 32 MB) with a fresh
``mmap`` and unmaps it on free, so every call touched every page of the block anew:
13,900 page faults per step, each a trap into the kernel and a zeroed page. With
freed memory kept, the same step ran 46.4 -> 37.9 ms and the scan-fused epoch, which
pays the faults once per call of 10 steps, 33.8 -> 32.6 ms (Intel Xeon, 2 cores; one
process each, medians of 5 rounds).

Limit: XLA runs a call on a worker thread, and glibc gives each worker thread its own
heaps of at most 64 MB, deleting a heap once it is empty: a block that needs a heap of
its own is still mapped afresh every call (the transformer's step still took 4,200
faults per step, a third of before). Starting the process with every thread on the
main heap (``GLIBC_TUNABLES=glibc.malloc.arena_max=1:...``) ends those too, but made
the same step and epoch slower, not faster (48.2 and 45.7 ms against 37.9 and
32.6 ms with ``mallopt`` alone; why was not established, one heap shared by every
thread's allocations being the obvious suspect). It is not used.

Cost: the process's resident memory stays at its peak instead of shrinking after
large temporaries are freed (as with tcmalloc or jemalloc, which training hosts
often preload for the same reason). Call it once in a process that trains;
``scripts/train.py`` and ``scripts/bench.py`` do (``--no-keep-host-memory`` to
compare). It cannot be undone within the process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import sys

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
# freed memory at the top of the heap goes back to the kernel only beyond this many
# bytes (mallopt takes a C int: INT_MAX, 2 GiB)
_NEVER_TRIM = 2**31 - 1

_state = {"applied": False}


@dataclasses.dataclass(frozen=True)
class HostMemory:
    """What ``keep_freed_host_memory`` did: ``applied``, and ``detail``, a line for a
    run's header (``"kept (glibc 2.36: no mmap for large blocks, no trimming)"`` or why not)."""

    applied: bool
    detail: str


def _glibc():
    """glibc as a ``ctypes`` library, and its version; ``(None, reason)`` elsewhere."""
    if not sys.platform.startswith("linux"):
        return None, f"not glibc ({sys.platform})"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        version = libc.gnu_get_libc_version
        libc.mallopt  # noqa: B018 - present in every glibc; absent in musl's libc
    except (OSError, AttributeError):
        return None, "not glibc (no gnu_get_libc_version/mallopt in the C library)"
    version.restype = ctypes.c_char_p
    return libc, version().decode()


def keep_freed_host_memory() -> HostMemory:
    """Serve large host allocations from the heap and keep freed memory (process-wide).

    Returns:
      ``HostMemory(applied, detail)``; ``applied`` is False where the C library is not
      glibc (nothing changed) or refused a setting (``detail`` names it; the other
      may have taken effect).
    """
    libc, version = _glibc()
    if libc is None:
        return HostMemory(False, version)
    if _state["applied"]:
        return HostMemory(True, _state["detail"])
    refused = [
        name
        for name, param, value in (
            ("M_MMAP_MAX", M_MMAP_MAX, 0),
            ("M_TRIM_THRESHOLD", M_TRIM_THRESHOLD, _NEVER_TRIM),
        )
        if libc.mallopt(ctypes.c_int(param), ctypes.c_int(value)) != 1
    ]
    if refused:
        return HostMemory(False, f"glibc {version} refused mallopt {', '.join(refused)}")
    detail = f"kept (glibc {version}: no mmap for large blocks, no trimming)"
    _state.update(applied=True, detail=detail)
    return HostMemory(True, detail)


def host_memory_state() -> str:
    """``"kept"`` once ``keep_freed_host_memory`` applied in this process, else ``"default"``."""
    return "kept" if _state["applied"] else "default"
