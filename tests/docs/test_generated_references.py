"""The configuration and command references are generated from the code, item by item."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tests.wow_core.runtime import probe_plugin
from wow_core.plugins import load_plugins
from wow_core.runtime.cli import settings_lines
from wow_core.runtime.settings import ENV_PREFIX, WowSettings

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "hooks" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    return _load("settings_reference")


def test_the_cli_reference_has_every_registered_command() -> None:
    cli_hook = _load("cli_reference")
    page = (ROOT / "docs/cli.md").read_text()
    rendered = cli_hook.on_page_markdown(page, page=None)
    assert cli_hook.MARKER not in rendered
    for name in load_plugins().names("command"):
        assert f"## `wow {name}`" in rendered
        assert f"usage: wow {name}" in rendered
    assert "--json" in rendered


def test_every_setting_has_a_row(hook: ModuleType) -> None:
    rendered = hook.render()
    for line in settings_lines(WowSettings(), ENV_PREFIX):
        variable = line.split("=", 1)[0]
        assert f"| `{variable}` |" in rendered, variable
    assert (
        "| `WOW_EVENT__ACK_ON_UNRECORDED_FAILURE` | `wow.event.ack-on-unrecorded-failure` | `bool` | `true` |"
        in (rendered)
    )
    assert (
        "`wow.command.bus.local-first.backlog-high-water-mark` | `int` (> 0, <= 2147483647) | `10000` |"
        in rendered
    )


def test_the_bounds_of_every_setting_are_in_the_reference(hook: ModuleType) -> None:
    rendered = hook.render()
    assert (
        "| `WOW_RUNTIME__SHUTDOWN_TIMEOUT` | `wow.runtime.shutdown-timeout` | `float` (> 0, <= 86400) |"
        in rendered
    )
    assert (
        "| `WOW_RUNTIME__MAX_IN_FLIGHT` | `wow.runtime.max-in-flight` | `int` (> 0, <= 1000000) |" in rendered
    )
    assert "| `WOW_SERVICE_NAME` | `wow.service-name` | `str` (1 to 100 characters) |" in rendered
    assert "| `WOW_REDIS__KEY_PREFIX` | `wow.redis.key-prefix` | `str` (at most 100 characters) |" in rendered
    assert (
        "| `WOW_REDIS__CLAIM_INTERVAL` | `wow.redis.claim-interval` | `float | None` (> 0, <= 86400) |"
        in rendered
    )
    assert "| `WOW_NATS__MAX_AGE` | `wow.nats.max-age` | `float` (>= 0, <= 3153600000) |" in rendered
    assert "| `WOW_KAFKA__LINGER_MS` | `wow.kafka.linger-ms` | `int` (>= 0, <= 2147483647) |" in rendered
    assert (
        rendered.count("Bounds: every number is finite (`inf` and `nan` are refused); every text value is")
        >= 4
    )


def test_the_marker_is_replaced_and_other_pages_are_untouched(hook: ModuleType) -> None:
    page = (ROOT / "docs/configuration.md").read_text()
    assert hook.MARKER in page
    assert hook.MARKER not in hook.on_page_markdown(page, page=None, config=None, files=None)
    assert hook.on_page_markdown("# other", page=None) == "# other"


def test_plugin_sections_are_rendered_with_their_origin(hook: ModuleType) -> None:
    table = hook._table(probe_plugin.ProbeSettings, "WOW_PROBE__", "wow.probe.")
    assert "| `WOW_PROBE__PORT` | `wow.probe.port` | `int` (>= 1, <= 65535) | `7000` | A port. |" in table
    assert (
        "| `WOW_PROBE__TOKEN` | `wow.probe.token` | `SecretStr` (at least 4 characters) | *secret* |" in table
    )
    assert "`list[str]`" in table


def test_a_placeholder_in_a_description_is_text_not_an_html_tag(hook: ModuleType) -> None:
    rendered = hook.render()
    assert "<name>" not in rendered
    assert "&lt;name&gt;.command" in rendered


def test_settings_names_are_marked_to_break_only_between_their_parts(hook: ModuleType) -> None:
    page = (
        "<td><code>WOW_EVENT__BUS__LOCAL_FIRST__BACKLOG_HIGH_WATER_MARK</code></td>"
        "<code>wow.command.wait-timeout</code> <code>WOW_TRANSPORT</code> <code>WOW_A__B=1</code>"
    )
    marked = hook.on_page_content(page)
    assert (
        '<code class="wow-name" style="--wow-longest: 23ch"><span>WOW_EVENT__</span><wbr><span>BUS__</span>'
        "<wbr><span>LOCAL_FIRST__</span><wbr><span>BACKLOG_HIGH_WATER_MARK</span></code>"
    ) in marked
    # short enough to stay whole; a plain variable and an assignment are left alone
    assert (
        '<code class="wow-name" style="--wow-longest: 24ch"><span>wow.command.wait-timeout</span></code>'
        in marked
    )
    assert "<code>WOW_TRANSPORT</code> <code>WOW_A__B=1</code>" in marked
