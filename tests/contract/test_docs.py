"""The docs cite only what exists (issue 29 item 6): scripts/check_docs.py over the real
docs, and its extractor and resolver on small strings and a small made-up checkout."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_docs", REPO / "scripts/check_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_docs"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


cd = _load()


def _refs(line: str, *, in_code_block: bool = False) -> list[tuple[str, str]]:
    return [(r.kind, r.text) for r in cd.extract_refs(line, in_code_block=in_code_block)]


def test_the_docs_cite_only_what_exists() -> None:
    findings = cd.check_repo(REPO)
    assert not findings, "dead references in the docs:\n" + "\n".join(map(str, findings))


def test_every_doc_family_is_read() -> None:
    files = {p.relative_to(REPO).as_posix() for p in cd.doc_files(REPO)}
    assert "README.md" in files
    assert "docs/testbed.md" in files
    assert "roles/nvidia_driver/README.md" in files
    assert "collections/ansible_collections/gpufleet/core/README.md" in files


# --- extraction -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param(
            "see `src/gpufleet/units.py:12`, and docs/testbed.md.",
            [("path", "src/gpufleet/units.py"), ("path", "docs/testbed.md")],
            id="paths-trailing-line-and-dot",
        ),
        pytest.param(
            "layout src/gpufleet/{planning,inputs}/",
            [("path", "src/gpufleet/{planning,inputs}/")],
            id="braces-kept-for-expansion",
        ),
        pytest.param(
            "reports/<run-id>/summary.md, tests/unit/<stage>/test_<module>.py, "
            "/etc/gpufleet/nccl.env, ~/tests/x, path/to/inventory",
            [],
            id="placeholders-node-paths-and-foreign-roots",
        ),
        pytest.param(
            "upstream https://github.com/NVIDIA/nccl/blob/master/src/transport.cc",
            [],
            id="urls",
        ),
        pytest.param(
            "[testbed](testbed.md#build) and [nccl](https://example.org/x.md)",
            [("link", "testbed.md#build")],
            id="relative-links-only",
        ),
    ],
)
def test_paths_and_links(line: str, expected: list[tuple[str, str]]) -> None:
    assert _refs(line) == expected


def test_test_ids_files_and_names() -> None:
    refs = _refs("`tests/unit/a/test_x.py::test_one`, `test_two` and `test_three_*` in test_y.py")
    assert ("test_id", "tests/unit/a/test_x.py::test_one") in refs
    assert ("test_file", "test_y.py") in refs
    assert ("test_name", "test_two") in refs
    assert ("test_name", "test_three_*") in refs
    assert ("test_name", "test_one") not in refs


def test_a_test_name_alone_is_not_a_citation() -> None:
    assert _refs("DCGM's `test_categories → tests → results` layout") == []


@pytest.mark.parametrize(
    ("line", "in_code", "expected"),
    [
        ("run `make test` then `make lint`", False, ["test", "lint"]),
        ("`make provision FULL=1 INVENTORY=x`", False, ["provision"]),
        ("make sure the docs hold", False, []),
        ("`gcc make elfutils-libelf-devel`", False, []),
        ("make demo    # (make turns any failure into 2)", True, ["demo"]),
        ("$ sudo make e2e", True, ["e2e"]),
    ],
)
def test_make_targets_only_as_commands(line: str, in_code: bool, expected: list[str]) -> None:
    assert [t for k, t in _refs(line, in_code_block=in_code) if k == "make"] == expected


def test_dotted_names_but_not_file_names() -> None:
    refs = _refs("`gpufleet.units.parse_size`, filter `gpufleet.core.plan`, /etc/gpufleet.conf")
    assert refs == [("dotted", "gpufleet.units.parse_size"), ("dotted", "gpufleet.core.plan")]


def test_heading_anchors_as_github_makes_them() -> None:
    text = "# Top\n## Faults (`make faults`)\n```\n# not a heading\n```\n## Top\n### A/B, pairs\n"
    assert cd.heading_anchors(text) == {"top", "faults-make-faults", "top-1", "ab-pairs"}


def test_code_blocks_are_tracked() -> None:
    text = "a\n```sh\nmake x\n```\nb\n~~~\nc\n~~~\n"
    assert [(n, code) for n, _, code in cd.iter_lines(text)] == [
        (1, False),
        (3, True),
        (5, False),
        (7, True),
    ]


# --- resolution against a small checkout ------------------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body))


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    _write(
        tmp_path,
        {
            ".gitignore": "/reports/\n/testbed/.state/\n*.retry\n",
            "Makefile": ".PHONY: test lint\ntest lint: setup\nsetup:\n\techo\nX := 1\n",
            "src/gpufleet/__init__.py": "",
            "src/gpufleet/units.py": "from os import path\nLIMIT = 1\ndef parse_size(): ...\n",
            "src/gpufleet/node/__init__.py": "",
            "src/gpufleet/node/nvml.py": "class Reader: ...\n",
            "collections/ansible_collections/gpufleet/core/plugins/filter/f.py": (
                "def filters():\n    return {'plan': 1}\n"
            ),
            "collections/ansible_collections/gpufleet/core/plugins/action/converge_state.py": "",
            "tests/unit/test_units.py": "def test_parse_ok(): ...\nclass TestSizes: ...\n",
            "docs/testbed.md": "# The testbed\n\n## Setup\n",
        },
    )
    return tmp_path


@pytest.mark.parametrize(
    ("line", "missing"),
    [
        ("`src/gpufleet/units.py` and `docs/testbed.md`", []),
        ("`src/gpufleet/gone.py`", ["src/gpufleet/gone.py"]),
        ("src/gpufleet/{units,gone}.py", ["src/gpufleet/{units,gone}.py"]),
        ("`tests/unit/test_*.py`, `tests/roles/test_*.py`", ["tests/roles/test_*.py"]),
        ("`testbed/.state/run/http.pid` is made by make testbed-up", []),
        ("[testbed](testbed.md), [gone](gone.md)", ["gone.md"]),
        (
            "[a](testbed.md#setup), [b](testbed.md#the-testbed), [c](testbed.md#gone)",
            ["testbed.md#gone"],
        ),
        ("`tests/unit/test_units.py::test_parse_ok`", []),
        ("`tests/unit/test_units.py::test_parse_*`", []),
        ("`tests/unit/test_units.py::TestSizes`", []),
        ("`tests/unit/test_units.py::test_gone`", ["tests/unit/test_units.py::test_gone"]),
        ("`test_units.py::test_gone`", ["test_units.py::test_gone"]),
        ("`test_gone.py`", ["test_gone.py"]),
        ("`test_parse_ok` and `test_gone` in test_units.py", ["test_gone"]),
        ("`make test`, `make lint`, `make setup`", []),
        ("`make bench`", ["bench"]),
        ("`gpufleet.units.parse_size`, `gpufleet.units.LIMIT`, `gpufleet.units.path`", []),
        ("`gpufleet.node.nvml.Reader`, `gpufleet.node.nvml`, `gpufleet.node`", []),
        ("`gpufleet.units.gone`", ["gpufleet.units.gone"]),
        ("`gpufleet.planning.planner`", ["gpufleet.planning.planner"]),
        ("`gpufleet.core`, `gpufleet.core.plan`, `gpufleet.core.converge_state`", []),
        ("`gpufleet.core.probe_sections`", ["gpufleet.core.probe_sections"]),
    ],
)
def test_resolution(checkout: Path, line: str, missing: list[str]) -> None:
    findings = cd.check_text(cd.Repo(checkout), checkout / "docs/x.md", line + "\n")
    assert [f.ref for f in findings] == missing
    assert all(f.file == "docs/x.md" and f.line == 1 for f in findings)


def test_a_link_that_is_also_a_path_is_reported_once(checkout: Path) -> None:
    findings = cd.check_text(cd.Repo(checkout), checkout / "README.md", "[x](docs/gone.md)\n")
    assert [str(f) for f in findings] == [
        "README.md:1: docs/gone.md (no such file or folder: docs/gone.md)"
    ]


def test_anchors_in_the_same_page(checkout: Path) -> None:
    text = "# Usage\n\nsee [up](#usage) and [down](#nowhere)\n"
    findings = cd.check_text(cd.Repo(checkout), checkout / "docs/x.md", text)
    assert [str(f) for f in findings] == [
        "docs/x.md:3: #nowhere (no heading #nowhere in this page)"
    ]


def test_measurement_records_check_links_only(checkout: Path) -> None:
    doc = checkout / "docs/measurements/perf-2026-12-04.md"
    text = "`tests/test_old.py`, `make gone`, [summary](../gone.md)\n"
    findings = cd.check_text(cd.Repo(checkout), doc, text)
    assert [f.ref for f in findings] == ["../gone.md"]


def test_main_lists_each_dead_reference_and_exits_1(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (checkout / "README.md").write_text("ok `make test`\n\nrun `make gone`\n")
    assert cd.main(["--root", str(checkout)]) == 1
    out = capsys.readouterr()
    assert out.out == "README.md:3: gone (no such make target)\n"
    assert "1 dead reference" in out.err
    (checkout / "README.md").write_text("ok `make test`\n")
    assert cd.main(["--root", str(checkout)]) == 0
