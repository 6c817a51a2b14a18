"""The ASGI app: GraphQL (with GraphiQL, served offline: ``graphql.ide``) at /graphql and a health
check at /healthz."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response

from klineage.graphql.context import Loaders, RequestContext
from klineage.graphql.guard import RequestGuard
from klineage.graphql.ide import ASSETS_PATH, OfflineGraphQLRouter, asset_response
from klineage.graphql.kernel_analysis import KernelAnalyzer
from klineage.graphql.schema import schema
from klineage.kb.service import KnowledgeBase

MAX_BODY_BYTES = 2 * 1024 * 1024
MAX_RESPONSE_BYTES = 4 * 1024 * 1024


def create_app(kb: KnowledgeBase, recorder: Callable[..., Any] | None = None,
               analyzer: KernelAnalyzer | None = None, max_body_bytes: int = MAX_BODY_BYTES,
               max_response_bytes: int = MAX_RESPONSE_BYTES, warm: bool = True) -> FastAPI:
    """An app serving ``kb``; each request gets fresh DataLoaders. ``recorder(kb, skill_id, source, outcome,
    speedup, gate_result)`` records an application (default ``kb.record_application``; the CLI passes
    ``klineage.ingest.feedback.record_with_feedback``, which also re-induces conditions). ``analyzer`` derives
    search inputs from a kernel source off the event loop (default ``KernelAnalyzer()``). Request bodies over
    ``max_body_bytes`` (counted as read) are refused with 413, GraphQL responses over ``max_response_bytes``
    are replaced by an error. With ``warm``, start-up loads the embedder and the analysis forkserver, so the
    first request does not pay for them."""
    analysis = analyzer if analyzer is not None else KernelAnalyzer()

    async def context_getter(request: Request) -> RequestContext:
        ctx = RequestContext(kb=kb, loaders=Loaders.for_kb(kb), authorization=request.headers.get("authorization"),
                             analyzer=analysis)
        if recorder is not None:
            ctx.recorder = recorder
        return ctx

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if warm:
            await asyncio.gather(asyncio.to_thread(kb.embedder.embed_query, "warm up"),
                                 asyncio.to_thread(analysis.start))
        try:
            yield
        finally:
            analysis.close()

    app = FastAPI(title="KLineage", description="Verified GPU-kernel optimization skills over GraphQL.",
                  lifespan=lifespan)

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "counts": kb.store.counts()}

    @app.get(ASSETS_PATH + "/{name}", include_in_schema=False)
    def graphiql_asset(name: str, request: Request) -> Response:
        return asset_response(name, request)

    app.include_router(OfflineGraphQLRouter(schema, context_getter=context_getter), prefix="/graphql")
    app.add_middleware(RequestGuard, max_body_bytes=max_body_bytes,
                       max_response_bytes=max_response_bytes)
    return app
