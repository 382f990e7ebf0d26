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
    """Bad input: a flag value, an environment variable, a config file, an output path. Raised in cli/ only,
    where every flag is parsed; the layers below take typed values."""

    exit_code = ExitCode.USAGE


class InputRejected(DevctlError):
    """Input that parsed, but that only facts of this machine can refuse: a device id it does not have,
    a snapshot directory that is not private, a size its memory cannot hold. Raised below cli/; bad input
    all the same, so exit 2."""

    exit_code = ExitCode.USAGE
