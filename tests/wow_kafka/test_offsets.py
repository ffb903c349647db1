"""PartitionOffsets: the contiguous low watermark of acknowledged offsets."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wow_kafka.offsets import PartitionOffsets


def test_watermark_stops_at_the_first_unacknowledged_offset() -> None:
    offsets = PartitionOffsets(10)
    for offset in (10, 11, 12, 13):
        offsets.delivered(offset)
    assert offsets.ack(11) is False
    assert offsets.ack(13) is False
    assert offsets.watermark == 10
    assert offsets.ack(10) is True
    assert offsets.watermark == 12  # 12 is still in flight
    assert offsets.in_flight == 2
    assert offsets.ack(12) is True
    assert offsets.watermark == 14
    assert offsets.in_flight == 0


def test_gaps_in_offsets_do_not_block_the_watermark() -> None:
    offsets = PartitionOffsets(0)
    for offset in (0, 5, 9):  # compaction or transaction markers skipped the rest
        offsets.delivered(offset)
    offsets.ack(5)
    offsets.ack(0)
    assert offsets.watermark == 6
    offsets.ack(9)
    assert offsets.watermark == 10


def test_duplicate_and_unknown_acks_change_nothing() -> None:
    offsets = PartitionOffsets(3)
    offsets.delivered(3)
    assert offsets.ack(2) is False
    assert offsets.ack(3) is True
    assert offsets.ack(3) is False
    assert offsets.watermark == 4


def test_a_retired_assignment_ignores_acknowledgements() -> None:
    offsets = PartitionOffsets(0)
    offsets.delivered(0)
    offsets.retire()
    assert offsets.ack(0) is False
    assert offsets.watermark == 0


def test_offsets_are_handed_out_in_order() -> None:
    offsets = PartitionOffsets(0)
    offsets.delivered(4)
    with pytest.raises(ValueError, match="after 4"):
        offsets.delivered(4)


async def test_drain_waits_for_in_flight_records() -> None:
    offsets = PartitionOffsets(0)
    offsets.delivered(0)
    assert await offsets.drain(0) is False
    waiter = asyncio.create_task(offsets.drain(5))
    await asyncio.sleep(0)
    offsets.ack(0)
    assert await waiter is True
    offsets.delivered(1)
    assert await offsets.drain(0.01) is False


@given(
    st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=40),
    st.data(),
)
def test_watermark_is_one_past_the_longest_acknowledged_prefix(gaps: list[int], data: st.DataObject) -> None:
    start = 100
    delivered = []
    position = start
    for gap in gaps:
        position += gap
        delivered.append(position)
        position += 1
    offsets = PartitionOffsets(start)
    for offset in delivered:
        offsets.delivered(offset)
    acked = data.draw(st.lists(st.sampled_from(delivered), unique=True))
    for offset in acked:
        offsets.ack(offset)
    expected = start
    for offset in delivered:
        if offset not in acked:
            break
        expected = offset + 1
    assert offsets.watermark == expected
    unacked = [offset for offset in delivered if offset not in acked]
    assert all(offsets.watermark <= offset for offset in unacked)
    assert offsets.in_flight == len(delivered) - (
        len([o for o in delivered if o < expected]) if expected > start else 0
    )
