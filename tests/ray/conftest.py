"""Ray tests run their Ray code in a subprocess inside ``../shared/tools/netns-run`` (a network
namespace with nothing but loopback), with usage stats and auth off. They skip, saying why,
where that is impossible (not root, no ``ip``, no Ray)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_NETNS_RUN = REPO.parent / "shared" / "tools" / "netns-run"
# tools/netns-run is a byte-identical copy of the shared tool, so CI machines without ../shared
# still run Ray inside a loopback-only namespace (test_vendored_netns_run_matches_shared checks it).
VENDORED_NETNS_RUN = REPO / "tools" / "netns-run"
NETNS_RUN = Path(
    os.environ.get("CARAMBA_NETNS_RUN", SHARED_NETNS_RUN if SHARED_NETNS_RUN.exists() else VENDORED_NETNS_RUN)
)


def _why_not() -> str | None:
    try:
        import ray  # noqa: F401
    except ImportError:
        return "ray is not installed (pip install 'caramba[ray]')"
    if not NETNS_RUN.exists():
        return f"{NETNS_RUN} not found (set CARAMBA_NETNS_RUN)"
    if shutil.which("ip") is None:
        return "netns-run needs iproute2 ('ip')"
    probe = subprocess.run([str(NETNS_RUN), "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"netns-run cannot create a loopback-only namespace: {probe.stderr.strip() or probe.returncode}"
    return None


@pytest.fixture(scope="session")
def netns_python():
    """``run(script, *args, timeout)`` -> the JSON object the script prints last."""
    reason = _why_not()
    if reason:
        pytest.skip(reason)

    def run(script: Path, *args: str, timeout: float = 600) -> dict:
        # short private temp dir: Ray's unix sockets must fit in 107 characters
        tmp = tempfile.mkdtemp(prefix="cray")
        env = {
            **os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": tmp,
            "PYTHONUNBUFFERED": "1",
        }
        try:
            proc = subprocess.run(
                [str(NETNS_RUN), sys.executable, str(script), *args],
                capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO,
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise AssertionError(
                f"{script.name} exited {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-8000:]}"
            )
        return json.loads(lines[-1])

    return run
