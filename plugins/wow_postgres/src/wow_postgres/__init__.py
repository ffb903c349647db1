"""wow_postgres: a PostgreSQL event store, snapshot repository and transport for wow-py.

``WOW_EVENTSOURCING__STORE=postgres``, ``WOW_EVENTSOURCING__SNAPSHOT=postgres`` and
``WOW_TRANSPORT=postgres`` select them; ``WOW_POSTGRES__*`` configures them (see :class:`PostgresSettings`).
"""

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

__version__ = "0.1.0"

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
    "masked_dsn",
    "migrate",
]
