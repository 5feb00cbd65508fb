"""A short diffusion training run, then `caramba image` samples it into a PNG grid; bad inputs."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from caramba.cli import app
from caramba.diffusion.io import as_images, grid_size, write_image
from caramba.diffusion.sample import find_denoiser, load_run, sample
from caramba.errors import ConfigError
from caramba.manifest.experiment import run_experiment
from caramba.store import RunStore

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="needs scikit-learn (caramba[data])"),
    pytest.mark.skipif(importlib.util.find_spec("PIL") is None, reason="needs Pillow (caramba[image])"),
]


def train(store: RunStore, manifest: str = "digits_diffusion.yml", *sets: str) -> str:
    res = run_experiment(EXAMPLES / manifest, ["trainer.steps=20", "trainer.eval_every=0", *sets], store=store)
    assert res.ok, [r.error for r in res.runs]
    return res.runs[0].run_id


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    return root, train(RunStore(root))


def image(root, *args):
    return CliRunner().invoke(app, ["image", *args, "--store", str(root)])


def test_image_writes_a_png_grid_of_the_right_size(trained, tmp_path):
    from PIL import Image

    root, run_id = trained
    out = tmp_path / "grid.png"
    res = image(root, run_id, "--n", "6", "--seed", "0", "-o", str(out), "--steps", "10", "--backend", "cpu",
                "--scale", "3")
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert "6 samples" in res.output and "flow, 10 steps" in res.output
    with Image.open(out) as im:
        assert im.format == "PNG" and im.mode == "L"
        assert im.size == grid_size(6, 8, 8, scale=3) == (3 * 24 + 4, 2 * 24 + 3)  # 3 columns, 2 rows, 1 px lines
    again = tmp_path / "again.png"
    assert image(root, "latest", "--n", "6", "--seed", "0", "-o", str(again), "--steps", "10",
                 "--scale", "3").exit_code == 0
    assert again.read_bytes() == out.read_bytes()  # same seed, same samples
    other = tmp_path / "other.png"
    assert image(root, run_id, "--n", "6", "--seed", "1", "-o", str(other), "--steps", "10", "--scale", "3").exit_code == 0
    assert other.read_bytes() != out.read_bytes()


def test_samples_are_in_the_data_range_and_stay_resident(trained):
    root, run_id = trained
    run = load_run(run_id, RunStore(root))
    den = find_denoiser(run.prep)
    assert den.data_range == (0.0, 1.0) and den.example_shape == (64,) and den.prediction == "pred"
    assert den.names["x_t"] == ("noise", "x_t") and den.names["t_features"] == ("t_emb",)
    x = sample(den, run.params, n=5, seed=3, steps=4)
    assert x.shape == (5, 64) and x.min() >= 0.0 and x.max() <= 1.0


def test_ddpm_run_samples(tmp_path):
    store = RunStore(tmp_path / "s")
    run_id = train(store, "digits_diffusion.yml", "topology.nodes.0.config.scheduler=ddpm")
    out = tmp_path / "ddpm.png"
    res = image(tmp_path / "s", run_id, "--n", "4", "-o", str(out), "--steps", "5", "--scale", "1", "--cols", "4")
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert "ddpm, 5 steps" in res.output
    from PIL import Image

    with Image.open(out) as im:
        assert im.size == grid_size(4, 8, 8, cols=4) == (4 * 8 + 5, 8 + 2)
    res = image(tmp_path / "s", run_id, "-o", str(tmp_path / "x.png"), "--steps", "101")
    assert isinstance(res.exception, ConfigError) and "DDPM samples with 1..100 steps" in str(res.exception)


@pytest.mark.parametrize("args, msg", [
    (["--n", "0"], "--n must be in 1..1024, got 0"),
    (["--n", "5000"], "--n must be in 1..1024, got 5000"),
    (["--steps", "0"], "flow sampling takes 1..100000 Euler steps, got 0"),
])
def test_bad_arguments(trained, tmp_path, args, msg):
    root, run_id = trained
    res = image(root, run_id, "-o", str(tmp_path / "x.png"), *args)
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError), res.output
    assert msg in str(res.exception)
    assert not (tmp_path / "x.png").exists()


def test_not_a_diffusion_run(tmp_path):
    root = tmp_path / "s"
    run_id = train(RunStore(root), "digits_mlp.yml")
    res = image(root, run_id, "-o", str(tmp_path / "x.png"))
    assert isinstance(res.exception, ConfigError)
    assert f"run {run_id}: 'digits-mlp' is not a diffusion model" in str(res.exception)
    assert "no diffusion.noise node" in str(res.exception)


def test_missing_checkpoint_and_unknown_run(trained, tmp_path):
    root, run_id = trained
    store = RunStore(root)

    class NoCheckpoints:  # a run whose checkpoints are gone from the store
        get = store.get

        def artifacts(self, run_id, kind=None):
            return []

    with pytest.raises(ConfigError, match=f"run {run_id} saved no checkpoint"):
        load_run(run_id, NoCheckpoints(), denoiser=True)
    res = image(root, "nosuchrun", "-o", str(tmp_path / "x.png"))
    assert res.exit_code != 0 and "nosuchrun" in str(res.exception)


def test_write_image_shapes_and_errors(tmp_path):
    from PIL import Image

    rgb = np.random.default_rng(0).random((3, 3, 4, 5))
    p = write_image(tmp_path / "rgb.png", rgb, cols=2, scale=2, pad=0)
    with Image.open(p) as im:
        assert im.mode == "RGB" and im.size == grid_size(3, 4, 5, cols=2, scale=2, pad=0) == (20, 16)
    assert as_images(np.zeros((2, 1, 4, 4))).shape == (2, 4, 4)
    assert as_images(np.zeros((2, 64))).shape == (2, 8, 8)
    with pytest.raises(ConfigError, match="no square image"):
        as_images(np.zeros((2, 10)))
    with pytest.raises(ConfigError, match="cannot show"):
        as_images(np.zeros((2, 2, 4, 4)))
    with pytest.raises(ConfigError, match="low < high"):
        write_image(tmp_path / "x.png", np.zeros((1, 4, 4)), value_range=(1.0, 1.0))
    with pytest.raises(ConfigError, match="scale"):
        write_image(tmp_path / "x.png", np.zeros((1, 4, 4)), scale=0)
    grey = write_image(tmp_path / "g.png", np.array([[[0.0, 0.5], [1.0, 2.0]]]), pad=0)
    with Image.open(grey) as im:
        assert np.asarray(im).tolist() == [[0, 128], [255, 255]]  # mapped from [0, 1], clipped
