"""The wire form shown in docs/transports/spi.md is what the codec writes and reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.accounts import Deposit
from wow_core.model import BodyTypeRegistry, CommandMessage, MessageCodec, TopicKind

ROOT = Path(__file__).resolve().parents[2]


def test_the_documented_command_is_the_codec_s_wire_form() -> None:
    page = (ROOT / "docs/transports/spi.md").read_text()
    section = page[page.index("**The wire form**") :]
    shown = json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))  # type: ignore[union-attr]
    registry = BodyTypeRegistry()
    registry.register(Deposit, "bank.Deposit")  # the type name the page shows
    codec = MessageCodec(registry)
    message = codec.decode(json.dumps(shown), TopicKind.COMMAND)
    assert isinstance(message, CommandMessage)
    assert message.body == Deposit(5)
    assert json.loads(codec.encode(message)) == shown
    assert list(json.loads(codec.encode(message))) == list(shown)  # same fields, same order
