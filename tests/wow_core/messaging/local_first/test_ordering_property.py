"""Per-aggregate send order on the distributed bus, for every interleaving.

Hypothesis draws sequences of sends (handed off, refused, local error; copies that fail
on the distributed bus; distributed sends that take a while), admissions, rejections,
admission errors, route closes and re-opens, cancelled senders and scheduler turns, over
several aggregates of two aggregate types. Whatever the interleaving:

- each aggregate's copies reach the distributed bus in send order, one at a time;
- every copy is sent exactly once, marked ``local_first=true`` exactly when every routed
  receiver admitted it;
- a handed-off send completes at once; a refused one completes only once its copy was
  sent (or fails with it); cancelling a sender changes nothing on the distributed bus.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.wow_core.messaging.local_first.local_first_doubles import (
    CARTS,
    ORDERS,
    ControlledLocalBus,
    RecordingDistributedBus,
    command,
)
from wow_core.messaging.local_first import LocalFirstCommandBus
from wow_core.model import AggregateId, CommandMessage

NAMED = [ORDERS, CARTS]
AGGREGATES = [(ORDERS, "o1"), (ORDERS, "o2"), (CARTS, "c1"), (CARTS, "c2")]


@dataclass(frozen=True)
class Send:
    aggregate: int
    mode: str
    copy_fails: bool
    slow: int


@dataclass(frozen=True)
class Decide:
    how: str  # admit | reject | fail
    pick: int


@dataclass(frozen=True)
class Route:
    named: int
    open: bool


@dataclass(frozen=True)
class Cancel:
    pick: int


@dataclass(frozen=True)
class Turn:
    count: int


operations = st.one_of(
    st.builds(
        Send,
        st.integers(0, len(AGGREGATES) - 1),
        st.sampled_from(["accept", "accept", "accept", "refuse", "raise"]),
        st.sampled_from([False, False, False, True]),
        st.integers(0, 3),
    ),
    st.builds(Decide, st.sampled_from(["admit", "admit", "reject", "fail"]), st.integers(0, 50)),
    st.builds(Route, st.integers(0, len(NAMED) - 1), st.booleans()),
    st.builds(Cancel, st.integers(0, 50)),
    st.builds(Turn, st.integers(1, 4)),
)


@dataclass
class Sent:
    message: CommandMessage[Any]
    handed_off: bool
    copy_fails: bool
    cancelled: bool = False
    copy_done_at_completion: bool | None = None
    task: asyncio.Task[None] = field(init=False)


async def run(ops: list[Any]) -> None:
    local = ControlledLocalBus()
    distributed = RecordingDistributedBus()
    bus = LocalFirstCommandBus(local, distributed)  # type: ignore[arg-type]
    sent: list[Sent] = []
    for n, op in enumerate(ops):
        if isinstance(op, Send):
            named, aggregate = AGGREGATES[op.aggregate]
            route = local.route(named)
            route.mode = op.mode
            message = command(aggregate, named=named, n=n)
            if op.copy_fails:
                distributed.failing.add(message.id)
            distributed.yields[message.id] = op.slow
            before = len(local.deliveries)
            record = Sent(message, False, op.copy_fails)

            async def send(record: Sent = record) -> None:
                # whether the copy was done is read as the send completes, in its own step:
                # a done callback runs later (and, on Python 3.12+, possibly after the
                # checks below, when nothing in between yields to the loop)
                try:
                    await bus.send(record.message)
                finally:
                    record.copy_done_at_completion = any(
                        a.message.id == record.message.id for a in distributed.arrivals
                    ) and (record.message.id in distributed.completed or record.copy_fails)

            task = record.task = asyncio.ensure_future(send())
            await asyncio.sleep(0)  # the send runs up to its first wait
            record.handed_off = len(local.deliveries) > before
            if record.handed_off:
                assert task.done(), "a handed-off send completes at once"
                assert task.exception() is None
            sent.append(record)
        elif isinstance(op, Decide):
            pending = local.pending()
            if pending:
                delivery = pending[op.pick % len(pending)]
                {"admit": local.admit, "reject": local.reject, "fail": local.fail}[op.how](delivery)
        elif isinstance(op, Route):
            if op.open:
                local.route(NAMED[op.named]).open = True
            else:
                local.close_route(NAMED[op.named])
        elif isinstance(op, Cancel):
            waiting = [s for s in sent if not s.task.done()]
            if waiting:
                victim = waiting[op.pick % len(waiting)]
                victim.cancelled = True
                victim.task.cancel()
        else:
            for _ in range(op.count):
                await asyncio.sleep(0)

    await local.close()  # rejects every admission still pending
    await asyncio.wait_for(asyncio.gather(*(s.task for s in sent), return_exceptions=True), 10)
    await asyncio.wait_for(bus.copies.join(), 10)

    # Order: per aggregate, the distributed bus saw the copies in send order, one at a time.
    by_aggregate: dict[AggregateId, list[str]] = {}
    for record in sent:
        by_aggregate.setdefault(record.message.aggregate_id, []).append(record.message.id)
    for aggregate, ids in by_aggregate.items():
        assert distributed.ids(aggregate) == ids, f"order broken for {aggregate}"
    assert distributed.overlaps == 0

    # Exactly once, with the admission result as the mark.
    decided = {d.message.id: d.decided for d in local.deliveries}
    marks = distributed.marks()
    assert len(distributed.arrivals) == len(sent)
    for record in sent:
        expected = "true" if decided.get(record.message.id) is True else "false"
        assert marks[record.message.id] == expected, record

    # When each send completed, and with what.
    for record in sent:
        task = record.task
        if record.handed_off:
            assert task.exception() is None
        elif task.cancelled():
            assert record.cancelled
        else:
            assert record.copy_done_at_completion, "a refused send completes only after its copy"
            error = task.exception()
            assert (error is not None) == record.copy_fails, (record, error)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operations, min_size=1, max_size=40))
def test_per_aggregate_order_holds_for_every_interleaving(ops: list[Any]) -> None:
    asyncio.run(run(ops))
