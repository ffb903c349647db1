"""Versioned, idempotent migrations of the schema this package owns.

Every migration has a number; ``<schema>.wow_migration`` records the numbers applied.
:func:`migrate` applies the missing ones in order, in one transaction together with
their records (all or none), under a transaction-level advisory lock keyed by the schema: several
processes starting at once apply each migration exactly once, and running it again
changes nothing. A database that holds a migration this code does not know (a newer
release migrated it) is refused with :class:`MigrationError` rather than used.

Layout (names from the settings; ``event_stream`` and ``snapshot`` by default): one
table of event streams for every aggregate type, the aggregate type as columns. One
table keeps one global position over every aggregate (catching up reads one index), and
adding an aggregate type needs no DDL; the two unique constraints enforce the version
check and the request-id de-duplication per aggregate type.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wow_postgres.settings import PostgresSettings

if TYPE_CHECKING:
    from wow_postgres.connection import Connection


class MigrationError(RuntimeError):
    """The database's schema is not one this code can use."""


def quote(identifier: str) -> str:
    """``identifier`` as a quoted SQL identifier (the settings allow no ``"`` in it)."""
    return '"' + identifier.replace('"', '""') + '"'


@dataclass(frozen=True, slots=True)
class Names:
    """The quoted, schema-qualified names of the tables, and of their constraints."""

    schema: str
    events: str
    snapshots: str
    migrations: str
    queue: str
    keys: str
    subscriptions: str
    outbox: str
    version_constraint: str
    request_constraint: str
    append_lock: tuple[int, int]
    """The two ``int4`` keys of the shared advisory lock every append takes (see
    :func:`append_lock_key`)."""
    append_lock_trigger: str
    late_append_trigger: str

    @classmethod
    def of(cls, settings: PostgresSettings) -> Names:
        schema = quote(settings.schema_name)
        return cls(
            schema=schema,
            events=f"{schema}.{quote(settings.events_table)}",
            snapshots=f"{schema}.{quote(settings.snapshots_table)}",
            migrations=f"{schema}.wow_migration",
            queue=f"{schema}.{quote(settings.queue_table)}",
            keys=f"{schema}.{quote((settings.queue_table + '_key')[:63])}",
            subscriptions=f"{schema}.{quote((settings.queue_table + '_subscription')[:63])}",
            outbox=f"{schema}.{quote(settings.outbox_table)}",
            version_constraint=f"{settings.events_table}_version_key"[:63],
            request_constraint=f"{settings.events_table}_request_key"[:63],
            append_lock=append_lock_key(settings.schema_name, settings.events_table),
            append_lock_trigger=f"{settings.events_table}_append_lock"[:63],
            late_append_trigger=f"{settings.events_table}_late_append"[:63],
        )


APPEND_LOCK_CLASS = 0x776F7745
"""The first key of every events table's append lock (``"wowE"``): a namespace of its own."""


def append_lock_key(schema_name: str, events_table: str) -> tuple[int, int]:
    """The keys of ``pg_advisory_xact_lock_shared(int4, int4)`` that every transaction
    appending to ``schema_name.events_table`` holds (taken by the table's insert trigger,
    migration 5) and that :meth:`~wow_postgres.PostgresEventStore.read_all` looks for in
    ``pg_locks``: a fixed first key, and a CRC-32 of the qualified table name, as signed
    ``int4``. ``pg_locks`` shows them as ``classid`` and ``objid`` (``oid``, unsigned),
    ``objsubid = 2``. Never change it: migration 5 wrote it into the trigger."""
    table = zlib.crc32(f"{schema_name}.{events_table}".encode())
    return APPEND_LOCK_CLASS, table - (1 << 32) if table >= 1 << 31 else table


def _migrations(names: Names, settings: PostgresSettings) -> list[tuple[int, str, str]]:
    """(number, description, SQL) of every migration, in order. Never edit a released one:
    add the next number."""
    events_table = settings.events_table
    return [
        (
            1,
            "event streams and snapshots",
            f"""
            CREATE TABLE {names.events} (
                global_position bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id(),
                context_name text NOT NULL,
                aggregate_name text NOT NULL,
                tenant_id text NOT NULL,
                aggregate_id text NOT NULL,
                version integer NOT NULL CHECK (version >= 1),
                stream_id text NOT NULL,
                request_id text NOT NULL,
                command_id text NOT NULL,
                create_time bigint NOT NULL,
                payload jsonb NOT NULL,
                CONSTRAINT {quote(names.version_constraint)}
                    UNIQUE (context_name, aggregate_name, tenant_id, aggregate_id, version),
                CONSTRAINT {quote(names.request_constraint)}
                    UNIQUE (context_name, aggregate_name, request_id)
            );
            CREATE INDEX {quote((events_table + "_time_idx")[:63])} ON {names.events}
                (context_name, aggregate_name, tenant_id, aggregate_id, create_time);
            CREATE INDEX {quote((events_table + "_tx_idx")[:63])} ON {names.events}
                (transaction_id, global_position);
            CREATE TABLE {names.snapshots} (
                context_name text NOT NULL,
                aggregate_name text NOT NULL,
                tenant_id text NOT NULL,
                aggregate_id text NOT NULL,
                version integer NOT NULL CHECK (version >= 1),
                state_type text NOT NULL,
                state jsonb NOT NULL,
                deleted boolean NOT NULL,
                snapshot_time bigint NOT NULL,
                PRIMARY KEY (context_name, aggregate_name, tenant_id, aggregate_id)
            );
            """,
        ),
        (
            2,
            "transport queue, key owners and subscriptions",
            f"""
            CREATE TABLE {names.subscriptions} (
                topic text NOT NULL,
                group_name text NOT NULL,
                created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                PRIMARY KEY (topic, group_name)
            );
            CREATE TABLE {names.queue} (
                id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                group_name text NOT NULL,
                topic text NOT NULL,
                key text NOT NULL,
                payload text NOT NULL,
                timestamp bigint NOT NULL,
                delivery_count integer NOT NULL DEFAULT 0,
                owner text,
                lease_until timestamptz
            );
            CREATE INDEX {quote((settings.queue_table + "_pending_idx")[:63])} ON {names.queue}
                (group_name, topic, key, id);
            CREATE INDEX {quote((settings.queue_table + "_owner_idx")[:63])} ON {names.queue}
                (group_name, owner) WHERE owner IS NOT NULL;
            CREATE TABLE {names.keys} (
                group_name text NOT NULL,
                topic text NOT NULL,
                key text NOT NULL,
                owner text,
                lease_until timestamptz,
                PRIMARY KEY (group_name, topic, key)
            );
            CREATE INDEX {quote((settings.queue_table + "_key_owner_idx")[:63])} ON {names.keys}
                (group_name, owner) WHERE owner IS NOT NULL;
            """,
        ),
        (
            3,
            "transactional outbox",
            f"""
            CREATE TABLE {names.outbox} (
                id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                context_name text NOT NULL,
                aggregate_name text NOT NULL,
                tenant_id text NOT NULL,
                aggregate_id text NOT NULL,
                version integer NOT NULL,
                topic text NOT NULL,
                key text NOT NULL,
                payload text NOT NULL,
                timestamp bigint NOT NULL,
                created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                sent_at timestamptz
            );
            CREATE INDEX {quote((settings.outbox_table + "_unsent_idx")[:63])} ON {names.outbox} (id)
                WHERE sent_at IS NULL;
            CREATE INDEX {quote((settings.outbox_table + "_sent_idx")[:63])} ON {names.outbox} (sent_at)
                WHERE sent_at IS NOT NULL;
            """,
        ),
        (
            4,
            "transport dead letters: the last error and the deliveries of a poison record",
            f"""
            ALTER TABLE {names.queue} ADD COLUMN last_error text, ADD COLUMN failed_deliveries integer;
            """,
        ),
        (
            5,
            "events: every append holds a shared advisory lock, taken before its xid",
            _append_lock_sql(names, settings),
        ),
    ]


LATE_APPEND_SETTING = "wow.late_append"
"""Set (``on``, for the transaction) by the insert trigger when the inserting transaction
already had an xid before it took the append lock."""


def _append_lock_sql(names: Names, settings: PostgresSettings) -> str:
    """Migration 5: the protocol :meth:`~wow_postgres.PostgresEventStore.read_all` relies
    on, enforced by the table itself for every writer (this package, an older release of
    it still running, plain SQL).

    - a statement trigger, before any row of an ``INSERT`` (or ``COPY``) into the events
      table is produced, takes the shared advisory transaction lock
      (:func:`append_lock_key`); a transaction that has no xid yet gets it after the lock,
      and its rows carry it (the column's default);
    - a transaction that already had an xid (it wrote elsewhere first) is marked *late*
      (:data:`LATE_APPEND_SETTING`); each row it inserts is then given, by a row trigger,
      the xid of a subtransaction started after the lock: a key above every position a
      reader may have passed before the lock was taken (as the table's owner: a role
      that may only insert needs no ``UPDATE``).

    A reader relies on the protocol only while both triggers are enabled (see
    :meth:`~wow_postgres.PostgresEventStore.read_all`).
    """
    table = settings.events_table
    key_class, key_table = names.append_lock
    lock_function = f"{names.schema}.{quote((table + '_append_lock')[:63])}"
    late_function = f"{names.schema}.{quote((table + '_late_append')[:63])}"
    widen_function = f"{names.schema}.{quote((table + '_widen_xid')[:63])}"
    return f"""
        CREATE FUNCTION {widen_function}(top xid8, sub xid) RETURNS xid8
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
            RETURN ((top::text::numeric
                     + ((sub::text::bigint - top::text::numeric % 4294967296 + 4294967296) % 4294967296))
                    )::text::xid8;
        COMMENT ON FUNCTION {widen_function}(xid8, xid) IS
            'The xid8 of sub, an xid assigned at or after top (less than 2^31 after it).';
        CREATE FUNCTION {lock_function}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_advisory_xact_lock_shared({key_class}, {key_table});
            IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
                PERFORM set_config('{LATE_APPEND_SETTING}', 'on', true);
            END IF;
            RETURN NULL;
        END $$;
        CREATE FUNCTION {late_function}() RETURNS trigger LANGUAGE plpgsql
            SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
        DECLARE
            fresh xid;
        BEGIN
            BEGIN  -- an exception block is a subtransaction: its xid is assigned here, now
                UPDATE {names.events} SET transaction_id = transaction_id
                    WHERE global_position = NEW.global_position RETURNING xmin INTO fresh;
            EXCEPTION WHEN OTHERS THEN
                RAISE;
            END;
            UPDATE {names.events} SET transaction_id = {widen_function}(pg_current_xact_id(), fresh)
                WHERE global_position = NEW.global_position;
            RETURN NULL;
        END $$;
        CREATE TRIGGER {quote(names.append_lock_trigger)}
            BEFORE INSERT ON {names.events} FOR EACH STATEMENT EXECUTE FUNCTION {lock_function}();
        CREATE TRIGGER {quote(names.late_append_trigger)}
            AFTER INSERT ON {names.events} FOR EACH ROW
            WHEN (current_setting('{LATE_APPEND_SETTING}', true) = 'on')
            EXECUTE FUNCTION {late_function}();
        """


def latest_version(settings: PostgresSettings) -> int:
    """The number of the newest migration this code knows."""
    return _migrations(Names.of(settings), settings)[-1][0]


async def applied(connection: Connection, settings: PostgresSettings) -> list[int]:
    """The migration numbers recorded in the schema (none when it has no record table)."""
    exists = await connection.fetchval(
        "SELECT to_regclass($1) IS NOT NULL", f"{quote(settings.schema_name)}.wow_migration"
    )
    if not exists:
        return []
    rows = await connection.fetch(f"SELECT version FROM {Names.of(settings).migrations} ORDER BY version")
    return [int(row["version"]) for row in rows]


async def migrate(connection: Connection, settings: PostgresSettings) -> list[int]:
    """Apply the migrations not applied yet; return the numbers applied now (empty: none
    was missing). Safe to run from several processes at once."""
    names = Names.of(settings)
    done: list[int] = []
    async with connection.transaction():
        # One lock per schema: concurrent migrators queue here, the later ones find it done.
        await connection.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"wow:{settings.schema_name}")
        await connection.execute(f"CREATE SCHEMA IF NOT EXISTS {names.schema}")
        await connection.execute(
            f"""CREATE TABLE IF NOT EXISTS {names.migrations} (
                version integer PRIMARY KEY,
                description text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )"""
        )
        rows = await connection.fetch(f"SELECT version FROM {names.migrations}")
        have = {int(row["version"]) for row in rows}
        known = _migrations(names, settings)
        unknown = sorted(have - {number for number, _, _ in known})
        if unknown:
            raise MigrationError(
                f"schema {settings.schema_name!r} holds migration(s) {unknown} that this version of "
                f"wow-postgres does not know (it knows 1..{known[-1][0]}): upgrade wow-postgres"
            )
        for number, description, sql in known:
            if number in have:
                continue
            await connection.execute(sql)
            await connection.execute(
                f"INSERT INTO {names.migrations} (version, description) VALUES ($1, $2)", number, description
            )
            done.append(number)
    return done
