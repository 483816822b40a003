"""The kafkasim command's parsing and dispatch (no cluster needed)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.cli import COMMANDS, _parser


def subcommands(parser: argparse.ArgumentParser) -> set[str]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(action.choices)


def test_every_subcommand_has_exactly_one_handler_in_the_dispatch_table():
    assert subcommands(_parser()) == set(COMMANDS)


@pytest.mark.parametrize("argv", [
    ["--data-dir", "/tmp/a", "status"],
    ["status", "--data-dir", "/tmp/a"],
    ["topic", "describe", "--data-dir", "/tmp/a"],
    ["--data-dir", "/tmp/b", "kill", "1", "--data-dir", "/tmp/a"],
])
def test_the_data_dir_option_is_taken_before_or_after_the_subcommand(argv):
    assert _parser().parse_args(argv).data_dir == Path("/tmp/a")


def test_no_data_dir_leaves_the_default_to_the_environment():
    assert _parser().parse_args(["status"]).data_dir is None


def test_an_unknown_command_is_refused_with_the_list_of_commands(tmp_path):
    run = subprocess.run([sys.executable, "-m", "cluster.cli", "--data-dir", str(tmp_path), "shutdown"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "invalid choice: 'shutdown'" in run.stderr and "status" in run.stderr


def test_a_command_for_a_missing_cluster_says_how_to_start_one(tmp_path):
    run = subprocess.run([sys.executable, "-m", "cluster.cli", "status", "--data-dir", str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert f"no cluster in {tmp_path / 'none'}" in run.stderr and "kafkasim up" in run.stderr


def test_net_on_the_compose_cluster_looks_for_the_project_s_containers(tmp_path):
    run = subprocess.run([sys.executable, "-m", "cluster.cli", "--data-dir", str(tmp_path), "net", "isolate", "1",
                          "--from", "zookeeper", "--docker", "--project", "kafkasim-no-such-project"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert ("no kafkasim broker containers in compose project 'kafkasim-no-such-project'" in run.stderr
            or "cannot reach the Docker engine" in run.stderr), run.stderr


def test_net_help_says_which_actions_work_on_the_compose_cluster():
    run = subprocess.run([sys.executable, "-m", "cluster.cli", "net", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert "--docker" in run.stdout and "helper container" in run.stdout and "netem" in run.stdout
    for action in ("partition", "heal", "slow", "status"):
        action_help = subprocess.run([sys.executable, "-m", "cluster.cli", "net", action, "--help"],
                                     capture_output=True, text=True, timeout=60).stdout
        assert "--docker" in action_help, action


def test_the_cli_starts_without_the_packages_the_broker_image_leaves_out():
    """The image (Dockerfile's LEAVE_OUT) has no analysis stack; its build runs `kafkasim --help`, and its
    brokers and tools must not import what is not there."""
    dockerfile = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text()
    left_out = next(line for line in dockerfile.splitlines() if "LEAVE_OUT=" in line).split("=", 1)[1].strip('"')
    assert "matplotlib" in left_out.split()
    blocked = "; ".join(f"sys.modules[{name!r}] = None" for name in left_out.split())
    script = (f"import sys; {blocked}; from cluster.cli import _parser; "
              "import cluster.chaos.runner, cluster.chaos.nemesis, broker.server; "
              "_parser().parse_args(['chaos', 'run', '--help'])")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--nemesis" in done.stdout
