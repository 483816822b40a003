"""The CPU group of the cleaner worker processes: a cgroup ``kafkasim-log-cleaner`` weighted at a tenth of a session's
share, a child of the broker's own cgroup in the hierarchy that holds the ``cpu`` controller, and in it one group per
broker, ``broker-<its pid>``, holding that broker's workers.

Why a group and not only SCHED_IDLE: the scheduler compares tasks inside one group, and groups with each other.
With autogroups (Linux's default on desktops and on this project's CI machines) every session is a group, and a
worker in its broker's session lent it the session's full weight against the other brokers: two SCHED_IDLE CPU
burners in a shell's session took produce p99 from 16 to 116 ms, the same two in a ``cpu.idle`` group left it at
15 ms (docs/compaction.md). A group of its own with a small weight gives the same latency: a waking broker preempts
the worker at once, since the worker's group runs up scheduler time ten times as fast as a session.

Why a tenth and not ``cpu.idle``: an idle group gets weight 3 against a session's 1024, next to nothing on a busy
machine, and in the full test suite (clusters beside a Spark JVM) cleanings then took long enough for two tests to
time out. A tenth (``cpu.shares`` 102 of 1024 on cgroup v1, ``cpu.weight`` 10 of 100 on v2) still leaves the
worker about 9 % of a core against one busy session, and the produce p99 with the cleaner running was 1.12x the
figure without it, the same as with ``cpu.idle`` (1.15x; 1.54x with no group).

Why one group per broker under the shared one: a broker removes its own at its shutdown without waiting for another
cluster's workers, and the tools that kill brokers (`kafkasim down` of a killed cluster, the benches, the tests)
remove the groups of brokers that are gone.

Where no such group can be made (not root, a read-only cgroup file system in a container, cgroup v2 without the
cpu controller delegated to the broker's group), the worker stays SCHED_IDLE in the broker's group, and the broker
logs a warning once. The parsing of ``/proc/self/mountinfo`` and ``/proc/self/cgroup`` is pure.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

GROUP_NAME = "kafkasim-log-cleaner"
BROKER_GROUP_PREFIX = "broker-"
V1_SHARES = "102"  # a tenth of a session's 1024
V2_WEIGHT = "10"   # a tenth of a session's 100
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


class NoCpuGroup(Exception):
    """The cleaner's CPU group cannot be made or joined here; the message says why."""


@dataclass(frozen=True)
class CpuHierarchy:
    directory: Path   # this process's own cgroup in the hierarchy with the cpu controller
    version: int      # 1 or 2


def _unescape(field: str) -> str:
    """mountinfo writes a space, tab, newline or backslash in a path as an octal escape (\\040)."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def cpu_hierarchy(mountinfo: str, proc_cgroup: str) -> CpuHierarchy | None:
    """Where this process's cgroup is in the hierarchy of the cpu controller: a cgroup v1 mount whose options name
    ``cpu``, else the cgroup v2 mount (whether v2 offers cpu is checked when the group is made). None when there is
    none, or when the process's cgroup is not under the mount's root (nothing to guess from)."""
    v1_mounts: list[tuple[str, str]] = []
    v2_mounts: list[tuple[str, str]] = []
    for line in mountinfo.splitlines():
        before, sep, after = line.partition(" - ")
        if not sep:
            continue
        fields, tail = before.split(), after.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, mount_point, fstype, super_options = _unescape(fields[3]), _unescape(fields[4]), tail[0], tail[2]
        if fstype == "cgroup" and "cpu" in super_options.split(","):
            v1_mounts.append((root, mount_point))
        elif fstype == "cgroup2":
            v2_mounts.append((root, mount_point))
    v1_path = v2_path = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy_id, controllers, path = parts
        if hierarchy_id == "0" and controllers == "":
            v2_path = path
        elif "cpu" in controllers.split(","):
            v1_path = path
    if v1_mounts and v1_path is not None:
        directory = _join(*v1_mounts[0], v1_path)
        return None if directory is None else CpuHierarchy(directory, 1)
    if v2_mounts and v2_path is not None:
        directory = _join(*v2_mounts[0], v2_path)
        return None if directory is None else CpuHierarchy(directory, 2)
    return None


def _join(mount_root: str, mount_point: str, cgroup_path: str) -> Path | None:
    """The directory of ``cgroup_path`` under a mount of the hierarchy's ``mount_root``: a container's mount has its
    own cgroup as its root, and its /proc/self/cgroup names the path either from the host's root or (with a cgroup
    namespace) from its own."""
    if mount_root != "/":
        if cgroup_path == mount_root or cgroup_path.startswith(mount_root.rstrip("/") + "/"):
            cgroup_path = cgroup_path[len(mount_root):]
        elif not os.path.isdir(os.path.join(mount_point, cgroup_path.lstrip("/"))):
            return None
    return Path(mount_point) / cgroup_path.lstrip("/")


def _read(path: str) -> str:
    with open(path, errors="surrogateescape") as f:
        return f.read()


def this_process_hierarchy() -> CpuHierarchy | None:
    try:
        return cpu_hierarchy(_read("/proc/self/mountinfo"), _read("/proc/self/cgroup"))
    except (OSError, ValueError):
        return None


class CleanerCpuGroup:
    """One broker's group (``kafkasim-log-cleaner/broker-<pid>``): made at its first worker's start, joined by each
    worker by its PID, removed at the broker's shutdown, with the shared parent when no other broker uses it."""

    def __init__(self, hierarchy: CpuHierarchy | None = None, owner_pid: int | None = None) -> None:
        self._hierarchy = hierarchy if hierarchy is not None else this_process_hierarchy()
        self.owner_pid = owner_pid if owner_pid is not None else os.getpid()
        self.refusal: str | None = None  # why the group could not be made or joined, once known

    @property
    def parent(self) -> Path | None:
        return None if self._hierarchy is None else self._hierarchy.directory / GROUP_NAME

    @property
    def directory(self) -> Path | None:
        parent = self.parent
        return None if parent is None else parent / f"{BROKER_GROUP_PREFIX}{self.owner_pid}"

    def join(self, pid: int) -> Path:
        """Move ``pid`` into this broker's group, making the groups first if needed; raises NoCpuGroup saying why
        not (and logs it, the first time only)."""
        try:
            try:
                return self._join(pid)
            except FileNotFoundError:
                pass  # another broker's shutdown removed the shared parent between our mkdir and our write
            try:
                return self._join(pid)
            except FileNotFoundError as exc:
                raise NoCpuGroup(f"cannot make or join {self.directory}: {exc.strerror or exc}") from None
        except NoCpuGroup as exc:
            if self.refusal is None:
                log.warning("the log cleaner's workers run SCHED_IDLE in the broker's CPU group, not in a group "
                            "of their own: %s", exc)
            self.refusal = str(exc)
            raise

    def _join(self, pid: int) -> Path:
        hierarchy, parent, group = self._hierarchy, self.parent, self.directory
        if hierarchy is None or parent is None or group is None:
            raise NoCpuGroup("no cgroup hierarchy with the cpu controller is mounted")
        try:
            if hierarchy.version == 2 and "cpu" not in (
                    hierarchy.directory / "cgroup.subtree_control").read_text().split():
                raise NoCpuGroup(f"the cpu controller is not enabled for the children of {hierarchy.directory}")
            parent.mkdir(exist_ok=True)
            if hierarchy.version == 1:
                (parent / "cpu.shares").write_text(V1_SHARES)
            else:
                (parent / "cpu.weight").write_text(V2_WEIGHT)
            group.mkdir(exist_ok=True)
            (group / "cgroup.procs").write_text(str(pid))
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise NoCpuGroup(f"cannot make or join {group}: {exc.strerror or exc}") from None
        return group

    def remove(self, wait_s: float = 0.0) -> bool:
        """Remove this broker's group once its workers are gone (waiting up to ``wait_s`` for workers stopped a
        moment ago), then the shared parent unless another broker's group is in it. Never raises: a shutdown must
        not fail over it. Whether this broker's group is gone."""
        gone = _remove_when_empty(self.directory, wait_s)
        _remove_when_empty(self.parent, 0.0)
        return gone


def _remove_when_empty(group: Path | None, wait_s: float) -> bool:
    if group is None:
        return True
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.rmdir(group)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if time.monotonic() >= deadline:
                log.debug("cannot remove %s: %s", group, exc)
                return False
        time.sleep(0.02)


def remove_groups_of_stopped_brokers(wait_s: float = 5.0) -> list[Path]:
    """For the tools that stop brokers with SIGKILL (`kafkasim down` of a killed cluster, the benches, the tests):
    the groups of brokers no longer running, which their shutdown would have removed (their workers die with them;
    up to ``wait_s`` is given for that), and the shared parent if nothing else is in it. What was removed."""
    parent = CleanerCpuGroup().parent
    if parent is None:
        return []
    removed: list[Path] = []
    with contextlib.suppress(OSError):
        for group in sorted(parent.glob(f"{BROKER_GROUP_PREFIX}*")):
            owner = group.name[len(BROKER_GROUP_PREFIX):]
            if owner.isdigit() and not _running(int(owner)) and _remove_when_empty(group, wait_s):
                removed.append(group)
    if parent.exists() and _remove_when_empty(parent, 0.0):
        removed.append(parent)
    return removed


def _running(pid: int) -> bool:
    """Whether the broker ``pid`` still runs: a zombie (killed, not yet reaped by whoever started it) does not."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True   # there, but not ours to look at
