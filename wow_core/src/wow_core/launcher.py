"""The ``wow`` executable's entry point: a stop signal is honoured from its first instant.

Importing the command line, the plugins and the user's app takes seconds on a loaded
machine, and an orchestrator sends SIGTERM whenever it likes. Python's default action
would kill the process by the signal (status -15, nothing closed). So for ``wow run``
this module, which imports nothing heavy, installs
:class:`~wow_core.stop_signals.StartupSignals` before
anything else: a SIGINT or SIGTERM received while the process starts is recorded, and
``wow run`` checks it between the steps of its start-up (after the app is imported,
after the runtime is built) and, once its event loop runs, aborts the start (see
:func:`wow_core.runtime.serve.serve`). The process then exits 0 without serving. A
second signal before the event loop runs exits at once with status 130, like a second
signal during the stop.
"""

from __future__ import annotations

import sys

from wow_core.stop_signals import StartupSignals

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs here
if TYPE_CHECKING:
    from collections.abc import Sequence


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
