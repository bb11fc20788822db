"""The request validator against the API's own document (``agent/runtime/ops/openapi.py``):
bodies judged by the document's JSON Schemas (checked here against the reference
``jsonschema`` library on generated specs), parameters cast from their text, the field at
fault named, and a document using a parameter kind it does not implement refused at build.
The live-HTTP side is ``test_api_contract.py`` (schemathesis) and ``test_ops_metrics.py``."""

from __future__ import annotations

import asyncio
from typing import Any

import jsonschema
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import BadRequest
from agent.runtime.ops.openapi import DOCUMENT, RequestValidator

VALIDATOR = RequestValidator.shared()


def _app() -> web.Application:
    """An app holding the document's routes, each answering what the validator says (the
    API's middleware does the same before its handlers)."""

    async def handler(request: web.Request) -> web.Response:
        body = await request.read() if VALIDATOR.takes_json(request) else None
        try:
            await VALIDATOR.check(request, body)
        except BadRequest as exc:
            return web.json_response({"field": exc.field, "error": str(exc)}, status=400)
        return web.Response(status=204)

    app = web.Application()
    for path, item in DOCUMENT["paths"].items():
        for verb in item:
            if verb in ("get", "post", "put", "delete", "patch"):
                app.router.add_route(verb.upper(), path, handler)
    return app


def _verdicts(requests: list[tuple[str, str, Any]]) -> list[dict[str, Any] | None]:
    """Each ``(method, url, body)`` (a JSON value, bytes or None) sent over loopback HTTP:
    None when the validator let it through, else its 400's body."""

    async def run() -> list[dict[str, Any] | None]:
        out: list[dict[str, Any] | None] = []
        async with TestClient(TestServer(_app())) as client:
            for method, url, body in requests:
                data = body if body is None or isinstance(body, bytes) else orjson.dumps(body)
                async with client.request(method, url, data=data) as reply:
                    out.append(None if reply.status == 204 else await reply.json())
        return out

    return asyncio.run(run())


def _verdict(method: str, url: str, body: Any = None) -> dict[str, Any] | None:
    return _verdicts([(method, url, body)])[0]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"name": "x", "creator": "t", "job_class": "wordcount", "trees": "2"}, "trees"),
        ({"name": "x", "creator": "t"}, "job_class"),
        ({"name": "x", "creator": "t", "job_class": "wordcount", "bogus": 1}, "bogus"),
        ({"name": "x y", "creator": "t", "job_class": "wordcount"}, "name"),
        (
            {"name": "x", "creator": "t", "job_class": "wordcount", "inputs": ["ok", "no pe"]},
            "inputs.1",
        ),
    ],
)
def test_a_refused_body_names_its_field(spec: dict[str, Any], field: str) -> None:
    reply = _verdict("POST", "/api/v1/jobs", spec)
    assert reply is not None and reply["field"] == field, reply
    assert field in reply["error"]


@pytest.mark.parametrize(
    ("query", "refused"),
    [("", False), ("epoch=0", False), ("epoch=12", False), ("epoch=abc", True),
     ("epoch=-1", True), ("epoch=1.5", True), ("epoch=9007199254740993", True)],
)  # fmt: skip
def test_query_parameters_are_cast_then_checked(query: str, refused: bool) -> None:
    reply = _verdict("GET", f"/api/v1/jobs/wc/results?{query}")
    assert (reply is not None) == refused, reply
    if reply is not None:
        assert reply["field"] == "epoch"


def test_path_parameters_are_checked() -> None:
    assert _verdict("GET", "/api/v1/jobs/wc/results") is None
    reply = _verdict("GET", "/api/v1/jobs/-bad/results")
    assert reply is not None and reply["field"] == "name"


def test_a_form_object_takes_the_remaining_query_parameters() -> None:
    assert _verdict("GET", "/api/v1/jobs/wc/local?user=a&item=b") is None


@pytest.mark.parametrize(
    "param",
    [
        {"name": "h", "in": "header", "schema": {"type": "string"}},
        {"name": "c", "in": "cookie", "schema": {"type": "string"}},
        {"name": "a", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
        {"name": "d", "in": "query", "style": "deepObject", "schema": {"type": "object"}},
        {"$ref": "#/components/parameters/P"},
    ],
)
def test_a_parameter_kind_it_does_not_implement_is_refused_at_build(param: dict) -> None:
    doc = {"paths": {"/x": {"get": {"parameters": [param]}}}, "components": {}}
    with pytest.raises(ValueError, match="not implemented"):
        RequestValidator(doc).warm()


JOB_SPEC = {**DOCUMENT["components"]["schemas"]["JobSpec"], "components": DOCUMENT["components"]}
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.text(max_size=8),
    st.floats(allow_nan=False, allow_infinity=False),
)  # fmt: skip
FIELDS = st.sampled_from(
    ["name", "creator", "job_class", "trees", "epoch_seconds", "params", "inputs", "bogus"]
)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        FIELDS,
        st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(st.text(max_size=4),
                                                                          SCALARS, max_size=2)),
        max_size=6,
    )
)  # fmt: skip
def test_bodies_are_judged_as_the_reference_library_judges_them(spec: dict[str, Any]) -> None:
    want_valid = jsonschema.Draft202012Validator(JOB_SPEC).is_valid(spec)
    assert (_verdict("POST", "/api/v1/jobs", spec) is None) == want_valid


def test_a_body_nested_past_the_validators_reach_is_a_400() -> None:
    # 300 levels: orjson reads up to 1,024, jsonschema_rs up to ~254
    deep = b'{"name": "x", "params": ' + b'{"a": ' * 300 + b"{}" + b"}" * 301
    reply = _verdict("POST", "/api/v1/jobs", deep)
    assert reply is not None and "nests too deeply" in reply["error"]
