"""`caramba manifest validate|render`, `caramba asset list|show`, `caramba config show`."""

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from caramba.cli import app
from caramba.manifest import ManifestError
from caramba.manifest.compile import check

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
ENV = {"COLUMNS": "200"}


def invoke(*args, env=None):
    return CliRunner().invoke(app, list(args), env={**ENV, **(env or {})})


def test_validate_prints_a_summary_line():
    r = invoke("manifest", "validate", str(EXAMPLES / "digits_mlp.yml"))
    assert r.exit_code == 0, r.output
    assert "ok" in r.output and "experiment 'digits-mlp'" in r.output and "9,610 values" in r.output


def test_validate_reports_a_located_error(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text((EXAMPLES / "digits_mlp.yml").read_text().replace("op: activation.gelu", "op: activation.gleu"))
    r = invoke("manifest", "validate", str(bad))
    assert isinstance(r.exception, ManifestError)
    assert "bad.yml:19:22:" in str(r.exception) and "did you mean 'activation.gelu'" in str(r.exception)


def test_cli_main_prints_errors_without_a_traceback(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("name: x\ntopology:\n  nodes: []\n  bogus: 1\n")
    code = "import sys; from caramba.cli import main; sys.argv = ['caramba', 'manifest', 'validate', sys.argv[1]]; main()"
    p = subprocess.run([sys.executable, "-c", code, str(bad)], capture_output=True, text=True, env={"COLUMNS": "200"})
    assert p.returncode == 2, p.stderr
    assert "bad.yml:4:3" in p.stderr and "unknown key 'bogus'" in p.stderr and "Traceback" not in p.stderr


def test_render_expands_and_applies_overrides():
    r = invoke("manifest", "render", str(EXAMPLES / "digits_mlp.yml"), "--set", "variables.hidden=7", "-f", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["topology"]["nodes"][0]["config"] == {"out_features": 7} and "variables" not in data
    r = invoke("manifest", "render", str(EXAMPLES / "digits_mlp.yml"), "--ir", "--batch", "3")
    assert r.exit_code == 0, r.output
    assert "%fc1.matmul = linalg.matmul" in r.output and "f64[3,10]" in r.output


def test_asset_list_and_show():
    r = invoke("asset", "list", "model")
    assert r.exit_code == 0 and "model.gpt2_small" in r.output and "projection.linear" not in r.output
    r = invoke("asset", "show", "model.gpt2_small")
    assert r.exit_code == 0, r.output
    assert "124,439,808 values" in r.output and "vocab_size" in r.output
    r = invoke("asset", "show", "projection.linear", "--source")
    assert r.output.startswith("kind: operation")
    r = invoke("asset", "show", "manifest.tune")
    assert r.exit_code == 0 and r.output.startswith("# manifest.tune: ")
    prep, _ = check(r.output)  # `caramba asset show manifest.tune > my.yml` gives a runnable manifest
    assert len(prep.manifest.tuner.arms) == 3
    r = invoke("asset", "show", "projection.linaer")
    assert "did you mean 'projection.linear'" in str(r.exception)


def test_config_show_names_sources(tmp_path):
    cfg = tmp_path / "c.yml"
    cfg.write_text("serve_port: 9001\n")
    r = invoke("config", "show", "--config", str(cfg), "--json", env={"CARAMBA_BACKEND": "cpu:threads=1"})
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["serve_port"] == {"value": 9001, "source": str(cfg)}
    assert data["backend"] == {"value": "cpu:threads=1", "source": "CARAMBA_BACKEND"}
    assert data["serve_host"]["source"] == "default"
