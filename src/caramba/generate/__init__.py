"""caramba.generate: autoregressive generation with a resident KV cache.

``Generator`` lowers a causal language model (a Hugging Face checkpoint opened with
``caramba.pretrained``, or a run's trained model) in decode mode (``lower_topology(...,
cache=CacheSpec(capacity, batch))``), keeps the keys and values on the runner and streams the
next tokens step by step: greedy in the graph (``reduce.argmax``) or drawn by ``sample.token``
(``Sampler``). ``caramba generate`` is its command line.
"""

from caramba.generate.generator import (
    GREEDY,
    CapacityError,
    Generator,
    Sampler,
    is_checkpoint_folder,
    model_context,
    run_model,
)

__all__ = ["GREEDY", "CapacityError", "Generator", "Sampler", "is_checkpoint_folder", "model_context", "run_model"]
