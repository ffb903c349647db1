"""``StartupSignals``: a stop signal received before ``wow run``'s event loop handles it.

Imports nothing of wow_core: :mod:`wow_core.launcher` installs it at the first instant of
the ``wow`` executable, and ``wow run`` (:mod:`wow_core.runtime.serve`) reads it later.
"""

from __future__ import annotations

import os
import signal

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs here
if TYPE_CHECKING:
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
