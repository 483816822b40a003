"""Reading a run folder into DataFrames: trace events, workload histories, final logs.

A run folder is what ``kafkasim traces collect`` writes, but a cluster's data dir works as well: trace files
are found by name (``trace.jsonl``, ``tools-trace.jsonl``, rotated ``trace.jsonl.N``) anywhere below it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from analysis.schema import model_struct, trace_schema
from traces.events import SCHEMA_VERSION
from traces.history import FINAL_LOGS_DIR, HISTORY_SUFFIX, OFFSET_UNKNOWN, AcknowledgedWrite, StoredRecord

_TRACE_FILE = re.compile(r"^(.*-)?trace\.jsonl(\.\d+)?$")


class RunDirectoryError(ValueError):
    """The folder holds nothing the analysis can read; the message says what was expected."""


def trace_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.rglob("*") if p.is_file() and _TRACE_FILE.match(p.name))


def history_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.rglob(f"*{HISTORY_SUFFIX}") if p.is_file())


def final_log_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in (run_dir / FINAL_LOGS_DIR).rglob("*.jsonl") if p.is_file())


def load_events(spark: SparkSession, run_dir: Path) -> DataFrame:
    """Every trace event of the run, one row each, with the schema derived from the event model.

    Rows whose ``schema_version`` is newer than this kafkasim's are refused: their fields may mean
    something else."""
    files = trace_files(run_dir)
    if not files:
        raise RunDirectoryError(f"no trace files (trace.jsonl, tools-trace.jsonl) under {run_dir}; "
                                f"run `kafkasim traces collect --out DIR` and analyze DIR")
    # a broker killed by SIGKILL may leave half a line at the end of its file: that line is skipped
    return spark.read.schema(trace_schema()).option("mode", "DROPMALFORMED").json([str(p) for p in files])


def check_schema_versions(events: DataFrame) -> None:
    newest = events.agg(F.max("schema_version")).first()[0]
    if newest is not None and newest > SCHEMA_VERSION:
        raise RunDirectoryError(f"traces were written with schema version {newest}, this kafkasim reads up to "
                                f"{SCHEMA_VERSION}; analyze them with the kafkasim that wrote them")


def _is_operation_history(path: Path) -> bool:
    """A `kafkasim chaos` history (invoke and completion of every operation) rather than acknowledged writes;
    told apart by its first line, which names the operation's function (``f``)."""
    with open(path, encoding="utf-8") as file:
        first = file.readline()
    try:
        return "f" in json.loads(first)
    except ValueError:
        return False


def load_history(spark: SparkSession, run_dir: Path, extra: list[Path] | None = None) -> DataFrame | None:
    """Acknowledged writes from both history formats: the workload histories' lines as they are, and the
    acknowledged sends (``f`` send, ``type`` ok) of chaos histories, an unknown offset as -1, but for the keyed sends
    to a compacted topic."""
    files = history_files(run_dir) + list(extra or [])
    if not files:
        return None
    operations = [str(p) for p in files if _is_operation_history(p)]
    writes = [str(p) for p in files if str(p) not in operations]
    schema = model_struct(AcknowledgedWrite)
    frames = []
    if writes:
        frames.append(spark.read.schema(schema).option("mode", "FAILFAST").json(writes))
    if operations:
        with_kind = StructType([*schema.fields, StructField("f", StringType()), StructField("type", StringType()),
                                StructField("key", StringType())])
        # a keyed send went to a compacted topic, whose cleaner removes superseded values by design: the chaos
        # checker holds those to compaction's promise (cluster/chaos/compaction_checker.py), not to survival
        sends = spark.read.schema(with_kind).option("mode", "FAILFAST").json(operations).where(
            (F.col("f") == "send") & (F.col("type") == "ok") & F.col("key").isNull())
        frames.append(sends.select(*(F.coalesce(F.col("offset"), F.lit(OFFSET_UNKNOWN)).cast(field.dataType)
                                     .alias("offset") if field.name == "offset" else F.col(field.name)
                                     for field in schema.fields)))
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def load_final_logs(spark: SparkSession, run_dir: Path) -> DataFrame | None:
    files = final_log_files(run_dir)
    if not files:
        return None
    return spark.read.schema(model_struct(StoredRecord)).option("mode", "FAILFAST").json([str(p) for p in files])
