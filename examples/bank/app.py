"""The bank service: ``wow run examples.bank.app:app``."""

from __future__ import annotations

from examples.bank.domain import Account, Loan, Transfer
from examples.bank.processor import LargeMovementAudit
from examples.bank.projection import BankSummary
from examples.bank.saga import Notice, TransferNoticeSaga

from wow_core import WowApp

app = WowApp(
    "bank",
    aggregates=[Account, Transfer, Notice],
    components=[BankSummary, TransferNoticeSaga, LargeMovementAudit],
    body_types=[Loan],
)
