"""gpufleet.planning.torch_source and wheel_sources: where a build can come from, the pin
each source can satisfy, the refusals, and the judgement of what an env holds."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.planning import torch_source as TS
from gpufleet.planning.planner import PlanRequest, describe, make_plan


def plan(variant: str | None = None, torch: str = "2.13.0", **kw: Any) -> dict[str, Any]:
    return make_plan(PlanRequest(torch=torch, variant=variant, python="3.11", **kw)).to_dict()


def settings(**kw: Any) -> TS.SourceSettings:
    return TS.SourceSettings.from_mapping(kw)


# --------------------------------------------------------------------------- the plan


def test_plan_of_the_pypi_default_carries_both_sources() -> None:
    p = plan()
    assert p["variant"] == "cu130"
    assert p["wheel_sources"] == [
        {
            "source": "pytorch-index",
            "index_url": "https://download.pytorch.org/whl/cu130",
            "requirement": "torch==2.13.0+cu130",
            "build": "2.13.0+cu130",
        },
        {
            "source": "pypi",
            "index_url": "https://pypi.org/simple",
            "requirement": "torch==2.13.0",
            "build": "2.13.0",
        },
    ]
    text = describe(make_plan(PlanRequest(torch="2.13.0")))
    assert (
        "pip install torch==2.13.0+cu130 --index-url https://download.pytorch.org/whl/cu130" in text
    )
    assert "pip install torch==2.13.0 --index-url https://pypi.org/simple  (PyPI)" in text


@pytest.mark.parametrize("variant", ["cu126", "cpu"])
def test_other_variants_come_from_the_pytorch_index_only(variant: str) -> None:
    p = plan(variant)
    assert [s["source"] for s in p["wheel_sources"]] == ["pytorch-index"]
    assert p["wheel_sources"][0]["requirement"] == f"torch==2.13.0+{variant}"
    assert "not on PyPI" in describe(make_plan(PlanRequest(torch="2.13.0", variant=variant)))


def test_the_pypi_default_follows_the_release() -> None:
    """torch 2.9's PyPI build is cu128 (the table's default), not cu130."""
    p = plan(torch="2.9.1")
    assert p["variant"] == "cu128"
    assert p["wheel_sources"][1] == {
        "source": "pypi",
        "index_url": "https://pypi.org/simple",
        "requirement": "torch==2.9.1",
        "build": "2.9.1",
    }


# --------------------------------------------------------------------------- source kinds


@pytest.mark.parametrize(
    ("index_url", "kind"),
    [
        ("", "pytorch-index"),
        ("https://download.pytorch.org/whl/cu126", "pytorch-index"),
        ("https://mirror.example/pytorch/whl/cu130/", "pytorch-index"),
        ("https://mirror.example/whl/cpu", "pytorch-index"),
        ("https://mirror.example/whl/rocm6.4", "pytorch-index"),
        ("https://nexus.example/repository/pypi-all/simple", "pypi"),
        ("https://user:pw@nexus.example/repository/pypi-all/simple/", "pypi"),
        ("http://10.213.0.1:8213/pypi/simple/", "pypi"),
    ],
)
def test_auto_reads_the_index_url(index_url: str, kind: str) -> None:
    got, why = TS.source_kind(settings(index_url=index_url))
    assert got == kind
    assert "gpufleet_pip_index_url" in why and "pw" not in why


def test_an_explicit_source_wins_over_the_url() -> None:
    assert TS.source_kind(settings(source="pytorch-index", index_url="https://n/simple"))[0] == (
        "pytorch-index"
    )


@pytest.mark.parametrize("source", ["PyPI", "index", "conda"])
def test_unknown_source_is_refused(source: str) -> None:
    with pytest.raises(TS.TorchSourceError, match=rf"gpufleet_torch_source='{source}'.*allowed"):
        TS.source_kind(settings(source=source))


def test_wheelhouse_without_find_links_is_refused() -> None:
    with pytest.raises(TS.TorchSourceError) as exc:
        TS.source_kind(settings(source="wheelhouse"))
    assert "gpufleet_torch_source='wheelhouse' needs at least one wheelhouse" in str(exc.value)
    assert "gpufleet_pip_find_links is empty" in str(exc.value)


# --------------------------------------------------------------------------- the torch step


def test_pypi_source_pins_the_unlabelled_build_exactly() -> None:
    step = TS.torch_install(plan(), "", settings(index_url="https://n.example/pypi/simple"))
    assert (step.source, step.requirement, step.build) == ("pypi", "torch===2.13.0", "2.13.0+cu130")
    assert (step.cuda, step.nccl, step.pypi_variant) == ("13.0", "2.29.7", "cu130")
    assert step.index_url == "https://n.example/pypi/simple"


def test_pytorch_index_pins_the_label_and_swaps_the_variant_segment() -> None:
    p = {**plan("cu126"), "index_url": "https://mirror/whl/cu126/"}
    step = TS.torch_install(p, "cpu", settings())
    assert (step.index_url, step.requirement) == ("https://mirror/whl/cpu", "torch==2.13.0+cpu")
    assert (step.cuda, step.nccl) == (None, None)


def test_a_plan_whose_index_ends_in_no_variant_uses_the_index_root() -> None:
    older = {**plan(), "index_url": "https://pypi.org/simple"}
    step = TS.torch_install(older, "cpu", settings(index_root="https://mirror.example/whl/"))
    assert step.index_url == "https://mirror.example/whl/cpu"


def test_another_cuda_variant_takes_its_own_cuda_and_nccl() -> None:
    step = TS.torch_install(plan(), "cu126", settings(source="pytorch-index"))
    assert (step.cuda, step.nccl, step.build) == ("12.6", "2.29.3", "2.13.0+cu126")


def test_credentials_never_reach_the_step() -> None:
    step = TS.torch_install(plan(), "", settings(index_url="https://u:secret@n.example/simple"))
    assert "secret" not in str(step.as_dict())


def test_a_variant_pypi_cannot_serve_is_refused_with_two_ways_out() -> None:
    with pytest.raises(TS.TorchSourceError) as exc:
        TS.torch_install(plan("cu126"), "", settings(index_url="https://u:pw@n.example/simple"))
    text = str(exc.value)
    assert "the plan's variant 'cu126'" in text
    assert "gpufleet_pip_index_url='https://***@n.example/simple'" in text
    assert "PyPI carries one Linux build of torch 2.13.0, the cu130 build" in text
    assert (
        "https://download.pytorch.org/whl/cu126 and set gpufleet_torch_source: pytorch-index"
        in text
    )
    assert "gpufleet_cuda_variant: cu130" in text
    assert "pw" not in text


def test_an_override_variant_is_named_as_the_variable() -> None:
    with pytest.raises(TS.TorchSourceError, match="torch_env_wheel_variant='cpu' cannot come from"):
        TS.torch_install(plan(), "cpu", settings(source="pypi"))


@pytest.mark.parametrize("variant", ["gpu", "cu1", "CPU"])
def test_a_malformed_variant_is_refused(variant: str) -> None:
    with pytest.raises(TS.TorchSourceError, match="is not a wheel variant"):
        TS.torch_install(plan(), variant, settings())


@pytest.mark.parametrize("missing", ["torch", "variant"])
def test_an_incomplete_plan_is_refused(missing: str) -> None:
    with pytest.raises(TS.TorchSourceError, match=f"gpufleet_plan has no '{missing}'"):
        TS.torch_install({**plan(), missing: ""}, "", settings())


# --------------------------------------------------------------------------- wheelhouse

HOUSE = [
    "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
    "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl",
]


def test_wheelhouse_prefers_the_labelled_build_of_the_variant() -> None:
    s = settings(source="wheelhouse", find_links=["/srv/w"])
    assert TS.wheelhouse_pin(HOUSE, "2.13.0", "cpu", "cu130", s) == "torch==2.13.0+cpu"


def test_wheelhouse_takes_the_unlabelled_build_for_the_pypi_default_only() -> None:
    s = settings(source="wheelhouse", find_links=["/srv/w"])
    assert TS.wheelhouse_pin(HOUSE, "2.13.0", "cu130", "cu130", s) == "torch===2.13.0"
    with pytest.raises(TS.TorchSourceError) as exc:
        TS.wheelhouse_pin(HOUSE, "2.13.0", "cu126", "cu130", s)
    text = str(exc.value)
    assert "gpufleet_pip_find_links=['/srv/w']" in text
    assert (
        "holds no torch 2.13.0 wheel of the cu126 build (torch wheels there: 2.13.0, 2.13.0+cpu)"
        in text
    )


def test_wheelhouse_with_no_torch_of_the_release_is_refused() -> None:
    with pytest.raises(TS.TorchSourceError, match="torch wheels there: none"):
        TS.wheelhouse_pin(HOUSE[2:], "2.13.0", "cu130", "cu130", settings(find_links=["/w"]))


def test_the_step_of_a_wheelhouse_waits_for_its_listing() -> None:
    s = settings(source="wheelhouse", find_links=["/srv/w"])
    assert TS.torch_install(plan(), "", s).requirement == ""
    assert TS.torch_install(plan(), "", s, wheelhouse=HOUSE).requirement == "torch===2.13.0"


# --------------------------------------------------------------------------- what an env holds

STEP = TS.torch_install(plan(), "", settings(source="pypi")).as_dict()


def test_pypi_and_pytorch_index_builds_of_one_variant_are_the_same_build() -> None:
    pypi = {"python": "3.11", "dist": "2.13.0", "version": "2.13.0+cu130", "cuda": "13.0"}
    labelled = {**pypi, "dist": "2.13.0+cu130"}
    assert TS.found_problems(pypi, STEP, "3.11", imported=False) == []
    assert TS.found_problems(labelled, STEP, "3.11", imported=False) == []
    assert TS.found_problems({**pypi, "nccl": "2.29.7"}, STEP, "3.11", imported=True) == []


@pytest.mark.parametrize(
    ("found", "fragment"),
    [
        ({"python": "3.11", "dist": None}, "no torch installed"),
        ({"python": "3.12", "dist": "2.13.0", "cuda": "13.0"}, "Python 3.12 (planned 3.11)"),
        ({"python": "3.11", "dist": "2.12.1", "cuda": "13.0"}, "planned release 2.13.0"),
        ({"python": "3.11", "dist": "2.13.0+cu126", "cuda": "12.6"}, "the cu126 build"),
        ({"python": "3.11", "dist": "2.13.0", "cuda": "12.6"}, "torch reports CUDA 12.6"),
        ({"python": "3.11", "dist": "2.13.0+cpu", "cuda": None}, "torch reports CUDA none"),
    ],
)
def test_a_different_build_is_named(found: dict[str, Any], fragment: str) -> None:
    problems = TS.found_problems(found, STEP, "3.11", imported=False)
    assert any(fragment in p for p in problems), problems


def test_nccl_is_judged_after_an_import_only() -> None:
    found = {"python": "3.11", "dist": "2.13.0", "cuda": "13.0", "nccl": "2.28.9"}
    assert TS.found_problems(found, STEP, "3.11", imported=False) == []
    assert TS.found_problems(found, STEP, "3.11", imported=True) == [
        "torch reports NCCL 2.28.9 (planned 2.29.7)"
    ]


@pytest.mark.parametrize(
    ("names", "holds"),
    [
        (["torch-2.13.0.dist-info"], True),
        (["torch-2.13.0+cu130.dist-info"], True),
        (["torch-2.13.0+cpu.dist-info"], False),
        (["torch-2.12.1.dist-info"], False),
        (["torchvision-2.13.0.dist-info"], False),
    ],
)
def test_dist_info_names(names: list[str], holds: bool) -> None:
    assert TS.dist_info_holds(names, TS.TorchInstall(**STEP)) is holds


def test_an_unlabelled_build_is_the_pypi_variant_only() -> None:
    """An env holding PyPI's torch (unlabelled: cu130) does not hold the cu126 build."""
    cu126 = TS.torch_install(plan("cu126"), "", settings(source="pytorch-index"))
    assert not TS.dist_info_holds(["torch-2.13.0.dist-info"], cu126)
    assert TS.dist_info_holds(["torch-2.13.0+cu126.dist-info"], cu126)
