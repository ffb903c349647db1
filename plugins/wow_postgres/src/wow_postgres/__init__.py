"""wow_postgres: a PostgreSQL event store, snapshot repository and transport for wow-py.

``WOW_EVENTSOURCING__STORE=postgres``, ``WOW_EVENTSOURCING__SNAPSHOT=postgres`` and
``WOW_TRANSPORT=postgres`` select them (and, with the transport, the ``postgres`` wait
notifier); ``WOW_POSTGRES__*`` configures them (see :class:`PostgresSettings`).

Importing the package is cheap: each name is imported on first use, so loading its
plugin entry point (every ``wow`` process does) costs nothing until the feature is used.
"""

from __future__ import annotations

from wow_core._lazy import lazy_exports

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: keep the import of the package cheap
if TYPE_CHECKING:
    from wow_postgres.connection import PostgresUnavailableError
    from wow_postgres.event_store import (
        START,
        EventStoreDataError,
        GlobalPosition,
        PositionedStream,
        PostgresEventStore,
        PostgresSnapshotRepository,
    )
    from wow_postgres.migrations import MigrationError, migrate
    from wow_postgres.outbox import OutboxRelay, PostgresOutbox
    from wow_postgres.settings import PostgresSettings, masked_dsn
    from wow_postgres.transport import PostgresReceiver, PostgresRecord, PostgresTransport
    from wow_postgres.wait_notifier import PostgresWaitNotifier

__version__ = "0.1.0"

_EXPORTS = {
    "PostgresUnavailableError": "wow_postgres.connection",
    "START": "wow_postgres.event_store",
    "EventStoreDataError": "wow_postgres.event_store",
    "GlobalPosition": "wow_postgres.event_store",
    "PositionedStream": "wow_postgres.event_store",
    "PostgresEventStore": "wow_postgres.event_store",
    "PostgresSnapshotRepository": "wow_postgres.event_store",
    "MigrationError": "wow_postgres.migrations",
    "migrate": "wow_postgres.migrations",
    "OutboxRelay": "wow_postgres.outbox",
    "PostgresOutbox": "wow_postgres.outbox",
    "PostgresSettings": "wow_postgres.settings",
    "masked_dsn": "wow_postgres.settings",
    "PostgresReceiver": "wow_postgres.transport",
    "PostgresRecord": "wow_postgres.transport",
    "PostgresTransport": "wow_postgres.transport",
    "PostgresWaitNotifier": "wow_postgres.wait_notifier",
}

__all__ = [
    "START",
    "EventStoreDataError",
    "GlobalPosition",
    "MigrationError",
    "OutboxRelay",
    "PositionedStream",
    "PostgresEventStore",
    "PostgresOutbox",
    "PostgresReceiver",
    "PostgresRecord",
    "PostgresSettings",
    "PostgresSnapshotRepository",
    "PostgresTransport",
    "PostgresUnavailableError",
    "PostgresWaitNotifier",
    "masked_dsn",
    "migrate",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
