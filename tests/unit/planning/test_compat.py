from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources
from typing import Any

import pytest

from gpufleet.planning.compat import CompatDataError, load, parse_data


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        resources.files("gpufleet").joinpath("data/compat.json").read_text()
    )
    return doc


def test_every_row_names_a_known_source() -> None:
    data = load()
    keys = set(data.sources)
    rows = [r.source for r in data.torch] + [c.source for c in data.cuda.values()]
    rows += [f.source for f in data.families] + [e.source for e in data.el.values()]
    rows += [a.source for a in data.arch_sets.values()]
    for text in rows:
        assert any(k in text for k in keys), f"row without a known source: {text!r}"


def test_adding_a_release_is_a_data_change_only() -> None:
    doc = _doc()
    doc["torch"].append(
        {
            "minor": "2.16",
            "released": "2027-01",
            "patches": ["2.16.0"],
            "default": "cu132",
            "python": ["3.11", "3.15"],
            "glibc": "2.28",
            "nccl": "2.30.7",
            "variants": {"cu132": {"archs": "sm75-120+ptx"}},
            "source": "PyPI",
        }
    )
    from gpufleet.planning.planner import PlanRequest, make_plan

    plan = make_plan(PlanRequest(torch="2.16.0"), data=parse_data(doc))
    assert plan.variant == "cu132" and plan.toolkit_package == "cuda-toolkit-13-2"


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda d: d["torch"][0].update(default="cu999"), "default cu999"),
        (lambda d: d["torch"][0]["variants"]["cu116"].update(archs="nope"), "unknown arch set"),
        (lambda d: d["torch"][0]["variants"].update(cu115={"archs": "sm37-86"}), "no CUDA 11.5"),
        (lambda d: d["torch"][0]["patches"].append("2.0.0"), "does not belong"),
        (lambda d: d.update(schema=2), "schema"),
    ],
)
def test_inconsistent_data_is_rejected(
    mutate: Callable[[dict[str, Any]], object], fragment: str
) -> None:
    doc = _doc()
    mutate(doc)
    with pytest.raises(CompatDataError, match=fragment):
        parse_data(doc)
