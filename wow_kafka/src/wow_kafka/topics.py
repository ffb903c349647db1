"""Topic management: make sure a topic exists before it is written or subscribed.

With ``auto_create_topics`` (the default) a missing topic is created through the admin
client with the configured partitions and replication factor; without it, a missing
topic is a :class:`~wow_kafka.errors.KafkaTopicError` naming the topic and the setting.
The transport never relies on a broker's own auto-creation, whose partition count is
the broker's default rather than yours. Topics known to exist are remembered, so the
check costs one admin round trip per new topic, not one per send.

A topic kept as a log (the cluster intake's failure ledger) is made sure of with
:meth:`KafkaTopics.ensure_retained`: created with :data:`RETAINED` (records kept forever)
when missing, and refused with :class:`~wow_kafka.errors.KafkaTopicError` when it exists
with a configuration under which the broker would delete records (a finite
``retention.ms`` or ``retention.bytes``, compaction): the topic's configuration is not
changed behind its operator's back, the error says what to set.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from wow_kafka.errors import KafkaConnectError, KafkaTopicError
from wow_kafka.settings import KafkaSettings

log = logging.getLogger(__name__)

_LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_TOPIC_ALREADY_EXISTS = 36
MAX_TOPIC_LENGTH = 249

RETAINED: Mapping[str, str] = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
"""The configs of a topic whose records the broker never deletes."""


def deleting_configs(configs: Mapping[str, str]) -> list[str]:
    """What in a topic's ``configs`` lets the broker delete records, as ``name=value``
    (empty when none). A config that is not described (a broker that reports only the
    configs set on the topic, as tansu does) is the broker's default, which deletes after
    7 days on Kafka: ``retention.ms`` must be described as ``-1``."""
    found = []
    retention_ms = configs.get("retention.ms")
    if retention_ms is None:
        found.append("retention.ms=<broker default>")
    elif retention_ms.strip() != "-1":
        found.append(f"retention.ms={retention_ms}")
    retention_bytes = configs.get("retention.bytes", "-1").strip()
    if retention_bytes != "-1":
        found.append(f"retention.bytes={retention_bytes}")
    policy = configs.get("cleanup.policy", "delete")
    if "compact" in policy:
        found.append(f"cleanup.policy={policy}")
    return found


def check_topic_name(topic: str) -> str:
    """Raise :class:`KafkaTopicError` for a name Kafka would refuse."""
    if not topic or topic in (".", "..") or len(topic) > MAX_TOPIC_LENGTH or not set(topic) <= _LEGAL:
        raise KafkaTopicError(
            f"{topic!r} is not a legal Kafka topic name: "
            f"use 1-{MAX_TOPIC_LENGTH} letters, digits, '.', '_' or '-'"
        )
    return topic


class KafkaTopics:
    """Creates missing topics, or refuses them, once per topic."""

    def __init__(self, settings: KafkaSettings, common: dict[str, Any]) -> None:
        self._settings = settings
        self._common = common
        self._known: set[str] = set()
        self._lock = asyncio.Lock()
        self._admin: AIOKafkaAdminClient | None = None

    def known(self, topic: str) -> bool:
        return topic in self._known

    def forget(self) -> None:
        """Forget which topics exist (after a broker lost its data, for instance)."""
        self._known.clear()

    async def ensure(self, topics: Iterable[str], configs: Mapping[str, str] | None = None) -> None:
        """Return once every topic exists; create missing ones (with the topic ``configs``,
        e.g. ``retention.ms``) or raise. An existing topic's configs are left as they are."""
        wanted = [check_topic_name(topic) for topic in topics if topic not in self._known]
        if not wanted:
            return
        async with self._lock:
            wanted = [topic for topic in dict.fromkeys(wanted) if topic not in self._known]
            if not wanted:
                return
            admin, existing = await self._list_topics()
            missing = [topic for topic in wanted if topic not in existing]
            if missing and not self._settings.auto_create_topics:
                raise KafkaTopicError(
                    f"topic(s) {', '.join(missing)} do not exist on {self._settings.bootstrap_servers} and "
                    "WOW_KAFKA__AUTO_CREATE_TOPICS is false: create them, or allow the transport to"
                )
            if missing:
                await self._create(admin, missing, configs)
            self._known.update(wanted)

    async def configs(self, topic: str) -> dict[str, str]:
        """The configs the broker describes for ``topic`` (name to value)."""
        admin = await self._client()
        try:
            described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        except KafkaError as error:
            raise KafkaTopicError(f"describing the configs of {topic} failed: {error}", error) from error
        for response in described:
            for resource in response.resources:
                error_code, error_message, _, name, entries = resource[:5]
                if name != topic:
                    continue
                if error_code:
                    raise KafkaTopicError(
                        f"describing the configs of {topic} failed: error {error_code} {error_message or ''}"
                    )
                return {str(entry[0]): str(entry[1]) for entry in entries if entry[1] is not None}
        raise KafkaTopicError(f"the broker did not describe the configs of topic {topic}")

    async def ensure_retained(self, topic: str) -> None:
        """Make sure ``topic`` keeps every record: create it with :data:`RETAINED` when it is
        missing; raise :class:`KafkaTopicError` when it exists with configs under which the
        broker deletes records (:func:`deleting_configs`), naming them and the fix."""
        check_topic_name(topic)
        await self.ensure((topic,), RETAINED)
        wrong = deleting_configs(await self.configs(topic))
        if wrong:
            raise KafkaTopicError(
                f"topic {topic} must keep every record, but the broker would delete some under "
                f"{', '.join(wrong)}: set retention.ms=-1, retention.bytes=-1 and cleanup.policy=delete "
                f"on it (kafka-configs --alter --entity-type topics --entity-name {topic} --add-config "
                "retention.ms=-1,retention.bytes=-1,cleanup.policy=delete)"
            )

    async def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        """The partition count of each of ``topics`` (created first if missing, as by
        :meth:`ensure`)."""
        wanted = list(dict.fromkeys(topics))
        await self.ensure(wanted)
        admin = await self._client()
        try:
            described = await admin.describe_topics(wanted)
        except KafkaError as error:
            raise KafkaTopicError(
                f"describing topic(s) {', '.join(wanted)} failed: {error}", error
            ) from error
        counts = {entry["topic"]: len(entry["partitions"]) for entry in described if not entry["error_code"]}
        missing = [topic for topic in wanted if topic not in counts]
        if missing:
            raise KafkaTopicError(f"topic(s) {', '.join(missing)} could not be described")
        return counts

    async def _list_topics(self) -> tuple[AIOKafkaAdminClient, set[str]]:
        # A broker restart leaves the admin client with a dead connection it does not
        # re-open by itself: on a retriable error, start a new client once.
        for attempt in (1, 2):
            admin = await self._client()
            try:
                return admin, set(await admin.list_topics())
            except KafkaError as error:
                await self.close()
                if attempt == 2 or not error.retriable:
                    raise KafkaConnectError(
                        f"cannot list the topics of {self._settings.bootstrap_servers} "
                        f"(WOW_KAFKA__BOOTSTRAP_SERVERS): {error}",
                        error,
                    ) from error
        raise AssertionError("unreachable")

    async def _create(
        self, admin: AIOKafkaAdminClient, topics: list[str], configs: Mapping[str, str] | None = None
    ) -> None:
        settings = self._settings
        new = [
            NewTopic(
                topic, settings.partitions, settings.replication_factor, topic_configs=dict(configs or {})
            )
            for topic in topics
        ]
        try:
            response = await admin.create_topics(new)
        except KafkaError as error:
            raise KafkaTopicError(f"creating topic(s) {', '.join(topics)} failed: {error}", error) from error
        failures = []
        for result in response.topic_errors:
            topic, code = result[0], result[1]
            message = result[2] if len(result) > 2 else None
            if code not in (0, _TOPIC_ALREADY_EXISTS):
                failures.append(f"{topic}: error {code} {message or ''}".rstrip())
            elif code == 0:
                log.info(
                    "created topic %s (%d partitions, replication %d)",
                    topic,
                    settings.partitions,
                    settings.replication_factor,
                )
        if failures:
            raise KafkaTopicError(
                "creating topic(s) failed (WOW_KAFKA__PARTITIONS="
                f"{settings.partitions}, WOW_KAFKA__REPLICATION_FACTOR={settings.replication_factor}): "
                + "; ".join(failures)
            )

    async def _client(self) -> AIOKafkaAdminClient:
        if self._admin is None:
            admin = AIOKafkaAdminClient(**self._common)
            try:
                await admin.start()
            except KafkaError as error:
                await admin.close()
                raise KafkaConnectError(
                    f"no broker of {self._settings.bootstrap_servers} (WOW_KAFKA__BOOTSTRAP_SERVERS) "
                    f"answered the admin client: {error}",
                    error,
                ) from error
            self._admin = admin
        return self._admin

    async def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            await admin.close()
