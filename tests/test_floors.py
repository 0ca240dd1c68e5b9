"""The floor plan (docs/architecture.md, "Floors"): no module imports from a floor above its own.

Read from the source with ``ast`` (every import, at the top, inside a function or under
``TYPE_CHECKING``), so a lazy import counts as much as an eager one. Launching a process by
module name (``-m coffer_auth.cli``, ``"coffer_auth.main:create_app"``) is not an import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONTRACT, RUNTIME, SERVICES, STACK, ABOVE = range(5)
FLOOR_NAMES = ["contract", "runtime", "services", "stack", "tests and bench"]
SERVICE_PACKAGES = {"coffer_auth", "coffer_metadata", "coffer_blob", "coffer_edge"}
STACK_PACKAGES = {"coffer_stack", "coffer_harness"}
GROUND_PACKAGES = {"coffer_kit", "coffer_testkit"}


def floor_of_module(module: str) -> int | None:
    """The floor of an imported module, or None for a module that is not Coffer's."""
    top, _, rest = module.partition(".")
    if top == "coffer_kit":
        return CONTRACT if rest == "contract" or rest.startswith("contract.") else RUNTIME
    if top in GROUND_PACKAGES:
        return RUNTIME
    if top in SERVICE_PACKAGES:
        return SERVICES
    if top in STACK_PACKAGES:
        return STACK
    return None


def floor_of_file(path: Path) -> int:
    parts = path.relative_to(ROOT).parts
    if parts[:5] == ("libs", "kit", "src", "coffer_kit", "contract"):
        return CONTRACT
    if parts[0] == "libs":
        return RUNTIME  # the kit's runtime, the service-free test helpers, and their tests
    if parts[0] == "services" and parts[2] == "src":
        return SERVICES
    if parts[0] == "stack" or parts[:3] == ("tests", "harness", "src"):
        return STACK
    return ABOVE  # tests/, bench/, each service's tests/, scripts/


def module_of_file(path: Path) -> list[str]:
    """The dotted name of a file's module under its ``src/`` (for relative imports)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if "src" in parts:
        parts = parts[parts.index("src") + 1 :]
    return parts[:-1] if parts[-1] == "__init__" else parts


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in ``path``; ``from a import b`` yields ``a.b`` too."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_of_file(path)[:-1] if path.name != "__init__.py" else module_of_file(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def python_files() -> list[Path]:
    skip = {".venv", "node_modules", "__pycache__", ".git", "migrations"}
    roots = ["libs", "services", "stack", "tests", "bench", "clients", "scripts"]
    return sorted(
        p
        for root in roots
        if (ROOT / root).is_dir()
        for p in (ROOT / root).rglob("*.py")
        if not skip & set(p.relative_to(ROOT).parts)
    )


def violations() -> list[str]:
    found = []
    for path in python_files():
        floor = floor_of_file(path)
        own = path.relative_to(ROOT).parts
        own_service = own[3] if floor == SERVICES and len(own) > 3 else None
        in_client = own[:3] == ("clients", "python", "src")
        for line, module in imports(path):
            target = floor_of_module(module)
            top = module.partition(".")[0]
            where = f"{path.relative_to(ROOT)}:{line} imports {module}"
            if in_client and top.startswith("coffer_") and top != "coffer_client":
                found.append(f"{where}: the client SDK imports nothing of the server")
            if target is None:
                continue
            if target > floor:
                found.append(f"{where}: {FLOOR_NAMES[floor]} may not import {FLOOR_NAMES[target]}")
            elif floor == SERVICES and target == SERVICES and top != own_service:
                found.append(f"{where}: a service imports no other service")
            elif floor == SERVICES and top == "coffer_testkit":
                found.append(f"{where}: a service imports no test helper")
    return found


def test_every_floor_has_modules() -> None:
    floors = {floor_of_file(p) for p in python_files()}
    assert floors == {CONTRACT, RUNTIME, SERVICES, STACK, ABOVE}, floors


def test_no_module_imports_from_a_floor_above_its_own() -> None:
    assert violations() == []


def test_the_contract_imports_no_runtime_module() -> None:
    contract = [p for p in python_files() if floor_of_file(p) == CONTRACT]
    assert contract
    runtime = [
        f"{p.relative_to(ROOT)}:{line} {m}"
        for p in contract
        for line, m in imports(p)
        if floor_of_module(m) not in (None, CONTRACT)
    ]
    assert runtime == []


def test_the_check_sees_an_upward_import() -> None:
    # The rules above hold on today's tree; this proves they would see a break.
    assert floor_of_module("coffer_kit.serve") == RUNTIME
    assert floor_of_module("coffer_kit.contract.ids") == CONTRACT
    assert floor_of_module("coffer_harness.inprocess") == STACK
    assert floor_of_file(ROOT / "libs/kit/src/coffer_kit/contract/ids.py") == CONTRACT
    assert floor_of_file(ROOT / "services/edge/src/coffer_edge/main.py") == SERVICES
    assert floor_of_file(ROOT / "services/edge/tests/test_dashboard.py") == ABOVE
