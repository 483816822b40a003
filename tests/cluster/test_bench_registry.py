"""One registry, one report: every bench is listed and parsed the same way, every report has one JSON shape,
and --strict turns a missed target into exit status 1. No bench runs here."""

from __future__ import annotations

import argparse
import io
import json

import pytest
from rich.console import Console

from cluster.bench import log as log_bench
from cluster.bench.registry import benches
from cluster.bench.report import Figure, Phase, Report, render, to_json
from cluster.cli import _parser

BENCHES = ["foundation", "client", "replication", "reassign", "groups", "transactions", "scale", "trace", "log",
           "purgatory", "analysis", "page-cache", "metrics", "dashboard"]
REPORT_KEYS = {"bench", "title", "settings", "figures", "phases", "notes", "error", "all_targets_met"}
FIGURE_KEYS = {"name", "label", "value", "unit", "target", "target_is", "met"}
PHASE_KEYS = {"name", "summary", "elapsed_s", "figures", "details", "cpu_s"}


def parse(*argv: str) -> argparse.Namespace:
    return _parser().parse_args(["bench", *argv])


def settings_of(args: argparse.Namespace) -> dict:
    """The bench's own options, without those every bench (or the whole command) takes."""
    return {k: v for k, v in vars(args).items() if k not in ("command", "bench", "json", "strict", "data_dir")}


def test_the_registry_lists_every_bench_in_order_each_with_one_line():
    registry = benches()
    assert list(registry) == BENCHES
    assert all(entry.name == name and entry.summary and "\n" not in entry.summary
               for name, entry in registry.items())


def test_bench_list_is_a_subcommand_of_its_own():
    assert parse("list").bench == "list"


# every option the benches took before they shared one runner, with its default
DEFAULTS = {
    "foundation": {"rounds": 3},
    "client": {"messages": 300_000, "size_mib": 1024, "latency_messages": 5_000, "latency_rate": 500,
               "phase_timeout": 120},
    "replication": {"rounds": 3, "messages": 200_000, "latency_messages": 2_000, "latency_rate": 200,
                    "phase_timeout": 180, "catchup_mib": 1024, "timer_ops": 1_000_000},
    "reassign": {"size_mib": 1024, "timeout": 1800},
    "groups": {"rounds": 3},
    "transactions": {"transactions": 200, "records": 100, "phase_timeout": 180},
    "scale": {"partitions": [100, 1000, 3000], "idle_s": 10.0, "settle_s": 3.0, "phase_timeout": 300,
              "idle_only": False},
    "trace": {"messages": 50_000, "rounds": 5},
    "log": {"dir": None, "quick": False, "append_mib": None, "append_rounds": None, "segments": None,
            "lookups": None, "recovery_mib": None},
    "purgatory": {"timer_ops": 1_000_000, "repeat": 3, "handles_only": False},
    "analysis": {"events": 1_000_000, "master": None},
    "page-cache": {"mib": 1024, "idle_s": 20.0},
    "metrics": {"scrapes": 200, "partitions": 100},
    "dashboard": {"partitions": 100, "repetitions": 5, "cpu_seconds": 30},
}


@pytest.mark.parametrize("name", BENCHES)
def test_every_bench_takes_its_own_options_with_their_defaults_and_json_and_strict(name):
    args = parse(name)
    assert settings_of(args) == DEFAULTS[name]
    assert (args.json, args.strict) == (False, False)
    assert (parse(name, "--json", "--strict").json, parse(name, "--strict").strict) == (True, True)


def test_a_bench_refuses_another_benchs_option(capsys):
    with pytest.raises(SystemExit):
        parse("log", "--catchup-mib", "8")
    assert "unrecognized arguments: --catchup-mib" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "option"), [
    (["client", "--messages", "0"], "--messages"),
    (["replication", "--catchup-mib", "-1"], "--catchup-mib"),
    (["page-cache", "--idle-s", "-2"], "--idle-s"),
    (["purgatory", "--timer-ops", "ten"], "--timer-ops"),
    (["scale", "--partitions", "100,0"], "--partitions"),
    (["scale", "--partitions", "many"], "--partitions"),
])
def test_sizes_and_counts_that_make_no_sense_are_refused_by_the_parser(capsys, argv, option):
    with pytest.raises(SystemExit):
        parse(*argv)
    assert option in capsys.readouterr().err


def test_options_given_on_the_command_line_reach_the_bench():
    args = parse("replication", "--rounds", "2", "--catchup-mib", "8", "--timer-ops", "5000", "--phase-timeout", "60")
    assert (args.rounds, args.catchup_mib, args.timer_ops, args.phase_timeout) == (2, 8, 5000, 60)
    assert parse("purgatory", "--count", "2000").timer_ops == 2000  # the option's earlier name still works


def test_quick_divides_the_log_sizes_not_given_but_keeps_the_rounds():
    assert log_bench.sizes(parse("log", "--quick", "--segments", "10")) == {
        "append_mib": 8, "append_rounds": 7, "segments": 10, "lookups": 1250, "recovery_mib": 32}
    assert log_bench.sizes(parse("log")) == log_bench.DEFAULTS


def _report(value: float, target: float | None = 10.0, error: str | None = None) -> Report:
    figure = Figure("rate", "a rate", value, "MiB/s", target)
    return Report("test", "title", {"size": 1}, [Phase("only", "what happened", 1.0, [figure])], error=error)


def test_strict_exits_1_only_when_a_figure_misses_its_target():
    missed, met, no_target = _report(9.0), _report(11.0), _report(9.0, target=None)
    assert [missed.exit_code(strict=True), missed.exit_code(strict=False)] == [1, 0]
    assert [met.exit_code(strict=True), no_target.exit_code(strict=True)] == [0, 0]
    assert missed.as_json()["all_targets_met"] is False and met.as_json()["all_targets_met"] is True


def test_a_run_that_stopped_early_exits_1_with_or_without_strict():
    stopped = _report(11.0, error="the produce phase did not finish")
    assert [stopped.exit_code(strict=True), stopped.exit_code(strict=False)] == [1, 1]


def test_every_report_has_the_same_json_shape_with_or_without_targets_and_phases():
    shapes = []
    for report in (_report(9.0), _report(9.0, target=None), Report("empty", "t", {}, error="no cluster")):
        data = json.loads(to_json(report))
        assert set(data) == REPORT_KEYS
        assert all(set(f) == FIGURE_KEYS for f in data["figures"])
        assert all(set(p) == PHASE_KEYS for p in data["phases"])
        shapes.append(set(data))
    assert shapes[0] == shapes[1] == shapes[2]


def test_a_figure_that_could_not_be_computed_is_null_in_json():
    assert json.loads(to_json(_report(float("inf"))))["figures"][0]["value"] is None


def test_the_table_marks_a_missed_target_and_shows_every_phase_and_note():
    report = _report(9.0)
    report.notes.append("MiB/s: 2^20 bytes")
    console = Console(width=200, record=True, file=io.StringIO())
    render(report, console)
    text = console.export_text()
    assert "a rate" in text and "9.00 MiB/s" in text and ">= 10 MiB/s" in text and "FAIL" in text
    assert "what happened" in text and "MiB/s: 2^20 bytes" in text
