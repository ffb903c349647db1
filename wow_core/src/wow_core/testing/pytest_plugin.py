"""The pytest plugin of wow-core (entry point ``pytest11: wow_conformance``).

It gives plugin authors the transport conformance suite; the fixtures land with it.
"""
