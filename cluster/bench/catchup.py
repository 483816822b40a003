"""Phase (c) of ``kafkasim bench replication``: a follower killed, the leaders filled while it is down, the
follower started again and timed until its logs match the leaders'."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass

from confluent_kafka import Producer

from cluster.bench.client_kit import THROUGHPUT_PRODUCER, Deadline, Stopwatch
from cluster.bench.measure import MIB, throughput_mib_s
from cluster.bench.process_facts import CpuMeter
from cluster.bench.replication_run import POLL_S, ReplicationRun, partition_log_bytes
from cluster.bench.report import Figure, Phase
from cluster.lifecycle import start_broker
from cluster.processes import stop_process

CATCHUP_TARGET_MIB_S = 150.0


@dataclass(frozen=True)
class CatchUp:
    """When a restarted follower's logs matched the leaders', from samples of its log sizes."""

    copied_bytes: int
    first_byte_s: float   # since the start command: start-up, log recovery and the first fetch
    caught_up_s: float    # since the start command

    @property
    def copy_s(self) -> float:
        return self.caught_up_s - self.first_byte_s

    @property
    def rate_mib_s(self) -> float:
        return throughput_mib_s(self.copied_bytes, self.copy_s)


class CatchUpWatch:
    """Follows one follower's log sizes against fixed targets (the leaders' sizes); pure, fed samples."""

    def __init__(self, targets: dict[int, int], initial: dict[int, int]) -> None:
        self.targets = targets
        self.initial_bytes = sum(initial.values())
        self.first_byte_s: float | None = None
        self.last: dict[int, int] = dict(initial)

    def sample(self, at_s: float, sizes: dict[int, int]) -> CatchUp | None:
        """Record the sizes seen at ``at_s``; the catch-up once every partition reached its target."""
        self.last = sizes
        if self.first_byte_s is None and sum(sizes.values()) > self.initial_bytes:
            self.first_byte_s = at_s
        if all(sizes.get(p, 0) >= target for p, target in self.targets.items()):
            first = self.first_byte_s if self.first_byte_s is not None else at_s
            return CatchUp(sum(self.targets.values()) - self.initial_bytes, first, at_s)
        return None

    def progress(self) -> str:
        have, want = sum(self.last.values()), sum(self.targets.values())
        return f"the follower holds {have / MIB:,.1f} of {want / MIB:,.1f} MiB"


def catchup_phase(run: ReplicationRun) -> Phase:
    settings, bench, layout = run.settings, run.bench, run.layout
    topic = "bench-catchup"
    deadline = Deadline("catch-up phase's set-up", settings.phase_timeout_s)
    run.create_topic(topic, deadline)
    controller = run.state(topic).controller_id
    # A follower that is not the controller, so that killing it moves partition leaders but not the controller.
    victim = max(b.broker_id for b in bench.spec.brokers if b.broker_id != controller)
    stop_process(layout.broker_pid(victim), 10.0, signal.SIGKILL)

    def victim_is_out() -> bool:
        partitions = run.state(topic).partitions
        return len(partitions) == settings.partitions and all(
            p.leader >= 0 and p.leader != victim and victim not in p.isr for p in partitions)

    run.wait_for(victim_is_out, deadline, lambda: f"broker {victim} is still a leader or in an ISR of {topic}")

    deadline = Deadline("catch-up phase's fill", settings.phase_timeout_s)
    count = settings.catchup_mib * MIB // settings.message_bytes
    bench.say(f"broker {victim} killed; producing {settings.catchup_mib:,} MiB to {topic} with acks=1 ...")
    producer = Producer(bench.config(THROUGHPUT_PRODUCER, "catchup-filler"))
    fill = bench.produce(producer, topic, count, deadline, "catch-up filler")

    # The leaders' logs are final once the other follower is back in step: every partition's ISR then holds
    # both live brokers, i.e. both reached the leader's log end (nothing is produced any more).
    live = sorted(b.broker_id for b in bench.spec.brokers if b.broker_id != victim)
    run.wait_for(lambda: all(sorted(p.isr) == live for p in run.state(topic).partitions), deadline,
                 lambda: f"the live replicas {live} are not all in the ISR of {topic}")
    leaders = {p.partition: p.leader for p in run.state(topic).partitions}
    targets = {p: partition_log_bytes(layout.broker_dir(leader) / "logs", topic, settings.partitions)[p]
               for p, leader in leaders.items()}
    follower_logs = layout.broker_dir(victim) / "logs"
    watch = CatchUpWatch(targets, partition_log_bytes(follower_logs, topic, settings.partitions))

    deadline = Deadline("catch-up", settings.phase_timeout_s)
    bench.say(f"starting broker {victim} again; it has {sum(targets.values()) / MIB:,.1f} MiB to fetch ...")
    started = time.perf_counter()
    start_broker(layout.data_dir, victim, wait=False, say=lambda _: None)
    cpu = Stopwatch(CpuMeter(bench.spec, layout))  # the restarted broker has a new PID
    while (done := watch.sample(time.perf_counter() - started,
                                partition_log_bytes(follower_logs, topic, settings.partitions))) is None:
        deadline.check(watch.progress)
        time.sleep(POLL_S)
    cpu.stop()
    run.wait_for(lambda: all(victim in p.isr for p in run.state(topic).partitions), deadline,
                 lambda: f"broker {victim} caught up on disk but is not back in every ISR of {topic}")
    in_isr_s = time.perf_counter() - started
    # Counted in message values like every other figure; the log bytes copied (batch headers too) are a detail.
    value_bytes = count * settings.message_bytes
    figure = Figure("follower_catchup", f"(c) follower catch-up of {settings.catchup_mib:,} MiB, "
                                        f"{settings.partitions} partitions", throughput_mib_s(value_bytes, done.copy_s),
                    "MiB/s", CATCHUP_TARGET_MIB_S)
    fill_rate = throughput_mib_s(value_bytes, fill.elapsed_s)
    # On a shared machine the follower may wait for a core: MiB per CPU-second it used (start-up included)
    # shows what it could do with one to itself.
    follower_cpu_s = cpu.cpu_s["brokers"].get(victim, 0.0)
    per_cpu_s = throughput_mib_s(done.copied_bytes, follower_cpu_s)
    return Phase(
        "catch-up", f"broker {victim} copied {done.copied_bytes / MIB:,.1f} MiB in {done.copy_s:.2f} s using "
                    f"{follower_cpu_s:.1f} CPU s ({per_cpu_s:,.0f} MiB per CPU s); its first byte came "
                    f"{done.first_byte_s:.2f} s after the start command, back in every ISR after {in_isr_s:.2f} s; "
                    f"fill at {fill_rate:,.1f} MiB/s while it was down",
        done.copy_s, [figure],
        {"follower": victim, "copied_bytes": done.copied_bytes, "copied_log_mib_s": round(done.rate_mib_s, 1),
         "copy_s": round(done.copy_s, 3),
         "first_byte_after_start_s": round(done.first_byte_s, 3), "caught_up_after_start_s": round(done.caught_up_s, 3),
         "back_in_isr_after_start_s": round(in_isr_s, 3), "fill_mib_s": round(fill_rate, 1),
         "follower_cpu_s": follower_cpu_s, "mib_per_follower_cpu_s": round(per_cpu_s, 1),
         "leader_log_bytes": targets}, cpu.cpu_s)
