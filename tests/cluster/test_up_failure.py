"""`kafkasim up` that fails half-way leaves nothing running behind its error."""

import pytest

from cluster.lifecycle import up
from cluster.processes import ClusterError, ClusterLayout

pytestmark = [pytest.mark.processes]


def test_brokers_that_exit_at_start_take_the_zookeeper_up_started_with_them(tmp_path):
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("a log directory cannot live here\n")
    with pytest.raises(ClusterError, match="exited during start-up"):
        up(tmp_path / "cluster", brokers=1, profile="classroom", base_port=0,
           overrides={"log.dirs": str(not_a_directory)}, say=lambda _: None)
    layout = ClusterLayout(tmp_path / "cluster")
    assert layout.zookeeper_pid().read() is None
    assert layout.broker_pid(1).read() is None
