"""Keep the memory a broker has used: the request and fetch buffers of a busy broker are ~1 MiB each, and by
default glibc maps such buffers afresh and trims its heap when they are freed (both thresholds start at
128 KiB), so the next buffer is often faulted in page by page again: 200 rounds of two 1 MiB buffers cost
about 96,000 minor page faults with the defaults and about 500 with these settings (tests/broker/
test_memory.py). Kafka's own start script avoids the same churn for the JVM with a heap committed up front
(-Xms equal to -Xmx)."""

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
