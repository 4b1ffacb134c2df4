"""The import graph of webrl/ and services/ as docs/design.md draws it: no import cycles (imports inside functions
count), nothing in webrl/ imports a service, and no service imports another."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("webrl", "services")


def modules() -> dict[str, Path]:
    """Every module of the packages by dotted name (a package by its own name)."""
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported_names(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the packages it imports anywhere in its file. ``from a.b import c`` counts as
    importing ``a.b.c`` when that is a module, else ``a.b``; a package imported only as the parent of a
    module is not counted (its ``__init__`` runs, but that is not an import of the module's own)."""
    known = modules()

    def owner(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in known.items():
        targets = {owner(imported) for imported in _imported_names(ast.parse(path.read_text()))}
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycles_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_webrl_imports_no_service_and_services_import_no_other_service() -> None:
    def top(module: str) -> tuple[str, ...]:  # ("webrl",) or ("services", "<service>")
        parts = module.split(".")
        return tuple(parts[:2]) if parts[0] == "services" else (parts[0],)

    wrong = [f"{module} -> {target}" for module, targets in import_graph().items() for target in targets
             if top(target)[0] == "services" and top(target) != top(module)]
    assert wrong == []


#: The layers of webrl/, lowest first: a module may import its own layer and those below, never one above. Each
#: entry names the top-level modules and packages of webrl/ (``webrl.<name>``) the layer holds; docs/design.md
#: draws the same table. The services (services/<name>/) stand above all of them.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("foundation", frozenset({"", "config", "errors", "text", "whole_files", "model_folders", "process_group",
                              "process_memory", "assets"})),
    ("method", frozenset({"method"})),
    ("safety", frozenset({"safety"})),
    ("agent", frozenset({"agent", "evaluation", "prompts"})),
    ("store", frozenset({"db", "store"})),
    ("wire", frozenset({"wire"})),
    ("serving", frozenset({"serving"})),
    ("models and sites", frozenset({"models", "sandbox"})),
    ("policies", frozenset({"policies"})),
    ("runs", frozenset({"runs", "orchestration", "viewer"})),
    ("commands", frozenset({"cli", "commands", "demo"})),
)


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of a module of webrl/ (``webrl.a.b`` is in the layer holding ``a``)."""
    name = module.split(".")[1] if "." in module else ""
    [index] = [i for i, (_, names) in enumerate(LAYERS) if name in names] or [None]
    assert index is not None, f"{module}: add webrl.{name} to a layer of LAYERS"
    return index


def test_every_module_of_webrl_has_one_layer() -> None:
    names = [name for _, layer in LAYERS for name in layer]
    assert len(names) == len(set(names))
    for module in modules():
        if module.split(".")[0] == "webrl":
            layer_of(module)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a webrl/ module by one of a lower layer, as ``module (layer) -> target (layer)``."""
    return [f"{module} ({LAYERS[layer_of(module)][0]}) -> {target} ({LAYERS[layer_of(target)][0]})"
            for module, targets in sorted(graph.items()) if module.split(".")[0] == "webrl"
            for target in sorted(targets) if target.split(".")[0] == "webrl" and layer_of(target) > layer_of(module)]


def test_upward_imports_are_found() -> None:
    graph = {"webrl.method.returns": {"webrl.db.repository", "webrl.method.hyperparams"}, "webrl.db.repository":
    {"webrl.method.rewards"},
             "webrl.cli": {"webrl.orchestration.pipeline"}, "webrl.orchestration.pipeline": set()}
    assert upward_imports(graph) == ["webrl.method.returns (method) -> webrl.db.repository (store)"]


def test_webrl_never_imports_a_layer_above() -> None:
    assert upward_imports(import_graph()) == []


#: Module names that repeat by design: each service's and each sandbox site's app and worker, a site plugin's
#: files (one per site), a package's ``__init__``, and ``base.py``, each package's own interface (tasks,
#: evaluators, model backends).
REPEATED_BY_LAYOUT = {"__init__.py", "app.py", "worker.py", "seed.py", "templates_tasks.py", "base.py"}


def _repeated(names: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: sorted(paths) for name, paths in sorted(names.items()) if len(paths) > 1}


def test_no_two_modules_share_a_name() -> None:
    """A name found by a file search is the file: two ``schemas.py`` or ``cli.py`` make a newcomer open both."""
    names: dict[str, list[str]] = {}
    for path in modules().values():
        if path.name not in REPEATED_BY_LAYOUT:
            names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert _repeated(names) == {}


def test_no_two_classes_share_a_name() -> None:
    """A database row and the record it stores have different names (``m.StepRow`` holds a ``Step``)."""
    names: dict[str, list[str]] = {}
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert _repeated(names) == {}
