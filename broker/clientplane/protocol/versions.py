"""The API versions this broker advertises (wire-compat.md section 0) and the kio classes behind each."""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kio.index import load_request_schema, load_response_schema
from kio.static.protocol import RequestPayload, ResponsePayload


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60


@dataclass(frozen=True, slots=True)
class VersionRange:
    """One row of the ApiVersions answer, plus what the broker can really decode."""

    api_key: ApiKey
    min_version: int
    max_version: int
    # First version that uses KIP-482 flexible encoding (compact strings, tagged fields).
    first_flexible_version: int
    min_implemented_version: int | None = None

    @property
    def implemented_from(self) -> int:
        return self.min_version if self.min_implemented_version is None else self.min_implemented_version


_RANGES = (
    # Produce 0-2 is advertised only because librdkafka < 2.11.1 (kcat on Debian bookworm) enables
    # gzip/snappy/lz4 only when Produce v0 is in range; Kafka 4.0 plays the same trick (KAFKA-18659).
    # No client sends them: a request below v3 is answered as unsupported.
    VersionRange(ApiKey.PRODUCE, 0, 8, 9, min_implemented_version=3),
    VersionRange(ApiKey.FETCH, 4, 11, 12),
    VersionRange(ApiKey.LIST_OFFSETS, 1, 5, 6),
    # Metadata v0 reads an empty topic list as "all topics": starting at v1 avoids that trap.
    VersionRange(ApiKey.METADATA, 1, 8, 9),
    VersionRange(ApiKey.OFFSET_COMMIT, 2, 7, 8),
    # v7 (KIP-447) adds require_stable: UNSTABLE_OFFSET_COMMIT while a transactional commit is pending
    VersionRange(ApiKey.OFFSET_FETCH, 1, 7, 6),
    VersionRange(ApiKey.FIND_COORDINATOR, 0, 2, 3),
    VersionRange(ApiKey.JOIN_GROUP, 0, 5, 6),
    VersionRange(ApiKey.HEARTBEAT, 0, 3, 4),
    VersionRange(ApiKey.LEAVE_GROUP, 0, 3, 4),
    VersionRange(ApiKey.SYNC_GROUP, 0, 3, 4),
    VersionRange(ApiKey.DESCRIBE_GROUPS, 0, 4, 5),
    VersionRange(ApiKey.LIST_GROUPS, 0, 2, 3),
    # v3 is the only flexible version advertised: librdkafka opens every connection with it.
    VersionRange(ApiKey.API_VERSIONS, 0, 3, 3),
    VersionRange(ApiKey.CREATE_TOPICS, 2, 4, 5),
    VersionRange(ApiKey.DELETE_TOPICS, 1, 3, 4),
    # v1 only says the response may be throttled; v2 is flexible (what librdkafka and kafka-python 3 send)
    VersionRange(ApiKey.DELETE_RECORDS, 0, 2, 2),
    # Mandatory: kafka-python 3 producers are idempotent by default and fail without it. v3 carries the producer's
    # id and epoch (KIP-360), v4 may answer PRODUCER_FENCED (Kafka 2.8's range).
    VersionRange(ApiKey.INIT_PRODUCER_ID, 0, 4, 2),
    # the transaction coordinator's APIs (Kafka 2.8's ranges); v2 may answer PRODUCER_FENCED, v3 is flexible
    VersionRange(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 3, 3),
    VersionRange(ApiKey.ADD_OFFSETS_TO_TXN, 0, 3, 3),
    VersionRange(ApiKey.END_TXN, 0, 3, 3),
    VersionRange(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 3, 4),
    # the coordinator's markers to partition leaders (issue 20's log side); kio has no v0 schema, Kafka 2.8 has 0-1
    VersionRange(ApiKey.WRITE_TXN_MARKERS, 0, 1, 1, min_implemented_version=1),
    # Kafka 2.8 has 0-3; v3 (KIP-447) carries the consumer's generation, member id and group.instance.id
    VersionRange(ApiKey.TXN_OFFSET_COMMIT, 0, 3, 3),
    VersionRange(ApiKey.DESCRIBE_CONFIGS, 1, 3, 4),
    # v2 only moves to the flexible encoding
    VersionRange(ApiKey.ALTER_CONFIGS, 0, 1, 2),
    # v1 carries the election type (PREFERRED or UNCLEAN); v2 only moves to the flexible encoding
    VersionRange(ApiKey.ELECT_LEADERS, 0, 1, 2),
    # v1 is v0 in the flexible encoding; librdkafka (>= 2.2) sends v1
    VersionRange(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1, 1),
    # KIP-455 (Kafka 2.4): flexible from the start; Kafka 2.8 has v0 only (v1, KIP-860, came in 3.4)
    VersionRange(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 0, 0),
    VersionRange(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0, 0),
    # kio has no v0, which v1 repeats unchanged (v1 only says the response may be throttled); v2 is flexible
    VersionRange(ApiKey.ALTER_REPLICA_LOG_DIRS, 1, 2, 2),
    # kio (generated from Kafka 4 specs) has no v0, which v1 repeats unchanged; v2 is flexible,
    # v3 adds a top-level error code and v4 the volume's total and usable bytes (KIP-827)
    VersionRange(ApiKey.DESCRIBE_LOG_DIRS, 1, 4, 2),
    # v1 only says the response may be throttled; v2 is flexible, v3 adds THROTTLING_QUOTA_EXCEEDED (KIP-599),
    # which kafkasim, having no quotas, never answers
    VersionRange(ApiKey.CREATE_PARTITIONS, 0, 3, 2),
    VersionRange(ApiKey.DELETE_GROUPS, 0, 2, 2),
    # never flexible (Kafka's OffsetDelete has a single version)
    VersionRange(ApiKey.OFFSET_DELETE, 0, 0, 1),
    # flexible from the start (KIP-700, Kafka 2.8); v1 adds the endpoint type (KIP-919) and v2 fenced brokers
    # (KIP-1073): kafka-python 3 reads v1's endpoint type unconditionally, so its describe_cluster() needs v1
    VersionRange(ApiKey.DESCRIBE_CLUSTER, 0, 2, 0),
)

SUPPORTED_VERSIONS: Mapping[int, VersionRange] = MappingProxyType({r.api_key: r for r in _RANGES})


def is_supported(api_key: int, api_version: int) -> bool:
    """True if (api_key, api_version) lies inside the advertised range."""
    supported = SUPPORTED_VERSIONS.get(api_key)
    return supported is not None and supported.min_version <= api_version <= supported.max_version


def is_implemented(api_key: int, api_version: int) -> bool:
    """True if the broker decodes and answers this version (advertised minus Produce 0-2)."""
    supported = SUPPORTED_VERSIONS.get(api_key)
    return supported is not None and supported.implemented_from <= api_version <= supported.max_version


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """How one (api_key, api_version) travels on the wire."""

    api_key: ApiKey
    api_version: int
    request_class: type[RequestPayload]
    response_class: type[ResponsePayload]
    flexible: bool
    request_header_version: int
    response_header_version: int


@functools.cache
def api_spec(api_key: int, api_version: int) -> ApiSpec | None:
    """The kio classes and header versions of an implemented API version; None otherwise."""
    if not is_implemented(api_key, api_version):
        return None
    flexible = api_version >= SUPPORTED_VERSIONS[api_key].first_flexible_version
    return ApiSpec(
        api_key=ApiKey(api_key),
        api_version=api_version,
        request_class=load_request_schema(api_key, api_version),
        response_class=load_response_schema(api_key, api_version),
        flexible=flexible,
        request_header_version=2 if flexible else 1,
        # KIP-511: clients read the ApiVersions response header before they know which versions the
        # broker speaks, so it stays v0 (no tagged fields) even when the body is flexible.
        response_header_version=1 if flexible and api_key != ApiKey.API_VERSIONS else 0,
    )
