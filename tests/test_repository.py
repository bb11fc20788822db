"""Repository-level contracts: CI runs the README's test command, every package and
subpackage states its role, the CLI answers, lower layers never import higher ones — between
packages and between the subpackages inside ``agent`` and ``srt`` — and no module import
cycle exists, ``TYPE_CHECKING`` and function-local imports included."""

from __future__ import annotations

import ast
import graphlib
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent.cli import cli

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["cbt", "overlay", "srt", "agent", "apps", "spark_sink"]

# Who may import whom: each layer lists the project packages it is allowed to use.
ALLOWED_IMPORTS = {
    "cbt": set(),
    "overlay": set(),
    "srt": {"cbt", "overlay"},
    "agent": {"cbt", "overlay", "srt", "spark_sink"},
    "apps": {"cbt", "agent", "spark_sink"},
    "spark_sink": {"cbt"},
}


def _readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```sh\n(.+?)\n```", readme, flags=re.S)
    matches = [c for c in commands if "pytest" in c and "[test]" in c]
    assert len(matches) == 1, "README must show exactly one test set-up command"
    return matches[0].strip()


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _readme_test_command() in ci_lines


@pytest.mark.parametrize("name", PACKAGES)
def test_each_package_states_its_role(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__doc__ and len(module.__doc__.split()) >= 15


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every project module path imported anywhere in ``path`` (module level, functions and
    ``if TYPE_CHECKING:`` blocks alike), with its line; relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _module_name(path).split(".")
    is_pkg = path.name == "__init__.py"
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_pkg else here[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return [(line, m) for line, m in found if m.split(".")[0] in PACKAGES]


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package.replace(".", "/")).rglob("*.py"))


@pytest.mark.parametrize("name", PACKAGES)
def test_layers_only_import_downward(name: str) -> None:
    for path in _sources(name):
        for line, module in _imports(path):
            root = module.split(".")[0]
            if root != name:
                assert root in ALLOWED_IMPORTS[name], (
                    f"{path.relative_to(ROOT)}:{line} imports {root!r}, "
                    f"which layer {name!r} may not use"
                )


# Layers inside a package, lowest first: a module may import its own group and lower groups,
# never a higher one. A group is a subpackage or a top-level module; the package's own
# __init__ (a facade of re-exports) is exempt. Groups on one rank may not import each other.
INNER_LAYERS: dict[str, list[set[str]]] = {
    "agent": [
        {"errors", "jsonable", "tunables", "log_format"},  # leaves every layer may use
        {"private_files"},  # secrets read from, raw lines written to, owner-only files
        {"config"},  # the agent's configuration (overlay, srt and runtime tunables nested)
        {"ql", "client"},  # the query language; the HTTP client of the user API
        {"jobs"},  # what a job is: spec, schedule, table, changes, QL job
        {"ingest"},  # log lines to records
        {"runtime"},  # the agent and its jobs at run time
        {"server"},  # the process: HTTP API, daemon, local cluster
        # job author's facade; CLI options; `elf top`'s view; the CLI's one-line summaries
        {"api", "cli_common", "cli_views", "top"},
        {"cli_data"},  # `elf tap` and `elf spark`: the commands that look at a job's data
        {"cli"},  # the `elf` command
    ],
    # Inside the agent's runtime: what a job is given, pure per-epoch state, what a master holds,
    # fault tolerance behind its facade, the job facade and `elf run`, the operator's view (it
    # reads plain summaries through protocols), and the agent facade that wires them together.
    "agent.runtime": [
        # what a job is given (protocols; the record thread; its share of the memory budget)
        {"services", "record_thread", "memory_budget"},
        {"epochs"},  # pure per-epoch state: worker, clock, window panes, cpu budget
        {"results"},  # what a master holds and how good it is; the lake sink and history
        {"recovery"},  # all fault tolerance, behind the Recovery facade
        {"job", "local"},  # JobRuntime (a job on an agent); `elf run` (parallel, one-shot)
        {"ops"},  # HTTP API, operator API, OpenAPI, metrics, logs, dashboard
        {"host"},  # the Agent facade: job table, ticks, peer API, ports
    ],
    "srt": [
        {"errors", "ids"},  # leaves
        {"config"},  # typed tunables
        {"trees", "dataplane"},  # the control plane and the data plane share only the leaves
        {"sim"},  # trees on the overlay simulator (tests and benchmarks at scale)
    ],
}


def _group(package: str, module: str) -> str | None:
    depth = package.count(".") + 1
    parts = module.split(".")
    inside = parts[:depth] == package.split(".") and len(parts) > depth
    return parts[depth] if inside else None


@pytest.mark.parametrize("package", sorted(INNER_LAYERS))
def test_subpackages_only_import_downward(package: str) -> None:
    rank = {g: i for i, groups in enumerate(INNER_LAYERS[package]) for g in groups}
    for path in _sources(package):
        here = _group(package, _module_name(path))
        if here is None:
            continue  # the package facade
        assert here in rank, f"{path.relative_to(ROOT)}: {here!r} has no place in INNER_LAYERS"
        for line, module in _imports(path):
            there = _group(package, module)
            if there is None or there == here or there not in rank:
                continue  # another package, the facade, or a name imported from the facade
            assert rank[there] < rank[here], (
                f"{path.relative_to(ROOT)}:{line} imports {module!r}: {package}.{here} may not "
                f"use {package}.{there} (same or higher layer)"
            )


def test_no_import_cycles() -> None:
    """The module import graph is acyclic (a facade __init__ re-exporting its own
    submodules does not count)."""
    modules = {_module_name(p): p for package in PACKAGES for p in _sources(package)}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        for _, target in _imports(path):
            parts = target.split(".")
            for k in range(len(parts), 0, -1):
                candidate = ".".join(parts[:k])
                if candidate in modules and candidate != name:
                    if not (is_pkg and candidate.startswith(name + ".")):
                        graph[name].add(candidate)
                    break
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


# Within apps: job code sees the agent only through its job API (agent.api) and cbt; the
# operator-side programs (the demo, `elf generate`) are clients of the system and may use the
# API client, the local cluster, the CLI's shared options and the lake's Spark jobs.
APPS_JOB_IMPORTS = ("agent.api", "cbt")
APPS_OPERATOR_IMPORTS = {
    "apps/demo": (*APPS_JOB_IMPORTS, "agent.client", "agent.server.cluster", "spark_sink"),
    "apps/workload_cli.py": (*APPS_JOB_IMPORTS, "agent.client", "agent.cli_common"),
}


def test_apps_use_the_agent_only_through_its_job_api() -> None:
    for path in (ROOT / "apps").rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        allowed = next(
            (mods for prefix, mods in APPS_OPERATOR_IMPORTS.items() if rel.startswith(prefix)),
            APPS_JOB_IMPORTS,
        )
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] not in set(PACKAGES) - {"apps"}:
                    continue
                assert any(name == a or name.startswith(a + ".") for a in allowed), (
                    f"{rel}:{node.lineno} imports {name!r}; apps may use only {allowed}"
                )


def test_cli_version_and_help() -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith("elf, version ")
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "Usage:" in result.output


def test_console_script_is_installed() -> None:
    elf = Path(sys.executable).parent / "elf"
    if not elf.exists():
        pytest.skip("package not installed into this interpreter's environment")
    out = subprocess.run([str(elf), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "elf, version" in out.stdout


def test_no_merge_conflict_markers() -> None:
    """No file in the repository carries a leftover merge-conflict marker."""
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.split()
    if not files:
        pytest.skip("not a git checkout")
    marker = re.compile(r"^(<{7}|>{7}) ", re.M)
    for name in files:
        path = ROOT / name
        if path.suffix in {".py", ".md", ".toml", ".txt", ".cfg"} and path.is_file():
            assert not marker.search(path.read_text(errors="replace")), f"{name}: merge marker"


def test_every_module_is_in_the_architecture_module_map() -> None:
    """docs/architecture.md's module map names every module (by path or, inside a grouped
    line such as ``ql/``'s, by name), so the map stays true as modules are added."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    missing = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in _sources(package)
        if path.name != "__init__.py"
        and f"`{path.name}`" not in doc
        and f"`{path.relative_to(ROOT / package).as_posix()}`" not in doc
        and f"`{path.stem}`" not in doc
    ]
    assert not missing, f"modules missing from docs/architecture.md's module map: {missing}"


# Names with a leading underscore that are public by the standard library's own convention:
# namedtuple's methods are underscored only to avoid clashing with field names, and
# ``sys._getframe`` / ``os._exit`` are documented interfaces.
PUBLIC_UNDERSCORE_NAMES = {"_replace", "_asdict", "_fields", "_make", "_getframe", "_exit"}

# Private names of the standard library a product module builds on on purpose, per file, each
# with no public form: cbt's tree pre-aggregates counts with the C loop behind Counter.update
# (``collections._count_elements``, on its plain-dict root; docs/cbt.md); the simulator's loop
# *is* an asyncio event loop, and marks and runs its timer handles through the fields asyncio's
# own loops use (``Handle._run``, ``TimerHandle._scheduled``).
FOREIGN_INTERNALS: dict[str, set[str]] = {
    "cbt/tree.py": {"_count_elements"},
    "overlay/sim.py": {"_run", "_scheduled"},
}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_"


def _own_names(tree: ast.Module) -> set[str]:
    """The underscored names a module defines itself: its functions and classes (at any
    depth), its module-level and class-level names, and the attributes it sets on
    ``self``/``cls``."""
    own: set[str] = set()
    bodies: list[list[ast.stmt]] = [tree.body]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
            if isinstance(node, ast.ClassDef):
                bodies.append(node.body)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in {"self", "cls"}
        ):
            own.add(node.attr)
    for body in bodies:
        for stmt in body:
            for node in ast.walk(stmt):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    break  # a function's locals are not the module's names
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    own.add(node.id)
    return {n for n in own if _is_private(n)}


def _private_name_reads(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = path.relative_to(ROOT).as_posix()
    own = _own_names(tree) | PUBLIC_UNDERSCORE_NAMES | FOREIGN_INTERNALS.get(rel, set())
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if _is_private(alias.name) and alias.name not in own:
                    found.append(f"{rel}:{node.lineno} imports {alias.name}")
        elif isinstance(node, ast.Attribute) and _is_private(node.attr):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in {"self", "cls"}:
                continue
            if node.attr in own:
                continue
            found.append(f"{rel}:{node.lineno} reads .{node.attr}")
    return found


def test_no_module_reads_another_modules_private_names() -> None:
    """No product module imports another module's ``_name`` or reads ``obj._x`` on an object
    other than ``self``/``cls`` unless ``_x`` is defined in that same module (so ``other._x``
    in a class's own ``__eq__`` is fine): privates stay private to the module that owns them."""
    violations = [
        v for package in PACKAGES for path in _sources(package) for v in _private_name_reads(path)
    ]
    assert not violations, "private names read across modules:\n" + "\n".join(violations)
