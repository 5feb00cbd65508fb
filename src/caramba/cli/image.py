"""``caramba image RUN``: sample a trained diffusion run and write the samples as a PNG grid."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("image")
    def image(
        run_id: str = typer.Argument(..., help="a diffusion run: its ID, an ID prefix, or latest"),
        n: int = typer.Option(16, "--n", help="number of samples (1..1024)"),
        seed: int = typer.Option(0, "--seed", help="the same seed gives the same samples on a backend"),
        out: Path = typer.Option(..., "--out", "-o", help="PNG file to write"),
        steps: int = typer.Option(None, "--steps", help="sampling steps (default: the training steps of the noise node)"),
        backend: str = typer.Option(None, "--backend", help="backend spec (default: the run's)"),
        scale: int = typer.Option(8, "--scale", help="each pixel becomes scale x scale pixels (cells are scale // 2 apart)"),
        cols: int = typer.Option(None, "--cols", help="images per row (default: a square grid)"),
        store: str = typer.Option(None, "--store", help="run store folder (default: the `store` setting)"),
        config: str = typer.Option(None, "--config", help="config file (default: ./caramba.yml, then ~/.caramba/config.yml)"),
    ) -> None:
        """Sample n images from a run trained with a diffusion.noise node, with the scheduler it
        trained with (DDPM ancestral steps or flow Euler steps), from its newest checkpoint."""
        from caramba.config import load_settings
        from caramba.diffusion.io import write_image
        from caramba.diffusion.sample import MAX_IMAGES, find_denoiser, load_run, sample
        from caramba.errors import ConfigError
        from caramba.store.runs import open_runs

        if not 1 <= n <= MAX_IMAGES:
            raise ConfigError(f"--n must be in 1..{MAX_IMAGES}, got {n}")
        runs = open_runs(load_settings(config, overrides={"store": store}).store)
        run = load_run(run_id, runs, denoiser=True)
        den = find_denoiser(run.prep)
        images = sample(den, run.params, n=n, seed=seed, steps=steps, backend=backend or run.backend)
        path = write_image(out, images, value_range=den.data_range, scale=scale, cols=cols, pad=max(1, scale // 2))
        typer.echo(f"wrote {path}: {n} samples of run {run.run_id} (step {run.step}, "
                   f"{den.config['scheduler']}, {steps or den.config['steps']} steps, seed {seed})")
