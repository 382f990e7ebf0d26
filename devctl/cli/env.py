"""`devctl env`: versions and environment variables, without initializing any backend."""

from __future__ import annotations

from devctl.cli.options import JsonOpt


def env(json_out: JsonOpt = False) -> None:
    """Versions of everything and the environment variables that change JAX's device behaviour."""
    from devctl.collect.env import collect_environment
    from devctl.render import emit

    emit(collect_environment(), json_out)
