"""wow_otel: see the package README and docs."""

__version__ = "0.1.0"
