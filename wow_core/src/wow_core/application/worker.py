"""``CommandWorker``: executes the commands queued on one named transport.

For each record of its topic, in this order:

1. the envelope is decoded and the command class it names is looked up among the
   classes the worker knows (the bus's handler classes and any given
   ``command_types``): nothing is imported because a queued record names it;
2. the serializer restores that requested class, and the worker checks that the
   returned object is exactly of that class;
3. the marker (read through the :class:`~wow_core.application.marker.CommandMetadataProvider`)
   must name this worker's transport: a command without the marker, or marked for
   another transport, is rejected, whatever handlers exist;
4. the context is restored, and any attribute whose name starts with ``__`` is
   rejected, whichever context serializer is configured;
5. the attributes are merged, later winning: transported context < the worker's
   trusted ``attributes`` < ``__original_operation_id`` (the producer's operation id)
   and ``__execution_mode`` (``sync``);
6. the command is dispatched on the bus in ``ExecutionMode.SYNC`` (the transport
   middleware passes it through) with a new operation of its own.

The record is acknowledged only after the dispatch returned. Any error in steps 2 to 6
prevents the acknowledgement and follows the :class:`RejectionPolicy`. A record that is
not a command envelope (step 1: not JSON, not an envelope of this version) can never
succeed: it is not retried but takes the decode-failure path, as an undecodable record
of the aggregate bus does (the worker's
:class:`~wow_core.transport.TransportDecodeFailureHandler`, by default the transport's
own policy: ``<topic>.dlq`` and acknowledged, or left pending on Redis). Delivery is at
least once: a worker that dies holding records leaves them to be delivered again, so a
handler makes its effect idempotent by ``__original_operation_id``.

:meth:`CommandWorker.run` reads with ``concurrency`` commands in flight at most, until
its ``stop`` event is set; it then takes no new record, waits for those in flight (up
to ``shutdown_timeout``), and closes its receiver (what was not acknowledged is
delivered again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from wow_core.application.context import OperationContextSerializer
from wow_core.application.envelope import CommandEnvelope, class_name
from wow_core.application.errors import CommandRejected, EnvelopeError
from wow_core.application.marker import CommandMetadataProvider, ReflectionCommandMetadataProvider
from wow_core.application.operation import RESERVED_PREFIX, ExecutionMode, Operation
from wow_core.application.serializer import CommandSerializer
from wow_core.application.settings import RejectionAction, WorkerSettings
from wow_core.model import DecodeError
from wow_core.transport.decode_failure import (
    DecodeFailure,
    DecodeFailureAction,
    DefaultDecodeFailureHandler,
    TransportDecodeFailureHandler,
    decide_decode_failure,
)
from wow_core.transport.spi import Transport, TransportMessage, TransportRecord

if TYPE_CHECKING:
    from wow_core.application.bus import ApplicationCommandBus

__all__ = ["CommandWorker", "Outcome", "RejectionAction", "RejectionPolicy"]

log = logging.getLogger("wow.application.worker")

DEAD_LETTER_SUFFIX = ".dlq"


@dataclass(frozen=True, slots=True)
class RejectionPolicy:
    """What a delivery that failed becomes (see :class:`RejectionAction`)."""

    action: RejectionAction = RejectionAction.RETRY
    attempts: int = 5
    backoff: float = 0.2
    max_backoff: float = 10.0

    def __post_init__(self) -> None:
        RejectionAction(self.action)
        if type(self.attempts) is not int or self.attempts < 1:
            raise ValueError(f"attempts is a positive integer, not {self.attempts!r}")
        if not 0 <= self.backoff <= self.max_backoff:
            raise ValueError("0 <= backoff <= max_backoff")

    @classmethod
    def from_settings(cls, settings: WorkerSettings) -> RejectionPolicy:
        return cls(
            settings.rejection, settings.retry_attempts, settings.retry_backoff, settings.retry_backoff_max
        )

    def delay(self, attempt: int) -> float:
        """The pause after failed attempt ``attempt`` (1-based): doubling, capped."""
        return float(min(self.max_backoff, self.backoff * 2 ** (attempt - 1)))


class Outcome(StrEnum):
    """What became of one record."""

    HANDLED = "handled"
    DEAD_LETTERED = "dead_lettered"
    DROPPED = "dropped"
    LEFT_PENDING = "left_pending"


class CommandWorker:
    """See the module docstring."""

    ATTR_ORIGINAL_OPERATION_ID = "__original_operation_id"
    ATTR_EXECUTION_MODE = "__execution_mode"

    def __init__(
        self,
        *,
        bus: ApplicationCommandBus,
        serializer: CommandSerializer,
        context_serializer: OperationContextSerializer,
        transport: Transport,
        transport_name: str,
        topic: str,
        group: str,
        metadata: CommandMetadataProvider | None = None,
        command_types: Iterable[type[Any]] = (),
        attributes: Mapping[str, Any] | None = None,
        policy: RejectionPolicy | None = None,
        concurrency: int = 1,
        shutdown_timeout: float = 30.0,
        decode_failure_handler: TransportDecodeFailureHandler | None = None,
    ) -> None:
        if type(concurrency) is not int or concurrency < 1:
            raise ValueError(f"concurrency is a positive integer, not {concurrency!r}")
        self.bus = bus
        self.serializer = serializer
        self.context_serializer = context_serializer
        self.transport = transport
        self.transport_name = transport_name
        self.topic = topic
        self.group = group
        self.metadata = metadata or ReflectionCommandMetadataProvider()
        self.attributes: dict[str, Any] = dict(attributes or {})
        self.policy = policy or RejectionPolicy()
        self.concurrency = concurrency
        self.shutdown_timeout = shutdown_timeout
        self.decode_failure_handler: TransportDecodeFailureHandler = (
            decode_failure_handler if decode_failure_handler is not None else DefaultDecodeFailureHandler()
        )
        self.command_types: dict[str, type[Any]] = {}
        for command_type in (*bus.command_types, *command_types):
            self.command_types[class_name(command_type)] = command_type

    # -- one record --------------------------------------------------------------------

    async def process(self, payload: str) -> Operation:
        """Decode, restore, check and dispatch one envelope; raises on any failure (an
        :class:`~wow_core.application.errors.EnvelopeError` for a record that is not an
        envelope); nothing is acknowledged here."""
        return await self.execute(CommandEnvelope.decode(payload))

    async def execute(self, envelope: CommandEnvelope) -> Operation:
        """Restore, check and dispatch a decoded envelope (steps 2 to 6); raises on any failure."""
        command_class = self.command_types.get(envelope.command_class)
        if command_class is None:
            raise CommandRejected(f"this worker knows no command class {envelope.command_class!r}")
        command = self.serializer.deserialize(envelope.payload, command_class)
        if type(command) is not command_class:
            raise CommandRejected(
                f"the serializer returned a {type(command).__qualname__} for {envelope.command_class}"
            )
        marked = self.metadata.metadata_of(command_class).transport
        if marked != self.transport_name:
            where = "no asynchronous marker" if marked is None else f"the marker names transport {marked!r}"
            raise CommandRejected(
                f"{envelope.command_class} is not for transport {self.transport_name!r}: {where}"
            )
        context = self.context_serializer.deserialize(envelope.context)
        if not isinstance(context, dict):
            raise CommandRejected("the context serializer did not return a dict")
        reserved = sorted(
            name for name in context if not isinstance(name, str) or name.startswith(RESERVED_PREFIX)
        )
        if reserved:
            raise CommandRejected(f"the queued context carries reserved attributes {reserved!r}")
        attributes = {
            **context,
            **self.attributes,
            self.ATTR_ORIGINAL_OPERATION_ID: envelope.operation_id,
            self.ATTR_EXECUTION_MODE: ExecutionMode.SYNC.value,
        }
        return await self.bus.dispatch(command, attributes=attributes, execution_mode=ExecutionMode.SYNC)

    async def handle(self, record: TransportRecord) -> Outcome:
        """Process ``record`` under the rejection policy, and acknowledge it when done.

        A record that is not an envelope is not retried: see :meth:`undecodable`."""
        try:
            envelope = CommandEnvelope.decode(record.payload)
        except EnvelopeError as error:
            return await self.undecodable(record, error)
        attempt = 0
        while True:
            attempt += 1
            try:
                await self.execute(envelope)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                failure: Exception = error
            else:
                await record.ack()
                return Outcome.HANDLED
            if self.policy.action is RejectionAction.RETRY and attempt < self.policy.attempts:
                delay = self.policy.delay(attempt)
                log.warning(
                    "%s failed (attempt %d of %d), again in %.2fs: %s",
                    _where(record),
                    attempt,
                    self.policy.attempts,
                    delay,
                    _describe(failure),
                )
                await asyncio.sleep(delay)
                continue
            return await self._reject(record, failure)

    async def undecodable(self, record: TransportRecord, error: EnvelopeError) -> Outcome:
        """The decode-failure path of a record that is not a command envelope, as on the
        aggregate bus: the :attr:`decode_failure_handler` decides (by default the
        transport's policy), the transport hears of it if it is a
        :class:`~wow_core.transport.DecodeFailureObserver`, and the record is acknowledged
        only when the handler kept it elsewhere (a dead letter)."""
        failure = DecodeFailure(self.group, record, DecodeError(error.kind, str(error)))
        action = await decide_decode_failure(self.decode_failure_handler, failure, self.transport)
        if action is DecodeFailureAction.LEAVE_PENDING:
            log.error("%s is not a command envelope, left unacknowledged: %s", _where(record), error)
            return Outcome.LEFT_PENDING
        await record.ack()
        log.error("%s is not a command envelope, dead-lettered: %s", _where(record), error)
        return Outcome.DEAD_LETTERED

    async def _reject(self, record: TransportRecord, failure: Exception) -> Outcome:
        action = self.policy.action
        if action is RejectionAction.RETRY:
            log.error(
                "%s failed %d times, left unacknowledged for a later delivery: %s",
                _where(record),
                self.policy.attempts,
                _describe(failure),
            )
            return Outcome.LEFT_PENDING
        if action is RejectionAction.DROP:
            log.error("%s rejected and dropped: %s", _where(record), _describe(failure))
            await record.ack()
            return Outcome.DROPPED
        dead_letter = TransportMessage(
            topic=record.topic + DEAD_LETTER_SUFFIX,
            key=record.key,
            payload=record.payload,
            timestamp=record.timestamp,
        )
        try:
            await self.transport.send(dead_letter)
        except Exception:
            log.exception("could not dead-letter %s; left unacknowledged", _where(record))
            return Outcome.LEFT_PENDING
        log.error("%s rejected, moved to %s: %s", _where(record), dead_letter.topic, _describe(failure))
        await record.ack()
        return Outcome.DEAD_LETTERED

    # -- the loop ----------------------------------------------------------------------

    async def run(
        self, stop: asyncio.Event, ready: asyncio.Event | None = None, draining: asyncio.Event | None = None
    ) -> None:
        """Serve until ``stop`` is set (see the module docstring); ``ready`` is set once
        a command sent from then on cannot be missed, ``draining`` once the worker took
        its last record and waits for those in flight."""
        receiver = self.transport.open(self.group, [self.topic])
        slots = asyncio.Semaphore(self.concurrency)
        in_flight: set[asyncio.Task[Outcome]] = set()

        async def one(record: TransportRecord) -> Outcome:
            try:
                return await self.handle(record)
            finally:
                slots.release()

        async def read() -> None:
            async for record in receiver:
                await slots.acquire()
                task = asyncio.ensure_future(one(record))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                task.add_done_callback(_log_crash)

        try:
            await receiver.ready()
            receiver.open_processing()
            if ready is not None:
                ready.set()
            reader = asyncio.ensure_future(read())
            stopping = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({reader, stopping}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
                if draining is not None:
                    draining.set()
            if in_flight:
                log.info("stopping: waiting for %d commands in flight", len(in_flight))
                _, late = await asyncio.wait(set(in_flight), timeout=self.shutdown_timeout)
                for task in late:
                    task.cancel()
                if late:
                    log.warning(
                        "%d commands did not finish within %.1fs; they are delivered again",
                        len(late),
                        self.shutdown_timeout,
                    )
                    await asyncio.gather(*late, return_exceptions=True)
            failure = None if reader.cancelled() else reader.exception()
            if failure is not None:
                raise failure  # the receiver failed: what was in flight finished first
        finally:
            await receiver.close()


def _where(record: TransportRecord) -> str:
    """The record for a log line: its position, with its topic unless the position names it
    (a Redis position is ``<stream>/<entry id>``, a Kafka one ``<partition>:<offset>``)."""
    position = record.position
    if position.startswith(record.topic):
        return f"record {position}"
    return f"record {record.topic} at {position}"


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _log_crash(task: asyncio.Task[Outcome]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("a command task failed outside the rejection policy", exc_info=task.exception())
