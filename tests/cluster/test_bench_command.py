"""``kafkasim bench NAME --json`` run for real as a subprocess, with small sizes: every bench's figures come
out in the one report shape, on a clean stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.cluster.test_bench_registry import BENCHES, FIGURE_KEYS, PHASE_KEYS, REPORT_KEYS


def bench(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cluster.cli", "bench", *argv], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def report_of(*argv: str, timeout: float = 120) -> dict:
    result = bench(*argv, "--json", timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)  # progress went to stderr: stdout is the JSON and nothing else
    assert set(report) == REPORT_KEYS
    assert all(set(f) == FIGURE_KEYS for f in report["figures"])
    assert all(set(p) == PHASE_KEYS for p in report["phases"])
    assert report["error"] is None
    return report


def figures_of(report: dict) -> dict[str, dict]:
    return {f["name"]: f for f in report["figures"]}


def test_bench_list_names_every_bench_on_a_line_of_its_own():
    result = bench("list")
    assert result.returncode == 0, result.stderr
    names = [line.split()[0] for line in result.stdout.splitlines()]
    assert names == BENCHES


def test_bench_log_help_shows_only_what_log_takes():
    result = bench("log", "--help")
    assert result.returncode == 0
    assert "--recovery-mib" in result.stdout and "--json" in result.stdout and "--strict" in result.stdout
    assert "--catchup-mib" not in result.stdout and "--data-dir" not in result.stdout


def test_purgatory_reports_both_speed_ups_against_their_target():
    report = report_of("purgatory", "--timer-ops", "2000", "--repeat", "1")
    assert report["bench"] == "purgatory" and report["settings"]["timer_ops"] == 2000
    figures = figures_of(report)
    assert set(figures) == {"timing_wheel_speed_up_batch", "timing_wheel_speed_up_interleaved"}
    assert all(f["value"] > 0 and f["target"] == 2.0 and f["target_is"] == "floor" for f in figures.values())
    shapes = report["phases"][0]["details"]["shapes"]
    assert {shape["shape"] for shape in shapes} == {"batch", "interleaved"}


def test_a_count_of_zero_is_refused_before_anything_runs():
    result = bench("purgatory", "--count", "0")
    assert result.returncode == 2 and "--timer-ops/--count" in result.stderr


def test_log_reports_append_lookup_and_recovery_figures():
    report = report_of("log", "--append-mib", "1", "--append-rounds", "1", "--segments", "3", "--lookups", "50",
                       "--recovery-mib", "2")
    figures = figures_of(report)
    assert set(figures) == {"append_16kib_mb_s", "append_1024kib_mb_s", "lookup_mean_us", "lookup_p50_us",
                            "lookup_p99_us", "recovery_s_per_gib"}
    assert all(f["value"] > 0 for f in figures.values())
    assert figures["lookup_p50_us"]["value"] <= figures["lookup_p99_us"]["value"]
    assert [p["name"] for p in report["phases"]] == ["append", "lookup", "recovery"]


def test_the_page_cache_probe_reports_its_write_rates_and_shows_progress_on_stderr():
    result = bench("page-cache", "--mib", "4", "--idle-s", "0", "--json")
    assert result.returncode == 0, result.stderr
    figures = figures_of(json.loads(result.stdout))
    assert set(figures) == {"anonymous_first_touch_mib_s", "page_cache_write_after_free_mib_s",
                            "page_cache_write_after_idle_mib_s", "idle_slowdown"}
    assert all(f["value"] > 0 for f in figures.values())
    assert "touching and freeing 8 MiB" in result.stderr


def test_the_table_goes_to_stdout_and_progress_to_stderr():
    result = bench("page-cache", "--mib", "4", "--idle-s", "0")
    assert result.returncode == 0, result.stderr
    assert "page-cache writes of 4 MiB right after freeing it" in result.stdout
    assert "touching and freeing" not in result.stdout and "touching and freeing" in result.stderr


@pytest.mark.processes
@pytest.mark.slow
def test_trace_reports_throughput_with_and_without_tracing():
    report = report_of("trace", "--messages", "500", "--rounds", "1", timeout=240)
    figures = figures_of(report)
    assert figures["tracing_on_msg_s"]["value"] > 0 and figures["tracing_off_msg_s"]["value"] > 0
    assert figures["overhead"]["target"] == 0.1 and figures["overhead"]["target_is"] == "ceiling"
    assert {"broker_cpu_s_per_10k_on", "broker_cpu_s_per_10k_off", "cpu_overhead"} <= set(figures)


@pytest.mark.processes
@pytest.mark.slow
def test_foundation_reports_start_up_failover_and_memory():
    figures = figures_of(report_of("foundation", "--rounds", "1", timeout=240))
    assert set(figures) == {"startup_s", "leader_failover_s", "controller_failover_s", "idle_broker_rss_mib"}
    assert all(f["value"] > 0 for f in figures.values())
    assert figures["idle_broker_rss_mib"]["target"] == 80.0


@pytest.mark.processes
@pytest.mark.slow
def test_scale_runs_every_step_end_to_end_at_a_tiny_size():
    report = report_of("scale", "--partitions", "12", "--idle-s", "1", "--settle-s", "0", "--phase-timeout", "90",
                       timeout=280)
    figures = figures_of(report)
    assert set(figures) == {f"{name}_12" for name in (
        "create_s", "create_answered_s", "idle_cpu_pct", "rss_mib", "kill9_moved_s", "kill9_over_session_s",
        "restart_isr_full_s", "controlled_shutdown_s", "shutdown_metadata_wrong", "controller_failover_s",
        "controller_over_session_s", "controller_load_s")}
    assert all(figures[f"{name}_12"]["value"] > 0 for name in (
        "create_s", "rss_mib", "kill9_moved_s", "restart_isr_full_s", "controlled_shutdown_s",
        "controller_failover_s"))
    assert figures["create_s_12"]["target"] == 3.0 and figures["shutdown_metadata_wrong_12"]["target"] == 0.0
    details = report["phases"][0]["details"]
    assert details["partitions"] == 12 and details["controller_failover"]["partitions_loaded"] == 12
    assert details["kill9"]["led"] > 0 and details["controlled_shutdown"]["led"] >= 0


@pytest.mark.processes
@pytest.mark.slow
def test_groups_reports_member_and_coordinator_failover():
    report = report_of("groups", "--rounds", "1", timeout=280)
    figures = figures_of(report)
    assert set(figures) == {"member_failover_median_s", "member_failover_over_session_s",
                            "coordinator_failover_median_s"}
    assert figures["member_failover_median_s"]["value"] > 0 and figures["coordinator_failover_median_s"]["value"] > 0
    assert [p["name"] for p in report["phases"]] == ["member", "coord"]


@pytest.mark.spark
@pytest.mark.slow
def test_analysis_times_every_job_on_a_small_synthetic_run():
    report = report_of("analysis", "--events", "2000", timeout=280)
    figures = figures_of(report)
    assert figures["analysis_s"]["value"] > 0 and figures["analysis_s"]["target"] == 60.0
    assert figures["spark_start_s"]["value"] > 0
    assert report["phases"][0]["details"]["events"] >= 2000
