"""__transaction_state records read back as written, in Kafka's TransactionLogKey/Value v0 layout."""

from __future__ import annotations

import struct

import pytest

from broker.transaction import log_records
from broker.transaction.metadata import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnState, TxnTransitMetadata


def transit(state: TxnState, partitions=frozenset()) -> TxnTransitMetadata:
    return TxnTransitMetadata(producer_id=4001, last_producer_id=NO_PRODUCER_ID, producer_epoch=3,
                              last_producer_epoch=NO_PRODUCER_EPOCH, txn_timeout_ms=60_000, state=state,
                              topic_partitions=frozenset(partitions), txn_start_timestamp=1_700_000_000_000,
                              txn_last_update_timestamp=1_700_000_000_500)


@pytest.mark.parametrize("state", [s for s in TxnState if s not in (TxnState.EMPTY, TxnState.PREPARE_EPOCH_FENCE)])
def test_values_round_trip(state: TxnState):
    value = transit(state, {("orders", 0), ("orders", 2), ("payments", 1)})
    assert log_records.decode_value(log_records.encode_value(value)) == value


def test_key_is_version_zero_then_the_id():
    key = log_records.encode_key("tx-1")
    assert key == b"\x00\x00\x00\x04tx-1"
    assert log_records.decode_key(key) == "tx-1"


def test_an_empty_transaction_stores_null_partitions_in_kafkas_layout():
    data = log_records.encode_value(transit(TxnState.EMPTY))
    expected = (struct.pack(">hqhib", 0, 4001, 3, 60_000, 0) + struct.pack(">i", -1)
                + struct.pack(">qq", 1_700_000_000_500, 1_700_000_000_000))
    assert data == expected
    assert log_records.decode_value(data) == transit(TxnState.EMPTY)


def test_partitions_are_grouped_by_topic():
    data = log_records.encode_value(transit(TxnState.ONGOING, {("a", 1), ("a", 0)}))
    assert data[17:] == (struct.pack(">i", 1) + b"\x00\x01a" + struct.pack(">iii", 2, 0, 1)
                         + struct.pack(">qq", 1_700_000_000_500, 1_700_000_000_000))


def test_a_tombstone_reads_as_none_and_unknown_versions_are_refused():
    assert log_records.decode_value(None) is None
    with pytest.raises(log_records.TransactionLogFormatError):
        log_records.decode_value(b"\x00\x01" + bytes(30))
    with pytest.raises(log_records.TransactionLogFormatError):
        log_records.decode_value(b"\x00\x00\x00")
