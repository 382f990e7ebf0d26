"""The command line: parse, call discovery or the probe, hand the result to render.

typer stays inside this package; command modules import heavy code only inside
command bodies so that `--help` and completion stay fast.
"""
