"""TransportBase: the closed flag, the refusal after close, the receiver registry."""

from __future__ import annotations

import pytest

from wow_core.messaging import BusClosedError
from wow_core.transport import DecodeFailureDefault, DefaultTopicNaming, TransportBase


class _Probe(TransportBase[str]):
    label = "probe"


def test_reports_its_naming_and_default() -> None:
    naming = DefaultTopicNaming("x.")
    probe = _Probe(naming, DecodeFailureDefault.LEAVE_PENDING)
    assert probe.naming is naming
    assert probe.decode_failure_default is DecodeFailureDefault.LEAVE_PENDING
    assert not probe.closed


def test_after_close_calls_are_refused_naming_the_transport_and_topic() -> None:
    probe = _Probe(DefaultTopicNaming(), DecodeFailureDefault.DEAD_LETTER)
    probe._check_open()
    assert probe._mark_closed() is True
    assert probe._mark_closed() is False  # close is idempotent
    assert probe.closed
    with pytest.raises(BusClosedError, match="the probe transport is closed"):
        probe._check_open()
    assert "cannot send to 'wow.a.b.command'" in str(probe._closed_error("wow.a.b.command"))


def test_tracks_open_receivers_until_they_report_their_close() -> None:
    probe = _Probe(DefaultTopicNaming(), DecodeFailureDefault.DEAD_LETTER)
    assert probe._track("r1") == "r1"
    probe._track("r2")
    snapshot = probe._open_receivers()
    probe.receiver_closed("r1")
    assert sorted(snapshot) == ["r1", "r2"]
    assert probe._open_receivers() == ["r2"]
