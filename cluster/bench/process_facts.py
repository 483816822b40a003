"""What the benches read about processes and the machine (CPU seconds, resident memory, available memory),
through psutil rather than by parsing /proc by hand."""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

from cluster.bench.measure import MIB
from cluster.processes import ClusterLayout, ClusterSpec


@dataclass(frozen=True)
class CpuSample:
    """CPU seconds used so far: per broker process, by ZooKeeper, by this process (the clients and their
    librdkafka threads), and by the whole machine."""

    brokers: dict[int, float]
    zookeeper: float
    client: float
    machine: float

    def since(self, earlier: CpuSample) -> dict:
        brokers = {b: round(s - earlier.brokers.get(b, 0.0), 2) for b, s in self.brokers.items()}
        zookeeper = self.zookeeper - earlier.zookeeper
        client = self.client - earlier.client
        ours = sum(brokers.values()) + zookeeper + client
        # Anything else running on the machine competes for the same cores: reported, not subtracted.
        return {"brokers": brokers, "zookeeper": round(zookeeper, 2), "client": round(client, 2),
                "other_processes": round(max(0.0, self.machine - earlier.machine - ours), 2)}


def process_cpu_s(pid: int | None) -> float:
    """User plus system CPU seconds of every thread of ``pid``; 0 for a process that is gone."""
    if pid is None:
        return 0.0
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return 0.0
    return times.user + times.system


def machine_busy_cpu_s() -> float:
    """CPU seconds the machine spent on anything but idling or waiting for IO, over all cores. Guest time is
    already inside user and nice, so it is not added again."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) + getattr(t, "steal", 0.0)


def resident_mib(pid: int) -> float:
    try:
        return psutil.Process(pid).memory_info().rss / MIB
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return float("nan")


def available_memory_bytes() -> int:
    """What the kernel could hand out without swapping (MemAvailable)."""
    return psutil.virtual_memory().available


class CpuMeter:
    """Samples the CPU use of a cluster's processes, this process and the machine."""

    def __init__(self, spec: ClusterSpec, layout: ClusterLayout) -> None:
        self.broker_pids = {b.broker_id: layout.broker_pid(b.broker_id).read() for b in spec.brokers}
        self.zookeeper_pid = layout.zookeeper_pid().read()

    def sample(self) -> CpuSample:
        return CpuSample({b: process_cpu_s(pid) for b, pid in self.broker_pids.items()},
                         process_cpu_s(self.zookeeper_pid), process_cpu_s(os.getpid()),
                         machine_busy_cpu_s())
