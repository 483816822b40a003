"""Progress of a running bench on stderr (a spinner on a terminal, plain lines elsewhere), so stdout holds
only the report and ``--json`` stays parseable."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.status import Status


class Progress:
    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self._status: Status | None = None

    @contextmanager
    def running(self, what: str) -> Iterator[Progress]:
        with self.console.status(what) as status:
            self._status = status
            try:
                yield self
            finally:
                self._status = None

    def say(self, message: str) -> None:
        """A step worth keeping in the scroll-back; the spinner shows it while the step runs."""
        self.console.print(message, markup=False, soft_wrap=True)
        if self._status is not None:
            self._status.update(message)

    def __call__(self, message: str) -> None:
        self.say(message)

