"""devctl's version, in a module of its own: any layer may import it without importing the package's facade
(devctl/__init__.py, which reaches into collect/ for devctl.inventory()).

The one definition of the version: pyproject.toml reads `__version__` from here (setuptools' `attr:`, which
parses this file without importing it), so a wheel, an editable install and a source tree on PYTHONPATH all
say the same, and no command pays for importlib.metadata to learn it.
"""

# The distribution's name on the package registry: `pip install jax-devctl`. The registry's `devctl` is
# another project with the same import package name; the command and the import package stay `devctl`.
DISTRIBUTION = "jax-devctl"

__version__ = "0.1.0"
