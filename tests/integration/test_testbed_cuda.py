"""PyPI's real CUDA build of the pinned torch, provisioned on every simulated node (issue 38):
`make e2e-cuda`, opt-in (about 2.7 GB downloaded once into the testbed's cache, about 5 GB
per node's env; not in make e2e or CI: docs/testbed.md, "A real CUDA wheel").

The testbed (`tbctl up --torch-wheels cuda`) serves the real wheels (torch 2.13.0 unlabelled,
nvidia-*, triton) in PyPI's simple-index layout; node1 and node2 take them through
`gpufleet_pip_index_url` (gpufleet_torch_source auto -> pypi, pin torch===2.13.0), node3 from
the same files as a find-links page with no index (gpufleet_torch_source: wheelhouse). The
role is unchanged. Proves:
- each env imports torch with the version, torch.version.cuda and NCCL version of the plan
  (`gpufleet plan --torch 2.13.0`), without a GPU;
- a rerun of every role in full reports changed=0 (the probe and the check after the
  install read the same facts, so PyPI's unlabelled metadata version converges);
- verify passes: the checks say which CUDA build is installed and skip what needs a GPU;
- a variant these sources cannot serve (cu126) is refused by preflight on every node,
  before any change.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "testbed"))

from tbctl import config  # noqa: E402

import testbed_lib as tb  # noqa: E402
from gpufleet.planning.planner import PlanRequest, make_plan  # noqa: E402

pytestmark = [*tb.cluster_marks(timeout=3600), pytest.mark.cuda_wheels]

LOGS = REPO / "reports" / "testbed-cuda"
PLAN = make_plan(PlanRequest(torch="2.13.0", python="3.11"))
PROBE = (
    "/opt/gpufleet/env/bin/python -c 'import json, torch; print(json.dumps({"
    '"version": torch.__version__, "cuda": torch.version.cuda, '
    '"nccl": ".".join(map(str, torch.cuda.nccl.version())), '
    '"gpu": torch.cuda.is_available()}))\''
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[list[config.Node]]:
    tb.tbctl("down")
    up = tb.tbctl("up", "--nodes", "3", "--torch-wheels", "cuda", timeout=3000)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    cluster = config.make_nodes(3)
    yield cluster
    down = tb.tbctl("down")
    assert down.returncode == 0, down.stderr
    for n in cluster:
        assert not n.run_dir.exists(), f"{n.run_dir}: make testbed-down leaves the node's env"


@pytest.fixture(scope="module")
def first(cluster: list[config.Node]) -> tb.Run:
    tb.make("wheel")
    run = tb.playbook("provision.yml", timeout=3000, log=LOGS / "first.log")
    assert run.rc == 0, run.tail()
    return run


def test_every_env_holds_the_planned_cuda_build(cluster: list[config.Node], first: tb.Run) -> None:
    assert PLAN.variant == "cu130" and PLAN.variant_is_default
    for n in cluster:
        got = json.loads(tb.node_out(n, PROBE))
        assert got == {
            "version": PLAN.expected_build,
            "cuda": PLAN.cuda,
            "nccl": PLAN.nccl,
            "gpu": False,
        }, n.name
        size = tb.node_out(n, "du -sm /opt/gpufleet/env | cut -f1")
        print(f"\n[cuda] {n.name}: env {size} MiB")
    assert "the pin it can satisfy: torch===2.13.0" in first.out
    index_conf = tb.node_out(cluster[0], "cat /var/lib/gpufleet/pip-torch.conf")
    assert "/pypi-cuda/simple/" in index_conf
    house_conf = tb.node_out(cluster[2], "cat /var/lib/gpufleet/pip-torch.conf")
    assert "no-index = true" in house_conf and "/pypi-cuda/files/" in house_conf
    manifest = json.loads(tb.node_out(cluster[2], "cat /etc/gpufleet/manifest.json"))
    assert (manifest["env_torch_source"], manifest["env_torch_cuda"]) == ("wheelhouse", "13.0")


def test_a_full_rerun_changes_nothing(cluster: list[config.Node], first: tb.Run) -> None:
    run = tb.playbook(
        "provision.yml", "-e", "gpufleet_converge_fast=false", timeout=1800, log=LOGS / "rerun.log"
    )
    assert run.rc == 0, run.tail()
    changed = {host: row[1] for host, row in run.recap().items()}
    assert changed == {n.name: 0 for n in cluster}, changed


def test_verify_passes_and_says_which_build_without_a_gpu(
    cluster: list[config.Node], first: tb.Run
) -> None:
    run = tb.verify("cuda-verify", timeout=1800, log=LOGS / "verify.log")
    assert run.rc == 0, run.tail()
    data = tb.summary("cuda-verify")
    for n in cluster:
        records = {r["name"]: r for r in data["nodes"][n.name]["records"]}
        assert records["torch_cuda_version"]["status"] == "pass"
        assert (
            "torch 2.13.0+cu130: torch.version.cuda = 13.0"
            in records["torch_cuda_version"]["message"]
        )
        assert records["nccl_version"]["status"] == "pass"
        assert records["driver_loaded"]["status"] == "skip"
        assert "no NVIDIA driver" in records["driver_loaded"]["message"]


def test_a_variant_the_sources_cannot_serve_is_refused_before_any_change(
    cluster: list[config.Node], first: tb.Run
) -> None:
    run = tb.playbook(
        "provision.yml", "-e", "gpufleet_cuda_variant=cu126", timeout=900, log=LOGS / "cu126.log"
    )
    assert run.rc != 0
    recap = {host: (row[1], row[3]) for host, row in run.recap().items()}
    assert recap == {n.name: (0, 1) for n in cluster}, recap
    text = " ".join(run.out.split())
    assert (
        "node1: torch_env cannot install the planned torch build: the plan's variant 'cu126'"
        in text
    )
    assert "PyPI carries one Linux build of torch 2.13.0, the cu130 build" in text
    assert "holds no torch 2.13.0 wheel of the cu126 build (torch wheels there: 2.13.0)" in text
