"""``KafkaTransportReceiver``: one consumer-group member over some topics.

Guarantees:

- ``ready()`` completes only after the group assigned partitions to this member and,
  for every assigned partition, the start offset is anchored: a partition the group
  never committed gets its reset position (``auto_offset_reset``, by default
  ``earliest``: the first retained record) resolved and *committed* at once, before
  readiness completes. With ``earliest`` a new group skips nothing that is still
  retained, also what was sent before any member joined; with ``latest`` a record sent
  after ``ready()`` returns is never missed. Either way a partition that a rebalance
  (the join's own, typically) moves to another member before this one consumed
  anything starts there at the committed anchor, not at a later end.
- Each anchored partition is logged at INFO with its start offset and why it was
  chosen: ``committed`` (the group's commit), ``reset earliest`` or ``reset latest``.
- Nothing is fetched before ``open_processing()``: the partitions stay paused.
- A record's ``ack()`` marks its offset; commits advance per partition only to the
  contiguous low watermark of acknowledged offsets (:mod:`wow_kafka.offsets`), every
  ``commit_interval_ms``, on revocation and on close. A record never acknowledged is
  never committed past: after a crash it is delivered again (at-least-once).
- On revocation the receiver stops handing out records of the revoked partitions,
  lets in-flight ones finish for up to ``revocation_drain_timeout_ms``, commits what is
  contiguous, and forgets the partitions; acknowledgements arriving later no longer
  count, so the new owner redelivers them. On assignment it anchors again.
- With a revocation listener (``set_revocation_listener``, the optional SPI method of
  :class:`~wow_core.transport.spi.RevocationListening`), the listener is called with the
  revoked ``(topic, partition)`` pairs right after the receiver stopped handing out their
  records, within ``revocation_drain_timeout_ms``; once it returned, the consumer is done
  with them (it dropped what it had not started, finished what was in flight), so the
  receiver commits at once without waiting for the dropped records. A listener that
  raises or overruns the timeout is logged, and the receiver drains for what is left of
  the timeout as without one. Either way the commit happens before the group hands the
  partitions over.

- A record its consumer releases unacknowledged (``release()``: its processing failed,
  the event store could not be reached) is delivered again by this member after
  ``release_delay_ms``, doubled per delivery up to ``release_delay_max_ms``, with
  ``delivery_count`` raised, for as long as the partition stays assigned here. It keeps
  holding its partition's commits at its offset meanwhile (commits never pass a record
  not acknowledged), and a revocation does not wait for it: the new owner delivers it
  again from the committed offset. Without ``release_delay_ms`` it waits for the
  partition's next owner (a rebalance or a restart). A released record comes again
  after records fetched later, so it may be processed after them. Released after its
  ``max_deliveries``-th delivery here, it is sent to ``<topic>.dlq`` (key, payload,
  timestamp, and the reason in its headers) and acknowledged instead, so the partition's
  commits move on; a dead letter that cannot be sent leaves it to be delivered again.

What it does not guarantee: exactly-once. A record in flight when its partition moved
or its process died is delivered again to the new owner, and may then be processed
twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError
from aiokafka.protocol.group import LeaveGroupRequest

from wow_core.transport.decode_failure import DeadLetterReason, DefaultDecodeFailureHandler
from wow_core.transport.kit import ReadAhead, Readiness
from wow_core.transport.spi import RevocationListener, TransportMessage
from wow_kafka.errors import KafkaCommitError, KafkaConnectError
from wow_kafka.offsets import PartitionOffsets
from wow_kafka.record import KafkaRecord
from wow_kafka.settings import KafkaSettings
from wow_kafka.topics import KafkaTopics

log = logging.getLogger(__name__)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, receiver: KafkaTransportReceiver) -> None:
        self._receiver = receiver

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._receiver._on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._receiver._on_assigned(assigned)


async def _leave_generation_zero(consumer: AIOKafkaConsumer) -> None:
    """Leave the group explicitly when the broker numbered its first generation 0.

    aiokafka sends LeaveGroup only for generations above 0; tansu starts at 0, so
    without this a closed member would hold its partitions until its session expires.
    """
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or getattr(coordinator, "generation", None) != 0 or not coordinator.member_id:
        return
    try:
        await coordinator._send_req(LeaveGroupRequest(coordinator.group_id, coordinator.member_id))
    except Exception as error:  # a best effort, as aiokafka's own leave
        log.debug("LeaveGroup for generation 0 failed: %s", error)


async def stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """``consumer.stop()``, also when a fetch of it is in its retry backoff.

    aiokafka's ``Fetcher.close`` cancels its fetch tasks and awaits each; one that a
    failed fetch (a request timeout, say) left sleeping in its ``retry_backoff_ms``
    re-raises that cancellation out of ``stop()`` (aiokafka 0.14.0), skipping the other
    fetch tasks and the closing of the client. A CancelledError while this task is not
    being cancelled is that one: the rest of the stop is done here, and a real
    cancellation of the caller still propagates.
    """
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        log.debug(
            "aiokafka's fetcher re-raised the cancellation of a fetch in its backoff; finishing the stop"
        )
        fetcher = getattr(consumer, "_fetcher", None)
        pending = list(getattr(fetcher, "_pending_tasks", ()))
        for fetch in pending:
            fetch.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await consumer._client.close()


class KafkaTransportReceiver:
    """A member of consumer group ``group`` for ``topics``; see the module docstring."""

    def __init__(
        self,
        group: str,
        topics: Sequence[str],
        settings: KafkaSettings,
        consumer_config: dict[str, Any],
        topic_admin: KafkaTopics,
        on_close: Callable[[KafkaTransportReceiver], None] | None = None,
        dead_letter: Callable[[TransportMessage, DeadLetterReason], Awaitable[None]] | None = None,
    ) -> None:
        if not group:
            raise ValueError("a Kafka receiver needs a group")
        if not topics:
            raise ValueError(f"receiver of group {group!r} names no topic")
        self.group = group
        self.topics: tuple[str, ...] = tuple(dict.fromkeys(topics))
        self._settings = settings
        self._config = consumer_config
        self._topic_admin = topic_admin
        self._on_close = on_close
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: dict[TopicPartition, PartitionOffsets] = {}
        self._what = f"Kafka receiver of group {group!r}"
        self._buffer: ReadAhead[tuple[PartitionOffsets, list[Any], int]] = ReadAhead(
            settings.buffered_records, low_mark=settings.buffered_records // 2
        )
        """Fetched batches, sized by their records (not counting the batch being handed
        out), each with the delivery it is (1: fetched; more: a released record delivered
        again); once ``buffered_records`` wait, fetching resumes when half were taken."""
        self._batch: list[Any] | None = None
        self._batch_offsets = PartitionOffsets(0)
        self._batch_index = 0
        self._batch_deliveries = 1
        self._releases: dict[tuple[PartitionOffsets, int], asyncio.TimerHandle] = {}
        """The released records waiting for their delay, by assignment and offset."""
        self._dead_letter = dead_letter
        """Sends a record to ``<topic>.dlq`` (the transport's send; None: no delivery limit)."""
        self._dead_letters: set[asyncio.Task[None]] = set()
        """Released records being sent to their dead-letter topic."""
        self.dead_lettered = 0
        """Records sent to ``<topic>.dlq`` after ``max_deliveries`` deliveries."""
        self._anchored = asyncio.Event()
        self._processing = False
        self._processing_opened = asyncio.Event()
        self._closed = False
        self._readiness: Readiness[None] = Readiness(
            self._start, what=self._what, name=f"wow-kafka-start:{group}"
        )
        self._fetch_task: asyncio.Task[None] | None = None
        self._commit_task: asyncio.Task[None] | None = None
        self._commit_wanted = asyncio.Event()
        self._commit_lock = asyncio.Lock()
        self.assignments = 0
        """How many assignments were anchored (rebalances this member went through)."""
        self.assignment_changed = asyncio.Event()
        """Set after each anchored assignment; tests and tools clear and wait on it."""
        self.revocation_started = asyncio.Event()
        """Set when a revocation of owned partitions begins (before the drain)."""
        self._revocation_listener: RevocationListener | None = None

    def set_revocation_listener(self, listener: RevocationListener | None) -> None:
        """Call ``listener`` on each revocation (see the module docstring); None removes it."""
        self._revocation_listener = listener

    # -- lifecycle --------------------------------------------------------------------

    async def ready(self) -> None:
        # one start at a time; after a failed one (broker down) the next call tries again
        await self._readiness.wait()

    async def _start(self) -> None:
        await self._topic_admin.ensure(self.topics)
        consumer = AIOKafkaConsumer(**self._config)
        consumer.subscribe(list(self.topics), listener=_Listener(self))
        self._consumer = consumer
        try:
            await consumer.start()
        except KafkaError as error:
            await consumer.stop()
            self._consumer = None
            raise KafkaConnectError(
                f"Kafka receiver of group {self.group!r} could not join at "
                f"{self._settings.bootstrap_servers} (WOW_KAFKA__BOOTSTRAP_SERVERS, "
                f"WOW_KAFKA__REQUEST_TIMEOUT_MS): {error}",
                error,
            ) from error
        # consumer.start() returns once partitions are installed, possibly before our
        # listener anchored them; readiness waits for the anchor.
        await self._anchored.wait()
        guard = self._buffer.guard  # a failure the loop does not retry ends the iteration with it
        self._fetch_task = asyncio.create_task(
            guard(self._fetch_loop(), what=self._what, logger=log), name=f"wow-kafka-fetch:{self.group}"
        )
        self._commit_task = asyncio.create_task(
            guard(self._commit_loop(), what=self._what, logger=log), name=f"wow-kafka-commit:{self.group}"
        )

    @property
    def processing_open(self) -> bool:
        return self._processing

    def open_processing(self) -> None:
        if self._processing or self._closed:
            return
        self._processing = True
        self._processing_opened.set()
        self._update_pause()

    @property
    def assigned(self) -> frozenset[TopicPartition]:
        """Partitions this member owns now."""
        return frozenset(tp for tp, state in self._partitions.items() if not state.revoking)

    @property
    def buffered(self) -> int:
        """Records fetched and waiting to be handed out (the batch being handed out aside)."""
        return self._buffer.size

    @property
    def in_flight(self) -> int:
        return sum(state.in_flight for state in self._partitions.values())

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._processing_opened.set()
        self._buffer.close()  # batches not handed out: committed past by nobody, fetched again
        for handle in self._releases.values():
            handle.cancel()  # released records: not committed past, delivered again after a restart
        self._releases.clear()
        if self._dead_letters:  # their acknowledgements go into the final commit
            await asyncio.wait(set(self._dead_letters), timeout=self._settings.request_timeout_ms / 1000)
        await self._readiness.close()
        for task in (self._fetch_task, self._commit_task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        consumer = self._consumer
        try:
            if consumer is not None:
                try:
                    await self._commit(list(self._partitions), self._final_commit_timeout())
                except KafkaError as error:
                    log.warning("Kafka receiver of group %r: final commit failed: %s", self.group, error)
                self._consumer = None
                await _leave_generation_zero(consumer)
                await stop_consumer(consumer)
        finally:
            for state in self._partitions.values():
                state.retire()
            self._partitions.clear()
            self._batch = None
            if self._on_close is not None:
                self._on_close(self)

    # -- records ----------------------------------------------------------------------

    def __aiter__(self) -> KafkaTransportReceiver:
        return self

    async def __anext__(self) -> KafkaRecord:
        # The position inside the current batch lives here, not in a generator: a
        # consumer that stops iterating and starts again loses no fetched record.
        while True:
            if self._closed:
                raise StopAsyncIteration
            records = self._batch
            if records is not None:
                offsets = self._batch_offsets
                index = self._batch_index
                if index < len(records) and offsets.active and not offsets.revoking:
                    self._batch_index = index + 1
                    record = records[index]
                    deliveries = self._batch_deliveries
                    if deliveries == 1:
                        offsets.delivered(record.offset)
                    elif not offsets.redelivered(record.offset):
                        continue  # acknowledged after its release: nothing to deliver
                    return KafkaRecord(self, offsets, record, deliveries)
                # done, or revoked: the next owner delivers the rest from the watermark
                self._batch = None
            if not self._processing:
                await self._processing_opened.wait()
                continue
            # StopAsyncIteration once closed; a failure of the fetch or commit loop, once
            self._batch_offsets, self._batch, self._batch_deliveries = await self._buffer.get()
            self._batch_index = 0

    async def _fetch_loop(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        settings = self._settings
        backoff = settings.retry_backoff_ms / 1000
        buffer = self._buffer
        while not self._closed:
            if buffer.room <= 0:
                # Back-pressure without pausing: a paused partition's prefetched data is
                # dropped and fetched again on resume. Not polling for longer than
                # max_poll_interval_ms makes the member leave its group, as in Kafka.
                await buffer.wait_for_room()
                continue
            try:
                batches = await consumer.getmany(
                    timeout_ms=settings.poll_timeout_ms, max_records=settings.max_poll_records
                )
            except asyncio.CancelledError:
                raise
            except KafkaError as error:
                log.warning("Kafka receiver of group %r: fetch failed, retrying: %s", self.group, error)
                await asyncio.sleep(backoff)
                continue
            except Exception:
                log.exception("Kafka receiver of group %r: unexpected fetch failure, retrying", self.group)
                await asyncio.sleep(backoff)
                continue
            if not batches:
                continue
            partitions = self._partitions
            for tp, records in batches.items():
                offsets = partitions.get(tp)
                if offsets is None:
                    # not anchored (yet): give the records back rather than skip them
                    if tp in consumer.assignment():
                        with contextlib.suppress(IllegalStateError):
                            consumer.seek(tp, records[0].offset)
                            consumer.pause(tp)
                    continue
                if offsets.revoking or not offsets.active:
                    continue  # revoked: the next owner starts from the committed watermark
                buffer.put_nowait((offsets, records, 1), len(records))

    def _update_pause(self) -> None:
        """Keep every partition paused until processing opens."""
        consumer = self._consumer
        if consumer is None:
            return
        assigned = consumer.assignment()
        if self._processing:
            # only anchored partitions: one whose anchoring failed stays paused
            consumer.resume(*(tp for tp in assigned if tp in self._partitions))
        else:
            consumer.pause(*assigned)

    # -- released records -------------------------------------------------------------

    def released(self, record: KafkaRecord) -> None:
        """The consumer released ``record`` unacknowledged: deliver it again here after
        ``release_delay_for(record.delivery_count)``. Nothing when the receiver closes,
        the partition is revoked (its next owner delivers it), the record was
        acknowledged, or there is no release delay."""
        offsets = record._offsets
        limit = self._settings.max_deliveries
        if (
            limit is not None
            and record.delivery_count >= limit
            and self._dead_letter is not None
            and offsets is not None
            and not self._closed
            and offsets.release(record.offset)
        ):
            task = asyncio.get_running_loop().create_task(
                self._send_to_dead_letter(record), name=f"wow-kafka-dlq {record.topic}[{record.position}]"
            )
            self._dead_letters.add(task)
            task.add_done_callback(self._dead_letters.discard)
            return
        self._deliver_later(record)

    def _deliver_later(self, record: KafkaRecord) -> None:
        offsets = record._offsets
        delay = self._settings.release_delay_for(record.delivery_count)
        if delay is None or offsets is None or self._closed or not offsets.release(record.offset):
            return
        key = (offsets, record.offset)
        previous = self._releases.pop(key, None)
        if previous is not None:
            previous.cancel()
        loop = asyncio.get_running_loop()
        self._releases[key] = loop.call_later(delay, self._deliver_released, record)
        log.debug(
            "Kafka receiver of group %r: %s[%d]@%d released after delivery %d; delivered again in %.2fs",
            self.group,
            record.topic,
            record.partition,
            record.offset,
            record.delivery_count,
            delay,
        )

    async def _send_to_dead_letter(self, record: KafkaRecord) -> None:
        """``record`` was delivered ``max_deliveries`` times and released each time: send
        it to ``<topic>.dlq`` (its key, payload and timestamp, as a decode failure's dead
        letter, with the reason ``max_deliveries`` in its headers: :mod:`wow_kafka.dead_letters`),
        then acknowledge it. A send that fails leaves it to be delivered again
        (nothing is lost); a revocation meanwhile leaves it to the next owner, which may
        dead-letter it a second time."""
        assert self._dead_letter is not None
        topic = record.topic + DefaultDecodeFailureHandler.DEAD_LETTER_SUFFIX
        try:
            await self._dead_letter(
                TransportMessage(topic, record.key, record.payload, record.timestamp),
                DeadLetterReason("max_deliveries", self.group, record.position, record.delivery_count),
            )
        except Exception as error:
            log.error(
                "%s: dead-lettering %s[%s] after %d deliveries failed: %r; delivered again",
                self._what,
                record.topic,
                record.position,
                record.delivery_count,
                error,
            )
            self._deliver_later(record)
            return
        await record.ack()
        self.dead_lettered += 1
        log.warning(
            "%s: %s[%s] released after %d deliveries (WOW_KAFKA__MAX_DELIVERIES): sent to %s",
            self._what,
            record.topic,
            record.position,
            record.delivery_count,
            topic,
        )

    def _deliver_released(self, record: KafkaRecord) -> None:
        offsets = record._offsets
        assert offsets is not None
        if self._releases.pop((offsets, record.offset), None) is None or self._closed:
            return
        if offsets.active and not offsets.revoking:
            # still held: a revocation meanwhile does not wait for it, an ack drops it
            self._buffer.put_nowait((offsets, [record._raw], record.delivery_count + 1), 1)

    def _cancel_release(self, record: KafkaRecord) -> None:
        """``record`` was acknowledged after its release: no delivery is needed."""
        offsets = record._offsets
        if offsets is not None:
            handle = self._releases.pop((offsets, record.offset), None)
            if handle is not None:
                handle.cancel()

    # -- commits ----------------------------------------------------------------------

    async def commit(self) -> None:
        """Commit the contiguous watermark of every owned partition now.

        Commits also happen every ``commit_interval_ms``, on revocation and on close;
        this is for a caller that wants the offsets stored at a point of its choosing.
        """
        await self._commit(list(self._partitions))

    def _acked(self) -> None:
        self._commit_wanted.set()

    async def _commit_loop(self) -> None:
        interval = self._settings.commit_interval_ms / 1000
        while not self._closed:
            await self._commit_wanted.wait()
            await asyncio.sleep(interval)  # gather the acknowledgements of one interval
            self._commit_wanted.clear()
            try:
                await self._commit(list(self._partitions))
            except asyncio.CancelledError:
                raise
            except (CommitFailedError, IllegalStateError) as error:
                log.info(
                    "Kafka receiver of group %r: commit skipped during a rebalance: %s", self.group, error
                )
            except KafkaError as error:
                log.warning("Kafka receiver of group %r: commit failed, will retry: %s", self.group, error)
                self._commit_wanted.set()

    async def _commit(self, partitions: list[TopicPartition], timeout: float | None = None) -> None:
        """Commit the watermarks of ``partitions`` (those that moved), within ``timeout``
        seconds (default ``request_timeout_ms``): aiokafka retries a retriable failure
        for ever (a topic the broker no longer knows: every 100 ms, without end), which
        held a revocation, and with it the group's rebalance, and a close for as long.
        Raises :class:`~wow_kafka.errors.KafkaCommitError` at the deadline; the topics
        are then looked up again before the next send or subscription
        (:meth:`KafkaTopics.forget`), so a topic the broker lost is made again."""
        consumer = self._consumer
        if consumer is None:
            return
        if timeout is None:
            timeout = self._settings.request_timeout_ms / 1000
        async with self._commit_lock:
            offsets: dict[TopicPartition, int] = {}
            states: list[tuple[PartitionOffsets, int]] = []
            for tp in partitions:
                state = self._partitions.get(tp)
                if state is not None and state.dirty:
                    offsets[tp] = state.watermark
                    states.append((state, state.watermark))
            if not offsets:
                return
            try:
                async with asyncio.timeout(timeout):
                    await consumer.commit(offsets)
            except TimeoutError:
                self._topic_admin.forget()
                raise KafkaCommitError(
                    f"Kafka receiver of group {self.group!r}: the commit of "
                    f"{', '.join(sorted(f'{tp.topic}[{tp.partition}]' for tp in offsets))} was not "
                    f"acknowledged within {timeout:g}s (does the broker still have the topics? is "
                    "the group's coordinator reachable?)"
                ) from None
            for state, watermark in states:
                state.committed = max(state.committed, watermark)

    def _final_commit_timeout(self) -> float:
        """The deadline of the commit on revocation and on close, which the group's
        rebalance or the shutdown waits for: the drain timeout, at least a second, at
        most ``request_timeout_ms``."""
        drain = self._settings.revocation_drain_timeout_ms / 1000
        return min(self._settings.request_timeout_ms / 1000, max(1.0, drain))

    # -- rebalance --------------------------------------------------------------------

    async def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        states = [(tp, self._partitions[tp]) for tp in revoked if tp in self._partitions]
        if not states:
            return
        for _, state in states:
            state.revoking = True
        self.revocation_started.set()
        timeout = self._settings.revocation_drain_timeout_ms / 1000
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if await self._tell_listener([tp for tp, _ in states], timeout):
            pass  # the consumer is done with them: nothing left to wait for
        elif timeout > 0 and not self._closed:
            for _, state in states:
                await state.drain(max(0.0, deadline - loop.time()))
        try:
            await self._commit([tp for tp, _ in states], self._final_commit_timeout())
        except KafkaError as error:
            log.warning(
                "Kafka receiver of group %r: commit on revocation failed, in-flight records will be "
                "redelivered: %s",
                self.group,
                error,
            )
        finally:
            retired = set()
            for tp, state in states:
                state.retire()
                retired.add(state)
                self._partitions.pop(tp, None)
            for key in [key for key in self._releases if key[0] in retired]:
                self._releases.pop(key).cancel()
        log.info("Kafka receiver of group %r: revoked %s", self.group, sorted(map(str, revoked)))

    async def _tell_listener(self, revoked: list[TopicPartition], timeout: float) -> bool:
        """Call the revocation listener within ``timeout``; True when it returned."""
        listener = self._revocation_listener
        if listener is None:
            return False
        pairs = sorted((tp.topic, tp.partition) for tp in revoked)
        try:
            async with asyncio.timeout(timeout):
                await listener(pairs)
        except TimeoutError:
            log.warning(
                "Kafka receiver of group %r: the revocation listener did not finish within %.1fs "
                "(WOW_KAFKA__REVOCATION_DRAIN_TIMEOUT_MS); committing what is done",
                self.group,
                timeout,
            )
            return False
        except Exception:
            log.exception("Kafka receiver of group %r: the revocation listener failed", self.group)
            return False
        return True

    async def _anchor(
        self, consumer: AIOKafkaConsumer, assigned: set[TopicPartition]
    ) -> tuple[dict[TopicPartition, PartitionOffsets], dict[TopicPartition, int]]:
        states: dict[TopicPartition, PartitionOffsets] = {}
        anchors: dict[TopicPartition, int] = {}
        reasons: dict[TopicPartition, str] = {}
        reset = f"reset {self._settings.auto_offset_reset}"
        for tp in assigned:
            committed = await consumer.committed(tp)
            if committed is None:
                # Conservative boundary: resolve the reset position now and commit it,
                # so whoever owns the partition later starts here, not at a later end.
                position = await consumer.position(tp)
                anchors[tp] = position
                states[tp] = PartitionOffsets(position)
                reasons[tp] = reset
            else:
                states[tp] = PartitionOffsets(committed)
                reasons[tp] = "committed"
        if anchors:
            await consumer.commit(anchors)
        for tp in sorted(states, key=lambda tp: (tp.topic, tp.partition)):
            log.info(
                "Kafka receiver of group %r: %s[%d] starts at offset %d (%s)",
                self.group,
                tp.topic,
                tp.partition,
                states[tp].watermark,
                reasons[tp],
            )
        return states, anchors

    async def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        backoff = self._settings.retry_backoff_ms / 1000
        for attempt in range(1, 4):
            try:
                states, anchors = await self._anchor(consumer, assigned)
                break
            except CommitFailedError as error:
                # The group moved on while we anchored; the next assignment anchors again.
                # Until then nothing may be fetched: a record skipped now would be lost here.
                log.info("Kafka receiver of group %r: anchoring interrupted: %s", self.group, error)
                consumer.pause(*assigned)
                return
            except KafkaError as error:
                if attempt == 3:
                    log.warning(
                        "Kafka receiver of group %r: could not anchor %s, leaving them paused until the "
                        "next rebalance: %s",
                        self.group,
                        sorted(map(str, assigned)),
                        error,
                    )
                    consumer.pause(*assigned)
                    return
                await asyncio.sleep(backoff * attempt)
        self._partitions.update(states)
        if not self._processing:
            consumer.pause(*assigned)
        self.assignments += 1
        self._anchored.set()
        self.assignment_changed.set()
        log.info(
            "Kafka receiver of group %r: assigned %s (anchored %d)",
            self.group,
            sorted(map(str, assigned)),
            len(anchors),
        )
