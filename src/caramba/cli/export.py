"""``caramba export RUN`` (a trained model as ONNX or safetensors) and ``caramba research
export --to mlflow DIR`` (runs into an MLflow store)."""

from __future__ import annotations

from pathlib import Path

import typer

STORE_HELP = "run store folder (default: the `store` setting)"
CONFIG_HELP = "config file (default: ./caramba.yml, then ~/.caramba/config.yml)"
TRACKERS = ("mlflow",)


def _runs(config: str | None, store: str | None):
    from caramba.config import load_settings
    from caramba.store.runs import open_runs

    return open_runs(load_settings(config, overrides={"store": store}).store)


def register(app: typer.Typer) -> None:
    @app.command("export")
    def export(
        run_id: str = typer.Argument(..., help="a run ID (or unique prefix, or latest) with a checkpoint"),
        fmt: str = typer.Option("onnx", "--format", "-f",
                                help="onnx: an inference graph with the weights baked in (dynamic batch); "
                                     "safetensors: parameters in torch.nn layouts"),
        dtype: str = typer.Option(None, "--dtype", help="float64 or float32 (default: the model's)"),
        out: Path = typer.Option(None, "--out", "-o", help="file to write (default: RUN.onnx / RUN.safetensors)"),
        output: list[str] = typer.Option(None, "--output",
                                         help="onnx: a published value to output (default: every output that "
                                              "is not a loss or metric); repeatable"),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Write a run's trained model for inference elsewhere: ONNX (labels, losses and metrics
        left out; ONNX Runtime computes what caramba computes) or safetensors (torch.nn layouts,
        no optimizer state, name map in the metadata). `caramba model export` writes a Hugging
        Face folder."""
        from caramba.errors import ConfigError
        from caramba.export import FORMATS

        runs = _runs(config, store)
        if fmt not in FORMATS:
            raise ConfigError(f"unknown --format {fmt!r}; caramba export writes: {', '.join(FORMATS)}")
        if fmt == "onnx":
            from caramba.export.to_onnx import export_onnx

            path = export_onnx(run_id, out, store=runs, dtype=dtype, outputs=output or None)
        else:
            if output:
                raise ConfigError("--output picks outputs of an ONNX graph; safetensors holds parameters only")
            from caramba.export.to_safetensors import export_safetensors

            path = export_safetensors(run_id, out, store=runs, dtype=dtype)
        typer.echo(f"wrote {path}")


def register_research_export(group: typer.Typer) -> None:
    """``caramba research export`` on the ``research`` command group."""

    @group.command("export")
    def research_export(
        target: Path = typer.Argument(..., metavar="DIR", help="the tracker's store folder (created if missing)"),
        runs_: list[str] = typer.Argument(None, metavar="[RUN...]", help="run IDs (or unique prefixes, or latest)"),
        to: str = typer.Option("mlflow", "--to", help="the tracker: mlflow (a file store)"),
        experiment: str = typer.Option(None, "--experiment", "-e", help="every run of this experiment"),
        artifacts: bool = typer.Option(True, "--artifacts/--no-artifacts",
                                       help="copy the runs' files (manifest, checkpoints, plots) too"),
        store: str = typer.Option(None, "--store", help=STORE_HELP),
        config: str = typer.Option(None, "--config", help=CONFIG_HELP),
    ) -> None:
        """Write runs (params, metric histories with steps, artifacts) into an experiment
        tracker's store: `--to mlflow DIR` makes an MLflow file store (needs `caramba[mlflow]`);
        runs already there are skipped."""
        from caramba.errors import ConfigError

        if to not in TRACKERS:
            raise ConfigError(f"unknown tracker --to {to!r}; caramba research export writes: {', '.join(TRACKERS)}")
        from caramba.export.to_mlflow import export_mlflow

        res = export_mlflow(target, runs_ or (), experiment=experiment, store=_runs(config, store),
                            artifacts=artifacts)
        typer.echo(res.as_text())


__all__ = ["register", "register_research_export"]
