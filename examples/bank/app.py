"""The bank service: ``wow run examples.bank.app:app``."""

from __future__ import annotations

from .domain import Account, Loan, Transfer
from .processor import LargeMovementAudit
from .projection import BankSummary
from .saga import Notice, TransferNoticeSaga

from wow_core import WowApp

app = WowApp(
    "bank",
    aggregates=[Account, Transfer, Notice],
    components=[BankSummary, TransferNoticeSaga, LargeMovementAudit],
    body_types=[Loan],
)
