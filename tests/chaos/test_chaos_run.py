"""`kafkasim chaos run` end to end on real brokers and a real ZooKeeper: the safe configuration survives every
nemesis with a valid verdict, and an unsafe one is caught with the lost values named."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster.chaos.history import read_final_reads, read_nemesis, read_operations
from cluster.chaos.nemesis import Nemesis
from cluster.chaos.runner import CLIENT_LOG_FILE, OPERATIONS_FILE, RESULTS_FILE, SCHEDULE_FILE, ChaosSettings, run_chaos
from cluster.chaos.schedule import ScheduleSettings, nemesis_schedule
from cluster.chaos.workload import WorkloadSettings
from cluster.chaos.history import Recorder
from cluster.processes import PidFile
from tests.harness import wait_until

pytestmark = [pytest.mark.processes, pytest.mark.slow, pytest.mark.chaos, pytest.mark.timeout(600)]

SHORT = ScheduleSettings(quiet_s=(2, 4), hold_s=(3, 6), recovery_s=8)
SAFE = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}


def _producer_restarts(run_dir: Path) -> list[str]:
    """The brokers' lines about idempotent producers refused a sequence, starting a new epoch or unknown: what
    explains a duplicate (the run folder is gone once the test ends)."""
    marks = ("refused producer", "starts epoch", "unknown here")
    brokers = [f"{log.parent.name}: {line}" for log in sorted(run_dir.glob("cluster/broker-*/broker.log"))
               for line in log.read_text(errors="replace").splitlines() if any(mark in line for mark in marks)]
    # and the producers' side: why librdkafka drained and bumped its epoch
    client_marks = ("ERRSEQ", "bumped epoch", "epoch bump", "timed out", "sequence")
    clients = [f"client: {line}" for line in (run_dir / CLIENT_LOG_FILE).read_text(errors="replace").splitlines()
               if any(mark in line for mark in client_marks)] if (run_dir / CLIENT_LOG_FILE).exists() else []
    return brokers + clients


def test_safe_configuration_survives_every_fault_of_a_seeded_run(tmp_path):
    settings = ChaosSettings(seed=11, duration_s=45, nemesis=("kill", "pause", "controller", "bounce", "zk-down"),
                             schedule=SHORT)
    run = run_chaos(settings, tmp_path / "run", say=print)
    assert run.result.verdict == "valid", (run.result.anomalies, _producer_restarts(tmp_path / "run"))
    # a value librdkafka sent again under a new epoch of its own is reported but is not the brokers' doing
    # (the checker tells it by the producer epochs in the log; confluentinc/librdkafka#4953)
    if run.result.counts["client-resend"]:
        print("client re-sends:", run.result.anomalies, _producer_restarts(tmp_path / "run"))
    assert all(count == 0 for name, count in run.result.counts.items() if name != "client-resend")
    assert run.result.summary.acknowledged > 1000
    assert run.result.summary.partitions_with_final_reads == 6
    # the faults the seed planned are the faults that were applied, in order, at their times
    planned = [s for s in nemesis_schedule(11, 45, settings.nemesis, [1, 2, 3], SHORT) if s.kind != "heal"]
    assert len(planned) >= 3
    events = read_nemesis(tmp_path / "run" / "nemesis.jsonl")
    started = [e for e in events if e.type == "start" and e.kind != "heal"]
    assert [(e.step, e.kind) for e in started] == [(s.step, s.kind) for s in planned]
    first_op = read_operations(tmp_path / "run" / "history.jsonl")[0].mono_ns
    ended = {e.step: (e.mono_ns - first_op) / 1e9 for e in events if e.type == "stop"}
    previous_end = 0.0
    for event, step in zip(started, planned, strict=True):
        # applied when planned (plus start-up), or as soon as the fault before it was over: the nemesis applies one
        # fault at a time, and a bounce's restarts may outlast its planned hold on a loaded machine
        assert abs((event.mono_ns - first_op) / 1e9 - max(step.at_s, previous_end)) < 3.0
        previous_end = ended[step.step]
    results = json.loads((tmp_path / "run" / RESULTS_FILE).read_text())
    assert results["verdict"] == "valid" and results["seed"] == 11 and results["ops_per_s"] > 50
    assert (tmp_path / "run" / "throughput-latency.png").stat().st_size > 10_000
    assert (tmp_path / "run" / "offsets.png").stat().st_size > 10_000


def test_a_compacted_topic_keeps_compactions_promise_through_kills_and_bounces_while_its_cleaner_runs(tmp_path):
    settings = ChaosSettings(seed=3, duration_s=30, nemesis=("kill", "bounce"), schedule=SHORT)
    assert settings.workload.compacted_topics == ("chaos-b",)
    assert {s.kind for s in nemesis_schedule(3, 30, settings.nemesis, [1, 2, 3], SHORT)} == {"kill", "bounce", "heal"}
    run = run_chaos(settings, tmp_path / "run", say=print)
    assert run.result.verdict == "valid", (run.result.anomalies, _producer_restarts(tmp_path / "run"))
    assert all(count == 0 for name, count in run.result.counts.items() if name != "client-resend")
    operations = read_operations(tmp_path / "run" / "history.jsonl")
    acknowledged = [op for op in operations if op.f == "send" and op.type == "ok" and op.topic == "chaos-b"]
    assert len(acknowledged) > 1000 and all(op.key for op in acknowledged)
    assert any(op.value is None for op in acknowledged), "some tombstones were acknowledged"
    # the cleaner ran on every broker, and the compacted topic's logs hold far fewer records than were acknowledged
    for trace in sorted((tmp_path / "run" / "cluster").glob("broker-*/trace.jsonl")):
        cleaned = [json.loads(line) for line in trace.read_text().splitlines() if '"log_cleaned"' in line]
        assert any(event["topic"] == "chaos-b" and event["records_kept"] < event["records_read"]
                   for event in cleaned), trace
    final = read_final_reads(tmp_path / "run" / "final-reads.json")
    kept = sum(len(read.records) for read in final.replicas if read.topic == "chaos-b" and read.leader)
    assert 0 < kept < len(acknowledged) / 2
    assert final.read_ts_ms is not None


def test_the_command_line_run_writes_its_folder_and_exits_0_when_valid(tmp_path):
    out = tmp_path / "cli-run"
    done = subprocess.run([sys.executable, "-m", "cluster.cli", "--data-dir", str(tmp_path / "unused"), "chaos", "run",
                           "--seed", "4", "--duration", "35", "--nemesis", "kill", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "seed 4: valid" in done.stdout
    schedule = json.loads((out / SCHEDULE_FILE).read_text())
    planned = nemesis_schedule(4, 35, ("kill",), [1, 2, 3])
    assert [s.kind for s in planned] == ["kill", "heal"]
    assert schedule == [s.model_dump(mode="json") for s in planned]
    for name in ("history.jsonl", "nemesis.jsonl", "final-reads.json", RESULTS_FILE):
        assert (out / name).exists(), name


def kill_followers_then_leader(nemesis: Nemesis, recorder: Recorder) -> None:
    """Every replica but the leader of chaos-a-0 dies, so the ISR shrinks to the leader, which keeps taking
    writes alone; then the leader dies too and the others come back. Only an unclean election gives the
    partition a leader now — one that never had those writes."""
    leader = nemesis.leader("chaos-a", 0)
    others = [b.broker_id for b in nemesis.spec.brokers if b.broker_id != leader]
    recorder.nemesis("start", "kill", others, "the followers of chaos-a-0", 0)
    for broker in others:
        nemesis.kill9(broker)
    wait_until(lambda: not set(others) & nemesis.registered(), 15, f"brokers {others} to leave /brokers/ids")
    time.sleep(4)  # the leader, alone in every ISR, acknowledges acks=1 writes nobody else has
    recorder.nemesis("start", "kill", [leader], "the leader of chaos-a-0", 1)
    nemesis.kill9(leader)
    for broker in others:
        nemesis.start_broker(broker)
    recorder.nemesis("stop", "kill", others, "the followers of chaos-a-0", 0)
    time.sleep(4)  # what the followers' partitions do without the old leader: offline, or an unclean leader
    nemesis.start_broker(leader)
    recorder.nemesis("stop", "kill", [leader], "the leader of chaos-a-0", 1)


def scripted_run(tmp_path: Path, name: str, acks: str, overrides: dict[str, str]):
    settings = ChaosSettings(seed=0, duration_s=25, nemesis=(), overrides=overrides,
                             workload=WorkloadSettings(acks=acks, idempotent=acks == "all", rate=300))
    return run_chaos(settings, tmp_path / name, say=print, script=kill_followers_then_leader)


def test_acks_1_with_unclean_election_loses_acknowledged_writes_and_the_checker_names_them(tmp_path):
    run = scripted_run(tmp_path, "unsafe", "1", {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"})
    assert run.result.verdict == "invalid"
    lost = next(report for report in run.result.anomalies if report.name == "lost-write")
    assert lost.count > 0
    example = lost.examples[0]
    assert example.values and all(v.startswith("producer-") for v in example.values)
    acked = {op.value for op in read_operations(tmp_path / "unsafe" / "history.jsonl")
             if op.f == "send" and op.type == "ok"}
    assert set(example.values) <= acked, "every value named lost was acknowledged to its producer"


def test_the_same_faults_lose_nothing_with_the_safe_configuration(tmp_path):
    run = scripted_run(tmp_path, "safe", "all", SAFE)
    assert run.result.verdict == "valid", run.result.anomalies
    assert run.result.counts["lost-write"] == 0
    # the cost of safety: writes were refused (NOT_ENOUGH_REPLICAS) or waited while the ISR was too small
    assert run.result.availability.longest_without_ok_send_ms > 3000


@pytest.mark.netns
def test_safe_configuration_survives_network_partitions_zookeeper_isolation_and_a_full_disk(tmp_path):
    # namespaced brokers on tmpfs log directories: the campaign's combination of every nemesis this kernel has
    settings = ChaosSettings(seed=1, duration_s=45, nemesis=("partition", "zk-isolate", "disk-full"), schedule=SHORT,
                             netns=True, log_dir_size_mib=64)
    kinds = {s.kind for s in nemesis_schedule(1, 45, settings.nemesis, [1, 2, 3], SHORT)}
    assert kinds == {"partition", "zk-isolate", "disk-full", "heal"}
    run = run_chaos(settings, tmp_path / "run", say=print)
    assert run.result.verdict == "valid", run.result.anomalies
    assert run.result.summary.acknowledged > 1000
    assert run.heal_to_settled_s is not None
    faults = (tmp_path / "run" / "cluster" / "tools-trace.jsonl").read_text()
    assert '"action":"disk-full"' in faults and '"action":"disk-free"' in faults
    # every replica was read back from its tmpfs before the unmount took the records away
    assert run.result.summary.partitions_with_final_reads == 6
    assert not [line for line in Path("/proc/mounts").read_text().splitlines() if str(tmp_path) in line]


@pytest.mark.spark
def test_kafkasim_analyze_reads_a_chaos_run_folder(tmp_path):
    out = tmp_path / "run"
    # the default workload: chaos-b is compacted, and its keyed sends are left out of the lost-writes job (the cleaner
    # removes superseded values by design; the chaos checker holds them to compaction's promise instead)
    run = run_chaos(ChaosSettings(seed=4, duration_s=20, nemesis=(), schedule=SHORT), out, say=print)
    assert run.result.valid
    done = subprocess.run([sys.executable, "-m", "cluster.cli", "analyze", str(out)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = (out / "analysis" / "summary.txt").read_text()
    sends = [op for op in read_operations(out / OPERATIONS_FILE) if op.f == "send" and op.type == "ok"]
    unkeyed = sum(1 for op in sends if op.key is None)
    assert 0 < unkeyed < len(sends)  # some went to the compacted topic
    assert f"acknowledged writes: {unkeyed}, missing from the final logs: 0" in summary
    assert (out / "analysis" / "missing_writes.csv").exists()


def test_a_cell_of_kafkas_replication_matrix_passes(tmp_path):
    done = subprocess.run([sys.executable, "-m", "cluster.cli", "--data-dir", str(tmp_path), "chaos", "matrix",
                           "--cell", "hard_bounce/leader", "--duration", "20", "--out", str(tmp_path / "m")],
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = [line for line in done.stdout.splitlines() if "hard_bounce" in line and "│" in line]
    assert "valid" in row and "too few" not in row
    results = json.loads((tmp_path / "m" / "hard_bounce-leader" / RESULTS_FILE).read_text())
    assert results["verdict"] == "valid" and results["summary"]["acknowledged"] >= 5000
    kills = [e for e in read_nemesis(tmp_path / "m" / "hard_bounce-leader" / "nemesis.jsonl") if e.type == "start"
             and e.kind == "kill"]
    assert len(kills) == 5  # Kafka's hard bounce: five kills of the current leader, each after deregistration


def test_a_run_against_a_cluster_kafkasim_did_not_start_checks_what_its_leaders_serve(cluster_factory, tmp_path):
    cluster = cluster_factory(3)
    out = tmp_path / "external"
    done = subprocess.run([sys.executable, "-m", "cluster.cli", "--data-dir", str(tmp_path), "chaos", "run", "--seed",
                           "9", "--duration", "8", "--bootstrap", cluster.spec.bootstrap_servers, "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((out / RESULTS_FILE).read_text())
    assert results["verdict"] == "valid" and results["summary"]["acknowledged"] > 500
    assert results["summary"]["partitions_with_final_reads"] == 6
    refused = subprocess.run([sys.executable, "-m", "cluster.cli", "chaos", "run", "--bootstrap",
                              cluster.spec.bootstrap_servers, "--nemesis", "kill", "--out", str(tmp_path / "no")],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "no faults" in refused.stderr
    assert not (tmp_path / "no").exists()


def test_safe_configuration_survives_a_full_disk_in_a_seeded_run(tmp_path):
    settings = ChaosSettings(seed=2, duration_s=40, nemesis=("disk-full", "kill"), schedule=SHORT,
                             log_dir_size_mib=64)
    planned = [s.kind for s in nemesis_schedule(2, 40, settings.nemesis, [1, 2, 3], SHORT)]
    assert "disk-full" in planned
    run = run_chaos(settings, tmp_path / "run", say=print)
    assert run.result.verdict == "valid", run.result.anomalies
    assert run.result.summary.acknowledged > 1000
    faults = (tmp_path / "run" / "cluster" / "tools-trace.jsonl").read_text()
    assert '"action":"disk-full"' in faults and '"action":"disk-free"' in faults
    # every replica was read back from its tmpfs before the unmount took the records away
    assert run.result.summary.partitions_with_final_reads == 6


@pytest.mark.netns
def test_an_interrupted_campaign_stops_and_leaves_no_process_namespace_or_mount_behind(tmp_path):
    # SIGTERM (a CI timeout, `kill`) once the run has restarted a killed broker itself: that broker is a child
    # of the campaign, and a child not reaped kept its namespace, whose removal then failed; the failure replaced
    # the interrupt and the campaign went on to its next run with the mounts of the first left behind
    out = tmp_path / "campaign"
    campaign = subprocess.Popen([sys.executable, "-m", "cluster.cli", "--data-dir", str(tmp_path / "unused"), "chaos",
                                 "campaign", "--runs", "3", "--seed", "7", "--duration", "60", "--nemesis", "kill",
                                 "--netns", "--log-dir-size-mib", "16", "--out", str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        nemesis = out / "seed-7" / "nemesis.jsonl"
        wait_until(lambda: nemesis.exists() and any(e.kind == "kill" and e.type == "stop"
                                                    for e in read_nemesis(nemesis)), 120,
                   "the run to restart the broker it killed")
        tag = json.loads((out / "seed-7" / "cluster" / "cluster.json").read_text())["network"]["tag"]
        campaign.send_signal(signal.SIGTERM)
        output, _ = campaign.communicate(timeout=120)
    finally:
        if campaign.poll() is None:
            os.killpg(campaign.pid, signal.SIGKILL)
            campaign.wait()
    assert campaign.returncode != 0
    assert sorted(p.name for p in out.iterdir()) == ["seed-7"], output  # no next run
    assert "not entirely taken down" not in output, output
    assert not [line for line in Path("/proc/mounts").read_text().splitlines() if str(tmp_path) in line]
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"kafkasim-{tag}-" not in namespaces
    for pid_file in (out / "seed-7" / "cluster").glob("*/*.pid"):
        assert PidFile(pid_file).read() is None, pid_file
