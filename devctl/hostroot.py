"""Where discovery reads the machine from.

Every path under sysfs, /dev, /proc, /etc and /tmp that discovery reads goes
through a `HostRoot`, so `--host-root /host` inspects a host whose `/` is
mounted into a container, and tests build whole machines as directory trees.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class HostRoot:
    root: str = "/"

    @property
    def is_real(self) -> bool:
        return os.path.realpath(self.root) == "/"

    def path(self, absolute: str) -> str:
        """Map an absolute path on the inspected host to a path on this machine."""
        return os.path.join(self.root, absolute.lstrip("/"))

    def read_text(self, absolute: str, limit: int = 1 << 16) -> str | None:
        """The file's text, stripped, or None when it is absent or unreadable."""
        try:
            with open(self.path(absolute), encoding="utf-8", errors="replace") as f:
                return f.read(limit).strip()
        except OSError:
            return None

    def exists(self, absolute: str) -> bool:
        return os.path.lexists(self.path(absolute))

    def listdir(self, absolute: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(absolute)))
        except OSError:
            return []

    def unmap(self, local: str) -> str:
        """Inverse of `path`: the host's absolute path for a path on this machine."""
        if self.is_real:
            return local
        rel = os.path.relpath(local, self.root)
        return "/" + rel if not rel.startswith("..") else local
