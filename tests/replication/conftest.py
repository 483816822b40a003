"""kafka-python 3 loads its JSON message specs at import time through importlib.resources calls deprecated
since Python 3.11; import the protocol modules the scenarios use once, quietly (as tests/client does)."""

from __future__ import annotations

import importlib
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    for module in ("kafka.protocol.api_message", "kafka.protocol.producer.produce",
                   "kafka.protocol.consumer.offsets"):
        importlib.import_module(module)
