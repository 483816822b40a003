"""The disk-full fault's pure parts (mount names, the mount table, the mount command, what cluster.json
records) and its refusals, without a running cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster import disk
from cluster.cli import _parser
from cluster.lifecycle import up
from cluster.processes import BrokerSpec, ClusterError, ClusterLayout, ClusterSpec

MOUNTS = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
kafkasim-logs-0123456789-broker-1 /tmp/a/broker-1/logs tmpfs rw,relatime,size=65536k,mode=755 0 0
kafkasim-logs-0123456789-broker-2 /tmp/with\\040space/broker-2/logs tmpfs rw,relatime,size=65536k 0 0
kafkasim-logs-0123456789-outer /tmp/a tmpfs rw,relatime 0 0
kafkasim-logs-9999999999-broker-1 /tmp/b/broker-1/logs tmpfs rw,relatime 0 0
kafkasim-logs-0123456789-broker-3 /tmp/a/broker-3/logs ext4 rw 0 0
"""


def spec(**changes) -> ClusterSpec:
    base = ClusterSpec(zookeeper="127.0.0.1:2181", external_zookeeper=False, profile="classroom",
                       brokers=[BrokerSpec(1, 9092, 9192), BrokerSpec(2, 9093, 9193)])
    for key, value in changes.items():
        setattr(base, key, value)
    return base


def test_mount_names_carry_the_kafkasim_prefix_and_differ_between_clusters_and_brokers():
    one, other = Path("/data/one"), Path("/data/other")
    assert disk.mount_name(one, 1).startswith(disk.MOUNT_PREFIX)
    assert disk.mount_name(one, 1).startswith(disk.cluster_mount_prefix(one))
    assert len({disk.mount_name(one, 1), disk.mount_name(one, 2), disk.mount_name(other, 1)}) == 3
    assert disk.mount_name(one, 1) == disk.mount_name(Path("/data/one"), 1)


def test_the_mount_table_is_read_with_the_kernels_escapes_undone():
    entries = disk.parse_mounts(MOUNTS)
    assert entries[2] == disk.MountEntry("kafkasim-logs-0123456789-broker-2", "/tmp/with space/broker-2/logs",
                                         "tmpfs")
    assert len(entries) == 6


def test_only_a_clusters_own_tmpfs_mounts_are_found_by_its_prefix_deepest_first():
    found = disk.mounts_named(disk.parse_mounts(MOUNTS), "kafkasim-logs-0123456789-")
    assert [e.mount_point for e in found] == ["/tmp/a/broker-1/logs", "/tmp/with space/broker-2/logs", "/tmp/a"]


def test_the_mount_command_limits_the_size_and_names_the_mount():
    assert disk.tmpfs_mount_command("kafkasim-logs-x-broker-1", Path("/d/broker-1/logs"), 64) == [
        "mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "kafkasim-logs-x-broker-1", "/d/broker-1/logs"]


def test_a_recorded_mount_survives_the_round_trip_through_cluster_json(tmp_path):
    mount = disk.LogDirMount(2, "kafkasim-logs-x-broker-2", str(tmp_path / "broker-2/logs"), 64)
    layout = ClusterLayout(tmp_path)
    layout.save(spec(log_dir_mounts=[mount.as_json()]))
    assert disk.recorded_mounts(layout.load()) == [mount]


def test_a_cluster_json_written_before_the_mounts_existed_still_loads(tmp_path):
    layout = ClusterLayout(tmp_path)
    layout.save(spec())
    raw = layout.spec_path.read_text().replace('"log_dir_mounts": [],', "")
    layout.spec_path.write_text(raw)
    assert disk.recorded_mounts(layout.load()) == []


def test_the_broker_log_dir_follows_a_log_dirs_override_and_refuses_several(tmp_path):
    layout = ClusterLayout(tmp_path)
    assert disk.broker_log_dir(spec(), 2, layout) == tmp_path / "broker-2" / "logs"
    assert disk.broker_log_dir(spec(overrides={"log.dirs": "/x"}), 2, layout) == Path("/x")
    with pytest.raises(ClusterError, match="names 2 directories"):
        disk.broker_log_dir(spec(overrides={"log.dirs": "/x,/y"}), 1, layout)


def test_up_with_a_log_dir_size_refuses_a_user_who_is_not_root(tmp_path, monkeypatch):
    monkeypatch.setattr(disk.os, "geteuid", lambda: 1000)
    with pytest.raises(ClusterError, match="only root may do"):
        up(tmp_path, log_dir_size_mib=64, say=lambda _: None)
    assert not (tmp_path / "cluster.json").exists(), "nothing may start before the refusal"


def test_fill_refuses_a_broker_whose_log_dir_is_a_normal_folder(tmp_path):
    ClusterLayout(tmp_path).save(spec())
    with pytest.raises(ClusterError, match="--log-dir-size-mib"):
        disk.fill(tmp_path, 1, say=lambda _: None)
    with pytest.raises(ClusterError, match="not part of this cluster"):
        disk.fill(tmp_path, 7, say=lambda _: None)


def test_fill_refuses_a_recorded_mount_that_is_gone(tmp_path):
    gone = disk.LogDirMount(1, disk.mount_name(tmp_path, 1), str(tmp_path / "broker-1/logs"), 64)
    ClusterLayout(tmp_path).save(spec(log_dir_mounts=[gone.as_json()]))
    with pytest.raises(ClusterError, match="no longer mounted"):
        disk.fill(tmp_path, 1, say=lambda _: None)


def test_the_command_line_takes_the_size_and_fill_with_or_without_free():
    assert _parser().parse_args(["up", "--log-dir-size-mib", "64"]).log_dir_size_mib == 64
    assert _parser().parse_args(["up"]).log_dir_size_mib is None
    args = _parser().parse_args(["fill", "2"])
    assert (args.command, args.broker_id, args.free) == ("fill", 2, False)
    assert _parser().parse_args(["fill", "2", "--free"]).free is True


def test_up_refuses_to_hide_existing_logs_under_a_mount_before_starting_anything(tmp_path):
    (tmp_path / "broker-1" / "logs" / "orders-0").mkdir(parents=True)
    try:
        with pytest.raises(ClusterError, match="holds broker 1's logs"):
            up(tmp_path, brokers=1, base_port=0, log_dir_size_mib=8, say=lambda _: None)
        assert ClusterLayout(tmp_path).zookeeper_pid().read() is None
        assert not disk.mounts_named(disk.current_mounts(), disk.cluster_mount_prefix(tmp_path))
    finally:
        disk.unmount_named(disk.cluster_mount_prefix(tmp_path))


def test_a_log_dir_mount_is_made_named_limited_and_removed_again(tmp_path):
    log_dir = tmp_path / "broker-1" / "logs"
    try:
        mount = disk.mount_log_dir(tmp_path, 1, log_dir, 1)
        assert mount.name == disk.mount_name(tmp_path, 1) and disk.is_mounted(mount)
        assert disk.fill_until_full(log_dir) <= 1 << 20
        with pytest.raises(ClusterError, match="a mount point already"):
            disk.mount_log_dir(tmp_path, 1, log_dir, 1)
        disk.unmount_log_dirs([mount], say=lambda _: None)
        assert not disk.is_mounted(mount) and not any(log_dir.iterdir())
    finally:
        disk.unmount_named(disk.cluster_mount_prefix(tmp_path))
