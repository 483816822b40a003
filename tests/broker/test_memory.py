"""A broker keeps the memory of its freed 1 MiB buffers instead of faulting it in again for the next one."""

import subprocess
import sys

# Two live 1 MiB buffers per round, like a fetch response read from a segment and its copy into a message.
_ROUNDS = """
import resource, sys
from broker.memory import keep_freed_memory
if sys.argv[1] == "keep" and not keep_freed_memory():
    sys.exit("the C library refused the settings")
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):
    received = b"x" * (1 << 20)
    copied = received[1:]
    del received, copied
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _minor_page_faults(mode: str) -> int:
    result = subprocess.run([sys.executable, "-c", _ROUNDS, mode], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def test_freed_buffers_are_reused_instead_of_faulted_in_again():
    glibc_defaults = _minor_page_faults("default")
    kept = _minor_page_faults("keep")
    # By default every round maps its buffers afresh: about 512 faults a round, 200 rounds.
    assert glibc_defaults > 200 * 256
    assert kept * 10 < glibc_defaults
