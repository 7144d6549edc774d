"""gpufleet.node.perftest: ib_write_bw's output (tests/fixtures/perftest) and the verdict per
NIC against the shipped profiles' per-port floor."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.node import perftest
from gpufleet.node.profiles import load_profiles

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "perftest"


def parsed(name: str) -> perftest.PerftestResult:
    return perftest.parse((FIXTURES / name).read_text())


def floor(profile: str) -> perftest.PortFloor:
    p = load_profiles()[profile]
    fig = p.floor(perftest.FLOOR_FIELD)
    return perftest.PortFloor(p.name, fig.value, fig.source, fig.note)


def test_a_gpudirect_client_run() -> None:
    r = parsed("h100-gdr-client.txt")
    assert (r.device, r.link_type, r.msg_bytes, r.iterations) == ("mlx5_0", "IB", 65536, 3731820)
    assert r.average_gbps == 391.42 and r.peak_gbps == 0.0  # -D: the peak is not measured
    assert r.gpu_memory and r.cuda_device == "NVIDIA H100 80GB HBM3" and not r.error


def test_the_server_side_reads_alike() -> None:
    r = parsed("server-gdr.txt")
    assert r.average_gbps == 391.40 and r.gpu_memory and r.device == "mlx5_0"


def test_a_host_memory_run() -> None:
    r = parsed("h100-host-client.txt")
    assert r.average_gbps == 392.07 and not r.gpu_memory and r.device == "mlx5_3"


def test_megabytes_are_refused_not_guessed() -> None:
    r = parsed("mb-units-client.txt")
    assert r.average_gbps is None and "MB/sec" in r.error and "--report_gbits" in r.error


def test_a_run_that_could_not_connect_says_why() -> None:
    r = parsed("connect-failed-client.txt")
    assert r.average_gbps is None and r.error == "Couldn't connect to 10.0.0.2:18515"


@pytest.mark.parametrize(
    ("recording", "profile", "status"),
    [
        ("h100-gdr-client.txt", "hgx-h100-8gpu", "pass"),  # 391.42 >= 375
        ("h100-gdr-client.txt", "hgx-h200-8gpu", "pass"),  # >= 360
        ("slow-port-gdr-client.txt", "hgx-h100-8gpu", "fail"),  # 181.36 < 375
        ("slow-port-gdr-client.txt", "hgx-a100-80gb-8gpu", "fail"),  # < 185
    ],
)
def test_gpudirect_figures_against_the_per_port_floor(
    recording: str, profile: str, status: str
) -> None:
    rec = perftest.judge("n1", "n2", "mlx5_0:1", parsed(recording), floor(profile))
    assert rec.status == status and rec.name == "ib_write_bw:mlx5_0:1"
    assert rec.threshold == floor(profile).value
    assert "n1 mlx5_0:1 -> n2" in rec.message and "azurehpc-health-checks" in rec.message
    assert bool(rec.remedy) == (status == "fail")


def test_a_figure_exactly_at_the_floor_passes() -> None:
    at = perftest.PerftestResult("mlx5_0", "IB", 65536, 1, 0.0, 375.0, True, "GPU")
    assert perftest.judge("n1", "n2", "mlx5_0:1", at, floor("hgx-h100-8gpu")).status == "pass"


def test_host_memory_is_not_judged_against_the_gpudirect_floor() -> None:
    rec = perftest.judge(
        "n1", "n2", "mlx5_3:1", parsed("h100-host-client.txt"), floor("hgx-h100-8gpu")
    )
    assert (
        rec.status == "skip"
        and rec.value == 392.07
        and "not judged from host memory" in rec.message
    )


def test_a_profile_without_the_floor_reports_the_figure() -> None:
    rec = perftest.judge(
        "n1", "n2", "mlx5_0:1", parsed("h100-gdr-client.txt"), floor("pcie-l40s-8gpu")
    )
    assert (
        rec.status == "skip"
        and rec.value == 391.42
        and "has no ib_write_bw_gdr_gbps floor" in rec.message
    )


def test_an_error_fails_the_nic_with_what_to_check() -> None:
    rec = perftest.judge("n1", "n2", "mlx5_0:1", parsed("connect-failed-client.txt"), None)
    assert rec.status == "fail" and "Couldn't connect" in rec.message and "ibstat" in rec.remedy
