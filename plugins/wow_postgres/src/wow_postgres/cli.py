"""``wow postgres``: the schema from the command line.

::

    wow postgres migrate      apply the pending migrations (idempotent), print what was applied
    wow postgres status       print the migrations applied and the newest this code knows
    wow postgres relay        publish the transactional outbox to the configured transport
                              (WOW_TRANSPORT) until SIGTERM or SIGINT

Both read ``WOW_POSTGRES__*`` (the DSN is printed with its password masked). ``status``
exits 1 when migrations are pending, so a deployment step can check before starting
services that run with ``WOW_POSTGRES__MIGRATE_ON_START=false``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
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
        await transport.start()
        invocation.out.write(
            f"relaying the outbox of schema {settings.schema_name!r} at {settings.masked_dsn} "
            f"to transport {transport.name}\n"
        )
        invocation.out.flush()
        await OutboxRelay(settings, transport, metrics=container.metrics()).run(stop)
    finally:
        await transport.close()


def _run(invocation: Invocation) -> int:
    from wow_postgres.migrations import latest_version

    settings = invocation.settings().section(SECTION, PostgresSettings)
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


def _configure(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="postgres_command", required=True, metavar="COMMAND")
    commands.add_parser("migrate", help="apply the pending migrations (idempotent)")
    commands.add_parser("status", help="the migrations applied and pending (exit 1 when some are pending)")
    commands.add_parser("relay", help="publish the outbox to the configured transport until SIGTERM")


COMMAND = Command(
    help="migrate the PostgreSQL schema, relay the outbox",
    description="Create or upgrade the tables of the PostgreSQL event store and snapshot repository in "
    "WOW_POSTGRES__SCHEMA_NAME (versioned, idempotent, safe to run from several processes at once).",
    run=_run,
    configure=_configure,
)
