"""caramba.train: layers, initializers, optimizers, schedules, the train step and checkpoints.

The user API reads like MLX: layers declare parameters in ``__init__`` and build math in
``__call__``; optimizers implement ``init_single``/``apply_single``. Underneath, a train step is
one graph (``TrainStep``) run by a small driver (``Trainer``) with resident state.
"""

from caramba.ops.train import accuracy, bce, cross_entropy, f1, mse, perplexity
from caramba.train import init, schedules
from caramba.train.checkpoint import Checkpoint, CheckpointError, load_checkpoint, read_checkpoint, save_checkpoint
from caramba.train.clip import clip_by_global_norm, global_norm
from caramba.train.layers import MLP, Dropout, Embedding, LayerNorm, Linear, Module, Parameter, Sequential
from caramba.train.optimizers import (
    OPTIMIZERS,
    SGD,
    Adagrad,
    Adam,
    Adamax,
    AdamW,
    Lamb,
    Lion,
    Optimizer,
    RMSprop,
)
from caramba.train.schedules import Schedule, constant, cosine, linear_warmup
from caramba.train.step import Trainer, TrainStep

__all__ = [
    "MLP", "OPTIMIZERS", "SGD", "Adagrad", "Adam", "AdamW", "Adamax", "Checkpoint", "CheckpointError", "Dropout",
    "Embedding", "Lamb", "LayerNorm", "Linear", "Lion", "Module", "Optimizer", "Parameter", "RMSprop", "Schedule",
    "Sequential", "TrainStep", "Trainer", "accuracy", "bce", "clip_by_global_norm", "constant", "cosine",
    "cross_entropy", "f1", "global_norm", "init", "linear_warmup", "load_checkpoint", "mse", "perplexity",
    "read_checkpoint", "save_checkpoint", "schedules",
]
