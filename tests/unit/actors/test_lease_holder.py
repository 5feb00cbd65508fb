"""An experiment stops recording evidence once the worker process holding its lease is gone
(the lease itself lives until its TTL): tests/ray/test_ray_cluster.py's killed worker used to
leave a checkpoint behind in that window."""

from __future__ import annotations

import socket
import subprocess
import sys

from caramba.actors.experiment import _holder_alive
from caramba.store.runs import this_process


def test_a_dead_holder_is_seen_and_a_live_or_remote_one_is_not():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()  # exited and reaped: that pid is free
    assert _holder_alive(this_process())
    assert not _holder_alive(f"{socket.gethostname()}:{p.pid}")
    assert _holder_alive("another-host:1")  # not checkable here: the lease's TTL decides
    assert _holder_alive("")
