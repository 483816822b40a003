"""The group APIs on the wire, decoded by kafka-python's own protocol classes (written independently of the
broker's kio codec) to the last byte: the coordinator answers, any other broker says NOT_COORDINATOR, a new
member is asked for its id, a bad session timeout is refused."""

from __future__ import annotations

import warnings

import pytest
from confluent_kafka.admin import AdminClient

from tests.client.support import RawConnection, client_port, decode_exactly
from tests.groups.support import coordinator_of
from tests.harness import RunningCluster

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer import (
        HeartbeatRequest,
        HeartbeatResponse,
        JoinGroupRequest,
        JoinGroupResponse,
        LeaveGroupRequest,
        LeaveGroupResponse,
        OffsetFetchRequest,
        OffsetFetchResponse,
    )

pytestmark = [pytest.mark.processes]
GROUP = "wire-group"
NOT_COORDINATOR, UNKNOWN_MEMBER_ID, INVALID_SESSION_TIMEOUT, MEMBER_ID_REQUIRED = 16, 25, 26, 79
FENCED_INSTANCE_ID = 82


def call(connection: RawConnection, request, response_class, version: int):
    connection._correlation_id += 1
    request.with_header(correlation_id=connection._correlation_id, client_id="kafkasim-group-tests")
    connection.sock.sendall(request.encode(version=version, header=True, framed=True))
    return decode_exactly(response_class, connection.read_frame(), version)


def join(member_id: str, session_timeout_ms: int) -> JoinGroupRequest:
    return JoinGroupRequest(group_id=GROUP, session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=10000,
                            member_id=member_id, group_instance_id=None, protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])


def test_only_the_coordinator_answers_for_a_group(shared_cluster: RunningCluster):
    admin = AdminClient({"bootstrap.servers": shared_cluster.spec.bootstrap_servers})
    coordinator = coordinator_of(admin, GROUP)
    other = next(b.broker_id for b in shared_cluster.spec.brokers if b.broker_id != coordinator)
    heartbeat = HeartbeatRequest(group_id=GROUP, generation_id=1, member_id="nobody", group_instance_id=None)
    fetch = OffsetFetchRequest(group_id=GROUP, topics=None)
    with RawConnection(client_port(shared_cluster, other)) as connection:
        assert call(connection, heartbeat, HeartbeatResponse, 3).error_code == NOT_COORDINATOR
        assert call(connection, fetch, OffsetFetchResponse, 5).error_code == NOT_COORDINATOR
    with RawConnection(client_port(shared_cluster, coordinator)) as connection:
        assert call(connection, heartbeat, HeartbeatResponse, 3).error_code == UNKNOWN_MEMBER_ID
        answer = call(connection, fetch, OffsetFetchResponse, 5)
        assert answer.error_code == 0 and answer.topics == []


def test_a_new_member_gets_its_id_first_and_a_bad_session_timeout_is_refused(shared_cluster: RunningCluster):
    admin = AdminClient({"bootstrap.servers": shared_cluster.spec.bootstrap_servers})
    with RawConnection(client_port(shared_cluster, coordinator_of(admin, GROUP))) as connection:
        first = call(connection, join("", 10000), JoinGroupResponse, 5)
        assert first.error_code == MEMBER_ID_REQUIRED and first.member_id.startswith("kafkasim-group-tests-")
        refused = call(connection, join(first.member_id, 1000), JoinGroupResponse, 5)
        assert refused.error_code == INVALID_SESSION_TIMEOUT
        joined = call(connection, join(first.member_id, 10000), JoinGroupResponse, 5)
        assert joined.error_code == 0 and joined.generation_id == 1 and joined.leader == first.member_id
        assert [m.member_id for m in joined.members] == [first.member_id]


def test_a_static_member_joins_without_an_id_round_trip_and_leaves_by_its_instance_id(shared_cluster: RunningCluster):
    group, instance = "wire-static-group", "wire-instance"
    admin = AdminClient({"bootstrap.servers": shared_cluster.spec.bootstrap_servers})
    request = JoinGroupRequest(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                               group_instance_id=instance, protocol_type="consumer",
                               protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")])
    with RawConnection(client_port(shared_cluster, coordinator_of(admin, group))) as connection:
        joined = call(connection, request, JoinGroupResponse, 5)
        assert joined.error_code == 0 and joined.member_id.startswith(f"{instance}-")  # no MEMBER_ID_REQUIRED
        assert [(m.member_id, m.group_instance_id) for m in joined.members] == [(joined.member_id, instance)]
        identity = LeaveGroupRequest.MemberIdentity
        leave = LeaveGroupRequest(group_id=group, members=[
            identity(member_id="stale-id", group_instance_id=instance),  # an old incarnation: fenced
            identity(member_id="", group_instance_id=instance)])  # the instance id alone is enough
        answer = call(connection, leave, LeaveGroupResponse, 3)
        assert answer.error_code == 0
        assert [(m.group_instance_id, m.error_code) for m in answer.members] == [
            (instance, FENCED_INSTANCE_ID), (instance, 0)]
