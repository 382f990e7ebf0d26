"""The name earlier releases documented for the in-job publisher: `devctl.monitor.publish()` is
`devctl.publish.publish()`, and the two modules share one publisher."""

from devctl.publish import Publisher, current, publish, snapshot, stop

__all__ = ["Publisher", "publish", "snapshot", "stop", "current"]
