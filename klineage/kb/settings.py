"""Open the configured knowledge-base store from the environment.

``KLINEAGE_STORE``: ``embedded`` (default; a networkx graph persisted in ``KLINEAGE_DATA_DIR``,
default ``./.klineage``) or ``neo4j`` (``klineage.kb.neo4j_store.Neo4jStore.from_env()``, which reads
``NEO4J_URI``, ``NEO4J_USER``, ``NEO4J_PASSWORD`` and ``NEO4J_DATABASE``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from klineage.kb.store import GraphStore, StoreError

STORE_ENV = "KLINEAGE_STORE"
DATA_DIR_ENV = "KLINEAGE_DATA_DIR"
DEFAULT_DATA_DIR = ".klineage"
STORE_KINDS: tuple[str, ...] = ("embedded", "neo4j")


def data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The embedded store's folder: ``$KLINEAGE_DATA_DIR`` or ``./.klineage``."""
    env = os.environ if environ is None else environ
    return Path(env.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR)


def open_store(environ: Mapping[str, str] | None = None) -> GraphStore:
    """The store ``$KLINEAGE_STORE`` names (default ``embedded``); StoreError for an unknown kind or
    a store that cannot be opened, saying which variable to set."""
    env = os.environ if environ is None else environ
    kind = (env.get(STORE_ENV) or "embedded").strip().lower()
    if kind == "embedded":
        from klineage.kb.embedded_store import EmbeddedStore

        return EmbeddedStore(data_dir(env))
    if kind == "neo4j":
        try:
            from klineage.kb.neo4j_store import Neo4jStore
        except ImportError as exc:
            raise StoreError(f"{STORE_ENV}=neo4j, but the Neo4j store cannot be imported ({exc})") from exc
        return Neo4jStore.from_env()
    raise StoreError(f"{STORE_ENV}={kind!r}: expected one of {', '.join(STORE_KINDS)}")
