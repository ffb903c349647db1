"""wow-core: the broker-neutral core of wow-py.

The public API is re-exported from the sub-packages named after the concepts of the
specification (``wow_core.model``, ``wow_core.messaging``, ``wow_core.transport``, ...).
"""

__version__ = "0.1.0"
