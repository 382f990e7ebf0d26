"""The `devctl bench` group: each bench command lives in a module of its own (devctl/cli/bench_transfer.py,
bench_collective.py, bench_memory.py, bench_matmul.py), the options they share in devctl/cli/bench_options.py."""

from __future__ import annotations

import typer

from devctl.cli.bench_collective import collective
from devctl.cli.bench_matmul import matmul
from devctl.cli.bench_memory import memory
from devctl.cli.bench_transfer import transfer

bench_app = typer.Typer(help="Benchmarks of the paths a JAX program uses.", no_args_is_help=True)
bench_app.command("transfer")(transfer)
bench_app.command("collective")(collective)
bench_app.command("memory")(memory)
bench_app.command("matmul")(matmul)
