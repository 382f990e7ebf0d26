"""Turning finished data into tables or JSON. Renderers never fetch data.

Commands print through emit(): a report's JSON document or its table, chosen in one place.
"""

from devctl.render.emit import emit

__all__ = ["emit"]
