"""Turning finished data into tables or JSON. Renderers never fetch data."""
