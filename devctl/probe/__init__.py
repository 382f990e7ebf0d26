"""Everything that loads jax or a PJRT library runs here, in a spawned child.

The CLI process never initializes a backend: `runner.run_child` starts
`python -m devctl.probe.<task>`, reads its JSON events from a private pipe and
bounds it with a watchdog, so a plugin that hangs, aborts or segfaults costs a
status row, not the CLI.
"""
