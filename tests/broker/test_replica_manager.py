from kio.schema.errors import ErrorCode

from broker.metadata_cache import MetadataCache
from broker.replication.replica_manager import ReplicaManager
from clusterplane import cluster_pb2 as pb


def leader_and_isr(controller_epoch, leader_epoch, leader=1, broker_epoch=-1, replicas=(1, 2, 3)):
    return pb.LeaderAndIsrRequest(
        controller_id=1, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
        partition_states=[pb.PartitionState(topic="t", partition=0, controller_epoch=controller_epoch,
                                            leader=leader, leader_epoch=leader_epoch, isr=[1, 2, 3],
                                            replicas=list(replicas))])


def test_leader_and_isr_makes_leader_or_follower():
    roles = []
    manager = ReplicaManager(2, lambda state, tp, role: roles.append((tp, role)))
    response = manager.become_leader_or_follower(leader_and_isr(1, 0, leader=1))
    assert response.error_code == 0 and response.partition_errors[0].error_code == 0
    assert roles == [(("t", 0), "follower")]
    manager.become_leader_or_follower(leader_and_isr(1, 1, leader=2))
    assert manager.leader_partitions() == [("t", 0)]


def test_request_from_a_deposed_controller_is_refused_and_changes_nothing():
    manager = ReplicaManager(2)
    manager.become_leader_or_follower(leader_and_isr(5, 3, leader=1))
    response = manager.become_leader_or_follower(leader_and_isr(4, 9, leader=2))
    assert response.error_code == ErrorCode.stale_controller_epoch.value
    assert manager.partitions[("t", 0)].leader == 1 and manager.partitions[("t", 0)].leader_epoch == 3


def test_request_for_an_earlier_incarnation_of_the_broker_is_refused():
    manager = ReplicaManager(2)
    manager.broker_epoch = 100
    response = manager.become_leader_or_follower(leader_and_isr(1, 0, broker_epoch=99))
    assert response.error_code == ErrorCode.stale_broker_epoch.value and not manager.partitions
    assert manager.become_leader_or_follower(leader_and_isr(1, 0, broker_epoch=100)).error_code == 0


def test_only_a_newer_leader_epoch_changes_a_partition():
    manager = ReplicaManager(2)
    manager.become_leader_or_follower(leader_and_isr(1, 4, leader=1))
    response = manager.become_leader_or_follower(leader_and_isr(1, 4, leader=3))
    assert response.partition_errors[0].error_code == ErrorCode.stale_controller_epoch.value
    assert manager.partitions[("t", 0)].leader == 1


def test_partition_not_assigned_here_is_unknown():
    manager = ReplicaManager(7)
    response = manager.become_leader_or_follower(leader_and_isr(1, 0))
    assert response.partition_errors[0].error_code == ErrorCode.unknown_topic_or_partition.value


def test_stop_replica_respects_leader_epoch_and_deletion_sentinel():
    manager = ReplicaManager(2)
    manager.become_leader_or_follower(leader_and_isr(1, 5))
    stale = pb.StopReplicaRequest(controller_id=1, controller_epoch=1, broker_epoch=-1, partitions=[
        pb.StopReplicaPartition(topic="t", partition=0, leader_epoch=5, delete_partition=False)])
    assert manager.stop_replicas(stale).partition_errors[0].error_code == ErrorCode.fenced_leader_epoch.value
    deleting = pb.StopReplicaRequest(controller_id=1, controller_epoch=1, broker_epoch=-1, partitions=[
        pb.StopReplicaPartition(topic="t", partition=0, leader_epoch=-2, delete_partition=True)])
    assert manager.stop_replicas(deleting).partition_errors[0].error_code == 0
    assert not manager.partitions


def test_metadata_cache_fences_and_drops_deleted_partitions():
    cache = MetadataCache()
    state = pb.PartitionState(topic="t", partition=0, leader=1, leader_epoch=0, isr=[1], replicas=[1])
    assert cache.update(pb.UpdateMetadataRequest(controller_id=1, controller_epoch=2, broker_epoch=-1,
                                                 partition_states=[state]), 10) == ErrorCode.none
    assert cache.update(pb.UpdateMetadataRequest(controller_id=3, controller_epoch=1, broker_epoch=-1), 10) \
        == ErrorCode.stale_controller_epoch
    assert cache.controller_id == 1 and ("t", 0) in cache.partitions
    gone = pb.PartitionState(topic="t", partition=0, leader=-2, leader_epoch=-2)
    cache.update(pb.UpdateMetadataRequest(controller_id=1, controller_epoch=2, broker_epoch=-1,
                                          partition_states=[gone]), 10)
    assert not cache.partitions
