"""``python -m broker --config server.properties``: run one broker process in the foreground."""

from __future__ import annotations

import sys

from cluster.cli import main

if __name__ == "__main__":
    sys.exit(main(["broker", *sys.argv[1:]]))
