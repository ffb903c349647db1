"""The examples that ship with wow-core: ``wow_core.examples.bank`` (``wow demo`` runs it).

In a source checkout ``bank`` is a symbolic link to ``examples/bank``, its only source;
the wow-core wheel carries a copy.
"""
