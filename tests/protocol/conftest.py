import importlib
import warnings

# kafka-python 3.0.12 (the test oracle) loads its JSON message specs at import time through
# importlib.resources calls deprecated since Python 3.11; import it once, quietly.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    for module in ("kafka.protocol.api_message", "kafka.protocol.metadata"):
        importlib.import_module(module)
