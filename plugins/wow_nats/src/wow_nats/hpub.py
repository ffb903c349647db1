"""A record's NATS message written as nats-py writes it, without rebuilding its headers.

nats-py's ``Client.publish`` builds the header block of every message from a dict,
checking each key against a pattern and cleaning each value: with a record's three
headers (``Wow-Key``, ``Wow-Timestamp``, ``Nats-Msg-Id``) that was about 3 µs of a
send's CPU. :func:`record_header` writes the same block directly (the keys are
constants, the values are known to need no cleaning), and :func:`write_hpub` queues
the ``HPUB`` command the way ``Client.publish`` does: the same checks (closed,
draining, the reconnect buffer's limit, the server's payload limit), the same
statistics, the same hand-off to nats-py's flusher. It reaches into nats-py's client
(``_send_command``, ``_flush_pending``): :func:`supports_direct_writes` says whether a
client has what it needs, and the transport falls back to ``Client.publish`` otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

import nats.errors
from nats.protocol.command import hpub_cmd

from wow_nats.record import ENCODED_KEY_HEADER, KEY_HEADER, TIMESTAMP_HEADER

if TYPE_CHECKING:
    from nats.aio.client import Client as NatsClient

MSG_ID_HEADER = "Nats-Msg-Id"

_START = b"NATS/1.0\r\n"
_KEY = f"{KEY_HEADER}: ".encode()
_ENCODED_KEY = f"{ENCODED_KEY_HEADER}: ".encode()
_TIMESTAMP = f"\r\n{TIMESTAMP_HEADER}: ".encode()
_MSG_ID = f"\r\n{MSG_ID_HEADER}: ".encode()
_END = b"\r\n\r\n"
_NEEDED = ("_send_command", "_flush_pending", "_flush_queue", "_pending_data_size", "_max_pending_size")


def record_header(key: str, timestamp: int, msg_id: str | None) -> bytes:
    """The header block nats-py writes for ``key_headers(key)``, the timestamp header and
    (unless None) the message id, in that order."""
    if key.isprintable() and key == key.strip():
        key_line = _KEY + key.encode()
    else:
        key_line = _ENCODED_KEY + quote(key, safe="").encode()
    if msg_id is None:
        return b"".join((_START, key_line, _TIMESTAMP, str(timestamp).encode(), _END))
    return b"".join((_START, key_line, _TIMESTAMP, str(timestamp).encode(), _MSG_ID, msg_id.encode(), _END))


def supports_direct_writes(client: NatsClient) -> bool:
    """Whether ``client`` has the parts of nats-py that :func:`write_hpub` uses."""
    return all(hasattr(client, name) for name in _NEEDED) and isinstance(getattr(client, "stats", None), dict)


async def write_hpub(client: NatsClient, subject: str, reply: str, header: bytes, payload: bytes) -> None:
    """Queue ``HPUB subject reply`` with the header block ``header`` as ``Client.publish``
    would (its checks and errors); the subject and reply must be valid subjects."""
    if client.is_closed:
        raise nats.errors.ConnectionClosedError
    if client.is_draining_pubs:
        raise nats.errors.ConnectionDrainingError
    size = len(payload)
    if not client.is_connected:
        limit = client._max_pending_size
        if limit <= 0 or size + client._pending_data_size > limit:
            raise nats.errors.OutboundBufferLimitError
    if size > client.max_payload:
        raise nats.errors.MaxPayloadError
    stats = client.stats
    stats["out_msgs"] += 1
    stats["out_bytes"] += size
    await client._send_command(hpub_cmd(subject, reply, header, payload))
    queue = client._flush_queue
    if queue is not None and queue.empty():
        await client._flush_pending()
