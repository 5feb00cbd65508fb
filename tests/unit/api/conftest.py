"""Fixtures: an app around a fresh store directory, and test clients with and without the token."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")

API_TOKEN = "test-token-123"


@pytest.fixture
def store(tmp_path):
    return tmp_path / "store"


@pytest.fixture
def app(store):
    from caramba.api import create_app
    from caramba.config import Settings

    return create_app(Settings(store=str(store), api_token=API_TOKEN))


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
