"""The cleaner workers' CPU group: where the cpu controller's hierarchy is (pure parsing of /proc files of the
shapes Linux writes), and on this machine a real worker process moved into a real cgroup weighted at a tenth, then the
group removed once its worker is gone."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import psutil
import pytest

from broker.log.cleaner.cpu_group import (
    BROKER_GROUP_PREFIX,
    GROUP_NAME,
    CpuHierarchy,
    CleanerCpuGroup,
    NoCpuGroup,
    cpu_hierarchy,
    remove_groups_of_stopped_brokers,
    this_process_hierarchy,
)
from broker.log.cleaner.worker import CleanerProcess
from tests.harness import wait_until


def in_cleaner_cpu_group(pid: int) -> bool:
    """Whether process ``pid`` is in a group under ``kafkasim-log-cleaner`` in the cpu controller's hierarchy."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text(errors="surrogateescape").splitlines()
    except OSError:
        return False
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and ("cpu" in parts[1].split(",") or parts[0] == "0") and \
                f"/{GROUP_NAME}/{BROKER_GROUP_PREFIX}" in parts[2]:
            return True
    return False


# a cgroup v1 host with a v2 mount beside it (this project's CI machines), as /proc/self/mountinfo lists them
HYBRID_MOUNTINFO = """\
24 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
30 29 0:26 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
31 29 0:27 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
33 29 0:29 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 29 0:34 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_CGROUP = "4:memory:/process_api/abc\n2:cpuacct:/\n1:cpu:/\n0::/\n"

# a systemd host on cgroup v2 only; the broker runs in a user's session scope
V2_MOUNTINFO = "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
V2_CGROUP = "0::/user.slice/user-1000.slice/session-3.scope\n"

# a container with a cgroup namespace: the mount's root is the container's own cgroup
CONTAINER_MOUNTINFO = "600 590 0:30 /docker/0123 /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n"


def test_a_v1_cpu_mount_is_preferred_and_the_process_path_is_joined_to_it():
    assert cpu_hierarchy(HYBRID_MOUNTINFO, HYBRID_CGROUP) == CpuHierarchy(Path("/sys/fs/cgroup/cpu"), 1)
    assert cpu_hierarchy(HYBRID_MOUNTINFO, "1:cpu,cpuacct:/kafka/broker-1\n0::/\n") == CpuHierarchy(
        Path("/sys/fs/cgroup/cpu/kafka/broker-1"), 1)


def test_cgroup_v2_alone_gives_the_process_own_cgroup():
    assert cpu_hierarchy(V2_MOUNTINFO, V2_CGROUP) == CpuHierarchy(
        Path("/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope"), 2)


def test_a_container_sees_its_cgroup_as_the_mount_root():
    assert cpu_hierarchy(CONTAINER_MOUNTINFO, "0::/docker/0123\n") == CpuHierarchy(Path("/sys/fs/cgroup"), 2)
    assert cpu_hierarchy(CONTAINER_MOUNTINFO, "0::/\n") == CpuHierarchy(Path("/sys/fs/cgroup"), 2)


def test_a_v1_container_with_cpu_comounted_and_escaped_paths():
    mountinfo = r"700 690 0:26 /docker/ab\040cd /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct" + "\n"
    assert cpu_hierarchy(mountinfo, "3:cpu,cpuacct:/docker/ab cd\n") == CpuHierarchy(
        Path("/sys/fs/cgroup/cpu,cpuacct"), 1)
    assert cpu_hierarchy(mountinfo, "3:cpu,cpuacct:/docker/ab cd/inner\n") == CpuHierarchy(
        Path("/sys/fs/cgroup/cpu,cpuacct/inner"), 1)
    assert cpu_hierarchy(mountinfo, "3:cpu,cpuacct:/elsewhere/not-under-the-root\n") is None, "nothing to guess from"


def test_no_cgroup_mount_at_all_is_none():
    assert cpu_hierarchy("24 1 254:0 / / rw - ext4 /dev/vda rw\n", "0::/\n") is None
    assert cpu_hierarchy("", "") is None


def test_a_group_that_cannot_be_made_is_refused_with_the_reason_and_the_worker_still_runs(tmp_path, caplog):
    missing = CleanerCpuGroup(CpuHierarchy(tmp_path / "not-a-cgroup", 1))
    with pytest.raises(NoCpuGroup, match=r"cannot make or join .*not-a-cgroup/kafkasim-log-cleaner/broker-"):
        missing.join(os.getpid())
    v2_without_cpu = tmp_path / "v2"
    v2_without_cpu.mkdir()
    (v2_without_cpu / "cgroup.subtree_control").write_text("memory pids\n")
    with pytest.raises(NoCpuGroup, match="the cpu controller is not enabled for the children"):
        CleanerCpuGroup(CpuHierarchy(v2_without_cpu, 2)).join(os.getpid())
    assert CleanerCpuGroup(CpuHierarchy(tmp_path / "x", 1)).remove(), "a group never made is no group left behind"
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    blocked = CleanerCpuGroup(CpuHierarchy(a_file, 1))  # rmdir under a file: ENOTDIR, reported, never raised
    assert blocked.remove() is False

    caplog.clear()
    missing = CleanerCpuGroup(CpuHierarchy(tmp_path / "not-a-cgroup", 1))  # a broker's, before its first worker
    worker = CleanerProcess("test-cleaner", 1 << 20, 0.9, float("inf"), missing)
    second = CleanerProcess("test-cleaner-2", 1 << 20, 0.9, float("inf"), missing)
    try:
        worker.start()
        second.start()
        assert worker.pid is not None
        wait_until(lambda: os.sched_getscheduler(worker.pid) == os.SCHED_IDLE, 10, "the worker to lower itself")
        assert missing.refusal is not None and "not-a-cgroup" in missing.refusal
        assert not in_cleaner_cpu_group(worker.pid)
        warnings = [r for r in caplog.records if "not in a group of their own" in r.getMessage()]
        assert len(warnings) == 1, "said once per broker, not once per worker"
    finally:
        worker.close()
        second.close()


def test_a_worker_runs_in_its_broker_s_cpu_group_at_a_tenth_of_the_weight_which_goes_with_the_worker():
    """On the machines this project runs on (root, a writable cpu hierarchy) the group is real: without it a worker
    shares its broker's session weight against the other brokers (docs/compaction.md)."""
    group = CleanerCpuGroup()
    assert this_process_hierarchy() is not None and group.directory is not None, \
        "this machine mounts a cgroup hierarchy with the cpu controller"
    worker = CleanerProcess("test-cleaner", 1 << 20, 0.9, float("inf"), group)
    try:
        worker.start()
        pid = worker.pid
        assert pid is not None and group.refusal is None
        assert in_cleaner_cpu_group(pid), Path(f"/proc/{pid}/cgroup").read_text()
        assert group.parent is not None and group.parent.name == GROUP_NAME
        assert group.directory.name == f"broker-{os.getpid()}"
        # a tenth of a session's weight, not cpu.idle's near nothing: a loaded machine still leaves the worker some CPU
        hierarchy = this_process_hierarchy()
        assert hierarchy is not None
        weight = "cpu.shares" if hierarchy.version == 1 else "cpu.weight"
        assert (group.parent / weight).read_text().strip() == ("102" if hierarchy.version == 1 else "10")
        idle = group.parent / "cpu.idle"
        assert not idle.exists() or idle.read_text().strip() == "0"
        wait_until(lambda: os.sched_getscheduler(pid) == os.SCHED_IDLE, 10, "the worker to lower itself")
    finally:
        worker.close()
    wait_until(lambda: not psutil.pid_exists(pid), 10, "the worker to exit")
    assert group.remove(wait_s=5.0) and not group.directory.exists()


def test_the_tools_remove_the_groups_of_brokers_that_are_gone_and_keep_the_others():
    gone = CleanerCpuGroup(owner_pid=_a_pid_that_has_exited())
    alive = CleanerCpuGroup()  # this process: running
    sleeper = psutil.Popen(["sleep", "30"])
    try:
        gone.join(sleeper.pid)
        sleeper.kill()
        sleeper.wait(10)
        assert gone.directory is not None and gone.directory.exists()
        alive_dir = alive.directory
        assert alive_dir is not None
        alive_dir.mkdir(parents=True, exist_ok=True)
        removed = remove_groups_of_stopped_brokers(wait_s=5.0)
        assert gone.directory in removed and not gone.directory.exists()
        assert alive_dir.exists(), "a running broker's group is its own to remove"
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            sleeper.kill()
        alive.remove(wait_s=1.0)
    assert not alive_dir.exists()


def _a_pid_that_has_exited() -> int:
    child = psutil.Popen(["true"])
    child.wait(10)
    return child.pid
