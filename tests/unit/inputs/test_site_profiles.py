"""A site's own profile files (gpufleet_profiles_dir, --profiles-dir): read after the shipped
ones, a whole profile or one that extends a shipped profile with what the site states
differently; a bad file refused before any change, named as the site wrote its directory
(gpufleet.inputs.profile_file, gpufleet.inputs.rules)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.inputs import profile_file as pf
from gpufleet.inputs import rules
from gpufleet.node.nvml import GpuReading, NodeReading
from gpufleet.node.profiles import detect

SITES = Path(__file__).resolve().parents[2] / "fixtures" / "profiles"
SITE = "tests/fixtures/profiles/site-12nvlink"  # as an inventory writes it, from the checkout


def h100_node() -> NodeReading:
    gpus = tuple(GpuReading(i, name="NVIDIA H100 80GB HBM3") for i in range(8))
    return NodeReading("570.133.20", 12080, gpus)


def test_a_site_profile_states_only_what_differs_each_with_its_source() -> None:
    loaded = pf.load_profiles(site_dir=SITES / "site-12nvlink")
    site, shipped = loaded["h100-12nvlink"], loaded["hgx-h100-8gpu"]
    assert (site.extends, site.origin, shipped.origin) == ("hgx-h100-8gpu", "site", "shipped")
    assert site.nvlink_links == 12 and shipped.nvlink_links == 18
    assert site.figures["gpu.nvlink_links"].source.startswith("site acceptance record")
    assert site.floor("allreduce_busbw_gbs").value == 300.0
    # what the site left alone is the shipped profile's, with the shipped source
    assert site.floor("matmul_bf16_tflops") == shipped.floor("matmul_bf16_tflops")
    assert site.gpu_names == shipped.gpu_names and site.ib_ports == 8
    assert site.title.startswith("HGX H100 8-GPU, 12 of 18")


def test_auto_detection_picks_the_site_profile_over_the_one_it_extends() -> None:
    assert detect(h100_node(), pf.load_profiles()).name == "hgx-h100-8gpu"
    assert (
        detect(h100_node(), pf.load_profiles(site_dir=SITES / "site-12nvlink")).name
        == "h100-12nvlink"
    )


def test_a_whole_site_profile_under_a_shipped_name_replaces_it(tmp_path: Path) -> None:
    data = json.loads(
        (Path(pf.__file__).parents[1] / "data/profiles/simulated-cpu.json").read_text()
    )
    data["title"] = "our CPU nodes"
    (tmp_path / "simulated-cpu.json").write_text(json.dumps(data))
    got = pf.load_profiles(site_dir=tmp_path)["simulated-cpu"]
    assert (
        got.title == "our CPU nodes"
        and got.origin == "site"
        and got.path == str(tmp_path / "simulated-cpu.json")
    )


@pytest.mark.parametrize(
    ("fixture", "field", "problem"),
    [
        ("bad-unit", "floors.ib_write_bw_gdr_gbps.unit", "expected 'Gb/s'"),
        ("bad-extends", "extends", "'hgx-h100-9gpu' is no profile known"),
    ],
)
def test_a_bad_site_file_is_named_as_written(fixture: str, field: str, problem: str) -> None:
    written = f"tests/fixtures/profiles/{fixture}"
    with pytest.raises(pf.ProfileFileError) as exc:
        pf.load_profiles(site_dir=SITES / fixture)
    assert exc.value.field == field and problem in str(exc.value)
    # the check play's rule, with the path as the inventory wrote it (relative to the checkout)
    with pytest.raises(rules.BoundaryError) as bexc:
        rules.check_profiles_dir(written, "gpufleet_profiles_dir")
    assert f"{written}/h100-site.json: field {field}" in str(bexc.value)


def test_a_figure_without_its_source_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text(
        json.dumps(
            {
                "schema": 1,
                "name": "x",
                "extends": "hgx-h100-8gpu",
                "floors": {"matmul_bf16_tflops": {"value": 700.0, "unit": "TFLOP/s"}},
            }
        )
    )
    with pytest.raises(
        pf.ProfileFileError,
        match=r"floors\.matmul_bf16_tflops\.source: a figure needs its public source",
    ):
        pf.load_profiles(site_dir=tmp_path)


def test_a_tolerance_must_be_a_fraction(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text(
        json.dumps(
            {
                "schema": 1,
                "name": "x",
                "extends": "hgx-h100-8gpu",
                "tolerances": {"gpu_spread_fraction": {"value": 10, "source": "site"}},
            }
        )
    )
    with pytest.raises(
        pf.ProfileFileError, match=r"tolerances\.gpu_spread_fraction\.value: expected a fraction"
    ):
        pf.load_profiles(site_dir=tmp_path)


def test_an_empty_or_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(pf.ProfileFileError, match=r"holds no \*.json profile"):
        pf.load_profiles(site_dir=tmp_path)
    with pytest.raises(
        rules.BoundaryError, match=r"gpufleet_profiles_dir='/nonexistent/x'.*does not exist"
    ):
        rules.check_profiles_dir("/nonexistent/x", "gpufleet_profiles_dir")


def test_the_host_may_name_a_site_profile() -> None:
    assert (
        rules.check_system_profile("h100-12nvlink", "verify_system_profile", SITE)
        == "h100-12nvlink"
    )
    with pytest.raises(rules.BoundaryError, match="h100-12nvlink"):
        rules.check_system_profile("h100-13nvlink", "verify_system_profile", SITE)
    with pytest.raises(rules.BoundaryError):  # without the site's directory the name is unknown
        rules.check_system_profile("h100-12nvlink", "verify_system_profile")


@pytest.mark.parametrize(
    ("text", "seconds"), [("30m", 1800), ("90s", 90), ("90", 90), ("1h", 3600), ("2M", 120)]
)
def test_durations(text: str, seconds: int) -> None:
    assert rules.check_duration(text, "verify_burnin_duration") == seconds


@pytest.mark.parametrize("text", ["0", "-5m", "1.5h", "30x", "8d", "", True, 3.5])
def test_bad_durations_name_the_variable(text: object) -> None:
    with pytest.raises(rules.BoundaryError, match="verify_burnin_duration"):
        rules.check_duration(text, "verify_burnin_duration")


def test_matmul_shapes() -> None:
    assert rules.check_matmul_shapes("4096,8192x8192x4096", "s") == "4096,8192x8192x4096"
    for bad in ("4096,big", "0", "8192x8192", "70000"):
        with pytest.raises(rules.BoundaryError, match="MxNxK"):
            rules.check_matmul_shapes(bad, "verify_compute_shapes")
