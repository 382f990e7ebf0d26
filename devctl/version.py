"""devctl's version, in a module of its own: any layer may import it without importing the package's facade
(devctl/__init__.py, which reaches into collect/ for devctl.inventory())."""

__version__ = "0.1.0"
