"""The HTTP API's OpenAPI 3.1 document and request validation against it.

Contract: :data:`DOCUMENT` is ``agent/runtime/openapi.json``, shipped in the package, served at
``GET /api/v1/openapi.json`` and kept identical to ``docs/openapi.json`` (a test checks both and
that the document lists exactly the app's routes). :class:`RequestValidator` checks a request's
path and query parameters, and its JSON body where the operation declares one, against the
document's own JSON Schemas (``$ref``\\ s into ``components`` resolved) and raises
:class:`~agent.errors.BadRequest` whose ``field`` names the parameter or the body path at fault
(``"spec.trees"`` is reported as ``"trees"``: the body's top-level field, as the spec validator
names it). Authentication is not checked here (the API's middleware does, before validation);
nor is the ``application/x-ndjson`` body of ingest (the input's parser reads it line by line,
counting what it rejects). A JSON body is validated as JSON whatever its ``Content-Type``
says: the API always read bodies as JSON, and ``curl -d`` sends
``application/x-www-form-urlencoded``.

Parameters: the document uses path parameters (strings), scalar query parameters (cast from
their text: integer, number, boolean, string) and one ``form``/``explode`` object of the
remaining query parameters. Building a validator for a document that uses anything else
(headers, cookies, other styles, arrays) raises ``ValueError``: a document change the
validator does not implement fails at start-up and in the contract test, never silently.

Why ``jsonschema_rs`` on the schemas, not a whole-document library: ``openapi-core`` did this
before and cost every agent process ~40 MB of RSS (it loads at the first status poll), against
~6 MB for ``jsonschema_rs``, which is also faster. The parameter subset above is small enough to
decode here. A body over :data:`THREAD_BODY_BYTES` (64 KiB) is validated in a worker thread,
not on the event loop (bodies are at most 8 MiB: the app's ``client_max_size``).
"""

from __future__ import annotations

import asyncio
import importlib.resources
from dataclasses import dataclass, field
from typing import Any

import jsonschema_rs
import orjson
from aiohttp import web

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


_SCALARS = ("integer", "number", "boolean", "string")


@dataclass(frozen=True)
class _Param:
    """One declared path or query parameter: how its text is cast, and its schema."""

    name: str
    where: str  # "path" or "query"
    kind: str  # a scalar type name, or "object" for the form/explode object of the rest
    required: bool
    schema: Any  # a compiled jsonschema_rs validator


@dataclass(frozen=True)
class _Operation:
    """What one ``(METHOD, path)`` of the document checks."""

    params: tuple[_Param, ...] = ()
    body: Any = None  # a compiled validator of the JSON body, or None
    named_query: frozenset[str] = field(default_factory=frozenset)


class RequestValidator:
    """Validates requests against :data:`DOCUMENT` (see the module contract)."""

    def __init__(self, doc: dict[str, Any] | None = None) -> None:
        self._doc = DOCUMENT if doc is None else doc
        self._ops: dict[tuple[str, str], _Operation] | None = None

    @classmethod
    def shared(cls) -> RequestValidator:
        """The process's validator of :data:`DOCUMENT`, built once (compiling its schemas
        takes a few ms: at start-up, not in a request on the event loop)."""
        global _SHARED
        if _SHARED is None:
            validator = cls()
            validator.warm()
            _SHARED = validator
        return _SHARED

    def warm(self) -> None:
        """Compile the document's schemas now rather than at the first request."""
        self._operations()

    def _operations(self) -> dict[tuple[str, str], _Operation]:
        if self._ops is None:
            self._ops = _compile(self._doc)
        return self._ops

    def _operation(self, request: web.Request) -> _Operation | None:
        resource = request.match_info.route.resource
        path = resource.canonical if resource is not None else ""
        return self._operations().get((request.method, path))

    def takes_json(self, request: web.Request) -> bool:
        """Whether the request's route declares a JSON body."""
        op = self._operation(request)
        return op is not None and op.body is not None

    async def check(self, request: web.Request, body: bytes | None) -> None:
        """Raise :class:`BadRequest` naming what is wrong with ``request`` (``body``: its
        bytes when the operation takes JSON, else None)."""
        op = self._operation(request)
        if op is None:
            return  # aiohttp routed it, so a route the document lacks: a test catches that
        _check_params(op, request)
        if body is None or op.body is None:
            return
        try:  # the handler's own message for bytes that are not JSON at all
            value = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"request body is not valid JSON: {exc}") from None
        try:
            if len(body) > THREAD_BODY_BYTES:  # a large body's walk: not on the event loop
                errors = await asyncio.to_thread(_errors, op.body, value)
            else:
                errors = _errors(op.body, value)
        except ValueError as exc:  # jsonschema_rs reads JSON nested up to ~254 levels
            raise BadRequest(f"request body nests too deeply to validate ({exc})") from None
        if errors:
            raise _bad_request(None, _most_specific(errors))


def _compile(doc: dict[str, Any]) -> dict[tuple[str, str], _Operation]:
    """Every operation's checks (module contract: unsupported parameters raise)."""
    components = doc.get("components") or {}
    ops: dict[tuple[str, str], _Operation] = {}
    for path, item in doc["paths"].items():
        shared = item.get("parameters") or []
        for method, op in item.items():
            if method not in _METHODS:
                continue
            params = tuple(_param(p, components) for p in [*shared, *(op.get("parameters") or [])])
            content = (op.get("requestBody") or {}).get("content") or {}
            body = None
            if "application/json" in content:
                body = _validator(content["application/json"].get("schema") or {}, components)
            named = frozenset(p.name for p in params if p.where == "query" and p.kind != "object")
            ops[(method.upper(), path)] = _Operation(params, body, named)
    return ops


def _validator(schema: dict[str, Any], components: dict[str, Any]) -> Any:
    """A 2020-12 validator of ``schema`` whose ``#/components/...`` references resolve (the
    components ride along under a key no keyword reads)."""
    return jsonschema_rs.Draft202012Validator({**schema, "components": components})


def _param(spec: dict[str, Any], components: dict[str, Any]) -> _Param:
    if "$ref" in spec:
        raise ValueError(f"parameter $ref is not implemented: {spec['$ref']}")
    where, name = spec.get("in"), spec.get("name")
    schema = spec.get("schema") or {}
    kind = schema.get("type", "string")
    style = spec.get("style", "simple" if where == "path" else "form")
    explode = spec.get("explode", style == "form")
    supported = (where == "path" and style == "simple" and kind in _SCALARS) or (
        where == "query"
        and style == "form"
        and (kind in _SCALARS or (kind == "object" and explode))
    )
    if not supported or not isinstance(name, str):
        raise ValueError(f"parameter {name!r} ({where}, {style}, {kind}) is not implemented")
    required = bool(spec.get("required", where == "path"))
    return _Param(name, where, kind, required, _validator(schema, components))


def _check_params(op: _Operation, request: web.Request) -> None:
    for param in op.params:
        if param.where == "path":
            text: str | None = request.match_info.get(param.name)
        elif param.kind == "object":
            rest = {k: v for k, v in request.query.items() if k not in op.named_query}
            _raise_first(param, rest)
            continue
        else:
            text = request.query.get(param.name)
        if text is None:
            if param.required:
                raise _bad_request(param.name, None, f"missing required parameter {param.name}")
            continue
        _raise_first(param, _cast(param, text))


def _cast(param: _Param, text: str) -> Any:
    """A parameter's text as its schema's type (a 400 naming it when it is not one)."""
    try:
        if param.kind == "integer":
            return int(text, 10)
        if param.kind == "number":
            return float(text)
    except ValueError:
        pass
    else:
        if param.kind == "boolean":
            if text in ("true", "false"):
                return text == "true"
        else:
            return text
    raise _bad_request(param.name, None, f"cannot cast {text[:100]!r} to {param.kind}")


def _raise_first(param: _Param, value: Any) -> None:
    errors = _errors(param.schema, value)
    if errors:
        raise _bad_request(param.name, _most_specific(errors))


def _errors(validator: Any, value: Any) -> list[Any]:
    return list(validator.iter_errors(value))


def _bad_request(name: str | None, error: Any, detail: str | None = None) -> BadRequest:
    """A 400 naming the parameter, or the body path at fault (module contract)."""
    field_name = name
    if error is not None:
        path = ".".join(str(p) for p in error.instance_path)
        field_name = ".".join(x for x in (name, path or _named_property(error)) if x) or None
        detail = str(error.message)[:500]  # the message quotes the value: bounded
    where = f"{field_name}: " if field_name else ""
    message = f"request does not match the API's schema: {where}{detail}"
    return BadRequest(message, field=field_name)


def _most_specific(errors: list[Any]) -> Any:
    """The deepest error (a required or unexpected property is named by the error itself)."""
    return max(errors, key=lambda e: len(e.instance_path))


def _named_property(error: Any) -> str | None:
    """The property a ``required`` or ``additionalProperties`` error is about."""
    kind = error.kind
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.Required):
        return str(kind.property)
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.AdditionalProperties):
        return str(kind.unexpected[0]) if kind.unexpected else None
    return None
