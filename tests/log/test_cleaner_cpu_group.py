"""The cleaner workers' idle CPU group: where the cpu controller's hierarchy is (pure parsing of /proc files of the
shapes Linux writes), and on this machine a real worker process moved into a real cgroup with cpu.idle set, then the
group removed once its worker is gone."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from broker.log.cleaner.cpu_group import (
    GROUP_NAME,
    CpuHierarchy,
    IdleCpuGroup,
    NoIdleGroup,
    cpu_hierarchy,
    in_idle_group,
    this_process_hierarchy,
)
from broker.log.cleaner.worker import CleanerProcess
from tests.harness import wait_until

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


def test_no_cgroup_mount_at_all_is_none():
    assert cpu_hierarchy("24 1 254:0 / / rw - ext4 /dev/vda rw\n", "0::/\n") is None
    assert cpu_hierarchy("", "") is None


def test_a_group_that_cannot_be_made_is_refused_with_the_reason_and_the_worker_still_runs(tmp_path):
    missing = IdleCpuGroup(CpuHierarchy(tmp_path / "not-a-cgroup", 1))
    with pytest.raises(NoIdleGroup, match=r"cannot make or join .*not-a-cgroup/kafkasim-log-cleaner"):
        missing.join(os.getpid())
    v2_without_cpu = tmp_path / "v2"
    v2_without_cpu.mkdir()
    (v2_without_cpu / "cgroup.subtree_control").write_text("memory pids\n")
    with pytest.raises(NoIdleGroup, match="the cpu controller is not enabled for the children"):
        IdleCpuGroup(CpuHierarchy(v2_without_cpu, 2)).join(os.getpid())
    assert IdleCpuGroup(CpuHierarchy(tmp_path / "x", 1)).remove(), "a group never made is no group left behind"

    worker = CleanerProcess("test-cleaner", 1 << 20, 0.9, float("inf"), missing)
    try:
        worker.start()
        assert worker.pid is not None
        wait_until(lambda: os.sched_getscheduler(worker.pid) == os.SCHED_IDLE, 10, "the worker to lower itself")
        assert worker.cpu_group_refusal is not None and "not-a-cgroup" in worker.cpu_group_refusal
        assert not in_idle_group(worker.pid)
    finally:
        worker.close()


def test_a_worker_runs_in_the_idle_cpu_group_which_goes_when_the_worker_has_gone():
    """On the machines this project runs on (root, a writable cpu hierarchy) the group is real: without it a worker
    shares its broker's session weight against the other brokers (docs/compaction.md)."""
    group = IdleCpuGroup()
    assert this_process_hierarchy() is not None and group.directory is not None, \
        "this machine mounts a cgroup hierarchy with the cpu controller"
    worker = CleanerProcess("test-cleaner", 1 << 20, 0.9, float("inf"), group)
    try:
        worker.start()
        pid = worker.pid
        assert pid is not None and worker.cpu_group_refusal is None
        assert in_idle_group(pid), Path(f"/proc/{pid}/cgroup").read_text()
        assert group.directory.name == GROUP_NAME
        idle = group.directory / "cpu.idle"
        assert not idle.exists() or idle.read_text().strip() == "1"
        wait_until(lambda: os.sched_getscheduler(pid) == os.SCHED_IDLE, 10, "the worker to lower itself")
    finally:
        worker.close()
    wait_until(lambda: not psutil.pid_exists(pid), 10, "the worker to exit")
    others = (group.directory / "cgroup.procs").read_text().split() if group.directory.exists() else []
    assert group.remove(wait_s=5.0) == (not others), f"another broker's workers are in it: {others}"
    if not others:
        assert not group.directory.exists()
