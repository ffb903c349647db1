"""``Command``: one ``wow <name>`` subcommand, what the ``register_commands`` hook registers.

The command line itself is the runtime's (:mod:`wow_core.runtime.cli`): it builds one
argparse parser from every registered command and calls the chosen one's ``run`` with
an :class:`~wow_core.runtime.cli.Invocation` (the parsed arguments, the plugins, where
to write, the settings and a container over them).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wow_core.runtime.cli import Invocation


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Command:
    """One ``wow <name>`` subcommand.

    ``configure`` adds its arguments to its argparse parser; ``run`` does the work and
    returns the exit status. ``SettingsError`` and ``PluginError`` raised by ``run`` become
    a message and exit status 2.
    """

    help: str
    run: Callable[[Invocation], int]
    configure: Callable[[argparse.ArgumentParser], None] = _no_arguments
    description: str | None = None
