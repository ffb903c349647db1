"""eventsourcing."""
