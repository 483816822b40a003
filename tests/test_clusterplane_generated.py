from pathlib import Path

from clusterplane.generate import GENERATED, REPO_ROOT, generate


def test_committed_generated_code_matches_the_schema(tmp_path: Path):
    for fresh in generate(tmp_path):
        committed = REPO_ROOT / "clusterplane" / fresh.name
        assert committed.read_bytes() == fresh.read_bytes(), (
            f"clusterplane/{fresh.name} does not match cluster.proto: run 'python -m clusterplane.generate'")
    assert {p.name for p in (tmp_path / "clusterplane").iterdir()} >= set(GENERATED)
