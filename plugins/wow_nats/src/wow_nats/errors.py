"""The errors the NATS transport raises that name a setting to change."""

from __future__ import annotations


class StreamSubjectsTakenError(RuntimeError):
    """Another stream on the server already holds subjects this transport's stream needs.

    JetStream lets one subject belong to one stream only. The message names the stream
    that could not be created or extended, the stream holding each subject, and the
    setting that separates two applications (or two stream prefixes) on one server.
    """
