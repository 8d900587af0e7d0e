"""The package's layout as docs/contributing.md draws it: every module listed there, and its rooms
(a folder, or a module at the top) in floors, none importing one that stands above it."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "phaseconv"


def modules() -> list[str]:
    return sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py"))


def room(module: str) -> str:
    """A module's room: its folder under the package, or the module itself at the top."""
    return module.split("/")[0] if "/" in module else module


def imported(module: str) -> set[str]:
    """The package's modules that `module` imports, at its top or inside its functions."""
    tree = ast.parse((PACKAGE / module).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("phaseconv"):
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("phaseconv"))
    found = set()
    for name in names:
        path = name.removeprefix("phaseconv").strip(".").replace(".", "/")
        for candidate in (f"{path}.py", f"{path}/__init__.py"):
            if (PACKAGE / candidate).is_file():
                found.add(candidate)
    return found - {module}


def test_contributing_lists_every_module_and_nothing_else():
    text = (ROOT / "docs" / "contributing.md").read_text()
    listing = re.search(r"```\nsrc/phaseconv/\n(.*?)```", text, re.S).group(1)
    entries = [
        line.split()[0] for line in listing.splitlines() if line.startswith("  ") and line.split()[0][0].isalpha()
    ]
    entries = [entry for entry in entries if "/" in entry or entry.endswith(".py")]
    for entry in entries:
        target = entry.replace("<name>.py", "")
        assert (PACKAGE / target).exists(), f"contributing.md lists {entry}, which is not in src/phaseconv"

    def listed(module: str) -> bool:
        return any(
            module == entry
            or (entry.endswith("/") and module.startswith(entry))
            or (entry.endswith("<name>.py") and module.startswith(entry.removesuffix("<name>.py")))
            for entry in entries
        )

    missing = [m for m in modules() if not listed(m) and m != "__init__.py" and not m.endswith("/__init__.py")]
    assert not missing, f"contributing.md does not list {missing}"


def test_no_room_imports_one_that_stands_above_it():
    """The rooms' imports form floors: no import runs back up (a circle of rooms)."""
    arrows: dict[str, set[str]] = {}
    for module in modules():
        for target in imported(module):
            if room(target) != room(module):
                arrows.setdefault(room(module), set()).add(room(target))

    def circle_from(start: str, path: list[str]) -> list[str] | None:
        for target in sorted(arrows.get(path[-1], ())):
            if target == start:
                return [*path, start]
            if target not in path:
                found = circle_from(start, [*path, target])
                if found:
                    return found
        return None

    for start in sorted(arrows):
        circle = circle_from(start, [start])
        assert circle is None, f"the rooms import each other in a circle: {' -> '.join(circle)}"


# A figure with the unit of a measurement: time, a ratio, a rate, a share, decibels.
MEASURED = re.compile(r"\b\d+(\.\d+)? ?(ms|dB|GMAC/s|GB/s|%)(?![\w/])|\b\d+\.\d+x\b")
# Not measurements: pocket-tts's frame, its decoder's fade-in, the kernel's clock tick.
NOT_MEASURED = ("80 ms", "5 ms fade-in", "every 4 ms at 250 Hz")


def prose(module: str) -> list[str]:
    """`module`'s comments and docstrings, a line each."""
    import io
    import tokenize

    lines = []
    source = (PACKAGE / module).read_text()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            lines.append(token.string)
        elif token.type == tokenize.STRING and token.string.lstrip("rbuRBU").startswith(('"""', "'''")):
            lines += token.string.splitlines()
    return lines


def test_no_measured_figure_in_the_source():
    """Numbers live in results/ and the generated docs; a comment says why, not what it measured."""
    found = [
        f"{module}: {line.strip()}"
        for module in modules()
        for line in prose(module)
        if any(MEASURED.finditer(line)) and not any(allowed in line for allowed in NOT_MEASURED)
    ]
    assert not found, "\n".join(found)


def test_modules_and_commands_stay_small():
    """No module over 500 lines; no command over 60 (a command parses, calls and prints)."""
    long_modules = [m for m in modules() if len((PACKAGE / m).read_text().splitlines()) > 500]
    assert not long_modules, f"over 500 lines: {long_modules}"
    long_commands = [
        f"cli/{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in (PACKAGE / "cli").glob("*.py")
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 60
    ]
    assert not long_commands, f"commands over 60 lines: {long_commands}"
