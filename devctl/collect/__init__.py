"""Assembly: one module per command, the only place where a command's parts meet.

Each module calls discovery (the machine, without jax) and the probe (jax, in a
child) and returns one report from devctl.model; cli/ calls one collector and
hands its report to render/. Collectors take typed values: flags are parsed
and validated in cli/ only.
"""
