"""``wow postgres``: the schema from the command line.

::

    wow postgres migrate      apply the pending migrations (idempotent), print what was applied
    wow postgres status       print the migrations applied and the newest this code knows
    wow postgres relay        publish the transactional outbox to the configured transport
                              (WOW_TRANSPORT) until SIGTERM or SIGINT

Both read ``WOW_POSTGRES__*`` (the DSN is printed with its password masked). ``status``
exits 1 when migrations are pending, so a deployment step can check before starting
services that run with ``WOW_POSTGRES__MIGRATE_ON_START=false``.

A failure (the server unreachable after the retries, a refused connection, a schema this
code cannot use, a transport that does not start) is one line on stderr naming the server
and the cause, with exit status 1, as ``wow run`` reports a part that does not start; a
wrong setting exits 2 (the core's settings errors). ``--debug`` logs at DEBUG (every retry)
and prints the traceback too. ``migrate`` and ``status`` log errors only otherwise (their
failure line says how many attempts were made); ``relay`` logs at INFO, as a service does.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import traceback
from typing import TYPE_CHECKING

from wow_core.plugins.commands import Command
from wow_postgres.settings import SECTION, PostgresSettings

if TYPE_CHECKING:
    from wow_core.runtime.cli import Invocation


async def _migrate(settings: PostgresSettings) -> list[int]:
    from wow_postgres.connection import create_pool
    from wow_postgres.migrations import migrate

    pool = await create_pool(settings)
    try:
        async with pool.acquire() as connection:
            return await migrate(connection, settings)
    finally:
        await pool.close()


async def _status(settings: PostgresSettings) -> list[int]:
    from wow_postgres.connection import create_pool
    from wow_postgres.migrations import applied

    pool = await create_pool(settings)
    try:
        async with pool.acquire() as connection:
            return await applied(connection, settings)
    finally:
        await pool.close()


async def _relay(invocation: Invocation, settings: PostgresSettings) -> None:
    from wow_postgres.outbox import OutboxRelay

    container = invocation.container()
    transport = container.transport()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        try:
            await transport.start()
        except Exception as error:
            raise TransportStartError(transport.name, error) from error
        invocation.out.write(
            f"relaying the outbox of schema {settings.schema_name!r} at {settings.masked_dsn} "
            f"to transport {transport.name}\n"
        )
        invocation.out.flush()
        await OutboxRelay(settings, transport, metrics=container.metrics()).run(stop)
    finally:
        await transport.close()


START_FAILED = 1
"""Exit status of a failure (the core's for a part that did not start)."""


class TransportStartError(RuntimeError):
    """The relay's transport did not start; the message names it and the cause."""

    def __init__(self, name: str, cause: BaseException) -> None:
        super().__init__(f"the transport {name!r} did not start: {str(cause) or type(cause).__name__}")


def _run(invocation: Invocation) -> int:
    import asyncpg

    from wow_postgres.migrations import MigrationError

    args = invocation.args
    _configure_logging("DEBUG" if args.debug else "INFO" if args.postgres_command == "relay" else "ERROR")
    settings = invocation.settings().section(SECTION, PostgresSettings)
    try:
        return _run_command(invocation, settings)
    except (
        OSError,
        asyncpg.PostgresError,
        asyncpg.InterfaceError,
        MigrationError,
        TransportStartError,
    ) as error:
        if args.debug:
            traceback.print_exception(error, file=sys.stderr)
        print(
            f"wow postgres {args.postgres_command}: {_describe(error, settings)} "
            "(`wow settings` shows the settings in effect)",
            file=sys.stderr,
        )
        return START_FAILED


def _describe(error: BaseException, settings: PostgresSettings) -> str:
    """The failure in one line, naming the server (password masked) unless the message does
    (every message of this package masks the password, and so do the transports')."""
    from wow_postgres.connection import PostgresUnavailableError

    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, PostgresUnavailableError | TransportStartError):
        return text
    return f"schema {settings.schema_name!r} at {settings.masked_dsn}: {type(error).__name__}: {text}"


def _run_command(invocation: Invocation, settings: PostgresSettings) -> int:
    from wow_postgres.migrations import latest_version

    where = f"schema {settings.schema_name!r} at {settings.masked_dsn}"
    out = invocation.out
    if invocation.args.postgres_command == "migrate":
        done = asyncio.run(_migrate(settings))
        if done:
            out.write(f"applied migration(s) {', '.join(map(str, done))} to {where}\n")
        else:
            out.write(f"{where} is up to date (migration {latest_version(settings)})\n")
        return 0
    if invocation.args.postgres_command == "relay":
        asyncio.run(_relay(invocation, settings))
        return 0
    have = asyncio.run(_status(settings))
    newest = latest_version(settings)
    pending = [n for n in range(1, newest + 1) if n not in have]
    out.write(f"{where}: applied {have or 'none'}, newest known {newest}, pending {pending or 'none'}\n")
    return 1 if pending else 0


def _configure_logging(level: str) -> None:
    if not logging.getLogger().handlers:  # else the application's own configuration stands
        logging.basicConfig(
            level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
        )


def _configure(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", help="log at DEBUG (every retry) and print the traceback of a failure"
    )
    commands = parser.add_subparsers(dest="postgres_command", required=True, metavar="COMMAND")
    commands.add_parser("migrate", parents=[common], help="apply the pending migrations (idempotent)")
    commands.add_parser(
        "status",
        parents=[common],
        help="the migrations applied and pending (exit 1 when some are pending)",
    )
    commands.add_parser(
        "relay", parents=[common], help="publish the outbox to the configured transport until SIGTERM"
    )


COMMAND = Command(
    help="migrate the PostgreSQL schema, relay the outbox",
    description="Create or upgrade the tables of the PostgreSQL event store and snapshot repository in "
    "WOW_POSTGRES__SCHEMA_NAME (versioned, idempotent, safe to run from several processes at once).",
    run=_run,
    configure=_configure,
)
