"""Backend registry and config strings: unknown names and options list the valid ones."""

import types

import pytest

from caramba.compute import BuildInfo, Option, new, parse_spec, registry
from caramba.errors import BackendUnavailable, ConfigError


def test_parse_name_and_options():
    assert parse_spec("cpu") == ("cpu", {})
    assert parse_spec("cpu:threads=2") == ("cpu", {"threads": 2})
    assert parse_spec("cpu:threads=1,debug") == ("cpu", {"threads": 1, "debug": True})


def test_unknown_backend_lists_valid_ones():
    with pytest.raises(ConfigError, match="unknown backend 'cpuu'.*did you mean 'cpu'"):
        parse_spec("cpuu")


@pytest.mark.parametrize(
    "spec, message",
    [
        ("cpu:thread=2", "unknown option 'thread' for backend cpu; valid options: debug, threads"),
        ("cpu:threads", "needs a value"),
        ("cpu:threads=two", "expected int"),
        ("cpu:threads=0", "must be positive"),
        ("cpu:threads=99999999999999999999", "is above its limit 1024"),
        ("cpu:debug=yes", "takes no value"),
        ("cpu:threads=1,threads=2", "given twice"),
        ("", "empty backend spec"),
    ],
)
def test_bad_options_are_errors(spec, message):
    with pytest.raises(ConfigError, match=message):
        parse_spec(spec)


def test_environment_selects_the_default_backend(monkeypatch):
    monkeypatch.setenv("CARAMBA_BACKEND", "cpu:threads=1")
    r = new()
    try:
        assert r.location == "cpu" and r.threads == 1
    finally:
        r.close()


def test_unavailable_backend_is_never_replaced(monkeypatch):
    fake = types.ModuleType("fake_backend")
    fake.OPTIONS = (Option("cpu", "flag"),)
    fake.build_info = lambda: BuildInfo("fake", False, reason="no device here", install_hint="pip install fake")

    def create(options):  # pragma: no cover - must never be called
        raise AssertionError("create() called for an unavailable backend")

    fake.create = create
    monkeypatch.setitem(registry.BACKENDS, "fake", "fake_backend")
    monkeypatch.setitem(__import__("sys").modules, "fake_backend", fake)
    with pytest.raises(BackendUnavailable, match="no device here") as info:
        new("fake:cpu")
    assert "pip install fake" in str(info.value)
