"""The HTTP API's OpenAPI 3.1 document and request validation against it.

Contract: :data:`DOCUMENT` is ``agent/runtime/openapi.json``, shipped in the package, served at
``GET /api/v1/openapi.json`` and kept identical to ``docs/openapi.json`` (a test checks both and
that the document lists exactly the app's routes). :class:`RequestValidator` checks a request's
path and query parameters, and its JSON body where the operation declares one, with
``openapi-core`` (its aiohttp request adapter; the document's own JSON Schemas, no hand checks)
and raises :class:`~agent.errors.BadRequest` whose ``field`` names the parameter or the body
path at fault (``"spec.trees"`` is reported as ``"trees"``: the body's top-level field, as
the spec validator names it). Authentication is not checked here (the API's middleware does,
before validation); nor is the ``application/x-ndjson`` body of ingest (the input's parser
reads it line by line, counting what it rejects). A JSON body is validated as JSON whatever
its ``Content-Type`` says: the API always read bodies as JSON, and ``curl -d`` sends
``application/x-www-form-urlencoded``.

Why ``openapi-core``: it reads the whole document (paths, parameter styles, ``$ref``\\ s, 3.0 and
3.1), ships an aiohttp request adapter, and is maintained; validating components with bare
``jsonschema`` would mean matching paths and decoding parameters by hand. Validation runs on
the event loop and costs about half a millisecond per request for a job spec
(``bench/ops_bench.py``); a body over :data:`THREAD_BODY_BYTES` (64 KiB) is validated in a
worker thread instead, since the schema walk costs ~70 ms per MB of JSON (bodies are at most
8 MiB: the app's ``client_max_size``).
"""

from __future__ import annotations

import asyncio
import importlib.resources
from collections.abc import Iterable
from functools import cached_property
from typing import Any

import orjson
from aiohttp import web
from openapi_core import OpenAPI
from openapi_core.contrib.aiohttp import AIOHTTPOpenAPIWebRequest
from openapi_core.templating.paths.exceptions import OperationNotFound, PathNotFound
from openapi_core.validation.request.validators import (
    V31RequestBodyValidator,
    V31RequestParametersValidator,
)

from agent.errors import BadRequest

#: the document's bytes, as served
DOCUMENT_BYTES: bytes = (
    importlib.resources.files("agent.runtime.ops").joinpath("openapi.json").read_bytes()
)
#: the document, decoded
DOCUMENT: dict[str, Any] = orjson.loads(DOCUMENT_BYTES)
_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
_SHARED: RequestValidator | None = None
#: JSON bodies larger than this are validated in a worker thread (module contract)
THREAD_BODY_BYTES = 64 * 1024


def document_routes(doc: dict[str, Any] | None = None) -> set[tuple[str, str]]:
    """``(METHOD, path)`` of every operation in the document."""
    doc = DOCUMENT if doc is None else doc
    return {
        (method.upper(), path)
        for path, item in doc["paths"].items()
        for method in item
        if method in _METHODS
    }


def app_routes(app: web.Application) -> set[tuple[str, str]]:
    """``(METHOD, path template)`` of every route of an aiohttp app (HEAD: aiohttp's own)."""
    out = set()
    for route in app.router.routes():
        if route.resource is not None and route.method not in ("HEAD", "*"):
            out.add((route.method, route.resource.canonical))
    return out


class _Request(AIOHTTPOpenAPIWebRequest):
    """The aiohttp adapter with the content type the operation declares (see module)."""

    __slots__ = ("_type",)

    def __init__(self, request: web.Request, *, body: bytes | None, content_type: str):
        super().__init__(request, body=body)
        self._type = content_type

    @property
    def host_url(self) -> str:
        return ""  # the document's server is "/": match paths, whatever the Host header says

    @property
    def content_type(self) -> str:
        return self._type


class RequestValidator:
    """Validates requests against :data:`DOCUMENT` (see the module contract)."""

    def __init__(self, doc: dict[str, Any] | None = None) -> None:
        self._doc = DOCUMENT if doc is None else doc

    @classmethod
    def shared(cls) -> RequestValidator:
        """The process's validator of :data:`DOCUMENT`, built once (parsing and checking the
        document takes ~50 ms: at start-up, not in a request on the event loop)."""
        global _SHARED
        if _SHARED is None:
            validator = cls()
            validator.warm()
            _SHARED = validator
        return _SHARED

    def warm(self) -> None:
        """Build the document's validators now rather than at the first request."""
        _ = (self._params, self._body, self._json_ops)

    @cached_property
    def _openapi(self) -> OpenAPI:
        return OpenAPI.from_dict(self._doc)

    @cached_property
    def _params(self) -> V31RequestParametersValidator:
        return V31RequestParametersValidator(self._openapi.spec)

    @cached_property
    def _body(self) -> V31RequestBodyValidator:
        return V31RequestBodyValidator(self._openapi.spec)

    @cached_property
    def _json_ops(self) -> frozenset[tuple[str, str]]:
        """``(METHOD, path)`` of the operations that take a JSON body."""
        return frozenset(
            (method.upper(), path)
            for path, item in self._doc["paths"].items()
            for method, op in item.items()
            if method in _METHODS
            and "application/json" in ((op.get("requestBody") or {}).get("content") or {})
        )

    def takes_json(self, request: web.Request) -> bool:
        """Whether the request's route declares a JSON body."""
        resource = request.match_info.route.resource
        path = resource.canonical if resource is not None else ""
        return (request.method, path) in self._json_ops

    async def check(self, request: web.Request, body: bytes | None) -> None:
        """Raise :class:`BadRequest` naming what is wrong with ``request`` (``body``: its
        bytes when the operation takes JSON, else None)."""
        if body is not None:
            try:  # the handler's own message for bytes that are not JSON at all
                orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise BadRequest(f"request body is not valid JSON: {exc}") from None
        adapted = _Request(request, body=body, content_type="application/json")
        if body is not None and len(body) > THREAD_BODY_BYTES:
            # a large body costs the schema walk ~70 ms per MB: not on the event loop
            errors = await asyncio.to_thread(self._errors, adapted, body)
        else:
            errors = self._errors(adapted, body)
        for exc in errors:
            if isinstance(exc, PathNotFound | OperationNotFound):
                continue  # aiohttp routed it, so a route the document lacks: a test catches that
            raise _bad_request(exc)

    def _errors(self, adapted: _Request, body: bytes | None) -> list[Exception]:
        errors: list[Exception] = list(self._params.iter_errors(adapted))
        if not errors and body is not None:
            errors = list(self._body.iter_errors(adapted))
        return errors


def _bad_request(exc: Exception) -> BadRequest:
    """An openapi-core error as a 400 naming the field (module contract)."""
    field: str | None = None
    detail = _text(exc)
    name = getattr(exc, "name", None)  # a parameter error carries the parameter's name
    if isinstance(name, str):
        field = name
    cause: BaseException | None = exc
    while cause is not None:
        schema_errors = getattr(cause, "schema_errors", None)
        if schema_errors:
            first = _most_specific(schema_errors)
            path = ".".join(str(p) for p in first.absolute_path)
            if path and name is None:
                field = path
            elif path:
                field = f"{name}.{path}"
            detail = first.message[:500]  # the message quotes the value: bounded
            break
        if cause is not exc:  # the deepest cause says what was wrong ("cannot cast 'abc'")
            detail = _text(cause)
        cause = cause.__cause__
    if field is None:
        field = _field_of_message(detail)
    where = f"{field}: " if field else ""
    return BadRequest(f"request does not match the API's schema: {where}{detail}", field=field)


def _text(exc: BaseException) -> str:
    """``str(exc)``, never raising (some library errors decode the request's bytes)."""
    try:
        return str(exc)[:500]
    except Exception:
        return type(exc).__name__


def _most_specific(errors: Iterable[Any]) -> Any:
    """The deepest schema error (jsonschema's ``best_match`` prefers shallow ones; a
    required-property error names the property in its message instead)."""
    errors = list(errors)
    return max(errors, key=lambda e: len(list(e.absolute_path)))


def _field_of_message(message: str) -> str | None:
    """``'x' is a required property`` and ``Additional properties are not allowed ('x' was
    unexpected)``: the property named in the message."""
    if "'" in message and ("required property" in message or "unexpected" in message):
        return message.split("'")[1]
    return None
