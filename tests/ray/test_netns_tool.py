"""The vendored tools/netns-run is the shared loopback-only namespace tool, unchanged."""

import pytest

from .conftest import SHARED_NETNS_RUN, VENDORED_NETNS_RUN


def test_vendored_netns_run_matches_shared():
    if not SHARED_NETNS_RUN.exists():
        pytest.skip(f"{SHARED_NETNS_RUN} is not on this machine; the vendored copy is used")
    assert VENDORED_NETNS_RUN.read_bytes() == SHARED_NETNS_RUN.read_bytes()
