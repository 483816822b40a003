"""Schema-valid synthetic traces of a busy cluster, for timing the analysis at scale.

Every line is a real event model serialized the way the brokers write it; the story is simple but
complete: partitions spread over brokers, steady produce, followers fetching, and now and then a leader
killed, expired, replaced and restarted, with its ISR shrink and expand.
"""

from __future__ import annotations

import random
from pathlib import Path

from traces import events as te


class SyntheticRun:
    def __init__(self, brokers: int = 3, partitions: int = 12, seed: int = 7, failover_rate: float = 0.0005) -> None:
        self.failover_rate = failover_rate   # chance that a step kills a partition's leader instead of producing
        self.brokers = list(range(1, brokers + 1))
        self.partitions = partitions
        self.random = random.Random(seed)
        self.lines: dict[int, list[str]] = {b: [] for b in [*self.brokers, -1]}
        self.now_ms = 1_700_000_000_000.0
        self.version: dict[int, int] = {}
        self.leader: dict[int, int] = {}
        self.epoch: dict[int, int] = {}
        self.isr: dict[int, list[int]] = {}
        self.leo: dict[int, int] = {}
        self.events = 0

    def _emit(self, writer: int, event_type: type[te.TraceEvent], **fields) -> None:
        """``writer``: the broker whose file gets the line (-1: the tools' file)."""
        fields.setdefault("broker_id", writer)
        self.lines[writer].append(event_type(ts_ms=self.now_ms, mono_ns=int(self.now_ms * 1e6),
                                             controller_epoch=1, **fields).model_dump_json())
        self.events += 1

    def _replicas(self, p: int) -> list[int]:
        n = len(self.brokers)
        return [self.brokers[(p + i) % n] for i in range(min(3, n))]

    def _state(self, p: int, leader: int, isr: list[int], change: str, previous: int) -> None:
        self.version[p] = self.version.get(p, -1) + 1
        self.epoch[p] = self.epoch.get(p, -1) + (1 if change != "isr" else 0)
        self.leader[p], self.isr[p] = leader, isr
        if change == "isr":
            old = self.isr_before
            kind = "expand" if len(isr) > len(old) else "shrink"
            self._emit(leader, te.IsrChanged, topic="load", partition=p, kind=kind, old_isr=old, new_isr=isr,
                       leader_epoch=self.epoch[p], zk_version=self.version[p], reason="synthetic",
                       lags=[te.ReplicaLag(replica=r, log_end_offset=self.leo[p] - 10, lag_offsets=10, lag_ms=50)
                             for r in set(old) ^ set(isr)])
        else:
            self._emit(self.brokers[0], te.LeaderElected, topic="load", partition=p, leader=leader,
                       leader_epoch=self.epoch[p], isr=isr, previous_leader=previous, zk_version=self.version[p],
                       election=change, replicas=self._replicas(p))
            for r in self._replicas(p):
                self._emit(r, te.ReplicaRoleChanged, topic="load", partition=p,
                           role="leader" if r == leader else "follower", leader=leader,
                           leader_epoch=self.epoch[p], isr=isr)

    def _steady(self, p: int) -> None:
        leader = self.leader[p]
        start = self.leo[p]
        self.leo[p] += 5
        self._emit(leader, te.ProduceAcknowledged, topic="load", partition=p, acks=-1, error="none",
                   base_offset=start, end_offset=self.leo[p])
        for r in self.isr[p]:
            if r == leader:
                continue
            self.now_ms += 0.2
            self._emit(leader, te.FollowerFetchStateUpdated, topic="load", partition=p, replica=r,
                       leader_epoch=self.epoch[p], log_end_offset=self.leo[p] - self.random.randint(0, 5),
                       leader_log_end_offset=self.leo[p], high_watermark=start, lag_ms=self.random.randint(0, 40),
                       in_isr=True)
            self._emit(r, te.HighWatermarkUpdated, topic="load", partition=p, high_watermark=start,
                       log_end_offset=self.leo[p], role="follower")
        self._emit(leader, te.HighWatermarkUpdated, topic="load", partition=p, high_watermark=self.leo[p],
                   log_end_offset=self.leo[p], role="leader")

    def _failover(self, p: int) -> None:
        old = self.leader[p]
        others = [r for r in self.isr[p] if r != old]
        if not others:
            return
        self._emit(-1, te.FaultInjected, action="sigkill", target=f"broker {old}", broker_id=old)
        self.now_ms += 2000
        self._emit(self.brokers[0], te.BrokerExpired, expired_broker=old, broker_epoch=100 + old)
        self.now_ms += 20
        self._state(p, others[0], others, "offline", old)
        self.now_ms += 30
        self._steady(p)
        self.now_ms += 3000
        self.isr_before = list(self.isr[p])
        self._state(p, self.leader[p], sorted([*self.isr[p], old]), "isr", self.leader[p])

    def generate(self, target_events: int) -> None:
        for p in range(self.partitions):
            replicas = self._replicas(p)
            self.leo[p] = 0
            self._state(p, replicas[0], replicas, "initial", -1)
        while self.events < target_events:
            p = self.random.randrange(self.partitions)
            self.now_ms += 1
            if self.random.random() < self.failover_rate:
                self._failover(p)
            else:
                self._steady(p)

    def write(self, out: Path) -> list[Path]:
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for broker, lines in self.lines.items():
            path = out / ("tools-trace.jsonl" if broker < 0 else f"broker-{broker}")
            if broker >= 0:
                path.mkdir(exist_ok=True)
                path = path / "trace.jsonl"
            path.write_text("\n".join(lines) + "\n" if lines else "")
            written.append(path)
        return written


def write_synthetic_run(out: Path, events: int, brokers: int = 3, partitions: int = 12, seed: int = 7) -> int:
    run = SyntheticRun(brokers, partitions, seed)
    run.generate(events)
    run.write(out)
    return run.events
