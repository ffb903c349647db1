"""The ``wow`` executable's entry point: a stop signal is honoured from its first instant.

Importing the command line, the plugins and the user's app takes seconds on a loaded
machine, and an orchestrator sends SIGTERM whenever it likes. Python's default action
would kill the process by the signal (status -15, nothing closed). So for ``wow run``
this module, which imports nothing heavy, installs :class:`StartupSignals` before
anything else: a SIGINT or SIGTERM received while the process starts is recorded, and
``wow run`` checks it between the steps of its start-up (after the app is imported,
after the runtime is built) and, once its event loop runs, aborts the start (see
:func:`wow_core.runtime.serve.serve`). The process then exits 0 without serving. A
second signal before the event loop runs exits at once with status 130, like a second
signal during the stop.
"""

from __future__ import annotations

import os
import signal
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs here
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
FORCED_EXIT = 130


class StartupSignals:
    """Records the first stop signal received before ``wow run``'s event loop handles them.

    :meth:`install` replaces the handlers of SIGINT and SIGTERM; :attr:`received` is the
    first signal received since (``None`` while there was none). A second one exits the
    process at once with status 130. :meth:`installed` finds the recorder in place, so
    the code that starts later (``wow run``) reads what was recorded without a global.
    """

    __slots__ = ("received",)

    def __init__(self) -> None:
        self.received: int | None = None

    def install(self) -> StartupSignals:
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._record)
        return self

    def _record(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            os._exit(FORCED_EXIT)
        self.received = signum

    @property
    def name(self) -> str:
        """The name of the signal received (``""`` when none was)."""
        return signal.Signals(self.received).name if self.received is not None else ""

    @staticmethod
    def installed() -> StartupSignals | None:
        """The recorder whose handler is in place for SIGTERM, if any."""
        handler = signal.getsignal(signal.SIGTERM)
        owner = getattr(handler, "__self__", None)
        return owner if isinstance(owner, StartupSignals) else None


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand of ``argv``: its first word that is not an option."""
    return next((word for word in argv if not word.startswith("-")), None)


def main() -> int:
    """``wow``: the command line of :mod:`wow_core.runtime.cli`, with stop signals recorded
    from the start for ``wow run``."""
    if _command(sys.argv[1:]) == "run":
        StartupSignals().install()
    from wow_core.runtime.cli import main as cli_main

    return cli_main()
