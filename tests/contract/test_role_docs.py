"""A role variable is declared once, in meta/argument_specs.yml (type, choices,
description) and defaults/main.yml (value); each README's variable table is generated from
them by scripts/role_docs.py (make role-docs). These tests fail when a README drifts from
its spec or when a spec option has no description."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta").is_dir())


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("role_docs", REPO / "scripts" / "role_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("role_docs", module)
    spec.loader.exec_module(module)
    return module


role_docs = _load_generator()
regenerate: Callable[..., list[str]] = role_docs.regenerate
render_table: Callable[[Path], str] = role_docs.render_table
RoleDocsError: type[Exception] = role_docs.RoleDocsError


def _spec_options(role: str) -> dict[str, Any]:
    path = REPO / "roles" / role / "meta" / "argument_specs.yml"
    options: dict[str, Any] = yaml.safe_load(path.read_text())["argument_specs"]["main"]["options"]
    return options


def test_every_readme_matches_its_spec() -> None:
    drifts = regenerate(role_docs.roles(REPO / "roles"), check=True)
    assert not drifts, "\n".join(drifts)


@pytest.mark.parametrize("role", ROLES)
def test_every_spec_option_has_a_description(role: str) -> None:
    bare = [n for n, spec in _spec_options(role).items() if not (spec or {}).get("description")]
    assert not bare, f"roles/{role}/meta/argument_specs.yml: options without a description: {bare}"


@pytest.mark.parametrize("role", ROLES)
def test_every_spec_option_is_a_table_row(role: str) -> None:
    readme = (REPO / "roles" / role / "README.md").read_text()
    missing = [n for n in _spec_options(role) if f"| `{n}` |" not in readme]
    assert not missing, f"roles/{role}/README.md: no table row for {missing}"


def _role(tmp_path: Path, spec: str, defaults: str, readme: str) -> Path:
    role = tmp_path / "roles" / "demo"
    (role / "meta").mkdir(parents=True)
    (role / "defaults").mkdir()
    (role / "meta" / "argument_specs.yml").write_text(spec)
    (role / "defaults" / "main.yml").write_text(defaults)
    (role / "README.md").write_text(readme)
    return role


SPEC = """\
argument_specs:
  main:
    options:
      demo_mode:
        type: str
        choices: [fast, safe]
        description: How the demo runs | piped.
      demo_hosts:
        type: list
        elements: str
        description:
          - Hosts it reaches,
          - in order.
"""
DEFAULTS = "demo_mode: fast\ndemo_hosts: \"{{ groups['all'] | default([]) }}\"\n"
README = "# demo\n\n## Variables\n\n{begin}\nhand-written\n{end}\n\n## Example\n"


def test_check_mode_names_a_drifting_readme_and_changes_nothing(tmp_path: Path) -> None:
    readme = README.format(begin=role_docs.BEGIN, end=role_docs.END)
    role = _role(tmp_path, SPEC, DEFAULTS, readme)
    drifts = regenerate([role], check=True)
    assert len(drifts) == 1 and str(role / "README.md") in drifts[0]
    assert (role / "README.md").read_text() == readme


def test_write_mode_renders_the_table_then_check_mode_passes(tmp_path: Path) -> None:
    role = _role(tmp_path, SPEC, DEFAULTS, README.format(begin=role_docs.BEGIN, end=role_docs.END))
    regenerate([role], check=False)
    text = (role / "README.md").read_text()
    assert "| `demo_mode` | str | `fast` | `fast`, `safe` | How the demo runs \\| piped. |" in text
    assert (
        "| `demo_hosts` | list of str | `{{ groups['all'] \\| default([]) }}` |  "
        "| Hosts it reaches, in order. |"
    ) in text
    assert "hand-written" not in text and text.endswith("## Example\n")
    assert regenerate([role], check=True) == []


def test_a_changed_description_is_drift(tmp_path: Path) -> None:
    role = _role(tmp_path, SPEC, DEFAULTS, README.format(begin=role_docs.BEGIN, end=role_docs.END))
    regenerate([role], check=False)
    spec_file = role / "meta" / "argument_specs.yml"
    spec_file.write_text(spec_file.read_text().replace("in order.", "in inventory order."))
    assert regenerate([role], check=True)


def test_an_option_without_description_is_refused(tmp_path: Path) -> None:
    spec = SPEC.replace("        description: How the demo runs | piped.\n", "")
    role = _role(tmp_path, spec, DEFAULTS, README.format(begin=role_docs.BEGIN, end=role_docs.END))
    with pytest.raises(RoleDocsError, match="demo_mode"):
        render_table(role)


def test_a_readme_without_markers_is_refused(tmp_path: Path) -> None:
    role = _role(tmp_path, SPEC, DEFAULTS, "# demo\n\n## Variables\n\n| old | table |\n")
    with pytest.raises(RoleDocsError, match="BEGIN VARIABLES"):
        regenerate([role], check=True)
