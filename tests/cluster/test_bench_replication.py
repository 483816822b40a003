"""``kafkasim bench replication``: the catch-up rules directly, and one small run of the real command."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import psutil

from cluster.bench.measure import MIB
from cluster.bench.page_cache import page_cache_write_mib_s, prefault_size_mib
from cluster.bench.process_facts import available_memory_bytes
from cluster.bench.replication import ReplicationBenchSettings
from cluster.bench.catchup import CatchUpWatch
from cluster.bench.replication_run import partition_log_bytes
from cluster.processes import ClusterError
from tests.cluster.test_bench_client import _processes_mentioning


def test_catch_up_counts_from_the_first_fetched_byte_to_the_leaders_sizes():
    watch = CatchUpWatch(targets={0: 3 * MIB, 1: MIB}, initial={0: 0, 1: 0})
    assert watch.sample(0.5, {0: 0, 1: 0}) is None          # starting up: nothing fetched yet
    assert watch.sample(1.0, {0: MIB, 1: 0}) is None        # first bytes on disk
    assert watch.sample(1.5, {0: 3 * MIB, 1: MIB // 2}) is None
    assert "3.5 of 4.0 MiB" in watch.progress()

    done = watch.sample(3.0, {0: 3 * MIB, 1: MIB})

    assert done is not None
    assert (done.first_byte_s, done.caught_up_s, done.copy_s) == (1.0, 3.0, 2.0)
    assert done.copied_bytes == 4 * MIB
    assert done.rate_mib_s == 2.0


def test_catch_up_waits_for_every_partition_and_does_not_count_what_the_follower_had():
    watch = CatchUpWatch(targets={0: 2 * MIB, 1: 2 * MIB}, initial={0: MIB, 1: 0})
    assert watch.sample(1.0, {0: 2 * MIB, 1: 2 * MIB - 1}) is None
    done = watch.sample(2.0, {0: 2 * MIB, 1: 2 * MIB})
    assert done is not None and done.copied_bytes == 3 * MIB


def test_prefault_covers_every_replica_and_buffers_but_never_more_than_half_the_free_memory():
    assert prefault_size_mib(200 * MIB, replicas=3, available_bytes=64 << 30) == 2 * 3 * 200 + 256
    assert prefault_size_mib(200 * MIB, replicas=3, available_bytes=1 << 30) == 512
    assert prefault_size_mib(200 * MIB, replicas=3, available_bytes=0) == 0


def test_available_memory_is_what_the_kernel_reports_and_no_more_than_the_total():
    available = available_memory_bytes()
    assert 0 < available <= psutil.virtual_memory().total


def test_the_page_cache_probe_writes_and_removes_its_file(tmp_path):
    assert page_cache_write_mib_s(tmp_path, 4) > 0
    assert list(tmp_path.iterdir()) == []
    result = subprocess.run([sys.executable, "-m", "cluster.cli", "bench", "page-cache", "--mib", "4",
                             "--idle-s", "0"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "page-cache writes of 4 MiB right after freeing it" in result.stdout


def test_partition_log_bytes_counts_segment_files_only(tmp_path):
    partition = tmp_path / "bench-catchup-0"
    partition.mkdir()
    (partition / "00000000000000000000.log").write_bytes(b"x" * 1000)
    (partition / "00000000000000000042.log").write_bytes(b"x" * 24)
    (partition / "00000000000000000000.index").write_bytes(b"\0" * 4096)  # preallocated: not log data

    assert partition_log_bytes(tmp_path, "bench-catchup", 2) == {0: 1024, 1: 0}


def test_settings_refuse_a_latency_phase_longer_than_the_phase_timeout():
    with pytest.raises(ClusterError, match="--phase-timeout"):
        ReplicationBenchSettings(latency_messages=100_000, latency_rate=200).check(free_bytes=1 << 40)


def test_settings_count_every_replica_in_the_disk_space_the_run_needs():
    settings = ReplicationBenchSettings(catchup_mib=1024, messages=1)
    with pytest.raises(ClusterError, match="MiB free"):
        settings.check(free_bytes=2 << 30)  # one copy of 1 GiB fits, three do not
    settings.check(free_bytes=4 << 30)


def test_a_non_positive_size_is_refused_before_anything_starts():
    result = subprocess.run([sys.executable, "-m", "cluster.cli", "bench", "replication", "--catchup-mib", "0"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--catchup-mib" in result.stderr


@pytest.mark.processes
@pytest.mark.slow
def test_bench_replication_reports_sane_figures_and_stops_its_cluster():
    result = subprocess.run(
        [sys.executable, "-m", "cluster.cli", "bench", "replication", "--catchup-mib", "8", "--messages", "5000",
         "--latency-messages", "200", "--timer-ops", "5000", "--phase-timeout", "60", "--rounds", "2", "--json"],
        capture_output=True, text=True, timeout=240, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["error"] is None
    figures = {f["name"]: f for f in report["figures"]}
    assert set(figures) == {"acks_all_latency_p50", "acks_all_latency_p99", "acks_1_throughput",
                            "acks_all_throughput", "acks_all_to_acks_1", "acks_1_throughput_fresh_memory",
                            "acks_all_throughput_fresh_memory", "acks_all_to_acks_1_fresh_memory",
                            "acks_all_to_acks_1_replicated_fresh_memory", "follower_catchup",
                            "timing_wheel_speed_up_batch", "timing_wheel_speed_up_interleaved"}
    assert 0 < figures["acks_all_latency_p50"]["value"] <= figures["acks_all_latency_p99"]["value"] < 10_000
    assert figures["acks_all_latency_p50"]["target"] == 5.0
    assert figures["acks_1_throughput"]["value"] > 0 and figures["acks_all_throughput"]["value"] > 0
    ratio = figures["acks_all_to_acks_1"]["value"]
    assert 0 < ratio < 10

    phases = {p["name"]: p for p in report["phases"]}
    produce = phases["produce"]["details"]
    runs = produce["runs"]
    # Two rounds (--rounds 2) of a pair as the machine is and a pair with memory pre-faulted; the second
    # round's pairs start with acks=all. The details list each condition's runs together.
    order = [(0, "1"), (0, "all"), (1, "all"), (1, "1")]
    assert [(r["condition"], r["pair"], r["acks"]) for r in runs] == [("fresh", *o) for o in order] + [
        ("backed", *o) for o in order]
    assert all(0 < r["produced_s"] <= r["replicated_s"] for r in runs)
    assert produce["prefault_mib"] > 0
    assert all((r["prefault_s"] > 0) == (r["condition"] == "backed") for r in runs)
    times = {(r["pair"], r["acks"]): r["produced_s"] for r in runs if r["condition"] == "backed"}
    pair_ratios = [times[(n, "1")] / times[(n, "all")] for n in (0, 1)]
    assert abs(ratio - sum(pair_ratios) / 2) < 0.01  # the median of two pairs
    assert figures["follower_catchup"]["value"] > 0
    assert all(figures[f"timing_wheel_speed_up_{shape}"]["value"] > 0 for shape in ("batch", "interleaved"))

    latency = phases["latency"]["details"]
    assert latency["messages"] == 200 and latency["producer"]["acks"] == "all"
    catchup = phases["catch-up"]["details"]
    # The follower fetched everything the leaders hold (8 MiB of values plus batch headers), after it started.
    assert catchup["copied_bytes"] == sum(catchup["leader_log_bytes"].values()) >= 8 * MIB
    assert catchup["first_byte_after_start_s"] > 0  # a restarted broker fetches nothing before it is up
    assert catchup["follower_cpu_s"] > 0  # measured on the restarted process, not the killed one
    assert catchup["follower"] in (1, 2, 3)
    data_dir = report["title"].split(" in ", 1)[1].split(",", 1)[0]
    assert data_dir.startswith("/") and not Path(data_dir).exists()
    assert _processes_mentioning(data_dir) == []
