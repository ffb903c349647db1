"""How every aiokafka client of the transport connects: the keyword arguments they share."""

from __future__ import annotations

import ssl
from typing import Any

from aiokafka.helpers import create_ssl_context

from wow_kafka.settings import KafkaSettings


def ssl_context(settings: KafkaSettings) -> ssl.SSLContext | None:
    """The TLS context of the SSL and SASL_SSL protocols; None otherwise."""
    if not settings.uses_ssl:
        return None
    context: ssl.SSLContext = create_ssl_context(
        cafile=settings.ssl_cafile,
        certfile=settings.ssl_certfile,
        keyfile=settings.ssl_keyfile,
        password=settings.ssl_key_password.get_secret_value() if settings.ssl_key_password else None,
    )
    context.check_hostname = settings.ssl_check_hostname
    return context


def common_config(settings: KafkaSettings, *, context: ssl.SSLContext | None = None) -> dict[str, Any]:
    """Connection settings shared by the producer, the consumers and the admin client."""
    config: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_list,
        "client_id": settings.client_id,
        "request_timeout_ms": settings.request_timeout_ms,
        "retry_backoff_ms": settings.retry_backoff_ms,
        "metadata_max_age_ms": settings.metadata_max_age_ms,
        "security_protocol": settings.security_protocol,
    }
    if settings.uses_ssl:
        config["ssl_context"] = context if context is not None else ssl_context(settings)
    if settings.sasl_mechanism is not None:
        config["sasl_mechanism"] = settings.sasl_mechanism
        config["sasl_plain_username"] = settings.sasl_username
        config["sasl_plain_password"] = (
            settings.sasl_password.get_secret_value() if settings.sasl_password else None
        )
    return config


def producer_config(settings: KafkaSettings, common: dict[str, Any]) -> dict[str, Any]:
    return {
        **common,
        "acks": "all" if settings.acks == "all" else int(settings.acks),
        "enable_idempotence": settings.enable_idempotence,
        "linger_ms": settings.linger_ms,
        "compression_type": None if settings.compression_type == "none" else settings.compression_type,
        "max_batch_size": settings.max_batch_size,
        "max_request_size": settings.max_request_size,
    }


def consumer_config(settings: KafkaSettings, common: dict[str, Any], group: str) -> dict[str, Any]:
    config = {
        **common,
        "group_id": group,
        "enable_auto_commit": False,
        "auto_offset_reset": settings.auto_offset_reset,
        "session_timeout_ms": settings.session_timeout_ms,
        "heartbeat_interval_ms": settings.heartbeat_interval_ms,
        "max_poll_interval_ms": settings.max_poll_interval_ms,
        "max_poll_records": settings.max_poll_records,
        "fetch_max_wait_ms": settings.fetch_max_wait_ms,
        "max_partition_fetch_bytes": settings.max_partition_fetch_bytes,
    }
    if settings.rebalance_timeout_ms is not None:
        config["rebalance_timeout_ms"] = settings.rebalance_timeout_ms
    return config
