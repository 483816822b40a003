"""kafka-python 3.0.12 loads its JSON message specs at import time through importlib.resources calls deprecated since
Python 3.11; import it once, quietly (as tests/client does)."""

from __future__ import annotations

import importlib
import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    for module in ("kafka.protocol.api_message", "kafka.protocol.metadata", "kafka.protocol.consumer"):
        importlib.import_module(module)
