from __future__ import annotations

import pytest

from gpufleet.planning.compat import load
from gpufleet.planning.gpuarch import (
    ArchError,
    covers,
    open_modules_supported,
    parse_arch,
    parse_cc,
    parse_lspci,
)

LSPCI = """\
3b:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 40GB] [10de:20b0] (rev a1)
86:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)
01:00.0 VGA compatible controller [0300]: NVIDIA Corporation TU102 [GeForce RTX 2080 Ti Rev. A] [10de:1e07] (rev a1)
01:00.1 Audio device [0403]: NVIDIA Corporation TU102 High Definition Audio Controller [10de:10f7] (rev a1)
c5:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)
0000:d8:00.0 3D controller [0302]: NVIDIA Corporation GV100GL [Tesla V100 SXM2 32GB] [10de:1db5] (rev a1)
e1:00.0 3D controller [0302]: NVIDIA Corporation Device 2901 [10de:2901] (rev a1)
00:1f.2 SATA controller [0106]: Intel Corporation C620 Series Chipset [8086:a182] (rev 09)
"""


def test_parse_lspci_keeps_gpus_only() -> None:
    gpus = parse_lspci(LSPCI)
    assert [(g.pci, g.codename, g.arch, g.family) for g in gpus] == [
        ("3b:00.0", "GA100", "sm_80", "Ampere"),
        ("86:00.0", "GH100", "sm_90", "Hopper"),
        ("01:00.0", "TU102", "sm_75", "Turing"),
        ("0000:d8:00.0", "GV100", "sm_70", "Volta"),
        ("e1:00.0", "Device", None, None),
    ]
    assert gpus[0].device_id == "20b0"
    assert gpus[0].to_dict()["cc"] == "8.0"


def test_parse_lspci_without_numeric_classes() -> None:
    text = "41:00.0 3D controller: NVIDIA Corporation AD102GL [L40S] (rev a1)\n"
    (gpu,) = parse_lspci(text)
    assert gpu.arch == "sm_89" and gpu.family == "Ada"


def test_parse_lspci_empty() -> None:
    assert parse_lspci("") == []


@pytest.mark.parametrize(
    ("text", "cc"),
    [
        ("sm_80", (8, 0)),
        ("sm90", (9, 0)),
        ("8.6", (8, 6)),
        ("75", (7, 5)),
        ("compute_120", (12, 0)),
        ("GA100", (8, 0)),
        ("ga102", (8, 6)),
        ("GK210", (3, 7)),
        ("GB202", (12, 0)),
        ("GH100", (9, 0)),
    ],
)
def test_parse_arch(text: str, cc: tuple[int, int]) -> None:
    assert parse_arch(text) == cc


@pytest.mark.parametrize("text", ["", "sm_", "A100", "XX100", "sm_20", "2.0", "99.9"])
def test_parse_arch_rejects(text: str) -> None:
    with pytest.raises(ArchError):
        parse_arch(text)


@pytest.mark.parametrize(
    ("cc", "archs", "how"),
    [
        ((8, 0), ["sm_80"], "SASS sm_80"),
        ((8, 6), ["sm_80", "sm_86"], "SASS sm_86"),
        ((8, 9), ["sm_80", "sm_86", "sm_90"], "SASS sm_86"),
        ((9, 0), ["sm_80", "compute_80"], "PTX compute_80 (JIT-compiled at first use)"),
        ((9, 0), ["sm_90a"], "SASS sm_90a"),
        ((10, 0), ["sm_90a", "sm_90"], None),
        ((12, 0), ["sm_90", "sm_100"], None),
        ((7, 0), ["sm_75", "sm_80"], None),
        ((10, 3), ["sm_100f"], "SASS sm_100f"),
        ((10, 0), ["sm_100a", "compute_90"], "SASS sm_100a"),
        ((10, 3), ["sm_100a", "compute_90"], "PTX compute_90 (JIT-compiled at first use)"),
        ((8, 0), [" sm_80 ", "bogus", "sm_8"], "SASS sm_80"),
    ],
)
def test_covers(cc: tuple[int, int], archs: list[str], how: str | None) -> None:
    assert covers(cc, archs) == how


def test_every_wheel_variant_covers_its_own_sass_and_ptx() -> None:
    # the planner reads a variant through the same covers() as the node check reads torch
    for rel in load().torch:
        for v in rel.variants.values():
            if v.archs is None:
                continue
            for s in v.archs.sass:
                assert covers(parse_cc(s), v.archs.arch_list) == f"SASS sm_{s.replace('.', '')}"


@pytest.mark.parametrize(
    ("text", "cc"), [("sm_90a", (9, 0)), ("sm_100f", (10, 0)), ("90a", (9, 0))]
)
def test_parse_arch_reads_arch_specific_names(text: str, cc: tuple[int, int]) -> None:
    assert parse_arch(text) == cc


def test_open_modules_threshold_comes_from_compat_policy() -> None:
    floor = parse_cc(load().policy.open_modules_min_cc)
    assert floor == (7, 5)
    assert open_modules_supported(floor) and open_modules_supported((12, 0))
    assert not open_modules_supported((7, 0)) and not open_modules_supported((6, 1))
