"""Where discovery reads the machine from.

Every path under sysfs, /dev, /proc, /etc and /tmp that discovery reads goes
through a `HostRoot`, so `--host-root /host` inspects a host whose `/` is
mounted into a container, and tests build whole machines as directory trees.

A host root is read the way the host's own kernel would read it, and never
outside it: every path, and every symbolic link met on the way, is resolved
inside the root (an absolute link starts again at the root, `..` stops there;
safefs.within). Only regular files are opened, without blocking and at most a
capped number of bytes (safefs.read_regular): a FIFO, a device node or an
endless file put in the tree costs a missing value, never a hang. Device nodes
are looked at (exists, stat, access), never opened.

The real `/` keeps the kernel's own resolution (no extra system calls), but is
read under the same rules: another local user can plant a FIFO or a link in
/tmp or /dev/shm.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from functools import cached_property

from devctl.safefs import read_regular, within

_DEFAULT_LIMIT = 1 << 16


@dataclass(frozen=True)
class HostRoot:
    root: str = "/"

    @cached_property
    def is_real(self) -> bool:
        return self._real_root == "/"

    @cached_property
    def _real_root(self) -> str:
        return os.path.realpath(self.root)

    def local(self, absolute: str) -> str | None:
        """The path on this machine of the host's `absolute`, every link in it resolved inside the root;
        None when it is missing or its links loop. On the real root: `absolute` itself, as the kernel resolves it."""
        if self.is_real:
            return absolute
        return within(self._real_root, absolute, root_is_resolved=True)

    def read_bytes(self, absolute: str, limit: int = _DEFAULT_LIMIT) -> bytes | None:
        """The first `limit` bytes of the regular file at `absolute`; None when absent, not a regular file
        (a FIFO, a device, a directory) or unreadable."""
        local = self.local(absolute)
        if local is None:
            return None
        try:
            # On a host root `local` has no link left in it, so not following one costs nothing and
            # closes the last component to a link swapped in after it was resolved.
            return read_regular(local, limit, follow_symlinks=self.is_real, truncate=True)
        except OSError:
            return None

    def read_text(self, absolute: str, limit: int = _DEFAULT_LIMIT) -> str | None:
        """The file's text, stripped, or None when it is absent, unreadable or not a regular file."""
        data = self.read_bytes(absolute, limit)
        return None if data is None else data.decode("utf-8", errors="replace").strip()

    def exists(self, absolute: str) -> bool:
        """Whether `absolute` names something. Under a host root a link counts only if it leads to something
        inside the root; on the real root a dangling link counts, as before."""
        if self.is_real:
            return os.path.lexists(absolute)
        return self.local(absolute) is not None

    def stat(self, absolute: str) -> os.stat_result | None:
        """stat of what `absolute` names (links followed inside the root); never opens it."""
        local = self.local(absolute)
        if local is None:
            return None
        try:
            return os.stat(local)
        except OSError:
            return None

    def listdir(self, absolute: str) -> list[str]:
        """The directory's entries, sorted; [] when it is absent or not a directory (listing never opens
        a FIFO: the kernel refuses a non-directory before opening it)."""
        local = self.local(absolute)
        if local is None:
            return []
        try:
            return sorted(os.listdir(local))
        except OSError:
            return []

    def readlink(self, absolute: str) -> str | None:
        """The host path the symbolic link at `absolute` points to, made absolute as the host's kernel would
        (relative to the link's directory; `..` stops at /), without reading or following the target, which
        may be absent. None when `absolute` is not a link."""
        directory, name = posixpath.split(absolute.rstrip("/"))
        local_dir: str | None
        if self.is_real:
            local_dir = os.path.realpath(directory)
            host_dir = local_dir
        else:
            local_dir = self.local(directory)
            if local_dir is None:
                return None
            rel = os.path.relpath(local_dir, self._real_root)
            host_dir = "/" if rel == "." else "/" + rel
        try:
            target = os.readlink(os.path.join(local_dir, name))
        except OSError:
            return None
        return posixpath.normpath(posixpath.join(host_dir, target))

