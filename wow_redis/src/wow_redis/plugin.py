"""The wow_redis plugin module (entry point group ``wow``).

It registers nothing yet; the issue that builds this package adds its hooks here.
"""
