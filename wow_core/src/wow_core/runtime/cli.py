"""The ``wow`` command line.

Subcommands are plugin registrations like any other: a plugin's ``register_commands``
hook calls ``register(name, Command(...))``; the core registers its own
(``plugins``, ``settings``, ``demo``) in :mod:`wow_core.runtime.builtin` the same way.
:class:`~wow_core.plugins.Command` is the plugins' type (re-exported here).

Nothing shows a secret: secret settings print masked and so do the credentials of every
URL in a setting or a message (``redis://:***@host``, :func:`mask_userinfo`).

A wrong setting or a broken plugin is reported as one clear message on stderr with exit
status 2, never as a traceback; a runtime that cannot start (a broker or a store that does
not answer) likewise, with exit status 1. ``main`` returns the exit status; the console
script passes it to ``sys.exit``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

import wow_core
from wow_core.plugins import PluginError, PluginRegistry, load_plugins
from wow_core.plugins.commands import Command
from wow_core.runtime._text import a_type_name
from wow_core.runtime.container import WowContainer, create_container
from wow_core.runtime.runtime import StartError
from wow_core.runtime.settings import ENV_PREFIX, NESTED, SettingsError, WowSettings, mask_userinfo

USAGE_ERROR = 2
START_FAILED = 1


@dataclass(slots=True)
class Invocation:
    """What a command receives: its parsed arguments, the plugins, where to write."""

    args: argparse.Namespace
    plugins: PluginRegistry
    out: TextIO = field(default_factory=lambda: sys.stdout)

    def settings(self) -> WowSettings:
        """The settings of the environment; raises ``SettingsError`` on a wrong value."""
        return WowSettings.load()

    def container(self) -> WowContainer:
        """A validated container over these settings and plugins (see ``runtime.container``)."""
        return create_container(self.settings(), plugins=self.plugins)


# -- wow plugins ---------------------------------------------------------------------------


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n"
        )


def _configure_plugins(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _run_plugins(invocation: Invocation) -> int:
    registrations = invocation.plugins.registrations()
    origins = sorted(invocation.plugins.origins.values(), key=lambda origin: origin.plugin)
    out = invocation.out
    if invocation.args.json:
        document = {
            "plugins": [
                {"plugin": o.plugin, "distribution": o.distribution, "version": o.version} for o in origins
            ],
            "registrations": [
                {
                    "kind": r.kind,
                    "name": r.name,
                    "plugin": r.origin.plugin,
                    "distribution": r.origin.distribution,
                    "version": r.origin.version,
                }
                for r in registrations
            ],
        }
        out.write(json.dumps(document, indent=2) + "\n")
        return 0
    out.write("Plugins (entry-point group 'wow'):\n")
    _table(
        [["PLUGIN", "DISTRIBUTION", "VERSION"]] + [[o.plugin, o.distribution, o.version] for o in origins],
        out,
    )
    out.write("\nRegistrations:\n")
    _table(
        [["KIND", "NAME", "PLUGIN", "DISTRIBUTION", "VERSION"]]
        + [[r.kind, r.name, r.origin.plugin, r.origin.distribution, r.origin.version] for r in registrations],
        out,
    )
    return 0


# -- wow settings --------------------------------------------------------------------------


def _env_value(value: Any) -> str:
    """How the value is written in an environment variable; secrets and URL credentials
    come out masked."""
    plain = mask_userinfo(to_jsonable_python(value))
    if isinstance(plain, str):
        return plain
    return json.dumps(plain)


def settings_lines(model: BaseModel, prefix: str) -> Iterator[str]:
    """``NAME=value`` for every field of ``model``, nested models flattened with ``__``."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        variable = prefix + name.upper()
        if isinstance(value, BaseModel):
            yield from settings_lines(value, variable + NESTED)
        else:
            yield f"{variable}={_env_value(value)}"


def _configure_settings(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of environment lines")


def _run_settings(invocation: Invocation) -> int:
    container = invocation.container()
    settings: WowSettings = container.settings()
    sections: dict[str, BaseModel] = container.plugin_sections()
    out = invocation.out
    if invocation.args.json:
        document = mask_userinfo(to_jsonable_python(settings))
        document["plugin_sections"] = {
            name: mask_userinfo(to_jsonable_python(model)) for name, model in sections.items()
        }
        out.write(json.dumps(document, indent=2) + "\n")
        return 0
    out.write(
        "# effective settings (environment and .env); secrets and URL credentials are masked, null is unset\n"
    )
    for line in settings_lines(settings, ENV_PREFIX):
        out.write(line + "\n")
    for name, section in sections.items():
        origin = invocation.plugins.get("settings", name).origin
        out.write(f"\n# section {name!r} of {origin}\n")
        for line in settings_lines(section, ENV_PREFIX + name.upper() + NESTED):
            out.write(line + "\n")
    return 0


# -- wow run, wow demo --------------------------------------------------------------------


def _run_demo(invocation: Invocation) -> int:
    from wow_core.runtime.serve import demo_command

    return demo_command(invocation)


def _configure_demo(parser: argparse.ArgumentParser) -> None:
    from wow_core.runtime.serve import configure_demo

    configure_demo(parser)


def _run_asyncapi(invocation: Invocation) -> int:
    from wow_core.runtime.asyncapi import asyncapi_command

    return asyncapi_command(invocation)


def _configure_asyncapi(parser: argparse.ArgumentParser) -> None:
    from wow_core.runtime.asyncapi import configure_asyncapi

    configure_asyncapi(parser)


def _run_run(invocation: Invocation) -> int:
    from wow_core.runtime.serve import run_command

    return run_command(invocation)


def _configure_run(parser: argparse.ArgumentParser) -> None:
    from wow_core.runtime.serve import configure_run

    configure_run(parser)


def _ledger_command() -> Command:
    from wow_core.runtime.ledger_cli import COMMAND

    return COMMAND


def _run_worker(invocation: Invocation) -> int:
    from wow_core.runtime.worker import worker_command

    return worker_command(invocation)


def _configure_worker(parser: argparse.ArgumentParser) -> None:
    from wow_core.runtime.worker import configure_worker

    configure_worker(parser)


CORE_COMMANDS: dict[str, Command] = {
    "plugins": Command(
        help="list the discovered plugins and what each registered",
        description="Every plugin found through the entry-point group 'wow', and every transport, "
        "recorder, handler, capture, store, metrics backend, settings section and command it registered, "
        "with its distribution and version.",
        run=_run_plugins,
        configure=_configure_plugins,
    ),
    "settings": Command(
        help="print the effective settings (secrets masked)",
        description="The settings this process would run with, read from WOW_* environment variables and "
        "a .env file, including the sections plugins contribute. Secret values are masked.",
        run=_run_settings,
        configure=_configure_settings,
    ),
    "demo": Command(
        help="run the bank demo on the configured transport and print what happened per stage",
        description="Runs examples/bank in this process on the settings' transport and stores (the "
        "embedded in-memory default when nothing is set): a batch of accounts, deposits, withdrawals and "
        "transfers, some refused on purpose, one request sent twice, one Void command; then a table per "
        "stage and a summary (counts, throughput, latency percentiles).",
        run=_run_demo,
        configure=_configure_demo,
    ),
    "asyncapi": Command(
        help="print the AsyncAPI 3.0 document of a service (module:app)",
        description="The channels (the transport's topic names), messages (the wire envelope with each "
        "body's JSON schema) and operations of a WowApp on the settings' transport, as AsyncAPI 3.0 "
        "JSON (--yaml: YAML). Nothing is started or connected.",
        run=_run_asyncapi,
        configure=_configure_asyncapi,
    ),
    "run": Command(
        help="run a service (module:app) until SIGINT or SIGTERM",
        description="Imports module:app (a WowApp), builds its runtime from the settings, logs what it "
        "runs on, serves until SIGINT or SIGTERM, then stops in order and exits 0. A second signal forces "
        "the stop (exit 130).",
        run=_run_run,
        configure=_configure_run,
    ),
    "ledger": _ledger_command(),
    "worker": Command(
        help="execute the application commands queued on one named transport until SIGINT or SIGTERM",
        description="Imports module:attribute (an ApplicationCommands, or a function of the "
        "TransportRegistry returning one), binds a CommandWorker to --transport (a name of "
        "WOW_APPLICATION__TRANSPORTS) and runs it with --concurrency commands at once. SIGTERM "
        "finishes the commands in flight, then exits 0; a second signal forces the exit (130).",
        run=_run_worker,
        configure=_configure_worker,
    ),
}


# -- the parser ----------------------------------------------------------------------------


def build_parser(plugins: PluginRegistry) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wow",
        description="wow-py: CQRS and event-sourced services on asyncio, with pluggable transports.",
        epilog="Settings come from WOW_* environment variables (and a .env file): "
        "'wow settings' prints them, 'wow plugins' lists what is installed. "
        "Example: WOW_TRANSPORT=redis wow settings",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {wow_core.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="<command>", title="commands")
    for registration in plugins.all("command"):
        command = registration.value
        if not isinstance(command, Command):
            raise PluginError(
                f"{registration.origin}: the command {registration.name!r} is "
                f"{a_type_name(command)}, not a wow_core.runtime.cli.Command"
            )
        subparser = commands.add_parser(
            registration.name, help=command.help, description=command.description or command.help
        )
        command.configure(subparser)
        subparser.set_defaults(_wow_command=command)
    return parser


def main(argv: Sequence[str] | None = None, *, plugins: PluginRegistry | None = None) -> int:
    """Run ``wow`` with ``argv`` (default: the process arguments); return the exit status."""
    try:
        registry = plugins if plugins is not None else load_plugins()
        parser = build_parser(registry)
    except PluginError as error:
        print(f"wow: {error}", file=sys.stderr)
        return USAGE_ERROR
    args = parser.parse_args(argv)
    command: Command | None = getattr(args, "_wow_command", None)
    if command is None:
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    try:
        return command.run(Invocation(args, registry))
    except SettingsError as error:
        print(f"wow {args.command}: {mask_userinfo(str(error))}", file=sys.stderr)
        return USAGE_ERROR
    except PluginError as error:
        print(f"wow {args.command}: {mask_userinfo(str(error))}", file=sys.stderr)
        return USAGE_ERROR
    except StartError as error:
        print(
            f"wow {args.command}: {mask_userinfo(str(error))} (`wow settings` shows the settings in effect)",
            file=sys.stderr,
        )
        return START_FAILED
    except BrokenPipeError:
        # `wow settings | head`: the reader left; say nothing more on the closed pipe.
        _silence_stdout()
        return 0
    except KeyboardInterrupt:
        return 130


def _silence_stdout() -> None:
    """Point stdout at devnull so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
