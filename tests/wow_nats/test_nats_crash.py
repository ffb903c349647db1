"""A member killed with SIGKILL mid-stream: its unacknowledged records go to a survivor."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.wow_nats.conftest import MakeTransport, Names
from tests.wow_nats.support import message

pytestmark = [pytest.mark.nats, pytest.mark.slow]

MEMBER = Path(__file__).with_name("crash_member.py")
ACK_WAIT = 2.0
RECORDS = 40


async def test_records_of_a_killed_member_are_delivered_to_the_survivor(
    make_transport: MakeTransport, names: Names, nats_url: str
) -> None:
    started = time.monotonic()
    transport = make_transport(ack_wait=ACK_WAIT, fetch_batch=4)
    topic, group = names.topic(), names.group()
    survivor = transport.open(group, [topic])
    await survivor.ready()  # the group's consumer exists before anything is sent

    member = await asyncio.create_subprocess_exec(
        sys.executable,
        str(MEMBER),
        nats_url,
        names.stream_prefix,
        names.topic_prefix,
        group,
        topic,
        "5",
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert member.stdout is not None
    victim_acked: set[str] = set()
    victim_held: set[str] = set()
    try:

        async def read_until_holding() -> None:
            assert member.stdout is not None
            assert (await member.stdout.readline()).strip() == b"ready"
            await transport.send_many([message(topic, f"k{n}") for n in range(RECORDS)])
            while len(victim_held) < 3:
                line = (await member.stdout.readline()).decode().split()
                assert line, "the member ended before holding records"
                (victim_acked if line[0] == "acked" else victim_held).add(line[1])

        await asyncio.wait_for(read_until_holding(), 20)
    finally:
        member.send_signal(signal.SIGKILL)
        await member.wait()
    assert member.returncode == -signal.SIGKILL

    # The survivor starts taking records only now; it gets every record the victim did
    # not acknowledge: those the victim held come back after the ack wait.
    survivor.open_processing()
    wanted = {f"k{n}" for n in range(RECORDS)} - victim_acked
    got: dict[str, int] = {}

    async def drain() -> None:
        async for record in survivor:
            got[record.key] = max(got.get(record.key, 0), record.delivery_count)
            await record.ack()
            if wanted <= set(got):
                return

    await asyncio.wait_for(drain(), ACK_WAIT + 10)
    assert wanted <= set(got), wanted - set(got)
    assert victim_held <= set(got)
    assert all(got[key] >= 2 for key in victim_held), "a held record came back without a redelivery"
    assert time.monotonic() - started < 30
