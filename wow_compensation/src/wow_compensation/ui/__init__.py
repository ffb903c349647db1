"""The operations page of event compensation: an ASGI app (starlette), mountable into any
ASGI app, and the server ``wow run`` serves it with (``WOW_COMPENSATION__UI__ENABLED``).

Needs the ``ui`` extra: ``pip install "wow-compensation[ui]"``.
"""

from __future__ import annotations

from wow_compensation.ui.app import Operations, create_app
from wow_compensation.ui.server import OperationsServer

__all__ = ["Operations", "OperationsServer", "create_app"]
