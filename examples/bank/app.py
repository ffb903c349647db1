"""The bank service: ``wow run wow_core.examples.bank.app:app``."""

from __future__ import annotations

from wow_core import WowApp

from .domain import Account, Loan, Transfer
from .processor import LargeMovementAudit
from .projection import BankSummary
from .saga import Notice, TransferNoticeSaga

app = WowApp(
    "bank",
    aggregates=[Account, Transfer, Notice],
    components=[BankSummary, TransferNoticeSaga, LargeMovementAudit],
    body_types=[Loan],
)
