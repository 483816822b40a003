"""The idle CPU group of the cleaner worker processes: a child cgroup ``kafkasim-log-cleaner`` of the broker's own, in
the cgroup hierarchy that holds the ``cpu`` controller, with ``cpu.idle`` set.

Why a group and not only SCHED_IDLE: the scheduler compares tasks inside one group, and groups with each other.
With autogroups (Linux's default on desktops and on this project's CI machines) every session is a group, and a
worker in its broker's session lent it the session's full weight against the other brokers: two SCHED_IDLE CPU
burners in a shell's session took produce p99 from 16 to 116 ms, the same two in a ``cpu.idle`` group left it at
15 ms (docs/compaction.md). In a group whose ``cpu.idle`` is 1 the worker runs only on CPU time no other group
wants, and any other task waking preempts it, as SCHED_IDLE means inside a group. The price is Kafka's: on a busy
machine the cleaner waits for spare CPU (Kafka throttles its cleaner by I/O rate for the same reason).

Where no such group can be made (not root, a read-only cgroup file system in a container, cgroup v2 without the
cpu controller delegated to the broker's group), the worker stays SCHED_IDLE in the broker's group, and the broker
says so once in its log. The parsing of ``/proc/self/mountinfo`` and ``/proc/self/cgroup`` is pure.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

GROUP_NAME = "kafkasim-log-cleaner"
SMALLEST_V1_SHARES = "2"    # where cpu.idle does not exist (Linux before 5.15): the least weight there is
SMALLEST_V2_WEIGHT = "1"


class NoIdleGroup(Exception):
    """The idle group cannot be made or joined here; the message says why."""


@dataclass(frozen=True)
class CpuHierarchy:
    directory: Path   # this process's own cgroup in the hierarchy with the cpu controller
    version: int      # 1 or 2


def cpu_hierarchy(mountinfo: str, proc_cgroup: str) -> CpuHierarchy | None:
    """Where this process's cgroup is in the hierarchy of the cpu controller: a cgroup v1 mount whose options name
    ``cpu``, else the cgroup v2 mount (whether v2 offers cpu is checked when the group is made)."""
    v1_mounts: list[tuple[str, str]] = []
    v2_mounts: list[tuple[str, str]] = []
    for line in mountinfo.splitlines():
        before, sep, after = line.partition(" - ")
        if not sep:
            continue
        fields, tail = before.split(), after.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, mount_point, fstype, super_options = fields[3], fields[4], tail[0], tail[2].split(",")
        if fstype == "cgroup" and "cpu" in super_options:
            v1_mounts.append((root, mount_point))
        elif fstype == "cgroup2":
            v2_mounts.append((root, mount_point))
    v1_path = v2_path = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "" and parts[0] == "0":
            v2_path = path
        elif "cpu" in controllers.split(","):
            v1_path = path
    if v1_mounts and v1_path is not None:
        return CpuHierarchy(_join(*v1_mounts[0], v1_path), 1)
    if v2_mounts and v2_path is not None:
        return CpuHierarchy(_join(*v2_mounts[0], v2_path), 2)
    return None


def _join(mount_root: str, mount_point: str, cgroup_path: str) -> Path:
    """The directory of ``cgroup_path`` under a mount of the hierarchy's ``mount_root`` (a container sees its own
    cgroup as the root of the mount)."""
    if mount_root != "/" and (cgroup_path == mount_root or cgroup_path.startswith(mount_root + "/")):
        cgroup_path = cgroup_path[len(mount_root):]
    return Path(mount_point) / cgroup_path.lstrip("/")


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def this_process_hierarchy() -> CpuHierarchy | None:
    try:
        return cpu_hierarchy(_read("/proc/self/mountinfo"), _read("/proc/self/cgroup"))
    except OSError:
        return None


class IdleCpuGroup:
    """The group, made once per broker (shared by brokers of one host: the same name under the same parent), joined by
    each worker process by its PID, removed at the broker's shutdown when no worker is left in it."""

    def __init__(self, hierarchy: CpuHierarchy | None = None) -> None:
        self._hierarchy = hierarchy if hierarchy is not None else this_process_hierarchy()

    @property
    def directory(self) -> Path | None:
        return None if self._hierarchy is None else self._hierarchy.directory / GROUP_NAME

    def join(self, pid: int) -> Path:
        """Move ``pid`` into the group, making it first if needed; raises NoIdleGroup saying why not."""
        hierarchy = self._hierarchy
        if hierarchy is None:
            raise NoIdleGroup("no cgroup hierarchy with the cpu controller is mounted")
        group = hierarchy.directory / GROUP_NAME
        try:
            if hierarchy.version == 2 and "cpu" not in (
                    hierarchy.directory / "cgroup.subtree_control").read_text().split():
                raise NoIdleGroup(f"the cpu controller is not enabled for the children of {hierarchy.directory}")
            group.mkdir(exist_ok=True)
            idle = group / "cpu.idle"
            if idle.exists():
                idle.write_text("1")
            elif hierarchy.version == 1:
                (group / "cpu.shares").write_text(SMALLEST_V1_SHARES)
            else:
                (group / "cpu.weight").write_text(SMALLEST_V2_WEIGHT)
            (group / "cgroup.procs").write_text(str(pid))
        except OSError as exc:
            raise NoIdleGroup(f"cannot make or join {group}: {exc.strerror or exc}") from None
        return group

    def remove(self, wait_s: float = 0.0) -> bool:
        """Remove the group once it is empty, waiting up to ``wait_s`` for workers killed a moment ago to be gone;
        another broker's workers may still be in it: then it stays for them. Whether it is gone."""
        group = self.directory
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
                if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY, errno.EACCES, errno.EPERM, errno.EROFS):
                    raise
                if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY) or time.monotonic() >= deadline:
                    return False
            time.sleep(0.02)


def remove_idle_cpu_group(wait_s: float = 5.0) -> bool:
    """For the tools that stop brokers with SIGKILL (`kafkasim down` of a killed cluster, the benches, the tests):
    the group a broker's shutdown would have removed."""
    return IdleCpuGroup().remove(wait_s)


def in_idle_group(pid: int) -> bool:
    """Whether process ``pid`` is in a ``kafkasim-log-cleaner`` group of the cpu controller's hierarchy."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and ("cpu" in parts[1].split(",") or parts[0] == "0") and \
                parts[2].rstrip("/").endswith("/" + GROUP_NAME):
            return True
    return False
