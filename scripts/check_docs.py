#!/usr/bin/env python3
"""Check that the documentation cites only things that exist (issue 29 item 6).

Reads README.md, docs/**/*.md, roles/*/README.md and the collection's README.md and checks
every reference they make to the repository:

- repository paths (``src/...``, ``tests/...``, ``roles/...``, ``docs/...``, ...), with
  ``{a,b}`` alternatives expanded, ``path:LINE`` suffixes dropped and ``*`` globs matched;
- relative Markdown links (``[text](testbed.md#build)``), resolved from the citing file's
  folder, and their ``#anchor`` against the target's headings (GitHub's anchors);
- test files (``test_x.py``) and test names (``test_x``), which must be defined somewhere in
  the test trees, and in the cited file when written ``file.py::test_x``;
- make targets written as code (```make x``` or a line of a code block), against the
  Makefile's rules;
- dotted names ``gpufleet.x.y`` (a module, then attributes, under src/gpufleet) and
  ``gpufleet.core.x`` (a plugin, filter or test of the Ansible collection).

Left alone: URLs, placeholders (anything with ``<`` ``>``, ``...`` or ``$``), absolute or
``~`` paths (node paths such as /etc/gpufleet/...), and paths under folders the repository
does not ship (reports/...). Exits 1 and prints ``file:line: <ref> (what is missing)`` per
dead reference, 0 when every reference resolves.
"""

from __future__ import annotations

import argparse
import ast
import functools
import os
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: Top-level folders whose paths the docs cite; other first segments are not checked.
PATH_ROOTS = (
    "src",
    "tests",
    "roles",
    "docs",
    "playbooks",
    "checks",
    "smoke_tests",
    "testbed",
    "scripts",
    "inventory",
    "collections",
    "requirements",
)
#: Folders whose Python files may define tests.
TEST_TREES = ("tests", "checks", "smoke_tests", "testbed", "collections")
#: Suffixes that make ``gpufleet.x`` a file name (gpufleet.conf), not a dotted module name.
FILE_SUFFIXES = frozenset(
    {"json", "yml", "yaml", "md", "py", "txt", "xml", "log", "conf", "cfg", "toml", "sh"}
    | {"service", "timer", "target", "socket", "repo", "png", "j2", "env", "lock", "d", "prom"}
)
COLLECTION = Path("collections/ansible_collections/gpufleet/core")
#: Dated measurement records: links checked, cited names left as they were then.
MEASUREMENTS = Path("docs/measurements")

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s)>\]`'\"]*", re.IGNORECASE)
_CODE_SPAN = re.compile(r"`([^`]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_PATH = re.compile(
    r"(?<![\w/.~$@{-])(?:\.\./|\./)?"
    r"((?:" + "|".join(PATH_ROOTS) + r")/[\w./{},*<>$-]*)"
)
_TEST_ID = re.compile(r"(?<![\w/.-])([\w./-]*test_\w+\.py)::(\w+\*?)")
_TEST_FILE = re.compile(r"(?<![\w/.<*-])(test_\w+\.py)\b")
_TEST_NAME = re.compile(r"(?<![\w/.<*:-])(test_\w+\*?)(?![\w.<>-])")
_CITES_TEST_FILE = re.compile(r"test_\w+\.py|(?<![\w/.-])tests/")
_MAKE = re.compile(
    r"(?:^\s*|[;&|]\s*|^\s*\$\s+)(?:sudo\s+)?make\s+"
    r"((?:-\S+\s+|[A-Z_]+=\S*\s+)*)([a-z0-9][\w-]*)"
)
_DOTTED = re.compile(r"(?<![\w/.@-])(gpufleet(?:\.\w+)+)")
_PLACEHOLDER = re.compile(r"[<>$]|\.\.\.")


@dataclass(frozen=True)
class Finding:
    """One dead reference: where it is cited, what was cited and what is missing."""

    file: str
    line: int
    ref: str
    missing: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.ref} ({self.missing})"


@dataclass(frozen=True)
class Ref:
    """One reference found on a line: its kind and its text."""

    kind: str  # path | link | test_id | test_file | test_name | make | dotted
    text: str


# --- extraction -------------------------------------------------------------------------


def _strip_urls(text: str) -> str:
    return _URL.sub(" ", text)


def _trim(path: str) -> str:
    """Drop trailing punctuation and a ``:LINE`` suffix from a cited path."""
    path = re.sub(r":\d+(?:-\d+)?$", "", path)
    return path.rstrip(".,;:")


def extract_refs(line: str, *, in_code_block: bool = False) -> list[Ref]:
    """Every checkable reference on one Markdown line, in order of kind.

    ``in_code_block`` says the line sits in a fenced block, where a command ``make x``
    (before any ``#`` comment) counts; elsewhere only a code span that starts with
    ``make x`` does. Test names count on a line that also cites a test file or a
    ``file::name`` (a name alone may be a key, such as DCGM's ``test_categories``).
    """
    refs: list[Ref] = []
    links = [m.group(1) for m in _LINK.finditer(line)]
    text = _strip_urls(line)
    for target in links:
        if _URL.match(target) or target.startswith(("mailto:", "/")):
            continue
        refs.append(Ref("link", target))
    for match in _PATH.finditer(text):
        path = _trim(match.group(1))
        if path and not _PLACEHOLDER.search(path):
            refs.append(Ref("path", path))
    cited_ids = set()
    for match in _TEST_ID.finditer(text):
        cited_ids.add(match.group(2))
        refs.append(Ref("test_id", f"{match.group(1)}::{match.group(2)}"))
    refs.extend(Ref("test_file", m.group(1)) for m in _TEST_FILE.finditer(text))
    if cited_ids or _CITES_TEST_FILE.search(text):
        refs.extend(
            Ref("test_name", m.group(1))
            for m in _TEST_NAME.finditer(text)
            if m.group(1) not in cited_ids
        )
    code = [text.split("#", 1)[0]] if in_code_block else _CODE_SPAN.findall(text)
    for chunk in code:
        refs.extend(Ref("make", m.group(2)) for m in _MAKE.finditer(chunk))
    for match in _DOTTED.finditer(text):
        name = match.group(1).rstrip(".")
        if name.rsplit(".", 1)[-1] not in FILE_SUFFIXES:
            refs.append(Ref("dotted", name))
    return refs


def iter_lines(text: str) -> Iterator[tuple[int, str, bool]]:
    """(line number, line, inside a fenced code block) for each line of a Markdown text."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.lstrip()
        marker = stripped[:3]
        if marker in ("```", "~~~"):
            if fence is None:
                fence = marker
                continue
            if marker == fence:
                fence = None
                continue
        yield number, line, fence is not None


# --- resolution -------------------------------------------------------------------------


class Repo:
    """What exists in one checkout: files, tests, make targets, modules, plugins."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @functools.cached_property
    def make_targets(self) -> frozenset[str]:
        targets: set[str] = set()
        makefile = self.root / "Makefile"
        if not makefile.is_file():
            return frozenset()
        for line in makefile.read_text().splitlines():
            if line.startswith(".PHONY:"):
                targets.update(line.split(":", 1)[1].split())
                continue
            match = re.match(r"^([a-zA-Z0-9_][\w-]*(?:\s+[a-zA-Z0-9_][\w-]*)*)\s*:(?!=)", line)
            if match:
                targets.update(match.group(1).split())
        return frozenset(targets)

    @functools.cached_property
    def _test_sources(self) -> dict[str, list[Path]]:
        """Test file name -> paths, for every test_*.py (and conftest) in the test trees."""
        out: dict[str, list[Path]] = {}
        for tree in TEST_TREES:
            for path in sorted((self.root / tree).rglob("*.py")):
                # not the caches, nor the testbed's state (a node's root filesystem)
                if not {"__pycache__", ".state"} & set(path.parts):
                    out.setdefault(path.name, []).append(path)
        return out

    @functools.cached_property
    def test_names(self) -> frozenset[str]:
        names: set[str] = set()
        for paths in self._test_sources.values():
            for path in paths:
                names.update(_defined_tests(path))
                if path.stem.startswith("test_"):
                    names.add(path.stem)
        return frozenset(names)

    def has_test(self, name: str) -> bool:
        """Whether a test (or test file) is called ``name``; ``test_x_*`` is a prefix."""
        if name.endswith("*"):
            return any(n.startswith(name[:-1]) for n in self.test_names)
        return name in self.test_names

    def test_files_named(self, name: str) -> list[Path]:
        return self._test_sources.get(name, [])

    @functools.cached_property
    def collection_names(self) -> frozenset[str]:
        """Plugin file stems and filter/test names of the gpufleet.core collection."""
        names: set[str] = set()
        plugins = self.root / COLLECTION / "plugins"
        for path in plugins.rglob("*.py"):
            names.add(path.stem)
            if path.parent.name in ("filter", "test"):
                names.update(_plugin_function_names(path))
        roles = self.root / COLLECTION / "roles"
        if roles.is_dir():
            names.update(p.name for p in roles.iterdir() if p.is_dir())
        return frozenset(names)

    @functools.cached_property
    def generated(self) -> tuple[str, ...]:
        """Anchored folders of .gitignore (testbed/.state, ...): made at run time."""
        ignore = self.root / ".gitignore"
        if not ignore.is_file():
            return ()
        return tuple(
            line.strip().strip("/") + "/"
            for line in ignore.read_text().splitlines()
            if line.startswith("/") and line.strip().endswith("/")
        )

    def resolve_path(self, path: str, base: Path) -> str | None:
        """None when ``path`` (relative to ``base``) exists, else what is missing.

        Paths under a folder .gitignore anchors (testbed/.state/, testbed/inventory/) are
        made at run time and are not looked for.
        """
        if base == self.root and (path.rstrip("/") + "/").startswith(self.generated):
            return None
        for variant in _expand_braces(path):
            target = base / variant.rstrip("/")
            if "*" in variant:
                if not list(base.glob(variant.rstrip("/"))):
                    return f"nothing matches {variant}"
                continue
            if not target.exists():
                return f"no such file or folder: {os.path.relpath(target, self.root)}"
        return None

    def resolve_test_id(self, file: str, name: str) -> str | None:
        candidates = [self.root / file] if "/" in file else self.test_files_named(Path(file).name)
        existing = [p for p in candidates if p.is_file()]
        if not existing:
            return f"no test file {file}"
        for path in existing:
            defined = _defined_tests(path)
            if name.endswith("*") and any(d.startswith(name[:-1]) for d in defined):
                return None
            if name in defined:
                return None
        return f"{file} defines no {name}"

    def resolve_dotted(self, name: str) -> str | None:
        parts = name.split(".")
        if parts[:2] == ["gpufleet", "core"]:
            if len(parts) == 2 or parts[2] in self.collection_names:
                return None
            return f"the gpufleet.core collection has no plugin, filter or test {parts[2]}"
        src = self.root / "src"
        module: Path | None = None
        index = 1
        for index in range(len(parts), 0, -1):
            base = src.joinpath(*parts[:index])
            if (base / "__init__.py").is_file():
                module = base / "__init__.py"
                break
            if base.with_suffix(".py").is_file():
                module = base.with_suffix(".py")
                break
        if module is None:
            return "no such module under src/"
        rest = parts[index:]
        if not rest:
            return None
        if rest[0] in _top_level_names(module):
            return None
        shown = ".".join(parts[:index])
        return f"{shown} ({module.relative_to(self.root)}) defines no {rest[0]}"


def heading_anchors(text: str) -> frozenset[str]:
    """The anchors GitHub gives a Markdown text's headings: lower case, punctuation but ``-``
    and ``_`` dropped, spaces as ``-``, ``-1``, ``-2`` ... on repeats."""
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    for _, line, in_code in iter_lines(text):
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if in_code or not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(anchors)


def _expand_braces(path: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    head, tail = path[: match.start()], path[match.end() :]
    out: list[str] = []
    for option in match.group(1).split(","):
        out.extend(_expand_braces(head + option + tail))
    return out


@functools.cache
def _parsed(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(), filename=str(path))
    except (SyntaxError, UnicodeDecodeError):
        return None


@functools.cache
def _defined_tests(path: Path) -> frozenset[str]:
    tree = _parsed(path)
    if tree is None:
        return frozenset()
    return frozenset(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    )


@functools.cache
def _top_level_names(path: Path) -> frozenset[str]:
    tree = _parsed(path)
    names: set[str] = set()
    if tree is None:
        return frozenset()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    if path.name == "__init__.py":
        names.update(p.stem for p in path.parent.glob("*.py"))
        names.update(p.name for p in path.parent.iterdir() if (p / "__init__.py").is_file())
    return frozenset(names)


@functools.cache
def _plugin_function_names(path: Path) -> frozenset[str]:
    tree = _parsed(path)
    if tree is None:
        return frozenset()
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    names.update(
        key.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        for key in node.keys
        if isinstance(key, ast.Constant) and isinstance(key.value, str)
    )
    return frozenset(names)


# --- checking ---------------------------------------------------------------------------


def check_ref(
    repo: Repo, ref: Ref, doc: Path, own_anchors: frozenset[str] = frozenset()
) -> str | None:
    """None when ``ref`` cited in ``doc`` resolves, else what is missing.

    ``own_anchors``: the anchors of ``doc``'s own headings, for links such as ``(#usage)``.
    """
    if ref.kind == "path":
        return repo.resolve_path(ref.text, repo.root)
    if ref.kind == "link":
        target, _, anchor = ref.text.partition("#")
        missing = repo.resolve_path(target, doc.parent) if target else None
        if missing or not anchor:
            return missing
        if not target:
            return None if anchor in own_anchors else f"no heading #{anchor} in this page"
        page = doc.parent / target
        if page.suffix != ".md" or anchor in heading_anchors(page.read_text()):
            return None
        return f"no heading #{anchor} in {os.path.relpath(page, repo.root)}"
    if ref.kind == "test_id":
        file, name = ref.text.split("::", 1)
        return repo.resolve_test_id(file, name)
    if ref.kind == "test_file":
        if repo.test_files_named(ref.text):
            return None
        return f"no test file named {ref.text} in {', '.join(TEST_TREES)}"
    if ref.kind == "test_name":
        return None if repo.has_test(ref.text) else "no test by that name"
    if ref.kind == "make":
        return None if ref.text in repo.make_targets else "no such make target"
    if ref.kind == "dotted":
        return repo.resolve_dotted(ref.text)
    raise ValueError(f"unknown reference kind {ref.kind!r}")


def check_text(repo: Repo, doc: Path, text: str) -> list[Finding]:
    """Dead references in one Markdown text.

    Dated records under docs/measurements/ cite tests and files as they were on that date;
    only their links are checked, so a moved or renamed page still breaks them.
    """
    shown = doc.relative_to(repo.root) if doc.is_relative_to(repo.root) else doc
    record = (repo.root / MEASUREMENTS) in doc.parents
    own_anchors = heading_anchors(text)
    findings: list[Finding] = []
    for number, line, in_code in iter_lines(text):
        seen: set[Ref] = set()
        for ref in extract_refs(line, in_code_block=in_code):
            if ref in seen or (record and ref.kind != "link"):
                continue
            seen.add(ref)
            missing = check_ref(repo, ref, doc, own_anchors)
            finding = Finding(str(shown), number, ref.text, missing or "")
            if missing and finding not in findings:  # a link is often a path as well
                findings.append(finding)
    return findings


def doc_files(root: Path) -> list[Path]:
    """The Markdown files this check reads."""
    files = [root / "README.md"]
    files += sorted((root / "docs").rglob("*.md"))
    files += sorted(root.glob("roles/*/README.md"))
    files.append(root / COLLECTION / "README.md")
    return [f for f in files if f.is_file()]


def check_repo(root: Path = REPO, files: Iterable[Path] | None = None) -> list[Finding]:
    repo = Repo(root.resolve())
    findings: list[Finding] = []
    for doc in files if files is not None else doc_files(repo.root):
        findings += check_text(repo, doc.resolve(), doc.read_text())
    return findings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default: all docs)")
    parser.add_argument("--root", type=Path, default=REPO, help="repository root")
    args = parser.parse_args(argv)
    findings = check_repo(args.root, args.files or None)
    for finding in findings:
        print(finding)
    if findings:
        print(
            f"{len(findings)} dead reference(s) in the docs: fix the doc, or the name it cites",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
