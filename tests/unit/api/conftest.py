"""Fixtures: an app around a fresh store directory, and test clients with and without the token."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")

API_TOKEN = "test-token-123"
TEST_HOSTS = ("testserver",)  # the Host header of FastAPI's test client


@pytest.fixture
def store(tmp_path):
    return tmp_path / "store"


@pytest.fixture
def app(store):
    from caramba.api import create_app
    from caramba.config import Settings

    return create_app(Settings(store=str(store), api_token=API_TOKEN), hosts=TEST_HOSTS)


@pytest.fixture
def client(app):
    from fastapi.testclient import TestClient

    with TestClient(app, headers={"Authorization": f"Bearer {API_TOKEN}"}) as c:
        yield c


@pytest.fixture
def anon(app):
    from fastapi.testclient import TestClient

    with TestClient(app) as c:
        yield c


@pytest.fixture
def token():
    return API_TOKEN


@contextmanager
def served(app):
    """``app`` served by uvicorn on a free 127.0.0.1 port, in a thread; yields its base URL."""
    import socket
    import threading
    import time

    uvicorn = pytest.importorskip("uvicorn", reason="the serve extra (uvicorn) is not installed")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def live_url(app):
    """``app`` served by uvicorn on a free 127.0.0.1 port (for real streaming and disconnects)."""
    with served(app) as url:
        yield url


@pytest.fixture
def serve():
    """``serve(app)``: a context manager that serves ``app`` on 127.0.0.1 and yields its URL."""
    return served
