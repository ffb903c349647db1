"""The streams a topic needs, created on demand: ``NatsTopics``.

A topic is a subject of its bounded context's stream. :meth:`NatsTopics.ensure` creates
that stream, or adds the topic's subjects to it, the first time a topic is sent to or
opened, once per stream however many callers ask at once (a failed creation is tried
again by the next call); a stream that exists is reconciled with the settings
(``max_age``, ``replicas``). Subjects another stream holds fail with
:class:`~wow_nats.errors.StreamSubjectsTakenError`, naming it.
"""

from __future__ import annotations

import asyncio
import logging

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import StorageType, StreamConfig

from wow_nats.connection import NatsConnection
from wow_nats.errors import StreamSubjectsTakenError
from wow_nats.layout import StreamLayout
from wow_nats.settings import NatsSettings

log = logging.getLogger("wow_nats")

SUBJECTS_OVERLAP = 10065
"""JetStream's error code for a stream whose subjects another stream holds."""


async def stream_holders(js: JetStreamContext, subjects: list[str]) -> dict[str, list[str]]:
    """The streams holding (overlapping) each of ``subjects``: stream -> its subjects."""
    holders: dict[str, list[str]] = {}
    for subject in subjects:
        try:
            holder = await js.find_stream_name_by_subject(subject)
        except Exception:  # not held, or the lookup failed: name what is known
            continue
        holders.setdefault(holder, []).append(subject)
    return holders


def subjects_taken(
    name: str,
    subjects: list[str],
    holders: dict[str, list[str]],
    error: Exception,
    *,
    topic_prefix: str,
    stream_prefix: str,
    hint: str = "",
) -> StreamSubjectsTakenError:
    """The :class:`StreamSubjectsTakenError` for stream ``name``, whose ``subjects`` other
    streams hold (``holders``, from :func:`stream_holders`): it names each holder and the
    settings that separate two applications (``WOW_MESSAGING__TOPIC_PREFIX``,
    ``WOW_NATS__STREAM_PREFIX``) with their values."""
    held = "; ".join(f"stream {holder!r} holds {', '.join(subs)}" for holder, subs in holders.items())
    return StreamSubjectsTakenError(
        f"cannot create NATS stream {name!r} for the subjects {', '.join(subjects)}: "
        f"{held or 'another stream holds them'} (JetStream gives a subject to one stream only; "
        "it is another application, or the same one with another WOW_NATS__STREAM_PREFIX, on "
        f"this server). Subjects are the topic names: give each its own "
        f"WOW_MESSAGING__TOPIC_PREFIX (now {topic_prefix!r}), or use the stream prefix of the "
        f"stream that holds them (WOW_NATS__STREAM_PREFIX, now {stream_prefix!r}).{hint} "
        f"Server: {error}"
    )


class NatsTopics:
    """Creates and reconciles the streams of the topics a transport uses."""

    def __init__(self, connection: NatsConnection, layout: StreamLayout, settings: NatsSettings) -> None:
        self._connection = connection
        self.layout = layout
        self.settings = settings
        self._streams: dict[str, asyncio.Future[None]] = {}
        self.ready: dict[str, str] = {}
        """Topics whose stream exists (topic -> stream): the fast path of a publish."""

    async def ensure(self, topic: str) -> str:
        """Create the stream of ``topic``'s context, or add its subjects; return its name."""
        stream = self.ready.get(topic)
        if stream is not None:
            return stream
        base = self.layout.base(topic)  # validates the topic
        name = self.layout.stream_for_base(base)
        future = self._streams.get(name)
        if future is None or (future.done() and (future.cancelled() or future.exception() is not None)):
            future = self._streams[name] = asyncio.ensure_future(self._create_or_update_stream(name, base))
        await asyncio.shield(future)
        self.ready[topic] = name
        return name

    def forget(self, topic: str) -> None:
        """Drop the memo of ``topic``'s stream (it was deleted behind our back)."""
        name = self.layout.stream(topic)
        self._streams.pop(name, None)
        for known in [known for known, stream in self.ready.items() if stream == name]:
            del self.ready[known]

    def cancel(self) -> None:
        """Cancel the creations under way (the transport closes)."""
        for future in self._streams.values():
            future.cancel()

    async def _subjects_taken(
        self, js: JetStreamContext, name: str, subjects: list[str], error: Exception
    ) -> StreamSubjectsTakenError:
        """The error for subjects of stream ``name`` that other streams hold, naming them."""
        return subjects_taken(
            name,
            subjects,
            await stream_holders(js, subjects),
            error,
            topic_prefix=self.layout.topic_prefix,
            stream_prefix=self.layout.stream_prefix,
        )

    async def _create_or_update_stream(self, name: str, base: str) -> None:
        js = await self._connection.jetstream()
        settings = self.settings
        subjects = self.layout.stream_subjects(base)
        try:
            info = await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            config = StreamConfig(
                name=name,
                subjects=subjects,
                storage=StorageType(settings.storage),
                num_replicas=settings.replicas,
                max_age=settings.max_age or None,
            )
            try:
                await js.add_stream(config)
                log.info("created stream %s for %s", name, ", ".join(subjects))
                return
            except nats.js.errors.BadRequestError as error:
                # another process created it first (fall through and reconcile), or
                # another stream holds the subjects
                try:
                    info = await js.stream_info(name)
                except nats.js.errors.NotFoundError:
                    raise await self._subjects_taken(js, name, subjects, error) from error
        current = info.config
        missing = [subject for subject in subjects if subject not in (current.subjects or [])]
        wanted_age = float(settings.max_age)
        if missing or float(current.max_age or 0) != wanted_age or current.num_replicas != settings.replicas:
            updated = current.evolve(
                subjects=[*(current.subjects or []), *missing],
                max_age=wanted_age or None,
                num_replicas=settings.replicas,
            )
            try:
                await js.update_stream(updated)
            except nats.js.errors.BadRequestError as error:
                if not missing:
                    raise
                raise await self._subjects_taken(js, name, missing, error) from error
            log.info("updated stream %s (subjects %s)", name, ", ".join(updated.subjects or []))
        storage = str(getattr(current.storage, "value", current.storage or settings.storage))
        if storage != settings.storage:
            log.warning(
                "stream %s uses %s storage, WOW_NATS__STORAGE asks for %s: storage cannot be changed",
                name,
                storage,
                settings.storage,
            )
