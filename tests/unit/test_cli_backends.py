"""`caramba backends` lists every registered backend with its availability."""

from typer.testing import CliRunner

from caramba.cli import app
from caramba.compute import BACKENDS


def test_backends_command_lists_every_backend():
    result = CliRunner().invoke(app, ["backends"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in BACKENDS:
        assert name in result.output
    assert "numpy" in result.output  # cpu build info shows its versions
