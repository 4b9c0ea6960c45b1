"""Errors of the admin API as Pulsar reports them: a status code and ``{"reason": "..."}``.

Pulsar's ``RestException`` answers with the HTTP status its handler chose and an
``ErrorData`` body whose only field is ``reason``. Core ``BrokerError`` s and storage
errors are mapped to the status Pulsar uses for the same situation; bad input of any
kind (malformed JSON, wrong types, illegal names, oversize bodies) gets a 4xx, never a
5xx. A 5xx means a bug or a broken disk, and is logged with its traceback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from magnetar.core import errors as core
from magnetar.storage import metadata_store as meta
from magnetar.storage.interfaces import EntryNotFound, StorageError

log = logging.getLogger("magnetar.admin")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class RestError(Exception):
    """An admin request failed: answered with ``status`` and ``{"reason": reason}``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def not_found(reason: str) -> RestError:
    return RestError(404, reason)


def conflict(reason: str) -> RestError:
    return RestError(409, reason)


def precondition_failed(reason: str) -> RestError:
    return RestError(412, reason)


def not_allowed(reason: str) -> RestError:
    return RestError(405, reason)


def bad_request(reason: str) -> RestError:
    return RestError(400, reason)


#: Core errors by the status Pulsar's admin API gives the same failure.
BROKER_ERROR_STATUS: dict[type[core.BrokerError], int] = {
    core.InvalidTopicName: 412,
    core.TopicNotFound: 404,
    core.SubscriptionNotFound: 404,
    core.ConsumerBusy: 412,
    core.ProducerBusy: 409,
    core.ProducerFenced: 409,
    core.NotAllowed: 405,
    core.LimitReached: 412,
    core.InvalidSchemaData: 422,
    core.IncompatibleSchema: 409,
    core.ConsumerAssignError: 412,
    core.ServiceNotReady: 503,
    core.MetadataError: 500,
    core.PersistenceError: 500,
}


def status_of(exc: Exception) -> int:
    """The HTTP status for an exception raised while serving an admin request."""
    if isinstance(exc, RestError):
        return exc.status
    if isinstance(exc, core.BrokerError):
        for kind in type(exc).__mro__:
            if kind in BROKER_ERROR_STATUS:
                return BROKER_ERROR_STATUS[kind]
        return 500
    if isinstance(exc, meta.AlreadyExists):
        return 409
    if isinstance(exc, meta.NotFound | EntryNotFound):
        return 404
    if isinstance(exc, meta.InvalidMetadata):
        return 400
    return 500


def error_response(status: int, reason: str) -> JSONResponse:
    return JSONResponse({"reason": reason}, status_code=status)


def _reason(exc: Exception) -> str:
    if isinstance(exc, RestError):
        return exc.reason
    if isinstance(exc, core.BrokerError):
        return exc.message
    return str(exc) or type(exc).__name__


def _validation_reason(exc: RequestValidationError) -> str:
    details = exc.errors()
    if not details:
        return "Invalid request"
    first = details[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or "body"
    message = first.get("msg", "invalid value")
    if first.get("type") == "json_invalid":
        return f"Invalid JSON body: {message}"
    return f"Invalid {where}: {message}"


def _path_param_failed(exc: RequestValidationError) -> bool:
    return any(err.get("loc", ("",))[0] == "path" for err in exc.errors())


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # JAX-RS answers 404 when a path segment does not convert to the parameter's type.
    status = 404 if _path_param_failed(exc) else 400
    return error_response(status, _validation_reason(exc))


async def _on_http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse({"reason": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)


async def _on_error(request: Request, exc: Exception) -> JSONResponse:
    status = status_of(exc)
    if status >= 500:
        log.error("admin request %s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(status, _reason(exc))


def install(app: FastAPI) -> None:
    """Answer every failure with Pulsar's error shape."""
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    for kind in (RestError, core.BrokerError, meta.MetadataError, StorageError, ValueError, Exception):
        app.add_exception_handler(kind, _on_error)


class RequestSizeLimit:
    """ASGI middleware: refuse request bodies over ``max_bytes`` with 413 (``httpMaxRequestSize``).

    The body is read here (admin bodies are small) so a chunked upload without a
    Content-Length is measured too; the application then reads the buffered copy.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.max_bytes < 0:
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send, declared)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send, size)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _refuse(self, send: Send, size: int) -> None:
        body = json.dumps({"reason": f"Request body of {size} bytes exceeds httpMaxRequestSize "
                                     f"({self.max_bytes} bytes)"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
