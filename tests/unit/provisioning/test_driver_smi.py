"""gpufleet.provisioning.driver_smi: the driver role reads nvidia-smi's driver version and
compares it with the module installed, the chosen branch and the plan's floor."""

from __future__ import annotations

from gpufleet.provisioning import driver_smi

SMI = "0, NVIDIA H100 80GB HBM3, 580.95.05\n1, NVIDIA H100 80GB HBM3, 580.95.05\n"


def test_the_driver_the_plan_wanted_passes() -> None:
    assert (
        driver_smi.problems(
            "n1", SMI, module_version="580.95.05", branch="580", min_driver="525.60.13"
        )
        == []
    )
    assert driver_smi.problems("n1", SMI, module_version="none", branch="latest") == []


def test_an_old_driver_still_loaded_needs_the_reboot() -> None:
    (msg,) = driver_smi.problems("n1", SMI, module_version="590.44.01")
    assert "running driver is 580.95.05 but the installed module is 590.44.01" in msg
    assert "reboot" in msg and msg.startswith("n1: ")


def test_another_branch_than_chosen_is_named() -> None:
    (msg,) = driver_smi.problems("n1", SMI, branch="570")
    assert "not of branch 570" in msg and "nvidia_driver_branch" in msg


def test_a_driver_below_the_plans_floor_is_named() -> None:
    (msg,) = driver_smi.problems(
        "n1", SMI.replace("580.95.05", "520.61.05"), min_driver="525.60.13"
    )
    assert "older than the plan's min_driver 525.60.13" in msg


def test_no_gpu_or_mixed_drivers() -> None:
    assert "listed no GPU" in driver_smi.problems("n1", "")[0]
    mixed = SMI.replace("1, NVIDIA H100 80GB HBM3, 580.95.05", "1, NVIDIA H100 80GB HBM3, 570.1.2")
    assert "several driver versions 570.1.2, 580.95.05" in driver_smi.problems("n1", mixed)[0]
