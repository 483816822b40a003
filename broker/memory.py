"""Keep the memory a broker has used: the request and fetch buffers of a busy broker are ~1 MiB each, and by
default glibc hands every such buffer back to the kernel when it is freed (mmap above 128 KiB, heap trim
above 128 KiB), so the next one is faulted in page by page again. Kafka's own start scripts avoid the
same churn for the JVM with a heap committed up front (-Xms equal to -Xmx)."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

# mallopt parameters, from glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Buffers up to glibc's largest mmap threshold (32 MiB on 64-bit) come from the heap, which is trimmed only
# when this much is free at its top: a broker keeps about its peak working set instead of re-faulting it.
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 512 << 20


def keep_freed_memory() -> bool:
    """True when glibc took the settings; elsewhere (musl, macOS) the allocator's defaults stay."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    taken = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 and mallopt(M_TRIM_THRESHOLD,
                                                                               TRIM_THRESHOLD_BYTES) == 1
    if not taken:
        log.info("the C library refused the malloc thresholds; freed buffers go back to the kernel")
    return taken
