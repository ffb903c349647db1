"""The bank service: ``wow run examples.bank.app:app``."""

from __future__ import annotations

from examples.bank.domain import Account, Transfer

from wow_core.runtime.app import WowApp

app = WowApp("bank", aggregates=[Account, Transfer])
