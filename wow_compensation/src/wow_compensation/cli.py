"""``wow compensation``: list, show and act on the records from the command line.

::

    wow compensation list [--status FAILED] [--queue to_retry] [--aggregate bank.account] [--json]
    wow compensation show ID [--json]
    wow compensation prepare ID
    wow compensation force-prepare ID
    wow compensation apply-retry-spec ID [--max-retries N] [--min-backoff S] [--execution-timeout S]
                                         [--disable|--enable]
    wow compensation mark-recoverable ID RECOVERABLE|UNKNOWN|UNRECOVERABLE
    wow compensation change-function ID --context C --processor P --function F [--kind EVENT|STATE_EVENT]

It reads the shared read model (``WOW_COMPENSATION__STORE``: redis) and writes through
the records' aggregate on the configured event store and transport, as the services do:
an action is decided by the aggregate's rules, and a refusal (unknown id, a state the
action does not fit) is printed with its code and exits 1, nothing changed. Bad
arguments exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, TextIO

from wow_compensation.model import (
    ExecutionFailed,
    ExecutionFailedState,
    ExecutionFailedStatus,
    FunctionInfo,
    FunctionKindName,
    Recoverable,
    RetrySpec,
)
from wow_compensation.service import ActionRefused, CompensationCommands, Written
from wow_compensation.settings import SECTION, CompensationSettings, StoreKind
from wow_compensation.store import CompensationStore, ExecutionRecord, Queue, RecordQuery, now_ms, query
from wow_core.plugins.commands import Command
from wow_core.settings import SettingsError

if TYPE_CHECKING:
    from wow_core.runtime.cli import Invocation


def record_json(record: ExecutionRecord, now: int) -> dict[str, Any]:
    """A record as JSON-ready data (the command line's and the page's)."""
    data = asdict(record.state)
    data["version"] = record.version
    data["updated_at"] = record.updated_at
    data["queue"] = record.queue(now).value
    return data


def _state_json(state: ExecutionFailedState | None) -> dict[str, Any] | None:
    return None if state is None else asdict(state)


def _row(record: ExecutionRecord, now: int) -> list[str]:
    state = record.state
    event, function, error = state.event, state.function, state.error
    return [
        state.id,
        state.status.value,
        record.queue(now).value,
        state.recoverable.value,
        f"{state.retry_state.retries}/{state.retry_spec.max_retries}",
        function.qualified_name if function else "",
        f"{event.aggregate}:{event.aggregate_id}@{event.version}" if event else "",
        f"{error.error_type}: {error.message}"[:60] if error else "",
    ]


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() + "\n"
        )


def _store(invocation: Invocation) -> CompensationStore:
    from wow_compensation.plugin import create_store

    settings = invocation.settings()
    section = settings.section(SECTION, CompensationSettings)
    store = create_store(settings)
    if section.store is StoreKind.IN_MEMORY or type(store).__name__ == "InMemoryCompensationStore":
        raise SettingsError(
            "invalid settings:\n  WOW_COMPENSATION__STORE: the in-memory store lives inside the service's "
            "process; the command line reads a shared store (redis)"
        )
    assert isinstance(store, CompensationStore)
    return store


async def _with_store(invocation: Invocation, work: Callable[[CompensationStore], Awaitable[int]]) -> int:
    store = _store(invocation)
    try:
        return await work(store)
    finally:
        await store.close()


async def _with_commands(
    invocation: Invocation, work: Callable[[CompensationCommands], Awaitable[Written]]
) -> int:
    """Decide one command with a kernel of this process over the configured stores and
    transport (the events go out like a service's), print the result."""
    settings = invocation.settings()
    # The command line hosts no dispatcher: its events go straight to the transport.
    bus = settings.event.bus
    state = settings.eventsourcing.state
    settings = settings.model_copy(
        update={
            "event": settings.event.model_copy(
                update={
                    "bus": bus.model_copy(
                        update={"local_first": bus.local_first.model_copy(update={"enabled": False})}
                    )
                }
            ),
            "eventsourcing": settings.eventsourcing.model_copy(
                update={
                    "state": state.model_copy(
                        update={
                            "bus": state.bus.model_copy(
                                update={
                                    "local_first": state.bus.local_first.model_copy(update={"enabled": False})
                                }
                            )
                        }
                    )
                }
            ),
        }
    )
    from wow_core.runtime.container import create_container

    container = create_container(settings, plugins=invocation.plugins)
    registry = container.aggregate_registry()
    registry.register(ExecutionFailed)
    registry.register_body_types(container.body_types())
    transport = container.transport()
    event_store = container.event_store()
    store = _store(invocation)
    kernel = container.kernel()
    out = invocation.out
    try:
        start = getattr(event_store, "start", None)
        if start is not None:
            await start()
        await transport.start()
        try:
            written = await work(CompensationCommands(kernel, registry, store))
        except ActionRefused as refused:
            out.write(f"refused: {refused.code}: {refused.message}\n")
            return 1
        if invocation.args.json:
            out.write(
                json.dumps({"version": written.version, "state": _state_json(written.state)}, indent=2) + "\n"
            )
        elif written.state is not None:
            out.write(f"{written.state.id}: {written.state.status.value} (version {written.version})\n")
        return 0
    finally:
        for bus_name in ("command_bus", "domain_event_bus", "state_event_bus"):
            await getattr(container, bus_name)().close()
        await transport.close()
        await event_store.close()
        await container.snapshot_repository().close()
        await store.close()


def _list(invocation: Invocation) -> int:
    args = invocation.args

    async def work(store: CompensationStore) -> int:
        now = now_ms()
        page = await query(
            store,
            RecordQuery(
                event_id=args.event_id,
                status=ExecutionFailedStatus(args.status) if args.status else None,
                recoverable=Recoverable(args.recoverable) if args.recoverable else None,
                queue=Queue(args.queue) if args.queue else None,
                aggregate=args.aggregate,
                aggregate_id=args.aggregate_id,
                processor=args.processor,
                function=args.function,
                offset=args.offset,
                limit=args.limit,
            ),
            now,
        )
        out = invocation.out
        if args.json:
            out.write(
                json.dumps(
                    {
                        "total": page.total,
                        "counts": {queue.value: count for queue, count in page.counts.items()},
                        "items": [record_json(record, now) for record in page.items],
                    },
                    indent=2,
                )
                + "\n"
            )
            return 0
        rows = [["ID", "STATUS", "QUEUE", "RECOVERABLE", "RETRIES", "FUNCTION", "EVENT", "ERROR"]]
        rows += [_row(record, now) for record in page.items]
        _table(rows, out)
        counts = ", ".join(f"{queue.value} {count}" for queue, count in page.counts.items())
        out.write(f"{len(page.items)} of {page.total} shown; {counts}\n")
        return 0

    return asyncio.run(_with_store(invocation, work))


def _show(invocation: Invocation) -> int:
    args = invocation.args

    async def work(store: CompensationStore) -> int:
        record = await store.get(args.id)
        out = invocation.out
        if record is None:
            out.write(f"refused: no execution failure has the id {args.id}\n")
            return 1
        data = record_json(record, now_ms())
        if args.json:
            out.write(json.dumps(data, indent=2) + "\n")
            return 0
        stack = (data.get("error") or {}).pop("stack_trace", "")
        for key, value in data.items():
            out.write(f"{key}: {json.dumps(value) if isinstance(value, dict) else value}\n")
        if stack:
            out.write("stack trace:\n" + stack + ("" if stack.endswith("\n") else "\n"))
        return 0

    return asyncio.run(_with_store(invocation, work))


def _action(
    do: Callable[[CompensationCommands, argparse.Namespace], Awaitable[Written]],
) -> Callable[[Invocation], int]:
    def run(invocation: Invocation) -> int:
        async def work(commands: CompensationCommands) -> Written:
            return await do(commands, invocation.args)

        return asyncio.run(_with_commands(invocation, work))

    return run


async def _apply_retry_spec(commands: CompensationCommands, args: argparse.Namespace) -> Written:
    # The current spec, read from the record's own history, with the given fields changed.
    current = await _current(commands, args.id)
    changes: dict[str, Any] = {}
    for field_name in ("max_retries", "min_backoff", "execution_timeout"):
        value = getattr(args, field_name)
        if value is not None:
            changes[field_name] = value
    if args.enabled is not None:
        changes["enabled"] = args.enabled
    try:
        spec = replace(current.retry_spec, **changes)
    except ValueError as error:
        raise ActionRefused(args.id, "COMMAND_INVALID", str(error)) from None
    return await commands.apply_retry_spec(args.id, spec)


async def _current(commands: CompensationCommands, record_id: str) -> ExecutionFailedState:
    from wow_compensation.service import UnknownExecutionError, aggregate_id
    from wow_core.command.stages import ErrorCodes

    metadata = commands.aggregates.get(aggregate_id(record_id).named_aggregate)
    kernel: Any = commands.kernel
    inner = getattr(kernel, "load_state", None)
    if metadata is None or inner is None:
        raise RuntimeError("the kernel of this process cannot load a record")
    version, state = await inner(metadata, aggregate_id(record_id))
    if version == 0:
        raise UnknownExecutionError(
            record_id, ErrorCodes.AGGREGATE_NOT_FOUND, f"no execution failure has the id {record_id}"
        )
    assert isinstance(state, ExecutionFailedState)
    return state


def _configure_list(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--status", choices=[s.value for s in ExecutionFailedStatus])
    parser.add_argument("--recoverable", choices=[r.value for r in Recoverable])
    parser.add_argument("--queue", choices=[q.value for q in Queue])
    parser.add_argument("--event-id", dest="event_id")
    parser.add_argument("--aggregate", help="context.aggregate of the failed event")
    parser.add_argument("--aggregate-id", dest="aggregate_id")
    parser.add_argument("--processor")
    parser.add_argument("--function", help="context.processor.function or the function name")
    parser.add_argument("--limit", type=_bounded_int(1, 1000), default=50)
    parser.add_argument("--offset", type=_bounded_int(0, 1 << 31), default=0)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _bounded_int(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in {low}..{high}, got {value}")
        return value

    return parse


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 86_400 * 365:
        raise argparse.ArgumentTypeError(f"must be in 0..{86_400 * 365} seconds, got {value}")
    return value


def _configure_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the execution failure id")
    parser.add_argument("--json", action="store_true", help="print JSON")


def _configure(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="compensation_command", required=True, metavar="COMMAND")
    _configure_list(commands.add_parser("list", help="list the records (filters are exact)"))
    _configure_id(commands.add_parser("show", help="one record: error, stack, event, function, retry"))
    _configure_id(commands.add_parser("prepare", help="start a compensation within the rules"))
    _configure_id(commands.add_parser("force-prepare", help="start a compensation past the cap"))
    spec = commands.add_parser("apply-retry-spec", help="change a record's retry spec (unset fields kept)")
    _configure_id(spec)
    spec.add_argument("--max-retries", dest="max_retries", type=_bounded_int(0, 1000))
    spec.add_argument("--min-backoff", dest="min_backoff", type=_non_negative)
    spec.add_argument("--execution-timeout", dest="execution_timeout", type=_non_negative)
    enabled = spec.add_mutually_exclusive_group()
    enabled.add_argument("--enable", dest="enabled", action="store_const", const=True, default=None)
    enabled.add_argument("--disable", dest="enabled", action="store_const", const=False)
    mark = commands.add_parser("mark-recoverable", help="set a record's recoverability")
    _configure_id(mark)
    mark.add_argument("recoverable", choices=[r.value for r in Recoverable])
    change = commands.add_parser("change-function", help="point a record at another function")
    _configure_id(change)
    change.add_argument("--context", required=True)
    change.add_argument("--processor", required=True)
    change.add_argument("--function", required=True)
    change.add_argument(
        "--kind", choices=[k.value for k in FunctionKindName], default=FunctionKindName.EVENT.value
    )


_ACTIONS: dict[str, Callable[[Invocation], int]] = {
    "list": _list,
    "show": _show,
    "prepare": _action(lambda commands, args: commands.prepare(args.id)),
    "force-prepare": _action(lambda commands, args: commands.force_prepare(args.id)),
    "apply-retry-spec": _action(_apply_retry_spec),
    "mark-recoverable": _action(
        lambda commands, args: commands.mark_recoverable(args.id, Recoverable(args.recoverable))
    ),
    "change-function": _action(
        lambda commands, args: commands.change_function(
            args.id, FunctionInfo(args.context, args.processor, args.function, FunctionKindName(args.kind))
        )
    ),
}


def _run(invocation: Invocation) -> int:
    return _ACTIONS[invocation.args.compensation_command](invocation)


COMMAND = Command(
    help="list, show and act on the event compensation records",
    description="The ExecutionFailed records of durable event compensation: list them (table or --json), "
    "show one, prepare or force-prepare a compensation, change a retry spec, the recoverability or the "
    "target function. Reads WOW_COMPENSATION__STORE (redis); writes through the records' aggregate.",
    run=_run,
    configure=_configure,
)

__all__ = ["COMMAND", "RetrySpec", "record_json"]
