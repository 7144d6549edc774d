"""The system profile of a host reaches the node checks: gpufleet_system_profile (per host,
default auto) feeds the verify role's verify_system_profile, which the checks task passes to
the suite as --system-profile (docs/profiles.md, "Which profile a node gets")."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import yaml

from gpufleet.commands.cmd_health import add_suite_options

REPO = Path(__file__).resolve().parents[2]


def _spec(role: str) -> dict[str, Any]:
    data = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    options: dict[str, Any] = data["argument_specs"]["main"]["options"]
    return options


def _defaults(role: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(
        (REPO / "roles" / role / "defaults" / "main.yml").read_text()
    )
    return data


def test_the_shared_variable_is_a_string_defaulting_to_auto_without_a_list_of_names() -> None:
    spec = _spec("gpufleet_common")["gpufleet_system_profile"]
    assert (spec["type"], spec["default"]) == ("str", "auto")
    # the names are the profile files': gpufleet.inputs checks them, no copy in YAML
    assert "choices" not in spec
    assert _defaults("gpufleet_common")["gpufleet_system_profile"] == "auto"


def test_verify_takes_it_from_the_shared_variable() -> None:
    spec = _spec("verify")["verify_system_profile"]
    assert (spec["type"], spec["default"], "choices" in spec) == (
        "str",
        "{{ gpufleet_system_profile }}",
        False,
    )
    assert _defaults("verify")["verify_system_profile"] == "{{ gpufleet_system_profile }}"


def test_the_checks_task_passes_it_as_an_option_the_suite_declares() -> None:
    tasks = yaml.safe_load((REPO / "roles" / "verify" / "tasks" / "checks.yml").read_text())
    task = next(t for t in tasks if "__verify_argv" in t.get("vars", {}))
    words = task["vars"]["__verify_argv"]
    (word,) = [w for w in words if "verify_system_profile" in w]
    rendered = re.sub(r"\{\{\s*verify_system_profile\s*\}\}", "hgx-h100-8gpu", word)
    parser = argparse.ArgumentParser()
    add_suite_options(parser.add_argument)
    known, rest = parser.parse_known_args([rendered])
    assert rest == []
    assert known.system_profile == "hgx-h100-8gpu"
