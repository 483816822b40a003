"""Errors the log reports: each carries the Kafka error code the broker answers a client with."""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode


class KafkaLogError(Exception):
    """A log operation was refused; ``error_code`` is the answer for the client, nothing was changed."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code

    def __str__(self) -> str:
        return f"{self.error_code.name.upper()} ({self.error_code.value}): {self.args[0]}"


class InvalidRecordBatchError(KafkaLogError):
    """The record set failed validation (CRC, magic, sizes, offsets, timestamps); none of it was written."""


class OffsetOutOfRangeError(KafkaLogError):
    """A read or lookup asked for an offset outside [log start offset, log end offset]."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.offset_out_of_range, message)


class UnexpectedAppendOffsetError(KafkaLogError):
    """A follower append starts below the log end offset.

    Kafka raises a non-API exception here (so the client-visible code is UNKNOWN_SERVER_ERROR); the
    replica fetcher catches it and, if the local log is empty, restarts the log at ``first_offset``.
    """

    def __init__(self, first_offset: int, log_end_offset: int) -> None:
        super().__init__(
            ErrorCode.unknown_server_error,
            f"follower append starts at offset {first_offset}, below the log end offset {log_end_offset}; "
            "truncate the log first (or restart an empty log at that offset)",
        )
        self.first_offset = first_offset
        self.log_end_offset = log_end_offset


class KafkaStorageError(KafkaLogError):
    """An I/O error in a log directory (Kafka's KafkaStorageException): the directory is offline from then on,
    and every replica in it answers KAFKA_STORAGE_ERROR until the broker starts again on a repaired disk."""

    def __init__(self, log_dir: Path, message: str) -> None:
        super().__init__(ErrorCode.kafka_storage_error, message)
        self.log_dir = log_dir


class CorruptCheckpointError(KafkaLogError):
    """A checkpoint file does not follow Kafka's text format."""

    def __init__(self, path: object, detail: str) -> None:
        super().__init__(
            ErrorCode.kafka_storage_error,
            f"checkpoint file {path} is malformed ({detail}); inspect it, then delete it to let the broker "
            "fall back to a full recovery",
        )


class CorruptIndexError(Exception):
    """An index file failed its sanity check; the segment's indexes are rebuilt from the log file."""


class LogDirInUseError(Exception):
    """Another process holds the log directory's lock."""
