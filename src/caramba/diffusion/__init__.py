"""caramba.diffusion: DDPM and flow-matching schedulers, sampling a trained denoiser, image files.

``schedule``: host float64 tables, the noising and per-step update math as IR ops.
``sample``: cut a manifest's topology at its ``diffusion.noise`` node and sample on a runner.
``io``: ``write_image`` (a PNG grid through Pillow). Submodules import what they need lazily.
"""

from caramba.diffusion.io import as_images, grid_size, write_image
from caramba.diffusion.schedule import DDPM, Flow, ddpm_betas, scheduler

__all__ = ["DDPM", "Flow", "as_images", "ddpm_betas", "grid_size", "scheduler", "write_image"]
