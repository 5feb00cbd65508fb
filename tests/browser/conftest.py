"""A live `caramba serve` app on 127.0.0.1 and a headless Chromium driven by Playwright.

Chromium comes from the system (Debian's ``chromium``; Playwright's own browser download is not
used). Without a chromium binary, or without playwright, the browser tests skip and say why.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "browser"
TOKEN = "browser-test-token"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-quic",
]


def chromium_binary() -> str | None:
    explicit = os.environ.get("CARAMBA_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else None


@pytest.fixture(scope="session")
def chromium_path():
    path = chromium_binary()
    if path is None:
        pytest.skip("no chromium binary found (install Debian's chromium: apt-get install chromium, "
                    "or set CARAMBA_CHROMIUM); the UI was not tested in a browser")
    return path


@pytest.fixture(scope="session")
def browser(chromium_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    with sync_api.sync_playwright() as pw:  # Playwright gives the browser a fresh temporary profile
        b = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS, timeout=60_000)
        yield b
        b.close()


@pytest.fixture
def live_server(tmp_path):
    """The app served by uvicorn on a free loopback port; yields its base URL."""
    pytest.importorskip("uvicorn", reason="the serve extra (uvicorn) is not installed")
    import uvicorn

    from caramba.api import create_app
    from caramba.config import Settings

    app = create_app(Settings(store=str(tmp_path / "store"), api_token=TOKEN))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=15)
    sock.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    # Chromium also logs every 4xx answer as a console error; those are expected (the UI shows them).
    pg.on("console", lambda msg: errors.append(msg.text)
          if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
    pg.js_errors = errors
    yield pg
    context.close()


@pytest.fixture
def login(page, live_server):
    """Open the UI with the token in the fragment (as `caramba serve` prints it); returns the base URL."""
    page.goto(f"{live_server}/#token={TOKEN}")
    page.wait_for_function("() => location.hash === '#/'")
    return live_server


@pytest.fixture
def artifacts():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
