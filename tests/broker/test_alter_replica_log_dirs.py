"""AlterReplicaLogDirs' answer for one replica (Kafka 2.8's ReplicaManager.alterReplicaLogDirs and
LogManager.isLogDirOnline), driven directly: one behaviour per test, in Kafka's order of checks."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.clientplane.handlers.log_dirs import alter_replica_log_dir_error

A, B = "/data/a", "/data/b"
TP = ("orders", 0)


def answer(destination: str, *, tp=TP, configured=(A, B), live=(A, B), current: str | None = A,
           offline: bool = False, known: bool = True) -> ErrorCode:
    return alter_replica_log_dir_error(tp, destination, list(configured), list(live), current, offline, known)


def test_a_replica_already_in_the_dir_has_nothing_to_do():
    assert answer(A) == ErrorCode.none


def test_a_dir_that_is_not_configured_is_not_found():
    assert answer("/data/c") == ErrorCode.log_dir_not_found


def test_the_dir_must_be_written_exactly_as_its_absolute_path():
    # Kafka compares File.getAbsolutePath strings: no normalisation of a trailing slash, "..", or a relative path
    assert answer(A + "/") == ErrorCode.log_dir_not_found
    assert answer("/data/b/../a") == ErrorCode.log_dir_not_found
    assert answer("data/a") == ErrorCode.log_dir_not_found


def test_an_unknown_dir_wins_over_an_unknown_partition():
    assert answer("/nowhere", current=None, known=False) == ErrorCode.log_dir_not_found


def test_an_offline_dir_or_replica_is_a_storage_error():
    assert answer(B, live=(A,)) == ErrorCode.kafka_storage_error
    assert answer(A, current=None, offline=True) == ErrorCode.kafka_storage_error


def test_a_partition_hosted_elsewhere_is_replica_not_available():
    assert answer(A, current=None, known=True) == ErrorCode.replica_not_available


def test_a_partition_nobody_knows_is_unknown():
    assert answer(A, current=None, known=False) == ErrorCode.unknown_topic_or_partition


def test_a_move_to_another_configured_dir_is_refused_as_an_invalid_request():
    assert answer(B) == ErrorCode.invalid_request


def test_a_topic_too_long_for_a_future_log_dir_name_is_invalid():
    # "<topic>-0.<32 hex>-future" must fit in 255 characters
    assert answer(A, tp=("t" * 213, 0)) == ErrorCode.none
    assert answer(A, tp=("t" * 214, 0)) == ErrorCode.invalid_topic_exception
