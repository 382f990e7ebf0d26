"""A fix as data: what a program (or the oracle tests) can carry out, before it is a line for people.

A fix's line may offer ways that each work ("set JAX_PLATFORMS=cpu, or pip uninstall jax-cuda12-plugin
jax-cuda12-pjrt"): each way is one Remedy, and any one of them makes JAX do what the fix promises. The line
is written from the Remedy (pip_command), so the words and the data never part.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

# An argument a shell would take apart (extras in brackets, version comparisons): quoted in the text.
_SHELL_SYNTAX = re.compile(r"[\[\]<>=!~*;&|()$`\"' ]")


@dataclass(frozen=True)
class Remedy:
    """One way to carry out a fix: an environment change, pip commands, or both (the environment first)."""

    env: dict[str, str | None] = field(default_factory=dict)  # variable -> its new value; None: unset it
    # pip commands in order, each its arguments after `pip` as a person types them (`pip uninstall` asks first;
    # a program adds -y), e.g. [["install", "-U", "jax[cuda12]==0.10.2"]].
    pip: list[list[str]] = field(default_factory=list)


def pip_command(args: Sequence[str]) -> str:
    """`pip ARGS` as a person types it: a requirement with brackets or a comparison quoted."""
    return " ".join(["pip", *(_quoted(a) for a in args)])


def _quoted(value: str) -> str:
    return f"'{value}'" if _SHELL_SYNTAX.search(value) or not value else value


def env_remedy(change: dict[str, str | None] | None) -> tuple[Remedy, ...]:
    return (Remedy(env=dict(change)),) if change else ()


def pip_remedy(*commands: Sequence[str]) -> tuple[Remedy, ...]:
    return (Remedy(pip=[list(c) for c in commands]),) if commands else ()
