"""ELF QL URL functions on the row path (Presto / Trino names; DuckDB has none in its core).

Contract: both take a URL, a request target, or a whole access-log request line
(``GET /a/b?x=1 HTTP/1.1``: read as its target, by the rule of
:func:`agent.ingest.formats.split_request` - three space-separated parts, or two whose second
starts with ``/`` - since a URL holds no raw space). :func:`url_extract_path` is the path
(``/a/b?x=1`` -> ``/a/b``, ``http://h`` -> ``''``), **as written** - not percent-decoded, like
Trino's (``java.net.URI.getRawPath``) - so ``/a%2Fb`` and ``/a/b`` stay different paths.
:func:`url_extract_parameter` is the value of the first query parameter named ``name``,
``''`` for a name without ``=``, NULL when absent; names and values are decoded as an HTML
form is (RFC 1866 8.2.1: ``+`` is a space, then ``%XX`` escapes as UTF-8; invalid escapes
stay as written). Anything that is not a string, or that :func:`urllib.parse.urlsplit`
refuses (a broken IPv6 host ``http://[::1``), is NULL. The reference is Python's
``urllib.parse`` (``urlsplit`` and ``parse_qsl(keep_blank_values=True)``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlsplit


def target(url: str) -> str:
    """The request target of a request line ``METHOD TARGET [PROTOCOL]``, else ``url``."""
    if " " not in url:
        return url
    parts = url.split(" ")
    if len(parts) == 3 or (len(parts) == 2 and parts[1].startswith("/")):
        return parts[1]
    return url


def url_extract_path(url: Any) -> str | None:
    """The path of ``url``, as written (see module docstring)."""
    if type(url) is not str:
        return None
    url = target(url)
    try:
        return urlsplit(url).path
    except ValueError:
        return None


def url_extract_parameter(url: Any, name: Any) -> str | None:
    """The decoded value of the first query parameter ``name`` of ``url`` (see module
    docstring)."""
    if type(url) is not str or type(name) is not str:
        return None
    url = target(url)
    try:
        query = urlsplit(url).query
        pairs = parse_qsl(query, keep_blank_values=True)
    except ValueError:
        return None
    for key, value in pairs:
        if key == name:
            return value
    return None
