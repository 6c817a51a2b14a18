"""An ASGI middleware that bounds what a client can send and receive, before GraphQL sees anything.

* Request bodies are counted as they are read (``Content-Length`` is only a hint: a chunked body has
  none): over ``max_body_bytes`` the request is answered 413 and the application never runs.
* A JSON body for the GraphQL endpoint must be UTF-8 JSON (no integer of more digits than Python
  parses, nesting at most ``MAX_JSON_DEPTH``), an object with a string ``query`` and optional object
  ``variables`` / ``extensions`` and string ``operationName``: otherwise 400 with a message.
* ``Authorization`` must be printable ASCII (a bearer token is): otherwise 400.
* A GraphQL response over ``max_response_bytes`` is replaced by a short error naming the limit.

Client errors are answered without logging a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_JSON_DEPTH = 64


class ClientError(Exception):
    """A request the guard refuses: ``status`` and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _depth(value: Any, limit: int) -> int:
    """Nesting depth of a parsed JSON value (iterative; stops counting past ``limit``)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if deepest > limit:
                return deepest
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def parse_graphql_body(body: bytes) -> dict[str, Any]:
    """The GraphQL-over-HTTP request object in ``body``; ClientError(400) saying what is wrong with it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ClientError(400, f"request body is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise ClientError(400, f"request body is JSON nested too deeply (limit {MAX_JSON_DEPTH})") from None
    except ValueError as exc:  # JSONDecodeError, and integers of too many digits
        raise ClientError(400, f"request body is not valid JSON ({str(exc)[:200]})") from None
    if not isinstance(value, dict):
        raise ClientError(400, "request body must be a JSON object such as "
                               f'{{"query": "...", "variables": {{}}}}, got {type(value).__name__}')
    if _depth(value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise ClientError(400, f"request body is JSON nested deeper than {MAX_JSON_DEPTH} levels")
    if not isinstance(value.get("query"), str):
        raise ClientError(400, "request body: 'query' must be a string holding the GraphQL document")
    for key in ("variables", "extensions"):
        if value.get(key) is not None and not isinstance(value[key], dict):
            raise ClientError(400, f"request body: {key!r} must be a JSON object")
    if value.get("operationName") is not None and not isinstance(value["operationName"], str):
        raise ClientError(400, "request body: 'operationName' must be a string")
    return value


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value)
    return None


def _json_response(status: int, message: str) -> tuple[Message, Message]:
    body = json.dumps({"data": None, "errors": [{"message": message}]}).encode()
    start = {"type": "http.response.start", "status": status,
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}
    return start, {"type": "http.response.body", "body": body, "more_body": False}


class RequestGuard:
    """ASGI middleware enforcing the limits in the module docstring on ``graphql_path``."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, max_response_bytes: int,
                 graphql_path: str = "/graphql") -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_response_bytes = max_response_bytes
        self.graphql_path = graphql_path.rstrip("/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            self._check_headers(scope)
            body = await self._read_body(receive)
            graphql = scope.get("path", "").rstrip("/") == self.graphql_path
            content_type = (_header(scope, b"content-type") or b"").split(b";")[0].strip().lower()
            if graphql and scope.get("method") == "POST" and content_type == b"application/json":
                parse_graphql_body(body)
        except ClientError as exc:
            for message in _json_response(exc.status, exc.message):
                await send(message)
            return
        await self.app(scope, _replay(body, receive), self._limited(send) if graphql else send)

    @staticmethod
    def _check_headers(scope: Scope) -> None:
        auth = _header(scope, b"authorization")
        if auth is not None and not all(0x20 <= b < 0x7F for b in auth):
            raise ClientError(400, "the Authorization header must be printable ASCII "
                                   "('Authorization: Bearer <token>')")

    async def _read_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientError(400, "client disconnected")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise ClientError(413, f"request body over {self.max_body_bytes} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _limited(self, send: Send) -> Send:
        """A ``send`` that holds the response until it is complete and swaps it for an error when too big."""
        held: dict[str, Any] = {"start": None, "chunks": [], "size": 0}

        async def limited(message: Message) -> None:
            if message["type"] == "http.response.start":
                held["start"] = message
                return
            if message["type"] != "http.response.body" or held["start"] is None:
                await send(message)
                return
            chunk = message.get("body", b"")
            held["size"] += len(chunk)
            if held["size"] <= self.max_response_bytes:
                held["chunks"].append(chunk)
            if message.get("more_body", False):
                return
            if held["size"] > self.max_response_bytes:
                start, body = _json_response(200, f"the response is {held['size']} bytes, over the limit of "
                                                  f"{self.max_response_bytes} bytes; ask for fewer fields "
                                                  "(kernel sources are large) or smaller pages")
                await send(start)
                await send(body)
                return
            await send(held["start"])
            await send({"type": "http.response.body", "body": b"".join(held["chunks"]), "more_body": False})

        return limited


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands out ``body`` once, then waits on the real one (for disconnects)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
