"""The command's safety defaults: loopback, read-only outside the classroom profile, a clear error on a busy port."""

from __future__ import annotations

import socket

import pytest

from cluster.cli import _parser
from cluster.dashboard.command import check_port_free, faults_allowed
from cluster.processes import ClusterError


def test_the_page_listens_on_loopback_port_8080_unless_told_otherwise():
    args = _parser().parse_args(["dashboard"])
    assert (args.host, args.port, args.allow_faults) == ("127.0.0.1", 8080, None)


def test_fault_buttons_are_on_for_the_classroom_profile_only_unless_asked():
    assert faults_allowed(None, "classroom")
    assert not faults_allowed(None, "kafka")
    assert faults_allowed(True, "kafka")
    assert not faults_allowed(False, "classroom")


def test_a_busy_port_is_a_clear_error():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ClusterError, match=f"127.0.0.1:{port}.*--port"):
            check_port_free("127.0.0.1", port)


def test_the_dashboard_with_docker_runs_the_dashboard_not_a_docker_fault(monkeypatch, tmp_path):
    from cluster.cli import COMMANDS, _dispatch, _parser

    called = []
    monkeypatch.setitem(COMMANDS, "dashboard", lambda args, _data_dir: called.append(args.docker) or 0)
    args = _parser().parse_args(["dashboard", "--docker", "--zookeeper", "zookeeper:2181", "--allow-faults"])
    assert _dispatch(args, tmp_path) == 0
    assert called == [True]
