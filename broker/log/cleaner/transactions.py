"""The cleaner's view of transactions in one pass (Kafka 2.8's CleanedTransactionMetadata). Pure.

Fed the aborted transactions of the range being read (from the log's ``.txnindex``) and then every batch in offset
order, it says which batches go:

- a data batch of an aborted transaction goes whole (and is never put in the offset map);
- an ABORT marker stays while this pass still met data of its transaction (that data goes in this pass; the
  marker, re-indexed in the cleaned segment's ``.txnindex``, goes in a later one), else it may go;
- a COMMIT marker may go if this pass met no data of its transaction;
- a control batch without a record (one an earlier pass emptied) may go.

"May go" is the caller's to combine with the delete horizon: a marker goes only where tombstones go too, so a
consumer reading the log slowly still sees the marker after the data (Kafka piggy-backs on delete.retention.ms).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from broker.log.record_batch import TRANSACTIONAL_FLAG, BatchHeader
from broker.log.transactions import ABORT, COMMIT, AbortedTxn


def overlapping(aborted: Iterable[AbortedTxn], start: int, end: int) -> list[AbortedTxn]:
    """The aborted transactions that overlap [start, end) (Kafka's collectAbortedTransactions(start, end))."""
    return [txn for txn in aborted if txn.last_offset >= start and txn.first_offset < end]


class CleanedTransactions:
    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._aborted = deque(sorted(aborted, key=lambda txn: txn.first_offset))
        self._ongoing_committed: set[int] = set()
        # producer id -> [its aborted transaction, the last offset of a batch of it met in this pass, or None]
        self._ongoing_aborted: dict[int, list] = {}
        self.cleaned_index: list[AbortedTxn] = []  # the entries of the cleaned segment's .txnindex

    def _consume_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0].first_offset <= offset:
            txn = self._aborted.popleft()
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, None])

    def on_data_batch(self, header: BatchHeader) -> bool:
        """True when the batch belongs to an aborted transaction: it goes whole."""
        self._consume_up_to(header.last_offset)
        if not header.attributes & TRANSACTIONAL_FLAG:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing[1] = header.last_offset
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: BatchHeader, control_type: int | None) -> bool:
        """True when the marker may go (past the delete horizon); ``control_type`` None: a batch without record."""
        self._consume_up_to(header.last_offset)
        if control_type is None:
            return True
        producer_id = header.producer_id
        if control_type == ABORT:
            ongoing = self._ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing[1] is not None:
                self.cleaned_index.append(ongoing[0])  # its data goes now, the marker in a later pass
                return False
            return True
        if control_type == COMMIT:
            met = producer_id in self._ongoing_committed
            self._ongoing_committed.discard(producer_id)
            return not met
        return False  # another control type: kept
