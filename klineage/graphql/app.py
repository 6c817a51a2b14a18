"""The ASGI app: GraphQL (with GraphiQL, served offline: ``graphql.ide``) at /graphql and a health
check at /healthz."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request, Response

from klineage.graphql.context import Loaders, RequestContext
from klineage.graphql.ide import ASSETS_PATH, OfflineGraphQLRouter, asset_response
from klineage.graphql.schema import schema
from klineage.kb.service import KnowledgeBase

MAX_BODY_BYTES = 2 * 1024 * 1024


def create_app(kb: KnowledgeBase, recorder: Callable[..., Any] | None = None) -> FastAPI:
    """An app serving ``kb``; each request gets fresh DataLoaders. ``recorder(kb, skill_id, source, outcome,
    speedup, gate_result)`` records an application (default ``kb.record_application``; the CLI passes
    ``klineage.ingest.feedback.record_with_feedback``, which also re-induces conditions)."""

    async def context_getter(request: Request) -> RequestContext:
        ctx = RequestContext(kb=kb, loaders=Loaders.for_kb(kb), authorization=request.headers.get("authorization"))
        if recorder is not None:
            ctx.recorder = recorder
        return ctx

    app = FastAPI(title="KLineage", description="Verified GPU-kernel optimization skills over GraphQL.")

    @app.middleware("http")
    async def limit_body(request: Request, call_next: Any) -> Any:
        from fastapi.responses import JSONResponse

        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > MAX_BODY_BYTES:
            return JSONResponse({"errors": [{"message": f"request body over {MAX_BODY_BYTES} bytes"}]},
                                status_code=413)
        return await call_next(request)

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "counts": kb.store.counts()}

    @app.get(ASSETS_PATH + "/{name}", include_in_schema=False)
    def graphiql_asset(name: str, request: Request) -> Response:
        return asset_response(name, request)

    app.include_router(OfflineGraphQLRouter(schema, context_getter=context_getter), prefix="/graphql")
    return app
