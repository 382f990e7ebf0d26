"""`devctl env`: versions and environment variables, without initializing any backend."""

from __future__ import annotations

from devctl.cli.options import JsonOpt


def env(json_out: JsonOpt = False) -> None:
    """Versions of everything and the environment variables that change JAX's device behaviour."""
    from devctl.collect.env import collect_environment

    rep = collect_environment()
    if json_out:
        from devctl.model import to_jsonable
        from devctl.render.console import print_json

        print_json(to_jsonable(rep))
    else:
        from devctl.render.env import render_environment

        render_environment(rep)
