"""gpufleet.provisioning.torch_probe, run as the node runs it (its text as ``python -c``)
against stand-in torch builds installed into a directory on its path: the metadata
version, torch/version.py read without an import, what torch reports after one, and the
torch wheels of find-links directories."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from fake_wheels import build, plain, torch_build
from gpufleet.provisioning import torch_probe

SCRIPT = inspect.getsource(torch_probe)


def install(wheel: Path, site: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)


def probe(site: Path, *flags: str, stdin: str = "") -> dict[str, Any]:
    """The script as the node runs it, with only ``site`` (and the standard library) on its
    path."""
    script = site.parent / "torch_probe_script.py"
    script.write_text(SCRIPT)
    code = (
        f"import runpy, sys; sys.path.insert(0, {str(site)!r}); "
        f"sys.argv[1:] = {list(flags)!r}; runpy.run_path({str(script)!r}, run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-I", "-c", code],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_no_torch(tmp_path: Path) -> None:
    assert probe(tmp_path / "site") == {
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "dist": None,
        "version": None,
        "cuda": None,
    }


def test_pypi_build_without_and_with_import(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    install(build(torch_build("2.13.0", "", "13.0", "nvidia-nccl-cu13"), wheels), tmp_path / "site")
    install(build(plain("nvidia-nccl-cu13", "2.29.7"), wheels), tmp_path / "site")
    quick = probe(tmp_path / "site")
    assert (quick["dist"], quick["version"], quick["cuda"]) == ("2.13.0", "2.13.0+cu130", "13.0")
    assert "nccl" not in quick, "no import without --import"
    full = probe(tmp_path / "site", "--import")
    assert (full["version"], full["cuda"], full["nccl"], full["cuda_available"]) == (
        "2.13.0+cu130",
        "13.0",
        "2.29.7",
        False,
    )


def test_an_import_failure_is_a_fact(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install(build(torch_build("2.13.0", "cpu", None, None), tmp_path / "w"), site)
    (site / "torch" / "__init__.py").write_text("raise OSError('libtorch_cuda.so: cannot open')\n")
    got = probe(site, "--import")
    assert got["import_error"] == "OSError: libtorch_cuda.so: cannot open"
    assert got["dist"] == "2.13.0+cpu" and got["cuda"] is None


def test_find_links_lists_torch_wheels_and_names_what_it_cannot_read(tmp_path: Path) -> None:
    house = tmp_path / "house"
    build(torch_build("2.13.0", "cu126", "12.6", None), house)
    build(plain("numpy", "2.4.6"), house)
    links = [
        str(house),
        "file://" + str(house),
        str(tmp_path / "missing"),
        "http://u:pw@127.0.0.1:9/x",
    ]
    got = probe(tmp_path / "site", "--find-links", stdin=json.dumps(links))["wheelhouse"]
    assert got["names"] == ["torch-2.13.0+cu126-py3-none-any.whl"]
    assert len(got["errors"]) == 2
    assert any("missing: FileNotFoundError" in e for e in got["errors"])
    assert not any("pw" in e for e in got["errors"]), got["errors"]
