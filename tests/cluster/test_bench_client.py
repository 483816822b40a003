"""``kafkasim bench client``: the figures' rules directly, and one small run of the real command."""

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from rich.console import Console

from cluster.bench.client import ClientBenchSettings
from cluster.bench.measure import percentile
from cluster.bench.process_facts import CpuSample
from cluster.bench.report import Figure, Phase, Report, render
from cluster.processes import ClusterError


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([7.0], 99) == 7
    assert percentile([3.0, 1.0, 2.0], 50) == 2


def test_percentile_of_nothing_is_an_error():
    with pytest.raises(ValueError):
        percentile([], 50)


def test_a_throughput_target_is_a_floor_and_a_figure_without_target_passes_nothing():
    assert Figure("t", "t", 60.0, "MiB/s", 60.0).met is True
    assert Figure("t", "t", 59.9, "MiB/s", 60.0).met is False
    assert Figure("l", "l", 5.0, "ms", 4.0, at_least=False).met is False
    assert Figure("l", "l", 5.0, "ms").met is None


def test_cpu_use_reports_what_other_processes_took():
    before = CpuSample({1: 1.0, 2: 2.0}, 0.5, 3.0, 100.0)
    after = CpuSample({1: 2.0, 2: 2.5}, 0.5, 4.0, 104.0)
    assert after.since(before) == {"brokers": {1: 1.0, 2: 0.5}, "zookeeper": 0.0, "client": 1.0,
                                   "other_processes": 1.5}


def test_the_table_and_json_carry_every_figure_and_the_reason_a_run_stopped():
    phase = Phase("produce", "10 msgs", 1.0, [Figure("produce_throughput", "(a) produce", 75.0, "MiB/s", 60.0)],
                  cpu_s={"brokers": {1: 0.1}, "client": 0.2, "other_processes": 0.0})
    report = Report("client", "title", {}, [phase], error="the consume phase did not finish")
    console = Console(width=200, record=True, file=io.StringIO())
    render(report, console)
    table = console.export_text()
    assert re.search(r"\(a\) produce\s+75\.0 MiB/s\s+>= 60 MiB/s\s+pass", table)
    assert "stopped: the consume phase did not finish" in table
    data = json.loads(json.dumps(report.as_json()))
    assert data["figures"][0]["met"] is True
    assert data["all_targets_met"] is False


def test_settings_refuse_a_latency_phase_longer_than_the_phase_timeout():
    with pytest.raises(ClusterError, match="--phase-timeout"):
        ClientBenchSettings(latency_messages=100_000, latency_rate=500).check(free_bytes=1 << 40)


def test_settings_refuse_to_start_without_the_disk_space_the_run_needs():
    with pytest.raises(ClusterError, match="MiB free"):
        ClientBenchSettings(size_mib=1024).check(free_bytes=100 << 20)


def _processes_mentioning(text: str) -> list[int]:
    return [proc.pid for proc in psutil.process_iter(["cmdline"]) if text in " ".join(proc.info["cmdline"] or [])]


@pytest.mark.processes
@pytest.mark.slow
def test_bench_client_prints_the_three_figures_and_stops_its_cluster():
    result = subprocess.run(
        [sys.executable, "-m", "cluster.cli", "bench", "client", "--size-mib", "8", "--messages", "5000",
         "--latency-messages", "200", "--phase-timeout", "30"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"\(a\) produce.*\s[\d,.]+ MiB/s\s+>= 60 MiB/s\s+(pass|FAIL)", out), out
    assert re.search(r"\(b\) consume 8 MiB.*\s[\d,.]+ MiB/s\s+>= 150 MiB/s\s+(pass|FAIL)", out), out
    assert re.search(r"\(c\) produce latency.*p50\s+[\d.]+ ms", out), out
    assert re.search(r"\(c\) produce latency.*p99\s+[\d.]+ ms", out), out
    assert "8,192 msgs" in out
    data_dir = re.search(r"in (/\S+kafkasim-bench-\w+),", out).group(1)
    assert not Path(data_dir).exists()
    assert _processes_mentioning(data_dir) == []
