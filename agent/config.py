"""Agent configuration: a TOML file, overridden by ``ELF_*`` environment variables, overridden
by command-line flags.

Contract: :func:`load_config` returns a validated, frozen :class:`AgentConfig` or raises
:class:`~agent.errors.ConfigError` naming the offending key and where it came from. The cluster
secret is read from a file (or ``ELF_SECRET`` for tests and containers) and must be at least 16
bytes; the API token comes from ``ELF_TOKEN`` or ``token_file`` and defaults to a value derived
from the secret, so holders of the secret file can always reach the API (``elf`` commands derive
it the same way). Secret and token files must be private to their owner: one others may read
is refused (:mod:`agent.private_files`). Neither value ever appears in ``repr(config)``.

Example file::

    [agent]
    host = "10.0.0.5"          # advertised address (overlay, data plane)
    overlay_port = 7400        # 0 = any free port
    data_port = 7401
    api_host = "127.0.0.1"
    api_port = 7480
    domain = "rack-12"         # failure domain label
    data_dir = "/var/lib/elf"
    bootstrap = ["10.0.0.1:7400", "10.0.0.2:7400"]
    secret_file = "/etc/elf/secret"
    logical_agents = 1         # >1 runs several agents in this process, ports + i
    lake = "s3://bucket/elf"   # rollup lake (default <data_dir>/lake; "off" disables)
    metrics_public = false     # GET /metrics without the API token (docs/metrics.md)

    [[inputs]]
    name = "web"
    type = "file"              # "file" (alias "jsonl": tail a file; path "-" = stdin)
                               # or "ingest" (HTTP only)
    path = "/var/log/nginx/access.log"
    format = "nginx"           # json | nginx | apache | syslog | raw (docs/inputs.md)
    timestamp_field = "ts"     # json only

    [tunables]                 # overlay timings, see overlay.Tunables
    probe_interval = 0.5

    [srt]                      # reducer trees and data plane, see srt.Tunables
    request_timeout = 5.0      # (the tree heartbeat is the agent's heartbeat_interval)

    [runtime]                  # agent runtime timings and bounds (defaults shown),
    tick_seconds = 0.1         # see agent.tunables.RuntimeTunables
    resync_seconds = 10.0      # job-table anti-entropy period
    resync_fanout = 2          # children a new jobs-tree root pulls the table from
    query_timeout = 10.0       # queries to the jobs-tree root and to a job's master
    placement_choices = 2      # candidate tree ids per job
    admission_timeout = 5.0    # a submitted spec's dry run (setup()) must end in this
    max_catchup_epochs = 3600  # a submitted start_epoch: at most this many epochs back,
    max_catchup_seconds = 3600.0   # ... at most this much event time back,
    max_start_ahead_seconds = 86400.0  # ... and at most this far ahead of now
    stopped_job_ttl = 600.0    # a stopped job leaves every agent's job table after this
    tombstone_seconds = 86400.0  # a removed job's last version is remembered this long
    multicast_timeout = 5.0    # a master's multicast down a job tree
    multicast_bundle_wait = 0.25   # an epoch's "empty" waits this long for its commit
    master_url_ttl = 5.0       # a master's data-plane URL is cached this long
    late_attempts = 12         # tries to deliver a late contribution to the master
    stop_flush_seconds = 10.0  # a stopping job waits this long for its lake rollups
    memory_budget_bytes = 268435456  # all this agent holds (results, buffers, checkpoints)
    result_memory_bytes = 268435456  # a master's resident results per job (older: spilled)
    result_spill_bytes = 4294967296  # its spilled results on disk per job (older: dropped)
    worker_memory_bytes = 268435456  # a worker's resident compressed CBT buffers per job
    lake_compact_seconds = 60.0  # the lake writer compacts complete hours this often
    lake_compact_grace = 300.0 # replaced epoch files are deleted this much later
    lake_retention_days = 0.0  # hour partitions older than this are dropped (0: keep)
    max_pending = 4096         # file positions per input awaiting acknowledgement
    api_head_timeout = 10.0    # API connections: a request head must arrive within this,
    api_body_timeout = 30.0    # its body within this; keep-alive silence is closed after
    api_idle_timeout = 60.0    # this; and at most api_max_preauth connections without an
    api_max_preauth = 64       # authenticated request (oldest closed first)
    dashboard_max_agents = 64  # agents the dashboard asks per picture (docs/dashboard.md)
    dashboard_streams = 8      # open dashboard event streams per agent

Each table of tunables (``[tunables]`` for the overlay, ``[srt]``, ``[runtime]``) is a frozen
dataclass nested in :class:`AgentConfig` (``tunables``, ``srt``, ``runtime``); the trees'
``heartbeat_interval`` is always the agent's own key (one source for it, so ``[srt]`` refuses
it); an unknown key or a bad value is a
:class:`~agent.errors.ConfigError` naming the table. Another layer's tunables nest the same way:
a field here and one entry in ``_TUNABLE_SECTIONS``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import ConfigError
from agent.log_format import LogFormatError, check_format
from agent.private_files import read_private
from agent.tunables import RuntimeTunables
from overlay import Tunables
from srt import Tunables as SrtTunables

MIN_SECRET_BYTES = 16
INPUT_TYPES = ("jsonl", "file", "ingest")
INPUT_FORMATS = ("json", "nginx", "apache", "syslog", "raw")  # agent.ingest.formats.FORMATS


@dataclass(frozen=True)
class InputConfig:
    """One named input of this agent: a file to tail (``path = "-"``: stdin), or an
    HTTP-ingest-only queue, in one line ``format``. Jobs name the inputs they read. An
    ``nginx``/``apache`` input may give the server's own ``log_format`` string (checked at
    load; None: the built-in combined/common parser)."""

    name: str
    type: str = "jsonl"
    path: str | None = None
    timestamp_field: str = "ts"
    format: str = "json"
    log_format: str | None = None


@dataclass(frozen=True)
class AgentConfig:
    """Everything one agent process needs; ``logical_agents`` > 1 runs that many agents."""

    # never in repr(): a config logged or shown in a traceback must not disclose them
    secret: bytes = field(repr=False)
    host: str = "127.0.0.1"
    overlay_port: int = 0
    data_port: int = 0
    api_host: str = "127.0.0.1"
    api_port: int = 0
    domain: str = "default"
    data_dir: str | None = None
    bootstrap: tuple[tuple[str, int], ...] = ()
    api_token: str = field(default="", repr=False)
    logical_agents: int = 1
    inputs: tuple[InputConfig, ...] = ()
    # Tunables of the layers, one table each (see _TUNABLE_SECTIONS).
    tunables: Tunables = field(default_factory=Tunables)  # [tunables]: the overlay node
    srt: SrtTunables = field(default_factory=SrtTunables)  # [srt]: trees and data plane
    runtime: RuntimeTunables = field(default_factory=RuntimeTunables)  # [runtime]
    heartbeat_interval: float = 1.0
    node_id: int | None = None  # overrides SHA-1(host:port); tests and planned placements
    lake: str | None = None  # rollup lake path/URI (spark_sink); None = no lake
    #: GET /metrics without the API token (metric labels name jobs and inputs: opt-in)
    metrics_public: bool = False

    def for_logical(self, index: int) -> AgentConfig:
        """The config of logical agent ``index``: fixed ports shift by ``index``, the data
        directory gets a per-agent subdirectory; port 0 stays 0 (any free port)."""

        def shift(port: int) -> int:
            return port + index if port else 0

        data_dir = str(Path(self.data_dir) / f"agent-{index}") if self.data_dir else None
        return dataclasses.replace(
            self,
            overlay_port=shift(self.overlay_port),
            data_port=shift(self.data_port),
            api_port=shift(self.api_port),
            data_dir=data_dir,
            logical_agents=1,
        )


def derive_api_token(secret: bytes) -> str:
    """The default API token: an HMAC of a fixed label under the cluster secret."""
    return hmac.new(secret, b"elf api token v1", hashlib.sha256).hexdigest()[:32]


def read_token(path: str | Path, where: str = "token_file") -> str:
    """The API token in ``path``: a private file (as the secret), non-empty."""
    try:
        token = read_private(path, where).decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: the token in {path} is not UTF-8 text") from None
    if not token:
        raise ConfigError(f"{where}: the token file {path} is empty")
    return token


def parse_address(text: str, where: str) -> tuple[str, int]:
    """``host:port`` → (host, port); the error names ``where`` the value came from."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{where}: expected host:port, got {text!r}")
    return host, int(port)


def read_secret(path: str | Path, where: str = "secret_file") -> bytes:
    """The cluster secret in ``path``: a private file (refused when others may read it,
    :func:`~agent.private_files.read_private`) holding at least 16 bytes."""
    secret = read_private(path, where).strip()
    if len(secret) < MIN_SECRET_BYTES:
        raise ConfigError(f"{where}: the secret in {path} is shorter than {MIN_SECRET_BYTES} bytes")
    return secret


_INT_KEYS = ("overlay_port", "data_port", "api_port", "logical_agents")
_STR_KEYS = (
    "host",
    "api_host",
    "domain",
    "data_dir",
    "secret_file",
    "token_file",
    "api_token",
    "node_id",
    "lake",
)
_FLOAT_KEYS = ("heartbeat_interval",)
_BOOL_KEYS = ("metrics_public",)
# TOML table → the tunables dataclass read from it, stored in the AgentConfig field of the
# same name. One line per layer.
_TUNABLE_SECTIONS: dict[str, Callable[..., Any]] = {
    "tunables": Tunables,
    "srt": SrtTunables,
    "runtime": RuntimeTunables,
}
_ENV = {
    "ELF_HOST": "host",
    "ELF_OVERLAY_PORT": "overlay_port",
    "ELF_DATA_PORT": "data_port",
    "ELF_API_HOST": "api_host",
    "ELF_API_PORT": "api_port",
    "ELF_DOMAIN": "domain",
    "ELF_DATA_DIR": "data_dir",
    "ELF_SECRET_FILE": "secret_file",
    "ELF_TOKEN_FILE": "token_file",
    "ELF_TOKEN": "api_token",
    "ELF_BOOTSTRAP": "bootstrap",
    "ELF_LOGICAL_AGENTS": "logical_agents",
    "ELF_LAKE": "lake",
    "ELF_METRICS_PUBLIC": "metrics_public",
}


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> AgentConfig:
    """Build the config from ``path`` (TOML, optional), then ``env`` (default ``os.environ``),
    then ``overrides`` (flags; ``None`` values are ignored)."""
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    origin: dict[str, str] = {}
    inputs_raw: list[Any] = []
    tunables_raw: dict[str, dict[str, Any]] = {}
    if path is not None:
        try:
            doc = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
        unknown = set(doc) - {"agent", "inputs", *_TUNABLE_SECTIONS}
        if unknown:
            raise ConfigError(f"config file {path}: unknown section(s) {sorted(unknown)}")
        for key, value in dict(doc.get("agent", {})).items():
            raw[key], origin[key] = value, f"{path} [agent].{key}"
        inputs_raw = list(doc.get("inputs", []))
        for section in _TUNABLE_SECTIONS:
            table = doc.get(section, {})
            if not isinstance(table, dict):
                raise ConfigError(f"config file {path}: [{section}] must be a table")
            tunables_raw[section] = table
    for var, key in _ENV.items():
        if var in env:
            raw[key], origin[key] = env[var], f"environment {var}"
    for key, value in (overrides or {}).items():
        if value is not None and value != ():
            raw[key], origin[key] = value, f"flag --{key.replace('_', '-')}"
    return _build(raw, origin, inputs_raw, tunables_raw, env)


def _build(
    raw: dict[str, Any],
    origin: dict[str, str],
    inputs_raw: list[Any],
    tunables_raw: dict[str, dict[str, Any]],
    env: Mapping[str, str],
) -> AgentConfig:
    known = {
        *_INT_KEYS, *_STR_KEYS, *_FLOAT_KEYS, *_BOOL_KEYS, "bootstrap", "inputs",
        "input_log_format",
    }  # fmt: skip
    for key in raw:
        # an input's log_format belongs to its [[inputs]] table: the key is the flag's only
        if key not in known or (key == "input_log_format" and not origin[key].startswith("flag")):
            raise ConfigError(f"{origin[key]}: unknown setting {key!r}")
    values: dict[str, Any] = {}
    numeric = [(k, int, "an integer") for k in _INT_KEYS]
    numeric += [(k, float, "a number") for k in _FLOAT_KEYS]
    for key, cast, what in numeric:
        if key in raw:
            try:
                values[key] = cast(raw[key])
            except (TypeError, ValueError):
                raise ConfigError(f"{origin[key]}: {key} must be {what}") from None
            if key.endswith("_port") and not 0 <= values[key] < 65536:
                raise ConfigError(f"{origin[key]}: {key} out of range")
    for key in _BOOL_KEYS:
        if key in raw:
            values[key] = _boolean(raw[key], origin[key], key)
    if values.get("logical_agents", 1) < 1:
        raise ConfigError(f"{origin['logical_agents']}: logical_agents must be ≥ 1")
    for key in ("host", "api_host", "domain", "data_dir"):
        if key in raw:
            values[key] = str(raw[key])
    if "lake" in raw:  # "off" disables; default <data_dir>/lake, shared by logical agents
        lake = str(raw["lake"]).strip()
        values["lake"] = None if lake.lower() in ("", "off", "none") else lake
    elif "data_dir" in values:
        values["lake"] = str(Path(values["data_dir"]) / "lake")
    if "node_id" in raw:
        try:
            values["node_id"] = int(str(raw["node_id"]), 16)
        except ValueError:
            raise ConfigError(f"{origin['node_id']}: node_id must be hexadecimal") from None
        if not 0 <= values["node_id"] < 1 << 160:
            raise ConfigError(f"{origin['node_id']}: node_id must fit in 160 bits")
        if values.get("logical_agents", 1) > 1:
            raise ConfigError(f"{origin['node_id']}: node_id needs logical_agents = 1")
    if "bootstrap" in raw:
        items = raw["bootstrap"]
        if isinstance(items, str):
            items = [s for s in items.split(",") if s.strip()]
        values["bootstrap"] = tuple(parse_address(s.strip(), origin["bootstrap"]) for s in items)
    if "ELF_SECRET" in env and "secret_file" not in raw:
        secret = env["ELF_SECRET"].encode()
        if len(secret) < MIN_SECRET_BYTES:
            raise ConfigError(f"environment ELF_SECRET: shorter than {MIN_SECRET_BYTES} bytes")
    elif "secret_file" in raw:
        secret = read_secret(raw["secret_file"], origin["secret_file"])
    else:
        raise ConfigError("no cluster secret: set secret_file (file, ELF_SECRET_FILE or flag)")
    values["secret"] = secret
    if "api_token" in raw:
        values["api_token"] = str(raw["api_token"])
    elif "token_file" in raw:
        values["api_token"] = read_token(raw["token_file"], origin["token_file"])
    else:
        values["api_token"] = derive_api_token(secret)
    if not values["api_token"]:
        raise ConfigError("the API token is empty")
    inputs = [dict(i) if isinstance(i, dict) else i for i in inputs_raw]
    if "inputs" in raw:  # flags: name=path
        inputs += [_input_flag(s, origin["inputs"]) for s in raw["inputs"]]
    if "input_log_format" in raw:  # flags: name=log_format
        _input_log_formats(inputs, raw["input_log_format"], origin["input_log_format"])
    values["inputs"] = tuple(_input(i, n) for n, i in enumerate(inputs))
    names = [i.name for i in values["inputs"]]
    if len(set(names)) != len(names):
        raise ConfigError(f"inputs: duplicate input names in {names}")
    stdin_inputs = sum(1 for i in values["inputs"] if i.path == "-" and i.type != "ingest")
    if stdin_inputs > 1:
        raise ConfigError("inputs: only one input can read stdin (path '-')")
    if stdin_inputs and values.get("logical_agents", 1) > 1:
        raise ConfigError("inputs: a stdin input (path '-') needs logical_agents = 1")
    if "heartbeat_interval" in tunables_raw.get("srt", {}):
        raise ConfigError("[srt]: heartbeat_interval is the agent's own key (heartbeat_interval)")
    for section, cls in _TUNABLE_SECTIONS.items():
        try:
            values[section] = cls(**tunables_raw.get(section, {}))
        except (TypeError, ValueError) as exc:  # unknown key, bad value
            raise ConfigError(f"[{section}]: {exc}") from None
    return AgentConfig(**values)


def _boolean(value: Any, where: str, key: str) -> bool:
    """A TOML boolean, or ``true``/``false``/``1``/``0``/``yes``/``no`` from a variable."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{where}: {key} must be true or false, got {value!r}")


def _input_flag(text: str, where: str) -> dict[str, Any]:
    """``NAME=PATH`` or ``NAME:FORMAT=PATH`` (PATH ``-`` is stdin)."""
    name, sep, path = str(text).partition("=")
    if not sep or not name or not path:
        raise ConfigError(f"{where}: expected NAME=PATH or NAME:FORMAT=PATH, got {text!r}")
    name, colon, fmt = name.partition(":")
    return {"name": name, "type": "jsonl", "path": path, **({"format": fmt} if colon else {})}


def checked_log_format(fmt: str, text: Any, where: str) -> str | None:
    """An input's custom ``log_format`` ``text`` for format ``fmt``, checked here so that an
    input accepted is an input whose lines can be parsed (:class:`ConfigError` naming
    ``where`` otherwise); None for the formats the built-in parser reads (nginx ``combined``,
    Apache ``common``: it reads both, and faster). The configuration file, ``elf agent
    --input-log-format`` and ``elf run --log-format`` all check through here."""
    if fmt not in ("nginx", "apache"):
        raise ConfigError(f"{where}: only an nginx or apache input has one")
    try:
        check_format(fmt, text)
    except LogFormatError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if text == "combined" or (fmt, text) == ("apache", "common"):
        return None
    return str(text)


def _input_log_formats(inputs: list[Any], flags: Any, where: str) -> None:
    """``--input-log-format NAME=STRING`` (repeatable): the ``log_format`` of input NAME
    (one given by ``--input`` or the configuration file), set before the input is checked."""
    for text in flags:
        name, sep, log_format = str(text).partition("=")
        if not sep or not name or not log_format:
            raise ConfigError(f"{where}: expected NAME=LOG_FORMAT, got {text!r}")
        found = [i for i in inputs if isinstance(i, dict) and i.get("name") == name]
        if not found:
            names = [i.get("name") for i in inputs if isinstance(i, dict)]
            raise ConfigError(f"{where}: no input named {name!r} (inputs: {names})")
        for item in found:
            item["log_format"] = log_format


def _input(item: Any, index: int) -> InputConfig:
    where = f"inputs[{index}]"
    if isinstance(item, InputConfig):
        return item
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: must be a table")
    unknown = set(item) - {"name", "type", "path", "timestamp_field", "format", "log_format"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}")
    name = item.get("name")
    if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"{where}.name: must be a non-empty identifier, got {name!r}")
    kind = item.get("type", "jsonl")
    if kind not in INPUT_TYPES:
        raise ConfigError(f"{where}.type: must be one of {INPUT_TYPES}, got {kind!r}")
    path = item.get("path")
    if kind != "ingest" and (not isinstance(path, str) or not path):
        raise ConfigError(f"{where}.path: a {kind} input needs a file path (or '-' for stdin)")
    ts_field = item.get("timestamp_field", "ts")
    if not isinstance(ts_field, str) or not ts_field:
        raise ConfigError(f"{where}.timestamp_field: must be a non-empty string")
    fmt = item.get("format", "json")
    if fmt not in INPUT_FORMATS:
        raise ConfigError(f"{where}.format: must be one of {INPUT_FORMATS}, got {fmt!r}")
    if fmt != "json" and ts_field != "ts":
        raise ConfigError(f"{where}.timestamp_field: the {fmt} format always produces 'ts'")
    log_format = item.get("log_format")
    if log_format is not None:
        log_format = checked_log_format(fmt, log_format, f"{where}.log_format")
    return InputConfig(
        name=name,
        type=kind,
        path=path,
        timestamp_field=ts_field,
        format=fmt,
        log_format=log_format,
    )
