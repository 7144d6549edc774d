"""A role variable is declared once, in meta/argument_specs.yml (type, choices,
description, default); each role's defaults/main.yml and README variable table are generated
from it by scripts/role_docs.py (make role-docs). These tests fail when either drifts from
the spec (a name, a value or its type, or the text), or when a spec option has no
description; the made-up roles below show each drift is caught."""

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
render_defaults: Callable[[Path], str] = role_docs.render_defaults
value_drifts: Callable[[Path], list[str]] = role_docs.value_drifts
RoleDocsError: type[Exception] = role_docs.RoleDocsError


def _spec_options(role: str) -> dict[str, Any]:
    path = REPO / "roles" / role / "meta" / "argument_specs.yml"
    options: dict[str, Any] = yaml.safe_load(path.read_text())["argument_specs"]["main"]["options"]
    return options


def test_every_generated_file_matches_its_spec() -> None:
    """Each role's defaults/main.yml and README table are what make role-docs writes."""
    drifts = regenerate(role_docs.roles(REPO / "roles"), check=True)
    assert not drifts, "\n".join(drifts)


@pytest.mark.parametrize("role", ROLES)
def test_defaults_hold_the_spec_defaults_by_name_and_value(role: str) -> None:
    """defaults/main.yml, as YAML loads it, has exactly the spec's defaults: the same names
    and, for each, the same value of the same type."""
    role_dir = REPO / "roles" / role
    assert value_drifts(role_dir) == []
    loaded = yaml.safe_load((role_dir / "defaults" / "main.yml").read_text()) or {}
    assert list(loaded) == list(role_docs.spec_defaults(role_dir))


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
        default: fast
        description: How the demo runs | piped.
      demo_hosts:
        type: list
        elements: str
        default: "{{ groups['all'] | default([]) }}"
        description:
          - Hosts it reaches,
          - in order.
"""
DEFAULTS = "demo_mode: fast\ndemo_hosts: \"{{ groups['all'] | default([]) }}\"\n"
README = "# demo\n\n## Variables\n\n{begin}\nhand-written\n{end}\n\n## Example\n"


def test_check_mode_names_a_drifting_readme_and_changes_nothing(tmp_path: Path) -> None:
    readme = README.format(begin=role_docs.BEGIN, end=role_docs.END)
    role = _role(tmp_path, SPEC, DEFAULTS, readme)
    (role / "defaults" / "main.yml").write_text(render_defaults(role))
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


# --- defaults/main.yml ------------------------------------------------------------------


def _generated(tmp_path: Path, spec: str = SPEC) -> Path:
    role = _role(tmp_path, spec, "", README.format(begin=role_docs.BEGIN, end=role_docs.END))
    assert regenerate([role], check=False)
    assert regenerate([role], check=True) == []
    return role


def test_write_mode_renders_the_defaults_with_their_descriptions(tmp_path: Path) -> None:
    role = _generated(tmp_path)
    text = (role / "defaults" / "main.yml").read_text()
    assert text.startswith("---\n# Generated by scripts/role_docs.py (make role-docs)")
    assert text.endswith(
        "# How the demo runs | piped.\ndemo_mode: fast\n\n"
        "# Hosts it reaches,\n# in order.\ndemo_hosts: \"{{ groups['all'] | default([]) }}\"\n"
    )


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        pytest.param(("demo_mode: fast", "demo_mode: safe"), "demo_mode is 'safe'", id="value"),
        pytest.param(("demo_mode: fast", 'demo_mode: "4"'), "demo_mode is '4'", id="type"),
        pytest.param(("demo_mode: fast", "demo_mood: fast"), "demo_mood is no option", id="name"),
        pytest.param(("demo_mode: fast\n", ""), "demo_mode is missing", id="missing"),
    ],
)
def test_a_drifted_defaults_file_fails_the_check(
    tmp_path: Path, edit: tuple[str, str], named: str
) -> None:
    """A hand edit of defaults/main.yml (or a spec changed without make role-docs) fails:
    the check names the variable, and the test over the real roles would fail the same way."""
    role = _generated(tmp_path)
    path = role / "defaults" / "main.yml"
    path.write_text(path.read_text().replace(*edit))
    drifts = regenerate([role], check=True)
    assert any(named in d for d in drifts), drifts
    assert any(d.endswith("the file differs from meta/argument_specs.yml; run make role-docs")
               for d in drifts), drifts  # fmt: skip
    assert value_drifts(role)


def test_a_changed_spec_default_is_drift(tmp_path: Path) -> None:
    role = _generated(tmp_path)
    spec_file = role / "meta" / "argument_specs.yml"
    spec_file.write_text(spec_file.read_text().replace("default: fast", "default: safe"))
    assert "demo_mode is 'fast', the spec's default is 'safe'" in " ".join(value_drifts(role))


def test_an_edited_comment_is_drift_though_the_values_agree(tmp_path: Path) -> None:
    role = _generated(tmp_path)
    path = role / "defaults" / "main.yml"
    path.write_text(path.read_text().replace("# in order.", "# in any order."))
    assert value_drifts(role) == []
    assert regenerate([role], check=True)


SPEC_VALUES = """\
argument_specs:
  main:
    options:
      demo_values:
        type: raw
        description: A long description that is wrapped at one hundred columns, word by word,
          so that no comment line of the generated file is longer than that, whatever the spec.
        default:
          jinja: "{{ a | default('b') }}/c"
          empty: ""
          yes_word: "yes"
          number_word: "3.11"
          int: 7
          float: 1.5
          bool: false
          none: null
          list: [a, 1, true, [], {}]
          nested: {k: [x, {y: "z: w"}]}
          multi: "line one\\nline two\\n"
          colon: "a: b # c"
  check_inputs:
    options:
      demo_values:
        type: raw
        description: The same option from the other entry point.
      demo_extra:
        type: int
        default: 3
        description: An option only this entry point declares.
"""


def test_every_kind_of_value_round_trips(tmp_path: Path) -> None:
    role = _generated(tmp_path, SPEC_VALUES)
    text = (role / "defaults" / "main.yml").read_text()
    spec = yaml.safe_load(SPEC_VALUES)["argument_specs"]
    want = {
        "demo_values": spec["main"]["options"]["demo_values"]["default"],
        "demo_extra": 3,
    }
    assert role_docs.same(yaml.safe_load(text), want)
    assert list(yaml.safe_load(text)) == ["demo_values", "demo_extra"]
    assert text.count("demo_values:") == 1, "one declaration per variable"
    assert all(len(line) <= 100 for line in text.splitlines() if line.startswith("#"))
    assert "multi: |\n" in text


def test_same_tells_types_apart() -> None:
    same = role_docs.same
    assert same({"a": [1, {"b": True}]}, {"a": [1, {"b": True}]})
    assert not same(True, 1) and not same("1", 1) and not same(1, 1.0)
    assert not same([1], [1, 2]) and not same({"a": 1}, {"b": 1})


def test_two_entry_points_giving_one_option_two_defaults_are_refused(tmp_path: Path) -> None:
    spec = SPEC + (
        "  check_inputs:\n    options:\n      demo_mode:\n        type: str\n"
        "        default: safe\n        description: Other default.\n"
    )
    role = _role(tmp_path, spec, "", README.format(begin=role_docs.BEGIN, end=role_docs.END))
    with pytest.raises(RoleDocsError, match="demo_mode has default 'fast' in entry point main"):
        render_defaults(role)
