"""Real request frames captured from librdkafka, kafka-python and aiokafka (wire-compat.md section 10).

rec/ was recorded against the advertised matrix, k39/ against Kafka-3.9-like ranges (so it also holds
flexible versions the broker does not advertise). Files hold the frame without its size prefix and
are named <client>_<Api>_v<version>.bin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from broker.clientplane.protocol.versions import ApiKey

FRAMES_DIR = Path(__file__).parent / "client_frames"
_NAME = re.compile(r"(?P<client>[a-z]+)_(?P<api>[A-Za-z]+)_v(?P<version>\d+)\.bin")


@dataclass(frozen=True)
class CapturedFrame:
    matrix: str
    client: str
    api_key: ApiKey
    api_version: int
    frame: bytes

    @property
    def id(self) -> str:
        return f"{self.matrix}/{self.client}_{self.api_key.name}_v{self.api_version}"


def _api_key(camel_case: str) -> ApiKey:
    return ApiKey[re.sub(r"(?<!^)(?=[A-Z])", "_", camel_case).upper()]


def load_captured() -> list[CapturedFrame]:
    captured = []
    for path in sorted(FRAMES_DIR.glob("*/*.bin")):
        match = _NAME.fullmatch(path.name)
        assert match, f"unexpected fixture name {path}"
        captured.append(
            CapturedFrame(
                matrix=path.parent.name,
                client=match["client"],
                api_key=_api_key(match["api"]),
                api_version=int(match["version"]),
                frame=path.read_bytes(),
            )
        )
    return captured


CAPTURED = load_captured()
