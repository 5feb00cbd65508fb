"""A loaded, trained or fine-tuned model back to a Hugging Face directory.

The architecture entry's tensor bindings, read backwards: each parameter goes to the tensor it
was read from (transposed back; slices of one fused tensor put back side by side), the source
checkpoint's ignored tensors (buffers) are copied through, and ``config.json`` plus the
tokenizer files beside the source are copied, so ``transformers`` loads the directory as it
loaded the original. LoRA adapters are merged into their weights (``lora="merge"``) or written
as a PEFT adapter beside the merged-free base (``lora="adapter"``).
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from caramba.errors import ConfigError
from caramba.ir.dtypes import DType
from caramba.ir.dtypes import dtype as as_dtype

COPIED = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
          "vocab.json", "merges.txt", "vocab.txt", "tokenizer.model", "added_tokens.json", "chat_template.jinja")
TORCH_NAMES = {DType.float64: "float64", DType.float32: "float32", DType.float16: "float16", DType.bfloat16: "bfloat16"}


def _assemble(res: Any, binds: Mapping[str, Any], params: Mapping[str, np.ndarray], out_dtype: DType | None) -> dict[str, np.ndarray]:
    """Checkpoint tensor name -> array, from the parameters through their bindings."""
    by_tensor: dict[str, list[tuple[str, Any]]] = {}
    for p, b in binds.items():
        by_tensor.setdefault(b.tensor, []).append((p, b))
    out: dict[str, np.ndarray] = {}
    for tensor, parts in by_tensor.items():
        info = res.checkpoint.tensors[tensor]
        arrays = []
        for p, b in parts:
            a = np.asarray(params[p])
            arrays.append((b, a.T if b.transpose else a, p))
        d = (out_dtype or as_dtype(arrays[0][1].dtype)).numpy
        if len(arrays) == 1 and arrays[0][0].slice_axis is None:
            out[tensor] = np.ascontiguousarray(arrays[0][1], dtype=d)
            continue
        full = np.empty(info.shape, dtype=d)
        covered = np.zeros(info.shape[arrays[0][0].slice_axis % len(info.shape)] if arrays[0][0].slice_axis is not None else 0,
                           dtype=np.int64)
        for b, a, p in arrays:
            if b.slice_axis is None:
                raise ConfigError(f"parameters {[q for q, _ in parts]} all read tensor '{tensor}', but '{p}' reads it "
                                  "whole; the export cannot tell which value to write")
            axis = b.slice_axis % len(info.shape)
            index = tuple(slice(b.slice_start, b.slice_start + a.shape[axis]) if i == axis else slice(None)
                          for i in range(len(info.shape)))
            full[index] = a
            covered[b.slice_start: b.slice_start + a.shape[axis]] += 1
        if covered.size and (covered != 1).any():
            raise ConfigError(f"the parameters reading slices of tensor '{tensor}' {list(info.shape)} do not cover "
                              "it exactly once; the export would write values nobody trained")
        out[tensor] = full
    return out


def _passthrough(res: Any, names: set[str]) -> dict[str, np.ndarray]:
    """The source checkpoint's ignored tensors (buffers), as stored."""
    from safetensors import safe_open

    ignore = [str(p) for p in res.arch.spec.get("ignore") or []]
    out: dict[str, np.ndarray] = {}
    wanted = [t for t in res.checkpoint.tensors.values()
              if t.name not in names and any(fnmatch.fnmatchcase(t.name, p) for p in ignore)]
    for f in {t.file for t in wanted}:
        with safe_open(str(f), framework="numpy") as h:
            for t in wanted:
                if t.file == f:
                    out[t.name] = h.get_tensor(t.name)
    return out


def _adapter(res: Any, binds: Mapping[str, Any], params: Mapping[str, np.ndarray], lora: Any) -> tuple[dict, dict]:
    """PEFT's adapter_model.safetensors tensors and adapter_config.json for the LoRA adapters."""
    from caramba.manifest import lora as lora_math

    tensors: dict[str, np.ndarray] = {}
    modules: list[str] = []
    for key in sorted(params):
        if not key.endswith(f".{lora_math.A}"):
            continue
        linear = key[: -len(lora_math.A) - 1]
        b = binds.get(f"{linear}.weight")
        if b is None or b.slice_axis is not None or not b.tensor.endswith(".weight"):
            raise ConfigError(f"the LoRA adapter of '{linear}' has no Hugging Face module of its own (its weight "
                              f"{'is a slice of a fused tensor' if b is not None else 'is not in the checkpoint'})",
                              hint="export with the adapters merged (--lora merge)")
        module = b.tensor[: -len(".weight")]
        a_name, b_name = lora_math.adapter_names(linear)
        # caramba: y += s * x @ A @ B with A [in, r], B [r, out]; PEFT: lora_B(lora_A(x)), weights [r, in], [out, r]
        tensors[f"base_model.model.{module}.lora_A.weight"] = np.ascontiguousarray(np.asarray(params[a_name]).T)
        tensors[f"base_model.model.{module}.lora_B.weight"] = np.ascontiguousarray(np.asarray(params[b_name]).T)
        modules.append(module.rsplit(".", 1)[-1])
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": lora.rank,
        "lora_alpha": lora.alpha if lora.alpha is not None else float(lora.rank), "lora_dropout": lora.dropout,
        "target_modules": sorted(set(modules)), "bias": "none", "fan_in_fan_out": False,
        "base_model_name_or_path": str(res.checkpoint.root), "inference_mode": True,
    }
    return tensors, config


def export_hf(prep: Any, params: Mapping[str, np.ndarray], out: str | os.PathLike[str], *, dtype: str | None = None,
              lora: str = "merge", provenance: Mapping[str, str] | None = None) -> Path:
    """Write ``params`` (by caramba parameter name) of the ``from_safetensors`` model of ``prep``
    as a Hugging Face directory at ``out`` (created; an existing non-empty folder is refused).
    ``dtype``: the tensors' dtype (default: the parameters'); ``lora``: merge or adapter."""
    from safetensors.numpy import save_file

    from caramba.manifest import lora as lora_math
    from caramba.manifest.pretrained import bind, param_specs

    res = prep.manifest.topology.pretrained
    if res is None:
        raise ConfigError("only a model loaded from a Hugging Face checkpoint (topology.from_safetensors) can be "
                          "exported in its format", hint="caramba export --format safetensors|onnx writes any model")
    if lora not in ("merge", "adapter"):
        raise ConfigError(f"lora must be merge or adapter, got {lora!r}")
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError(f"{target} exists and is not an empty folder; the export does not overwrite")
    out_dtype = as_dtype(dtype) if dtype is not None else None
    if out_dtype is not None and not out_dtype.is_float:
        raise ConfigError(f"export dtype must be a float type, got {dtype}")
    spec = param_specs(prep)
    missing = sorted(set(spec) - set(params))
    if missing:
        raise ConfigError(f"no value for parameter '{missing[0]}' ({len(missing)} missing)")
    model_spec = prep.manifest.model
    adapters = model_spec.lora if model_spec is not None else None
    base = dict(params)
    if adapters is not None and lora == "merge":
        base = lora_math.merge(params, adapters)
    base = {k: v for k, v in base.items() if k in spec and not lora_math.is_adapter(k)}
    binds = bind(res, {k: v for k, v in spec.items() if not lora_math.is_adapter(k)}, prep.doc)
    binds = {k: b for k, b in binds.items() if k.startswith(res.node_id + ".")}
    tensors = _assemble(res, binds, base, out_dtype)
    tensors.update(_passthrough(res, set(tensors)))
    first = next(iter(tensors.values()))
    meta = {"format": "pt", "producer": "caramba", "architecture": res.arch.op,
            "name_map": json.dumps({p: b.tensor for p, b in binds.items()}, sort_keys=True), **(provenance or {})}
    config = dict(res.checkpoint.config or {})
    d = out_dtype or as_dtype(first.dtype)
    config["torch_dtype"] = config["dtype"] = TORCH_NAMES.get(d, str(d))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        save_file(tensors, str(tmp / "model.safetensors"), metadata=meta)
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        for name in COPIED:
            src = res.checkpoint.root / name
            if src.is_file():
                shutil.copyfile(src, tmp / name)
        if adapters is not None and lora == "adapter":
            ad_tensors, ad_config = _adapter(res, binds, params, adapters)
            save_file(ad_tensors, str(tmp / "adapter_model.safetensors"), metadata={"format": "pt", "producer": "caramba"})
            (tmp / "adapter_config.json").write_text(json.dumps(ad_config, indent=2, sort_keys=True) + "\n")
        if target.exists():
            target.rmdir()
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


__all__ = ["export_hf"]
