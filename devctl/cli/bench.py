"""`devctl bench`: benchmarks (placeholder until transfer lands)."""

import typer

bench_app = typer.Typer(help="Benchmarks of the paths a JAX program uses.", no_args_is_help=True)
