"""Regenerates the cluster-plane code from cluster.proto: ``python -m clusterplane.generate``.

The generated modules are committed; tests/test_clusterplane_generated.py fails when they drift from the
schema, so nobody has to remember to run this.
"""

from __future__ import annotations

import sys
from pathlib import Path

PROTO = "clusterplane/cluster.proto"
REPO_ROOT = Path(__file__).resolve().parent.parent
GENERATED = ("cluster_pb2.py", "cluster_pb2.pyi", "cluster_pb2_grpc.py")


def generate(out_root: Path) -> list[Path]:
    from grpc_tools import protoc  # a dev dependency: only needed to regenerate

    (out_root / "clusterplane").mkdir(parents=True, exist_ok=True)
    status = protoc.main([
        "grpc_tools.protoc", f"-I{REPO_ROOT}", f"--python_out={out_root}", f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}", str(REPO_ROOT / PROTO),
    ])
    if status != 0:
        raise RuntimeError(f"protoc failed with status {status} on {PROTO}")
    return [out_root / "clusterplane" / name for name in GENERATED]


if __name__ == "__main__":
    for path in generate(REPO_ROOT):
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    sys.exit(0)
