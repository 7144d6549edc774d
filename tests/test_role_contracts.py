"""Every role documents the same variables in three places: defaults/main.yml (values),
meta/argument_specs.yml (types, checked before the role runs) and the README's variables
table. This test fails on any drift, for every role under roles/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())

_HEADING = re.compile(r"^(#+)\s+(.*)$")
_ROW = re.compile(r"^\|\s*`([A-Za-z_][A-Za-z0-9_]*)`\s*\|")


def defaults_keys(role: str) -> set[str]:
    path = REPO / "roles" / role / "defaults" / "main.yml"
    data = yaml.safe_load(path.read_text()) if path.exists() else None
    return set(data or {})


def spec_keys(role: str) -> set[str]:
    path = REPO / "roles" / role / "meta" / "argument_specs.yml"
    if not path.exists():
        return set()
    specs = (yaml.safe_load(path.read_text()) or {}).get("argument_specs", {})
    return set((specs.get("main") or {}).get("options") or {})


def readme_keys(role: str) -> set[str]:
    path = REPO / "roles" / role / "README.md"
    return table_keys(path.read_text()) if path.exists() else set()


def table_keys(markdown: str) -> set[str]:
    """Variable names in the first column of the tables under a "... Variables" heading."""
    keys: set[str] = set()
    level = 0
    for line in markdown.splitlines():
        heading = _HEADING.match(line)
        if heading:
            depth = len(heading.group(1))
            if "variables" in heading.group(2).lower():
                level = depth
            elif level and depth <= level:
                level = 0
            continue
        row = _ROW.match(line)
        if level and row:
            keys.add(row.group(1))
    return keys


def test_there_are_roles() -> None:
    assert ROLES, "no role under roles/"


@pytest.mark.parametrize("role", ROLES)
def test_role_has_the_three_sources(role: str) -> None:
    base = REPO / "roles" / role
    missing = [
        rel
        for rel in ("defaults/main.yml", "meta/argument_specs.yml", "meta/main.yml", "README.md")
        if not (base / rel).exists()
    ]
    assert not missing, f"roles/{role} lacks {', '.join(missing)}"


@pytest.mark.parametrize("role", ROLES)
def test_defaults_match_argument_specs(role: str) -> None:
    defaults, spec = defaults_keys(role), spec_keys(role)
    assert defaults == spec, (
        f"roles/{role}: only in defaults/main.yml: {sorted(defaults - spec)}; "
        f"only in meta/argument_specs.yml: {sorted(spec - defaults)}"
    )


@pytest.mark.parametrize("role", ROLES)
def test_defaults_match_readme_table(role: str) -> None:
    defaults, readme = defaults_keys(role), readme_keys(role)
    assert defaults == readme, (
        f"roles/{role}: only in defaults/main.yml: {sorted(defaults - readme)}; "
        f"only in the README variables table: {sorted(readme - defaults)}"
    )


@pytest.mark.parametrize("role", ROLES)
def test_public_variables_carry_the_role_prefix(role: str) -> None:
    stray = sorted(k for k in defaults_keys(role) if not k.startswith(f"{role}_"))
    assert not stray, f"roles/{role}: defaults without the '{role}_' prefix: {stray}"


@pytest.mark.parametrize("role", ROLES)
def test_every_option_is_described(role: str) -> None:
    path = REPO / "roles" / role / "meta" / "argument_specs.yml"
    options = yaml.safe_load(path.read_text())["argument_specs"]["main"]["options"] or {}
    undescribed = sorted(k for k, v in options.items() if not (v or {}).get("description"))
    assert not undescribed, f"roles/{role}: options without a description: {undescribed}"


def test_readme_parser_reads_only_the_variables_section() -> None:
    text = (
        "# r\n| `not_this` | x |\n## Role Variables\n| `r_a` | 1 |\n### Sub\n| `r_b` | 2 |\n"
        "## Example\n| `not_that` | y |\n"
    )
    assert table_keys(text) == {"r_a", "r_b"}
