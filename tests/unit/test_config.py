"""Settings: defaults < config file < CARAMBA_* environment < flags, each with its source."""

import pytest

from caramba.config import load_settings
from caramba.errors import ConfigError


def test_precedence_and_sources(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "caramba.yml").write_text("backend: cpu:threads=1\nserve_port: 9000\n")
    monkeypatch.setenv("CARAMBA_SERVE_PORT", "9100")
    s = load_settings(overrides={"api_token": "t0k"})
    assert s.backend == "cpu:threads=1" and s.sources["backend"].endswith("caramba.yml")
    assert s.serve_port == 9100 and s.sources["serve_port"] == "CARAMBA_SERVE_PORT"
    assert s.api_token == "t0k" and s.sources["api_token"] == "flag"
    assert s.sources["serve_host"] == "default" and s.serve_host == "127.0.0.1"


def test_unknown_setting_in_file_is_an_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "caramba.yml").write_text("backnd: cpu\n")
    with pytest.raises(ConfigError, match="unknown setting 'backnd'.*did you mean 'backend'"):
        load_settings()


def test_bad_value_names_its_source(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CARAMBA_SERVE_PORT", "eighty")
    with pytest.raises(ConfigError, match="serve_port.*CARAMBA_SERVE_PORT"):
        load_settings()
