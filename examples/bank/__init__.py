"""A small bank: accounts and transfers. ``wow demo`` runs it; ``wow run examples.bank.app:app`` serves it."""
