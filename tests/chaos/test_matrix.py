"""Kafka's replication test matrix as data, and its table built from check results."""

from __future__ import annotations

from rich.console import Console

from cluster.chaos.checker import check
from cluster.chaos.matrix import REPLICATION_MATRIX, MatrixRow, matrix_rows, matrix_table
from tests.chaos.test_checker import clean_run


def test_the_matrix_is_kafkas_four_failures_on_the_leader_and_the_controller():
    assert [c.cell_id for c in REPLICATION_MATRIX] == [
        "clean_shutdown/leader", "clean_shutdown/controller", "hard_shutdown/leader", "hard_shutdown/controller",
        "clean_bounce/leader", "clean_bounce/controller", "hard_bounce/leader", "hard_bounce/controller"]
    assert {(c.partitions, c.replication_factor, c.min_insync_replicas, c.acks) for c in REPLICATION_MATRIX} == {
        (3, 3, 2, "all")}
    cells = {c.cell_id: c for c in REPLICATION_MATRIX}
    hard_bounce = cells["hard_bounce/leader"]
    assert (hard_bounce.signal, hard_bounce.blows, hard_bounce.restart, hard_bounce.wait_for_deregistration) == (
        "SIGKILL", 5, True, True)
    clean_shutdown = cells["clean_shutdown/controller"]
    assert (clean_shutdown.signal, clean_shutdown.blows, clean_shutdown.restart) == ("SIGTERM", 1, False)
    assert not cells["clean_bounce/leader"].wait_for_deregistration


def test_a_row_carries_the_results_figures_and_fails_with_too_few_acknowledgements():
    history, final = clean_run()
    history.send("gone", partition=0, offset=3)
    lossy = check(history.operations, final)
    clean_history, clean_final = clean_run()
    clean = check(clean_history.operations, clean_final)
    rows = matrix_rows({"hard_bounce/leader": lossy, "clean_shutdown/leader": clean})
    by_cell = {r.cell_id: r for r in rows}
    assert len(rows) == 8
    assert (by_cell["hard_bounce/leader"].verdict, by_cell["hard_bounce/leader"].lost) == ("invalid", 1)
    assert by_cell["hard_bounce/leader"].passed is False
    assert by_cell["clean_shutdown/leader"].verdict == "valid"
    assert by_cell["clean_shutdown/leader"].passed is False  # 9 acknowledged, Kafka's test wants 5000
    assert "only 9 acknowledged" in by_cell["clean_shutdown/leader"].note
    assert (by_cell["clean_bounce/controller"].verdict, by_cell["clean_bounce/controller"].passed) == ("not run", None)
    assert MatrixRow.model_validate_json(rows[0].model_dump_json()) == rows[0]


def test_the_table_shows_every_cell():
    history, final = clean_run()
    history.send("gone", partition=0, offset=3)
    rows = matrix_rows({"hard_bounce/leader": check(history.operations, final)})
    console = Console(record=True, width=200)
    console.print(matrix_table(rows))
    text = console.export_text()
    assert text.count("not run") == 7
    assert "hard_bounce" in text and "invalid" in text
