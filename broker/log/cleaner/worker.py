"""The cleaner worker process: where a cleaning's CPU work runs, away from the broker's GIL.

A cleaner thread's Python loops (the offset map, the record walk, recompression) held the GIL long enough to slow
the broker's event loop: produce p99 tripled while a cleaning ran (docs/compaction.md). So each of
``log.cleaner.threads`` workers is a process of its own, started with the cleaner, with a lower priority
(SCHED_IDLE). The broker keeps everything that touches the log it serves: the choice, the plan, the check that the
log still holds what was read, the swap and the checkpoint (:mod:`broker.log.cleaner.manager`). The worker gets the
plan as data (:class:`broker.log.cleaner.cleaner.CleaningJob`) with the plan's own file descriptors of the source
segments (SCM_RIGHTS over a socketpair: a segment renamed or deleted meanwhile stays readable, as before), writes the
``.cleaned`` files, and answers with what it wrote; the broker opens them and swaps them in.

The worker ends with its broker: when idle it waits on the socket, and during a cleaning it looks at the socket at
every batch (and while throttled), so the broker's end closing (its shutdown, or a kill -9) ends it; in the middle of
a cleaning it then exits at once, as the broker did, and the broker's next load deletes the ``.cleaned`` files, as
after any crash. Linux's parent-death signal (PR_SET_PDEATHSIG) backs that up. A "stop" message during a cleaning
(the broker stopping) aborts it: the worker removes its ``.cleaned`` files and answers.

Wire format, both ways: 12-byte header (payload length, number of descriptors), a pickled tuple, then the
descriptors in chunks, each with a one-byte message.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import pickle
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

from broker.log.cleaner.cpu_group import CleanerCpuGroup, NoCpuGroup

if TYPE_CHECKING:
    from broker.log.cleaner.cleaner import CleaningPlan, CleaningResult

# Only the standard library at the top: the worker lowers its priority before it imports the cleaner (half a CPU
# second of imports, kio's schemas among them), so its start does not compete with the brokers either.

log = logging.getLogger(__name__)

NICENESS = 10  # kept beside SCHED_IDLE (which ignores it) for a system without SCHED_IDLE
HEADER = struct.Struct(">QI")
FDS_PER_MESSAGE = 200  # the kernel takes at most 253 (SCM_MAX_FD) in one message
PR_SET_PDEATHSIG = 1
EXIT_TIMEOUT_S = 5.0


class CleanerWorkerError(Exception):
    """A cleaning failed in the worker process; the message carries its traceback."""


class CleanerWorkerDied(Exception):
    """The worker process ended during a cleaning (killed, out of memory): its ``.cleaned`` files were removed."""


# ------------------------------------------------------------------------------------------------- framing

def send_message(sock: socket.socket, message: tuple, fds: Sequence[int] = ()) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(HEADER.pack(len(data), len(fds)) + data)
    for start in range(0, len(fds), FDS_PER_MESSAGE):
        socket.send_fds(sock, [b"F"], list(fds[start:start + FDS_PER_MESSAGE]))


def _recv_exact(sock: socket.socket, length: int) -> bytes:
    chunks, got = [], 0
    while got < length:
        chunk = sock.recv(min(length - got, 1 << 20))
        if not chunk:
            raise EOFError("the other end closed the cleaner socket")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def receive_message(sock: socket.socket) -> tuple[tuple, list[int]]:
    """A message and its descriptors (the caller closes them). EOFError when the other end is gone."""
    length, count = HEADER.unpack(_recv_exact(sock, HEADER.size))
    message = pickle.loads(_recv_exact(sock, length))
    fds: list[int] = []
    try:
        while len(fds) < count:
            data, got, flags, _ = socket.recv_fds(sock, 1, FDS_PER_MESSAGE)
            fds.extend(got)
            if not data:
                raise EOFError("the other end closed the cleaner socket")
            if flags & socket.MSG_CTRUNC:
                raise OSError("file descriptors of a cleaning were cut off (the process's limit on open files?)")
    except BaseException:
        _close_all(fds)
        raise
    return message, fds


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


# --------------------------------------------------------------------------------------- broker's side

class CleanerProcess:
    """One worker process, seen from the broker: started by :meth:`start` (the cleaner's startup calls it) or by the
    first :meth:`clean`, one cleaning at a time.

    :meth:`clean` blocks (a cleaner thread calls it; the thread only waits on the socket, it holds no GIL).
    :meth:`stop` may be called from any thread; :meth:`close` ends the process by its own PID.
    """

    def __init__(self, name: str, map_memory: int, load_factor: float, bytes_per_second: float,
                 cpu_group: CleanerCpuGroup | None = None) -> None:
        self.name = name
        self._cpu_group = cpu_group
        self._settings = {"map_memory": map_memory, "load_factor": load_factor, "bytes_per_second": bytes_per_second}
        self._process: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._busy = False
        self._stopping = False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def start(self) -> None:
        """Start the process unless it runs. Call it from the thread that lives as long as the broker (the event
        loop's): the parent-death signal is tied to the thread that started the child."""
        if self._process is not None and self._process.poll() is None and self._sock is not None:
            return
        self._forget()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "broker.log.cleaner.worker", str(theirs.fileno()), str(os.getpid()),
                 self.name, json.dumps(self._settings)],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, close_fds=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._sock = ours
        where = self._join_cpu_group(self._process.pid)
        log.info("%s: cleaner worker process started, pid %d%s", self.name, self._process.pid, where)

    def _join_cpu_group(self, pid: int) -> str:
        """At once after the start, before the interpreter's imports: what the log line says about where it runs
        (a group that cannot be made is logged once, by the group)."""
        if self._cpu_group is None:
            return ""
        try:
            return f", in the cleaner's CPU group {self._cpu_group.join(pid)}"
        except NoCpuGroup:
            return ", SCHED_IDLE in the broker's CPU group"

    def clean(self, plan: CleaningPlan, now_ms: int) -> CleaningResult | None:
        """Run the cleaning in the worker; the result's ``.cleaned`` segments are opened here, for the swap."""
        from broker.log.cleaner.cleaner import CleaningAborted

        self.start()
        sock = self._sock
        assert sock is not None
        self._busy = True
        try:
            try:
                with self._send_lock:
                    send_message(sock, ("clean", plan.job(now_ms)), plan.fds())
                    if self._stopping:
                        send_message(sock, ("stop",))
                reply, _ = receive_message(sock)
            except (EOFError, OSError) as exc:
                returncode = self._reap()
                plan.remove_cleaned_files()
                raise CleanerWorkerDied(f"{self.name}: the cleaner worker process ended during a cleaning "
                                        f"(exit status {returncode}): {exc}") from None
        finally:
            self._busy = False
        kind = reply[0]
        if kind == "done":
            return plan.result_of(reply[1])
        if kind == "aborted":
            raise CleaningAborted()
        raise CleanerWorkerError(f"{reply[1]}: {reply[2]}\n(in the cleaner worker process)\n{reply[3]}")

    def stop(self) -> None:
        """The broker is stopping: the cleaning in progress, or one starting now, stops at its next batch; its
        ``.cleaned`` files are removed by the worker."""
        with self._send_lock:
            self._stopping = True
            if self._busy and self._sock is not None:
                with contextlib.suppress(OSError):
                    send_message(self._sock, ("stop",))

    def kill(self) -> None:
        """End the worker at once by its PID (a shutdown that does not wait for it): a cleaning in progress fails
        with :class:`CleanerWorkerDied`, which removes its ``.cleaned`` files."""
        if self._process is not None:
            _sigkill(self._process)

    def close(self, timeout_s: float = EXIT_TIMEOUT_S) -> None:
        """Close the socket (the worker exits at once, or at its next batch), wait for it, kill it by its PID if it
        is still there after ``timeout_s``."""
        process, self._process = self._process, None
        self._forget()
        if process is None:
            return
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("%s: cleaner worker %d did not exit in %.0f s; killing it", self.name, process.pid, timeout_s)
            _sigkill(process)
            process.wait()

    def _forget(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _reap(self) -> int | None:
        self._forget()
        process = self._process
        if process is None:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(EXIT_TIMEOUT_S)
        _sigkill(process)
        process.wait()
        return process.returncode


def _sigkill(process: subprocess.Popen) -> None:
    """SIGKILL by the worker's own PID, unless it has already exited (and been reaped: its PID may be reused)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)


# --------------------------------------------------------------------------------------- worker's side

class _StopWatch:
    """``should_stop`` of a cleaning in the worker: a message from the broker, or its end closing, stops it."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.stopped = False

    def __call__(self) -> bool:
        if not self.stopped and select.select([self._sock], [], [], 0)[0]:
            self._read()
        return self.stopped

    def _read(self) -> None:
        self.stopped = True
        try:
            _, fds = receive_message(self._sock)  # only "stop" or "exit" come during a cleaning
            _close_all(fds)
        except (EOFError, OSError):
            # the broker is gone (kill -9): end at once, as it did, leaving the .cleaned files to its next load
            os._exit(1)

    def sleep(self, seconds: float) -> None:
        """The throttler's sleep: cut short by a message."""
        if not self.stopped and select.select([self._sock], [], [], seconds)[0]:
            self._read()


def _die_with_parent(parent_pid: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the broker died before the signal was set
        os._exit(1)


def _lower_priority() -> None:
    """The worker runs only on CPU time nothing else wants: SCHED_IDLE (weight 3 against a nice-0 task's 1024, and a
    waking task of any other class preempts it at once), the nice value too, for a system without SCHED_IDLE.

    Why not nice alone: with Linux's autogroup scheduling a nice value weighs only inside the session, the broker's
    (the worker stays in it), and the session's weight against the other brokers' follows its runnable load, so a
    nice-10 worker (weight 110) still took a tenth of a core from the followers an acks=all produce waits for;
    SCHED_IDLE's weight of 3 leaves its session's weight to the broker's own load. A session of its own with a
    niced autogroup was tried before: on a loaded machine it starved the worker (17 s to start and clean a small
    log at load 13); SCHED_IDLE in the broker's session cleaned in 40-400 ms at load 10 (docs/compaction.md)."""
    os.nice(NICENESS)
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def serve(sock: socket.socket, name: str, settings: dict) -> None:
    from broker.log.cleaner.cleaner import CleaningAborted, clean_job
    from broker.log.cleaner.offset_map import OffsetMap
    from broker.log.cleaner.throttler import Throttler

    offset_map = OffsetMap(settings["map_memory"], settings["load_factor"])
    while True:
        try:
            message, fds = receive_message(sock)
        except EOFError:
            return
        if message[0] == "exit":
            _close_all(fds)
            return
        if message[0] != "clean":  # a stop that came after its cleaning ended
            _close_all(fds)
            continue
        job = message[1]
        stop = _StopWatch(sock)
        throttler = Throttler(settings["bytes_per_second"], sleep=stop.sleep)
        try:
            reply: tuple = ("done", clean_job(job, fds, offset_map, throttler, should_stop=stop))
        except CleaningAborted:
            reply = ("aborted",)
        except Exception as exc:
            reply = ("error", type(exc).__name__, str(exc), traceback.format_exc())
        finally:
            _close_all(fds)
        send_message(sock, reply)


def main(argv: Sequence[str]) -> int:
    fd, parent_pid, name, settings = int(argv[0]), int(argv[1]), argv[2], json.loads(argv[3])
    _die_with_parent(parent_pid)
    _lower_priority()
    # kio's phantom types import hypothesis (and pytest, trio) when it is installed, a development environment's
    # half CPU second at every worker start; the worker never uses it, so it is made unimportable here
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    with contextlib.suppress(ValueError, OSError):  # a cleaning receives a descriptor for every segment of its log
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the broker's terminal is the broker's to handle
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s [{name} pid {os.getpid()}] %(name)s: %(message)s")
    started = time.monotonic()
    with socket.socket(fileno=fd) as sock:
        serve(sock, name, settings)
    log.debug("exiting after %.0f s", time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
