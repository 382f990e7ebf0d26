"""A real JAX job for the tests: a script run on forced CPU devices that publishes into a given snapshot
directory (devctl.publish), started and waited for until it prints its first line, and stopped with SIGINT."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from conftest import devctl_env
from test_monitor import START_TIMEOUT_S, _readline, foreground


class PublishingJob:
    def __init__(self, tmp_path: Path, runtime: Path, source: str, *args: str, name: str = "job.py", devices: int = 4, inline: bool = False):
        """inline: run the source as `python -c SOURCE ARGS` rather than as the script `name`."""
        self.script = tmp_path / name
        self.script.write_text(source)
        env = devctl_env(devices, DEVCTL_RUNTIME_DIR=str(runtime))
        argv = [sys.executable, "-c", source, *args] if inline else [sys.executable, str(self.script), *args]
        self.proc = subprocess.Popen(foreground(argv), env=env, cwd=tmp_path,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        self.first = json.loads(_readline(self.proc, START_TIMEOUT_S))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """SIGINT (a clean exit: its publisher removes its snapshot), then a kill if it does not go."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream and not stream.closed:
                stream.close()
