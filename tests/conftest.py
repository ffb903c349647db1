"""Suite-wide collection rules.

The suite runs on pytest-xdist workers (``./scripts/test`` passes ``-n`` and
``--dist loadgroup``). Every test module is one distribution group, so a module's
shared members, brokers and module-scoped fixtures start once, on one worker; the
packaging tests are one group together, so the session's wheelhouse is built once.
A test that names its own ``xdist_group`` keeps it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_PACKAGING = Path(__file__).parent / "packaging"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        path = Path(str(item.path))
        group = "packaging" if _PACKAGING in path.parents else path.relative_to(config.rootpath).as_posix()
        item.add_marker(pytest.mark.xdist_group(group))
