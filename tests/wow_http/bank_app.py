"""The test bank as a service: ``wow run tests.wow_http.bank_app:app``."""

from __future__ import annotations

from tests.accounts import Account
from wow_core.runtime.app import WowApp

app = WowApp("bank", aggregates=[Account])
