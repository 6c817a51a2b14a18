"""GraphiQL with no network: the page and its React/GraphiQL builds come from the package itself.

Strawberry's GraphiQL page loads React and GraphiQL from unpkg.com, so it is blank offline (and
behind a firewall). ``klineage/graphql/static/`` holds KLineage's page and the npm packages' browser
builds (gzip-compressed; provenance and licenses in static/README.md): ``ide_html(prefix)`` is the
page with its assets under ``prefix``, and ``asset_response`` serves one asset with
``Content-Encoding: gzip`` (decompressed for a client that does not accept gzip).
``OfflineGraphQLRouter`` is strawberry's router with this page instead of its own.
"""

from __future__ import annotations

import gzip
from functools import cache
from pathlib import Path

from fastapi import HTTPException, Request, Response
from fastapi.responses import HTMLResponse
from strawberry.fastapi import GraphQLRouter

STATIC_DIR = Path(__file__).with_name("static")
VENDOR_DIR = STATIC_DIR / "vendor"
ASSETS_PATH = "/graphiql-assets"
MEDIA_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
CACHE_CONTROL = "public, max-age=86400"


@cache
def ide_html(assets_prefix: str = ASSETS_PATH) -> str:
    """The GraphiQL page, its scripts and stylesheet under ``assets_prefix``."""
    return (STATIC_DIR / "graphiql.html").read_text(encoding="utf-8").replace("@ASSETS@", assets_prefix)


def asset_names() -> list[str]:
    """The names the asset route serves (e.g. ``graphiql.min.js``)."""
    return sorted(p.name.removesuffix(".gz") for p in VENDOR_DIR.glob("*.gz"))


@cache
def _compressed(name: str) -> bytes:
    return (VENDOR_DIR / f"{name}.gz").read_bytes()


def asset_response(name: str, request: Request) -> Response:
    """One vendored asset: 404 for a name that is not one (no path is ever built from the request)."""
    if name not in asset_names():
        raise HTTPException(status_code=404, detail=f"no GraphiQL asset {name!r}")
    media_type = MEDIA_TYPES[Path(name).suffix]
    body = _compressed(name)
    headers = {"Cache-Control": CACHE_CONTROL, "Vary": "Accept-Encoding"}
    if "gzip" in request.headers.get("accept-encoding", "").lower():
        return Response(body, media_type=media_type, headers={**headers, "Content-Encoding": "gzip"})
    return Response(gzip.decompress(body), media_type=media_type, headers=headers)


class OfflineGraphQLRouter(GraphQLRouter):
    """Strawberry's FastAPI router serving the offline GraphiQL page (assets at ``ASSETS_PATH``)."""

    async def render_graphql_ide(self, request: Request) -> HTMLResponse:
        return HTMLResponse(ide_html(ASSETS_PATH))
