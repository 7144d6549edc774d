"""gpufleet.node.drain_policy: when a failed pass is due to drain the node."""

from __future__ import annotations

import pytest

from gpufleet.node import drain_policy
from gpufleet.results import Record

NCCL = Record("nccl_env_interfaces", "fail", value="bogus0")
LOST = Record("gpu_readable", "fail", gpu="3 (00000000:5D:00.0)")
XID = Record("xid_errors", "fail", value=[79])
MISSING = Record("gpu_count", "fail", value=7)
SLOW = Record("health_timeout", "incomplete")


@pytest.mark.parametrize(
    ("records", "failed_passes", "drain_after", "due"),
    [
        pytest.param([NCCL], 1, 2, False, id="first-failure-waits"),
        pytest.param([NCCL], 2, 2, True, id="second-failure-drains"),
        pytest.param([NCCL], 5, 2, True, id="later-failures-drain"),
        pytest.param([NCCL], 1, 1, True, id="drain-after-1"),
        pytest.param([NCCL], 2, 3, False, id="drain-after-3-waits"),
        pytest.param([LOST], 1, 2, True, id="lost-gpu-at-once"),
        pytest.param([XID], 1, 5, True, id="critical-xid-at-once"),
        pytest.param([MISSING], 1, 2, True, id="gpu-missing-at-once"),
        pytest.param([NCCL, XID], 1, 2, True, id="one-critical-among-others"),
        pytest.param([SLOW], 7, 2, False, id="incomplete-never"),
        pytest.param([Record("xid_errors", "pass")], 0, 2, False, id="healthy"),
    ],
)
def test_drains_on_the_repeat_or_at_once_never_on_incomplete(
    records: list[Record], failed_passes: int, drain_after: int, due: bool
) -> None:
    assert drain_policy.decide(records, failed_passes, drain_after).due is due


def test_the_reason_names_the_count_or_the_critical_check() -> None:
    waits = drain_policy.decide([NCCL], 1, 2)
    assert waits.why == (
        "failed pass 1 in a row of the 2 that drain (nccl_env_interfaces); not drained yet"
    )
    assert drain_policy.decide([NCCL], 2, 2).why == "2 failed passes in a row (drains after 2)"
    assert drain_policy.decide([NCCL, LOST, XID], 1, 2).why.startswith(
        "gpu_readable, xid_errors failed: a critical Xid or a lost GPU drains at once"
    )


def test_a_threshold_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        drain_policy.decide([NCCL], 1, 0)
