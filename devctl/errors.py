"""Errors that reach the user as one line, and the exit codes they map to."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    FAILURE = 1  # the failure the command exists to report
    USAGE = 2  # bad input or usage
    INTERRUPTED = 130


class DevctlError(Exception):
    """An expected failure, printed as one line without a traceback."""

    exit_code = ExitCode.FAILURE


class UsageError(DevctlError):
    """Bad input: a flag value, an environment variable, a config file, an output path."""

    exit_code = ExitCode.USAGE
