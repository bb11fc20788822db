"""The grammar of custom access-log formats: nginx ``log_format`` and Apache ``LogFormat``.

Contract: a :class:`LogFormat` (``dialect`` ``"nginx"`` or ``"apache"``, ``text`` the format
string) is a plain, hashable, picklable value that names a line format wherever a format
name (``"nginx"``, ``"json"``, ...) is accepted. :func:`format_items` splits its text into
:class:`Literal` and :class:`Variable` items, each variable typed (:data:`KINDS`) and mapped
to the record field it fills, or raises :class:`LogFormatError` naming what is wrong (an
unknown variable, a malformed ``${...}`` or ``%{...}``, two variables with no literal text
between them, a format with no variable). Nothing else is raised on any text; nothing here
parses a log line (:mod:`agent.ingest.log_format` compiles the items into a parser).

This module sits below the configuration (it imports no project module) so that an input's
format is checked when the configuration is loaded: a format accepted is a format that runs.

Field names follow the built-in combined parser's where the variable is one of its fields
(``$remote_addr``/``%h`` → ``source_ip``, ``$body_bytes_sent``/``%b`` → ``bytes``,
``$http_referer`` → ``referer``, ``$http_user_agent`` → ``user_agent``, ``$time_local``/``%t``
→ ``ts``, ``$request``/``%r`` → ``request`` and its parts), so a query written for
``combined`` runs unchanged on a custom format; any other variable keeps its nginx name
(``$request_time`` → ``request_time``; Apache's ``%{X-Foo}i`` → ``http_x_foo`` as nginx names
that header).
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass

DIALECTS = ("nginx", "apache")

#: value kinds: how a variable's text is matched and converted (see docs/inputs.md)
KINDS = (
    "str",  # text; "-" (and Apache's empty %q) → None; escapes decoded
    "text",  # as str, but may hold spaces (request line, headers): matched lazily unquoted
    "int",  # integer; "-" → None
    "bytes",  # a size where "-" means 0 (Apache %b; combined's ``bytes``)
    "float",  # seconds with a fraction ("0.123"); "-" → None
    "usec",  # Apache %D: integer microseconds; also fills ``request_time`` in seconds
    "msec",  # Apache %{ms}T: integer milliseconds; also fills ``request_time`` in seconds
    "time_list",  # nginx upstream times: "-", "0.010" or "0.010, 0.020 : 0.005" → sum
    "int_list",  # nginx upstream sizes: as time_list, integers
    "str_list",  # nginx upstream addresses/statuses: the text as written
    "status",  # HTTP status: int ("-" → None); also sets ``priority``
    "request",  # the request line: ``request``, ``body`` and its parts, as combined
    "ts_clf",  # 21/Nov/2026:20:11:10 +0100 (nginx $time_local)
    "ts_clf_bracketed",  # [21/Nov/2026:20:11:10 +0100] (Apache %t)
    "ts_iso",  # 2026-11-21T20:11:10+01:00 (nginx $time_iso8601)
    "ts_epoch",  # 1763752270.123 (nginx $msec), seconds
    "ts_epoch_int",  # Apache %{sec}t (seconds)
    "ts_epoch_ms",  # Apache %{msec}t (milliseconds)
    "ts_epoch_us",  # Apache %{usec}t (microseconds)
)


class LogFormatError(ValueError):
    """A format string that cannot be compiled; the message names the offending part."""


@dataclass(frozen=True, slots=True)
class LogFormat:
    """A custom access-log format: ``dialect`` (``nginx`` or ``apache``) and its format string
    exactly as the server's configuration gives it (nginx: the ``log_format`` strings joined;
    Apache: the ``LogFormat`` string with its ``\\"`` escapes)."""

    dialect: str
    text: str

    def __str__(self) -> str:
        return f"{self.dialect}:{self.text}"


@dataclass(frozen=True, slots=True)
class Literal:
    """Text the server writes as is between variables."""

    text: str


@dataclass(frozen=True, slots=True)
class Variable:
    """One variable of a format: ``token`` as written (``$request_time``, ``%>s``), ``kind``
    (one of :data:`KINDS`) and ``field``, the record field it fills."""

    token: str
    kind: str
    field: str


Item = Literal | Variable

# ---- nginx ------------------------------------------------------------------------------------

#: nginx variables by name: (kind, field). Fields named after combined's where they are its.
NGINX_VARIABLES: dict[str, tuple[str, str]] = {
    "remote_addr": ("str", "source_ip"),
    "remote_user": ("str", "remote_user"),
    "time_local": ("ts_clf", "ts"),
    "time_iso8601": ("ts_iso", "ts"),
    "msec": ("ts_epoch", "ts"),
    "request": ("request", "request"),
    "status": ("status", "status"),
    "body_bytes_sent": ("bytes", "bytes"),
    "http_referer": ("text", "referer"),
    "http_user_agent": ("text", "user_agent"),
    "request_method": ("str", "method"),
    "server_protocol": ("str", "protocol"),
    "scheme": ("str", "scheme"),
    "host": ("str", "host"),
    "request_time": ("float", "request_time"),
    "upstream_response_time": ("time_list", "upstream_response_time"),
    "upstream_connect_time": ("time_list", "upstream_connect_time"),
    "upstream_header_time": ("time_list", "upstream_header_time"),
    "upstream_queue_time": ("time_list", "upstream_queue_time"),
    "upstream_response_length": ("int_list", "upstream_response_length"),
    "upstream_bytes_received": ("int_list", "upstream_bytes_received"),
    "upstream_bytes_sent": ("int_list", "upstream_bytes_sent"),
    "upstream_addr": ("str_list", "upstream_addr"),
    "upstream_status": ("str_list", "upstream_status"),
    "upstream_cache_status": ("str", "upstream_cache_status"),
    "bytes_sent": ("int", "bytes_sent"),
    "request_length": ("int", "request_length"),
    "remote_port": ("int", "remote_port"),
    "server_port": ("int", "server_port"),
    "connection": ("int", "connection"),
    "connection_requests": ("int", "connection_requests"),
    "content_length": ("int", "content_length"),
    "gzip_ratio": ("float", "gzip_ratio"),
    "pid": ("int", "pid"),
    "pipe": ("str", "pipe"),
    "request_uri": ("str", "request_uri"),
    "uri": ("str", "uri"),
    "document_uri": ("str", "uri"),
    "args": ("str", "args"),
    "query_string": ("str", "args"),
    "server_name": ("str", "server_name"),
    "server_addr": ("str", "server_addr"),
    "hostname": ("str", "hostname"),
    "realip_remote_addr": ("str", "realip_remote_addr"),
    "realip_remote_port": ("int", "realip_remote_port"),
    "request_id": ("str", "request_id"),
    "content_type": ("text", "content_type"),
    "ssl_protocol": ("str", "ssl_protocol"),
    "ssl_cipher": ("str", "ssl_cipher"),
    "ssl_server_name": ("str", "ssl_server_name"),
    "ssl_session_reused": ("str", "ssl_session_reused"),
    "http2": ("str", "http2"),
    "http3": ("str", "http3"),
    "request_completion": ("str", "request_completion"),
    "proxy_protocol_addr": ("str", "proxy_protocol_addr"),
    "proxy_protocol_port": ("int", "proxy_protocol_port"),
    "binary_remote_addr": ("str", "binary_remote_addr"),
    "limit_req_status": ("str", "limit_req_status"),
    "limit_conn_status": ("str", "limit_conn_status"),
}
#: families of nginx variables (headers, cookies, arguments): free text, named as written
NGINX_PREFIXES = ("http_", "sent_http_", "sent_trailer_", "upstream_http_", "upstream_cookie_",
                  "upstream_trailer_", "cookie_", "arg_")  # fmt: skip
_NGINX_NAME = re.compile(r"[A-Za-z0-9_]+")


def _nginx_variable(name: str, token: str) -> Variable:
    name = name.lower()  # nginx looks variables up case-insensitively
    known = NGINX_VARIABLES.get(name)
    if known is None and name.startswith(NGINX_PREFIXES) and name not in NGINX_PREFIXES:
        kind = "str" if name.startswith(("cookie_", "arg_", "upstream_cookie_")) else "text"
        known = (kind, name.lower())
    if known is None:
        raise LogFormatError(
            f"unknown nginx variable {token!r}: not one this agent can type (docs/inputs.md "
            f"lists them; headers and cookies as {', '.join(p + '*' for p in NGINX_PREFIXES)})"
        )
    return Variable(token, known[0], known[1])


def _nginx_items(text: str) -> list[Item]:
    items: list[Item] = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "$":
            literal.append(ch)
            i += 1
            continue
        if text.startswith("{", i + 1):
            end = text.find("}", i + 2)
            name = text[i + 2 : end] if end >= 0 else ""
            if end < 0 or not _NGINX_NAME.fullmatch(name):
                raise LogFormatError(
                    f"malformed variable at column {i}: '${{' must be followed by a name and '}}'"
                )
            token, i = text[i : end + 1], end + 1
        else:
            m = _NGINX_NAME.match(text, i + 1)
            if m is None:
                raise LogFormatError(
                    f"'$' at column {i} is not followed by a variable name (nginx has no "
                    "escape for a literal '$' in log_format)"
                )
            name, token, i = m.group(), text[i : m.end()], m.end()
        if literal:
            items.append(Literal("".join(literal)))
            literal = []
        items.append(_nginx_variable(name, token))
    if literal:
        items.append(Literal("".join(literal)))
    return items


# ---- Apache -----------------------------------------------------------------------------------

#: Apache directives without an argument: (kind, field)
APACHE_DIRECTIVES: dict[str, tuple[str, str]] = {
    "a": ("str", "client_ip"),
    "A": ("str", "server_ip"),
    "B": ("bytes", "bytes"),
    "b": ("bytes", "bytes"),
    "D": ("usec", "request_time_us"),
    "f": ("str", "filename"),
    "h": ("str", "source_ip"),
    "H": ("str", "protocol"),
    "I": ("int", "bytes_received"),
    "k": ("int", "keepalive_requests"),
    "l": ("str", "ident"),
    "L": ("str", "log_id"),
    "m": ("str", "method"),
    "O": ("int", "bytes_sent"),
    "p": ("int", "server_port"),
    "P": ("int", "pid"),
    "q": ("str", "query_string"),
    "r": ("request", "request"),
    "R": ("str", "handler"),
    "s": ("status", "status"),
    "S": ("int", "bytes_transferred"),
    "t": ("ts_clf_bracketed", "ts"),
    "T": ("float", "request_time"),
    "u": ("str", "remote_user"),
    "U": ("str", "uri"),
    "v": ("str", "server_name"),
    "V": ("str", "server_name"),
    "X": ("str", "connection_status"),
}
#: Apache directives taking ``{argument}``: the field is ``prefix`` + the argument lowercased,
#: ``-`` as ``_`` (nginx's names for headers); fixed arguments are listed in _APACHE_FIXED
APACHE_ARG_PREFIXES = {"i": "http_", "o": "sent_http_", "C": "cookie_", "e": "env_", "n": "note_"}
_APACHE_FIXED: dict[tuple[str, str], tuple[str, str]] = {
    ("a", "c"): ("str", "peer_ip"),
    ("p", "canonical"): ("int", "server_port"),
    ("p", "local"): ("int", "local_port"),
    ("p", "remote"): ("int", "remote_port"),
    ("P", "pid"): ("int", "pid"),
    ("P", "tid"): ("int", "tid"),
    ("P", "hextid"): ("str", "tid"),
    ("t", "sec"): ("ts_epoch_int", "ts"),
    ("t", "msec"): ("ts_epoch_ms", "ts"),
    ("t", "usec"): ("ts_epoch_us", "ts"),
    ("T", "s"): ("float", "request_time"),
    ("T", "ms"): ("msec", "request_time_ms"),
    ("T", "us"): ("usec", "request_time_us"),
}
#: header fields combined names its own way
_HEADER_FIELDS = {"http_referer": "referer", "http_user_agent": "user_agent"}
_APACHE_TOKEN = re.compile(r"%([<>]?)(?:\{([^}]*)\})?([<>]?)(.)", re.S)


def _apache_variable(m: re.Match[str], at: int) -> Variable:
    token = m.group()
    arg, letter = m.group(2), m.group(4)
    if arg is None:
        known = APACHE_DIRECTIVES.get(letter)
    elif (letter, arg) in _APACHE_FIXED:
        known = _APACHE_FIXED[(letter, arg)]
    elif letter in APACHE_ARG_PREFIXES and re.fullmatch(r"[A-Za-z0-9_-]+", arg):
        name = APACHE_ARG_PREFIXES[letter] + arg.lower().replace("-", "_")
        kind = "text" if letter in "io" else "str"
        known = (kind, _HEADER_FIELDS.get(name, name))
    elif letter == "t":
        raise LogFormatError(
            f"{token!r} at column {at}: only %t, %{{sec}}t, %{{msec}}t and %{{usec}}t times are "
            "supported (a strftime %{...}t cannot be read back reliably)"
        )
    else:
        known = None
    if known is None:
        raise LogFormatError(f"unknown Apache directive {token!r} at column {at}")
    return Variable(token, *known)


def _apache_items(text: str) -> list[Item]:
    items: list[Item] = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":  # mod_log_config's own escapes: \n \t, else the next character
            if i + 1 == len(text):
                raise LogFormatError("the format ends with a lone backslash")
            nxt = text[i + 1]
            if nxt == "n":
                raise LogFormatError(f"'\\n' at column {i}: a log line cannot hold a newline")
            literal.append("\t" if nxt == "t" else nxt)
            i += 2
            continue
        if ch != "%":
            literal.append(ch)
            i += 1
            continue
        if text.startswith("%%", i):
            literal.append("%")
            i += 2
            continue
        if re.match(r"%[<>]?!?[0-9]", text[i:]):
            raise LogFormatError(
                f"status conditions ({text[i : i + 12]!r}...) at column {i} are not "
                "supported: the value may be '-' for some statuses only"
            )
        m = _APACHE_TOKEN.match(text, i)
        if m is None:
            raise LogFormatError(f"malformed directive at column {i}: {text[i : i + 12]!r}")
        if literal:
            items.append(Literal("".join(literal)))
            literal = []
        items.append(_apache_variable(m, i))
        i = m.end()
    if literal:
        items.append(Literal("".join(literal)))
    return items


# ---- both -------------------------------------------------------------------------------------

#: the built-in formats: ``combined`` is also the default of the ``nginx``/``apache`` formats
PREDEFINED = {
    ("nginx", "combined"): '$remote_addr - $remote_user [$time_local] "$request" $status '
    '$body_bytes_sent "$http_referer" "$http_user_agent"',
    ("apache", "combined"): '%h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-agent}i"',
    ("apache", "common"): '%h %l %u %t "%r" %>s %b',
}


@functools.lru_cache(maxsize=64)
def format_items(fmt: LogFormat) -> tuple[Item, ...]:
    """The items of ``fmt`` (see module docstring); :class:`LogFormatError` when it has none,
    has a newline, two variables in a row, or an unknown or malformed variable."""
    if fmt.dialect not in DIALECTS:
        raise LogFormatError(f"log formats are nginx or apache, got {fmt.dialect!r}")
    text = PREDEFINED.get((fmt.dialect, fmt.text), fmt.text)
    if not isinstance(text, str) or not text:
        raise LogFormatError("the log format is empty")
    if "\n" in text or "\r" in text:
        raise LogFormatError("a log format cannot hold a newline (a line is one record)")
    items = _nginx_items(text) if fmt.dialect == "nginx" else _apache_items(text)
    variables = [x for x in items if isinstance(x, Variable)]
    if not variables:
        raise LogFormatError("the log format has no variable")
    for a, b in itertools.pairwise(items):
        if isinstance(a, Variable) and isinstance(b, Variable):
            raise LogFormatError(
                f"{a.token!r} and {b.token!r} have no literal text between them: a line "
                "could not be split between the two"
            )
    return tuple(items)


def check_format(dialect: str, text: object) -> LogFormat:
    """The :class:`LogFormat` of ``dialect`` and ``text``, checked (:func:`format_items`);
    :class:`LogFormatError` otherwise (``text`` not a string included)."""
    if not isinstance(text, str):
        raise LogFormatError(f"must be a string, got {type(text).__name__}")
    fmt = LogFormat(dialect, text)
    format_items(fmt)
    return fmt
