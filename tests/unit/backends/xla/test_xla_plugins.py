"""PJRT plugin lookup from caramba's settings: platform file, then shared file, then names in
library dirs. Pure path logic: needs no jax and no GPU."""

from __future__ import annotations

import pytest

from caramba.backends.xla import plugins
from caramba.config import Settings
from caramba.errors import BackendUnavailable, ConfigError


def settings(**kw) -> Settings:
    return Settings(**kw)


@pytest.fixture(autouse=True)
def no_env_dirs(monkeypatch):
    monkeypatch.delenv("PJRT_PLUGIN_LIBRARY_PATH", raising=False)
    monkeypatch.setattr(plugins, "_package_dirs", lambda platform: [])


def touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF")
    return path


def test_cpu_is_the_builtin_client():
    c = plugins.locate("cpu", settings())
    assert c.found and c.path is None and "built into jaxlib" in c.describe()


def test_platform_file_comes_first(tmp_path):
    own, shared = touch(tmp_path / "gpu.so"), touch(tmp_path / "shared.so")
    lib = touch(tmp_path / "lib" / "pjrt_c_api_gpu_plugin.so")
    s = settings(
        xla_plugin_file=f"cuda={own}", xla_shared_plugin_file=str(shared), xla_library_dirs=str(lib.parent)
    )
    c = plugins.locate("cuda", s)
    assert c.path == str(own) and "xla_plugin_file" in c.source


def test_shared_file_before_library_search(tmp_path):
    shared = touch(tmp_path / "shared.so")
    lib = touch(tmp_path / "lib" / "pjrt_c_api_gpu_plugin.so")
    c = plugins.locate("cuda", settings(xla_shared_plugin_file=str(shared), xla_library_dirs=str(lib.parent)))
    assert c.path == str(shared) and c.source == "xla_shared_plugin_file"


def test_names_searched_in_library_dirs_in_order(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    touch(second / "my_plugin.so")
    s = settings(xla_plugin_names="other.so, my_plugin.so", xla_library_dirs=f"{first},{second}")
    c = plugins.locate("cuda", s)
    assert c.path == str(second / "my_plugin.so") and not c.auto
    assert str(first / "other.so") in c.searched


def test_default_names_and_env_dirs(tmp_path, monkeypatch):
    lib = touch(tmp_path / "pjrt" / "xla_cuda_plugin.so")
    monkeypatch.setenv("PJRT_PLUGIN_LIBRARY_PATH", str(lib.parent))
    c = plugins.locate("cuda", settings())
    assert c.path == str(lib) and "PJRT_PLUGIN_LIBRARY_PATH" in c.source


def test_installed_jax_plugin_package_is_left_to_jax(tmp_path, monkeypatch):
    lib = touch(tmp_path / "xla_cuda12" / "xla_cuda_plugin.so")
    monkeypatch.setattr(plugins, "_package_dirs", lambda platform: [(str(lib.parent), "jax_plugins.xla_cuda12")])
    c = plugins.locate("cuda", settings())
    assert c.path == str(lib) and c.auto


def test_nothing_found_lists_what_was_searched(tmp_path):
    c = plugins.locate("cuda", settings(xla_library_dirs=str(tmp_path)))
    assert not c.found
    assert "no plugin found" in c.describe() and str(tmp_path / "xla_cuda_plugin.so") in c.describe()


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"xla_plugin_file": "/nowhere.so"}, "must be platform=path"),
        ({"xla_plugin_file": "tpu=/x.so"}, "unknown platform 'tpu'"),
        ({"xla_plugin_file": "cpu=/x.so"}, "takes no plugin file"),
        ({"xla_plugin_file": "cuda=/definitely/missing.so"}, "does not exist"),
        ({"xla_shared_plugin_file": "/definitely/missing.so"}, "does not exist"),
    ],
)
def test_misconfiguration_is_an_error(kw, message):
    with pytest.raises(ConfigError, match=message):
        plugins.locate("cuda", settings(**kw))


def test_xla_cuda_without_a_plugin_is_unavailable(tmp_path, monkeypatch):
    pytest.importorskip("jax")
    from caramba import compute

    monkeypatch.setenv("CARAMBA_XLA_LIBRARY_DIRS", str(tmp_path))
    with pytest.raises(BackendUnavailable, match="xla:cuda' is not available here: no plugin found"):
        compute.new("xla:cuda")
