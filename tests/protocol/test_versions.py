import pytest

from broker.clientplane.protocol.versions import SUPPORTED_VERSIONS, ApiKey, api_spec, is_implemented, is_supported

# wire-compat.md section 0, "advertise" column plus the optional extras (ElectLeaders, DescribeLogDirs,
# DeleteGroups, OffsetDelete, DescribeCluster, CreatePartitions, AlterConfigs, IncrementalAlterConfigs,
# DeleteRecords, Alter/ListPartitionReassignments, AlterReplicaLogDirs: issue 19; WriteTxnMarkers, TxnOffsetCommit,
# OffsetFetch v6-7 for require_stable, InitProducerId up to v4, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn: issue 20,
# Kafka 2.8's ranges).
RECOMMENDED = {
    0: (0, 8), 1: (4, 11), 2: (1, 5), 3: (1, 8), 8: (2, 7), 9: (1, 7), 10: (0, 2), 11: (0, 5),
    12: (0, 3), 13: (0, 3), 14: (0, 3), 15: (0, 4), 16: (0, 2), 18: (0, 3), 19: (2, 4), 20: (1, 3),
    21: (0, 2), 22: (0, 4), 23: (2, 3), 24: (0, 3), 25: (0, 3), 26: (0, 3),
    27: (0, 1), 28: (0, 3), 32: (1, 3), 33: (0, 1), 34: (1, 2), 35: (1, 4), 37: (0, 3),
    42: (0, 2),
    43: (0, 1), 44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 60: (0, 2),
}  # fmt: skip

# aiokafka 0.14 picks the highest of its own versions inside the broker range and fails if there
# is none: no advertised minimum may exceed these.
AIOKAFKA_MAXIMA = {
    18: 0, 3: 5, 0: 7, 1: 11, 2: 3, 8: 3, 9: 3, 10: 1, 11: 5, 14: 3, 12: 1, 13: 1, 19: 3, 20: 3, 22: 0,
}  # fmt: skip

IMPLEMENTED = [
    (key, version)
    for key, supported in SUPPORTED_VERSIONS.items()
    for version in range(supported.implemented_from, supported.max_version + 1)
]


def test_advertised_matrix_is_the_recommended_one():
    assert {key: (r.min_version, r.max_version) for key, r in SUPPORTED_VERSIONS.items()} == RECOMMENDED


def test_no_advertised_minimum_locks_out_aiokafka():
    for key, aiokafka_max in AIOKAFKA_MAXIMA.items():
        assert SUPPORTED_VERSIONS[key].min_version <= aiokafka_max, ApiKey(key).name


def test_consumer_group_heartbeat_is_not_advertised_so_librdkafka_stays_on_classic_groups():
    assert 68 not in SUPPORTED_VERSIONS


@pytest.mark.parametrize(("api_key", "low", "high"), [(k, lo, hi) for k, (lo, hi) in RECOMMENDED.items()])
def test_is_supported_holds_exactly_inside_the_range(api_key, low, high):
    assert is_supported(api_key, low) and is_supported(api_key, high)
    assert not is_supported(api_key, low - 1)
    assert not is_supported(api_key, high + 1)


def test_unknown_api_keys_are_not_supported():
    assert not is_supported(17, 0)
    assert not is_supported(-1, 0)
    assert api_spec(999, 0) is None


def test_produce_v0_to_v2_is_advertised_but_not_implemented():
    for version in (0, 1, 2):
        assert is_supported(ApiKey.PRODUCE, version)
        assert not is_implemented(ApiKey.PRODUCE, version)
        assert api_spec(ApiKey.PRODUCE, version) is None
    assert is_implemented(ApiKey.PRODUCE, 3)


@pytest.mark.parametrize(("api_key", "api_version"), IMPLEMENTED)
def test_api_spec_matches_kio_classes_and_headers(api_key, api_version):
    spec = api_spec(api_key, api_version)
    assert spec is not None
    for payload_class in (spec.request_class, spec.response_class):
        assert (payload_class.__api_key__, payload_class.__version__) == (api_key, api_version)
        assert payload_class.__flexible__ == spec.flexible
    assert spec.request_class.__header_schema__.__version__ == spec.request_header_version
    assert spec.response_class.__header_schema__.__version__ == spec.response_header_version


def test_flexible_versions_are_advertised_only_for_api_versions_and_the_admin_apis_that_need_them():
    # DescribeCluster exists only flexible (KIP-700); DeleteGroups v2, DeleteRecords v2, AlterReplicaLogDirs v2,
    # CreatePartitions v2-3 and DescribeLogDirs v2+ are what Kafka 2.8's admin clients (kafka-ui, kafka-log-dirs.sh,
    # kafka-delete-records.sh, kafka-reassign-partitions.sh) pick. Produce, Fetch and the group protocol stay
    # non-flexible but OffsetFetch v6-7 (v7's require_stable, KIP-447). WriteTxnMarkers v1 (Kafka 2.8's coordinators
    # send it) is the only version kio decodes; TxnOffsetCommit v3 carries the consumer's generation (KIP-447). The
    # transaction APIs have Kafka 2.8's ranges, whose last versions are flexible (librdkafka sends them).
    flexible = sorted((key, version) for key, version in IMPLEMENTED if api_spec(key, version).flexible)
    assert flexible == [(ApiKey.OFFSET_FETCH, 6), (ApiKey.OFFSET_FETCH, 7),
                        (ApiKey.API_VERSIONS, 3), (ApiKey.DELETE_RECORDS, 2), (ApiKey.INIT_PRODUCER_ID, 2),
                        (ApiKey.INIT_PRODUCER_ID, 3), (ApiKey.INIT_PRODUCER_ID, 4), (ApiKey.ADD_PARTITIONS_TO_TXN, 3),
                        (ApiKey.ADD_OFFSETS_TO_TXN, 3), (ApiKey.END_TXN, 3), (ApiKey.WRITE_TXN_MARKERS, 1),
                        (ApiKey.TXN_OFFSET_COMMIT, 3),
                        (ApiKey.ALTER_REPLICA_LOG_DIRS, 2),
                        (ApiKey.DESCRIBE_LOG_DIRS, 2),
                        (ApiKey.DESCRIBE_LOG_DIRS, 3), (ApiKey.DESCRIBE_LOG_DIRS, 4), (ApiKey.CREATE_PARTITIONS, 2),
                        (ApiKey.CREATE_PARTITIONS, 3), (ApiKey.DELETE_GROUPS, 2),
                        (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1), (ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0),
                        (ApiKey.LIST_PARTITION_REASSIGNMENTS, 0), (ApiKey.DESCRIBE_CLUSTER, 0),
                        (ApiKey.DESCRIBE_CLUSTER, 1), (ApiKey.DESCRIBE_CLUSTER, 2)]


def test_api_versions_v3_uses_request_header_v2_and_response_header_v0():
    spec = api_spec(ApiKey.API_VERSIONS, 3)
    assert (spec.request_header_version, spec.response_header_version) == (2, 0)


def test_first_flexible_version_is_just_above_the_advertised_range_for_all_but_the_flexible_ones():
    for key, supported in SUPPORTED_VERSIONS.items():
        if key not in (ApiKey.API_VERSIONS, ApiKey.DESCRIBE_LOG_DIRS, ApiKey.DELETE_GROUPS, ApiKey.DESCRIBE_CLUSTER,
                       ApiKey.ALTER_REPLICA_LOG_DIRS,
                       ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.DELETE_RECORDS, ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                       ApiKey.LIST_PARTITION_REASSIGNMENTS, ApiKey.CREATE_PARTITIONS, ApiKey.WRITE_TXN_MARKERS,
                       ApiKey.OFFSET_FETCH, ApiKey.TXN_OFFSET_COMMIT,
                       ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN,
                       ApiKey.END_TXN):
            assert supported.first_flexible_version == supported.max_version + 1, ApiKey(key).name
