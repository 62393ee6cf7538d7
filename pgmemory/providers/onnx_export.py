"""The local model as one pooled encoder (torch), exported once to ONNX in a cache directory.

The export runs on first use from the weights already on disk (no download), is checked against
torch on probe texts, and is written atomically; later processes load the cached file without
importing torch. The cache key names the weights file and the torch version that exported it.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

EXPORT_FORMAT = 1
_PROBES = ["Alice", "where does Alice work now?",
           "I left Tencent last week and now I work at OpenAI in San Francisco, which I like a lot."]
MIN_COSINE = 0.9999


def cache_dir() -> Path:
    """PGMEMORY_CACHE_DIR, else the per-user cache (XDG cache home)/pgmemory."""
    explicit = os.environ.get("PGMEMORY_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pgmemory"


def pooled_encoder(directory: Path) -> Any:
    """A torch module: token ids + mask -> mean-pooled, L2-normalised sentence vectors."""
    import torch
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    class PooledEncoder(torch.nn.Module):
        """What sentence-transformers computes for this model: transformer, mean pooling, normalise."""

        def __init__(self, transformer: Any) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: D102 - torch protocol
            hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask,
                                      token_type_ids=token_type_ids).last_hidden_state
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    return PooledEncoder(AutoModel.from_pretrained(str(directory))).eval()


def exported_path(directory: Path) -> Path:
    """Where the ONNX graph of these weights (exported by this torch version) is cached."""
    weights = directory / "model.safetensors"
    stat = weights.stat()
    torch_version = importlib.metadata.version("torch")
    key = f"{weights.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{torch_version}|{EXPORT_FORMAT}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir() / "onnx" / f"all-MiniLM-L6-v2-{digest}.onnx"


def exported_model(directory: Path) -> Path:
    """The cached ONNX file for the model in ``directory``, exported (and checked) if absent."""
    target = exported_path(directory)
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        _export(directory, target)
    return target


def _export(directory: Path, target: Path) -> None:
    """Trace the pooled encoder to ONNX, check it against torch, then move it into place."""
    import torch

    module = pooled_encoder(directory)
    ids = torch.tensor([[101, 2054, 2515, 102], [101, 2054, 102, 0]], dtype=torch.long)
    mask = (ids != 0).long()  # a padded row, so the traced graph keeps the masking path
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".onnx.tmp")
    os.close(fd)
    try:
        with warnings.catch_warnings(), torch.inference_mode():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module, (ids, mask, torch.zeros_like(ids)), tmp, dynamo=False, opset_version=17,
                input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["embedding"],
                dynamic_axes={"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"},
                              "token_type_ids": {0: "batch", 1: "tokens"}, "embedding": {0: "batch"}})
        _check(directory, module, tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _check(directory: Path, module: Any, path: str) -> None:
    """Refuse an export whose vectors differ from torch's on padded probe texts."""
    import onnxruntime as ort
    import torch
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    rows = [tok.encode(t).ids for t in _PROBES]
    width = max(len(r) for r in rows)
    ids = np.array([r + [0] * (width - len(r)) for r in rows], dtype=np.int64)
    mask = (ids != 0).astype(np.int64)
    with torch.inference_mode():
        want = module(torch.from_numpy(ids), torch.from_numpy(mask), torch.zeros_like(torch.from_numpy(ids))).numpy()
    got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
    worst = float((want * got).sum(1).min())
    if worst < MIN_COSINE:
        raise RuntimeError(f"the ONNX export differs from torch (cosine {worst:.5f} < {MIN_COSINE})")
