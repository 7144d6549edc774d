"""Opt-in: PyPI's CUDA build of the pinned torch, downloaded once and checked against the plan.

``python -m tbctl.cuda_wheels download`` runs ``pip download`` of ``torch==<pin>`` from PyPI
(cp311, manylinux x86_64) with every dependency wheel (``nvidia-*``, ``triton``, the pure
Python ones) into ``<CACHE_DIR>/wheels-cuda/``, checks each file's sha256 and size against
what PyPI's JSON simple index serves, and writes ``manifest.json`` and a ``.complete`` stamp
there; a rerun with the stamp in place downloads nothing. Several GB: never part of
``make test``, ``make e2e`` or CI (``make testbed-cuda-wheels`` runs it by hand).

``python -m tbctl.cuda_wheels check`` installs those wheels (``--no-index``, the cache only)
into a throwaway venv on this machine, reads ``torch.__version__``, ``torch.version.cuda``,
the NCCL version and ``torch.cuda.is_available()`` there, and compares them with what
``gpufleet plan`` says for the pinned torch (``gpufleet.planning.planner.make_plan``): one
line per field, JSON in ``<cache>/check.json``, exit 1 on a mismatch, 2 when it cannot run.
The testbed itself is not used.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpufleet.planning.planner import PlanRefused, PlanRequest, make_plan

from .config import CACHE_DIR, REPO_DIR
from .sh import TestbedError, say

CUDA_CACHE = CACHE_DIR / "wheels-cuda"
MANIFEST = "manifest.json"
STAMP = ".complete"
SPEC = ".spec"
CHECK_JSON = "check.json"
PYPI_SIMPLE = "https://pypi.org/simple/"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
PYTHON_VERSION = "3.11"
ABI = "cp311"
# The requirement files that pin torch, first hit wins (constraints.txt leaves torch out:
# `make lock` drops it, controller.txt pins it).
PIN_FILES = (
    REPO_DIR / "requirements" / "constraints.txt",
    REPO_DIR / "requirements" / "controller.txt",
)
CONSTRAINTS = REPO_DIR / "requirements" / "constraints.txt"
# pip settings kept from the environment (a site CA bundle, a timeout); every other PIP_*
# variable and every pip config file is dropped, so that no find-links directory (this
# machine's /opt/wheels holds torch 2.13.0+cpu) or extra index can serve another build.
PIP_ENV_KEEP = ("PIP_CERT", "PIP_DEFAULT_TIMEOUT")

_PIN = re.compile(r"^\s*torch\s*==\s*([0-9][^\s;#]*)")


class CudaWheelsError(TestbedError):
    """The CUDA wheels cannot be downloaded or checked; the message says why."""


# ---------------------------------------------------------------------------------------
# pure helpers (unit-tested)


def pinned_torch(texts: Iterable[str]) -> str:
    """The torch version of the first ``torch==X`` line (comments and markers ignored)."""
    for text in texts:
        for line in text.splitlines():
            m = _PIN.match(line)
            if m:
                return m.group(1)
    raise CudaWheelsError("no `torch==X.Y.Z` pin in " + ", ".join(str(p) for p in PIN_FILES))


def platforms(glibc_required: str) -> list[str]:
    """pip --platform tags for manylinux x86_64 wheels that need at most glibc_required.

    pip 23 takes a ``manylinux_2_28`` tag literally (no older ones implied), and the
    ``nvidia-*`` wheels carry tags from ``manylinux_2_17`` to ``manylinux_2_28``.
    """
    m = re.fullmatch(r"2\.(\d+)", glibc_required.strip())
    if not m:
        raise CudaWheelsError(f"glibc_required={glibc_required!r} is not 2.N")
    top = int(m.group(1))
    tags = [f"manylinux_2_{n}_x86_64" for n in range(top, 4, -1)]
    return [*tags, "manylinux2014_x86_64", "any"]


def wheel_name_version(filename: str) -> tuple[str, str]:
    """'nvidia_nccl_cu13-2.29.7-py3-none-manylinux_2_18_x86_64.whl' -> ('nvidia-nccl-cu13',
    '2.29.7'). Raises CudaWheelsError for anything but a wheel file name."""
    parts = filename.removesuffix(".whl").split("-")
    if not filename.endswith(".whl") or len(parts) not in (5, 6):
        raise CudaWheelsError(f"not a wheel file name: {filename!r}")
    return normalize(parts[0]), parts[1]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class IndexFile:
    sha256: str
    size: int | None


def parse_simple_json(data: Mapping[str, Any]) -> dict[str, IndexFile]:
    """A PEP 691 JSON project page -> {filename: IndexFile} (files without sha256 left out)."""
    out: dict[str, IndexFile] = {}
    for f in data.get("files", []):
        sha = (f.get("hashes") or {}).get("sha256")
        if isinstance(sha, str) and isinstance(f.get("filename"), str):
            size = f.get("size")
            out[f["filename"]] = IndexFile(sha.lower(), size if isinstance(size, int) else None)
    return out


def hash_problems(
    files: Sequence[Mapping[str, Any]], index: Mapping[str, Mapping[str, IndexFile]]
) -> list[str]:
    """Each manifest entry (file, size, sha256) against the index's pages (project ->
    {filename: IndexFile}); one line per file that is missing there or differs."""
    problems = []
    for entry in files:
        name = str(entry["file"])
        project, _ = wheel_name_version(name)
        served = index.get(project, {}).get(name)
        if served is None:
            problems.append(f"{name}: not on the index page of {project}")
        elif served.sha256 != entry["sha256"]:
            problems.append(f"{name}: sha256 {entry['sha256']} but the index says {served.sha256}")
        elif served.size is not None and served.size != entry["size"]:
            problems.append(f"{name}: {entry['size']} bytes but the index says {served.size}")
    return problems


def cache_problems(cache: Path, manifest: Mapping[str, Any]) -> list[str]:
    """Each manifest file in cache: present, same size, same sha256 (one line per problem)."""
    problems = []
    for entry in manifest["files"]:
        path = cache / str(entry["file"])
        if not path.is_file():
            problems.append(f"{path.name}: missing")
        elif path.stat().st_size != entry["size"]:
            problems.append(f"{path.name}: {path.stat().st_size} bytes, manifest {entry['size']}")
        elif _sha256(path) != entry["sha256"]:
            problems.append(f"{path.name}: sha256 differs from the manifest")
    return problems


def manifest_versions(manifest: Mapping[str, Any]) -> dict[str, str]:
    """project -> version of every wheel in a manifest."""
    return dict(wheel_name_version(str(f["file"])) for f in manifest["files"])


def nvidia_wheel(versions: Mapping[str, str], base: str) -> tuple[str, str] | None:
    """(project, version) of ``nvidia-<base>`` or ``nvidia-<base>-cuNN`` in versions."""
    pattern = re.compile(rf"^nvidia-{re.escape(base)}(-cu\d+)?$")
    hits = sorted((p, v) for p, v in versions.items() if pattern.match(p))
    return hits[0] if hits else None


WHEEL_LIBS = "site-packages/nvidia/"


def _short(path: str) -> str:
    """'/tmp/v/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2' ->
    'site-packages/nvidia/nccl/lib/libnccl.so.2' (other paths unchanged)."""
    i = path.find("site-packages/")
    return path[i:] if i >= 0 else path


def _release(version: str, parts: int) -> str:
    """'13.0.96' -> '13.0' (parts=2); the leading numbers of a PEP 440 version."""
    m = re.match(r"^(\d+(?:\.\d+)*)", version)
    return ".".join(m.group(1).split(".")[:parts]) if m else version


@dataclass(frozen=True)
class Row:
    field: str
    expected: str | None
    found: str | None
    match: bool | None  # None: shown for information, not compared
    source: str = ""

    def line(self) -> str:
        verdict = {True: "yes", False: "NO", None: "n/a"}[self.match]
        src = f"  [{self.source}]" if self.source else ""
        return (
            f"{self.field:<34} expected {self.expected or '-':<14} found "
            f"{self.found or '-':<16} match {verdict}{src}"
        )


def compare(
    plan: Mapping[str, Any],
    probe: Mapping[str, Any],
    versions: Mapping[str, str],
    expect_cuda_device: bool = False,
) -> list[Row]:
    """The plan (``Plan.to_dict()``) against what the throwaway venv reported (``probe``)
    and the wheels' versions (project -> version)."""
    rows: list[Row] = []
    cuda = plan.get("cuda")
    nccl = plan.get("nccl")
    rows.append(
        Row(
            "torch.__version__",
            plan["expected_build"],
            probe.get("torch_version"),
            probe.get("torch_version") == plan["expected_build"],
            "import torch",
        )
    )
    found_cuda = probe.get("cuda_version")
    rows.append(
        Row(
            "torch.version.cuda",
            cuda,
            found_cuda,
            found_cuda is not None and cuda is not None and _release(found_cuda, 2) == cuda,
            "import torch",
        )
    )
    nccl_found = probe.get("nccl_version")
    if nccl_found is not None:
        rows.append(
            Row(
                "torch.cuda.nccl.version()",
                nccl,
                nccl_found,
                nccl_found == nccl,
                "import torch",
            )
        )
    else:
        rows.append(
            Row(
                "torch.cuda.nccl.version()",
                nccl,
                None,
                False,
                f"failed: {probe.get('nccl_error') or 'no value'}",
            )
        )
    nccl_wheel = nvidia_wheel(versions, "nccl")
    rows.append(
        Row(
            "NCCL wheel version",
            nccl,
            nccl_wheel[1] if nccl_wheel else None,
            nccl_wheel is not None and _release(nccl_wheel[1], 3) == nccl,
            nccl_wheel[0] if nccl_wheel else "no nvidia-nccl wheel",
        )
    )
    runtime = nvidia_wheel(versions, "cuda-runtime")
    rows.append(
        Row(
            "CUDA runtime wheel (major.minor)",
            cuda,
            _release(runtime[1], 2) if runtime else None,
            runtime is not None and _release(runtime[1], 2) == cuda,
            f"{runtime[0]} {runtime[1]}" if runtime else "no nvidia-cuda-runtime wheel",
        )
    )
    libs = probe.get("loaded_libraries")
    if libs is not None:  # which libnccl / libcudart torch loaded: the wheels' or the system's
        for lib in ("libnccl", "libcudart"):
            hits = [str(p) for p in libs if f"/{lib}." in str(p)]
            rows.append(
                Row(
                    f"{lib} loaded from",
                    WHEEL_LIBS,
                    ", ".join(_short(h) for h in hits) or None,
                    bool(hits) and all(f"/{WHEEL_LIBS}" in h for h in hits),
                    "/proc/self/maps",
                )
            )
    available = probe.get("cuda_available")
    rows.append(
        Row(
            "torch.cuda.is_available()",
            str(expect_cuda_device),
            None if available is None else str(available),
            available is expect_cuda_device,
            "import torch; no GPU here" if not expect_cuda_device else "import torch",
        )
    )
    if "triton" in versions:
        rows.append(Row("triton wheel", None, versions["triton"], None, "not in the plan"))
    if probe.get("cudnn_version") is not None:
        rows.append(
            Row(
                "torch.backends.cudnn.version()",
                None,
                str(probe["cudnn_version"]),
                None,
                "not in the plan",
            )
        )
    return rows


def report(rows: Sequence[Row]) -> dict[str, Any]:
    compared = [r for r in rows if r.match is not None]
    return {
        "ok": all(r.match for r in compared),
        "mismatches": [r.field for r in compared if not r.match],
        "rows": [asdict(r) for r in rows],
    }


# ---------------------------------------------------------------------------------------
# side effects: PyPI, pip, a throwaway venv


def _pip_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update({k: os.environ[k] for k in PIP_ENV_KEEP if k in os.environ})
    env["PIP_CONFIG_FILE"] = os.devnull  # pip then reads no config file at all
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _plan(torch: str) -> dict[str, Any]:
    plan = make_plan(PlanRequest(torch=torch, python=PYTHON_VERSION)).to_dict()
    if not plan["variant_is_default"] or plan["variant"] == "cpu":
        raise CudaWheelsError(
            f"the plan for torch {torch} picks {plan['variant']}, which is not PyPI's default "
            "CUDA build: a PyPI download cannot be compared with it"
        )
    return dict(plan)


def read_pin() -> str:
    return pinned_torch(p.read_text() for p in PIN_FILES if p.is_file())


def fetch_index(projects: Iterable[str]) -> dict[str, dict[str, IndexFile]]:
    out = {}
    ctx = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
    for project in sorted(set(projects)):
        req = urllib.request.Request(f"{PYPI_SIMPLE}{project}/", headers={"Accept": SIMPLE_JSON})
        with urllib.request.urlopen(req, timeout=60, context=ctx) as resp:
            out[project] = parse_simple_json(json.load(resp))
    return out


def download_spec(torch: str, plats: Sequence[str]) -> str:
    """What a download is of; the stamp holds it, so a changed pin downloads again."""
    return json.dumps(
        {"requirement": f"torch=={torch}", "index": PYPI_SIMPLE, "abi": ABI, "platforms": plats},
        sort_keys=True,
    )


def download(cache: Path, torch: str) -> dict[str, Any]:
    plan = _plan(torch)
    plats = platforms(str(plan["glibc_required"]))
    spec = download_spec(torch, plats)
    stamp, manifest_path = cache / STAMP, cache / MANIFEST
    if stamp.is_file() and stamp.read_text() == spec and manifest_path.is_file():
        manifest: dict[str, Any] = json.loads(manifest_path.read_text())
        say(f"cuda wheels: already downloaded ({len(manifest['files'])} files in {cache})")
        return manifest
    if (cache / SPEC).is_file() and (cache / SPEC).read_text() != spec:
        say(f"cuda wheels: {cache} holds another download; removing it")
        shutil.rmtree(cache)
    cache.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    (cache / SPEC).write_text(spec)
    have = {p.name for p in cache.glob("*.whl")}
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--progress-bar",
        "off",
        "--index-url",
        PYPI_SIMPLE,
        "--only-binary=:all:",
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        "--abi",
        ABI,
        *[a for p in plats for a in ("--platform", p)],
        "-c",
        str(CONSTRAINTS),
        "-d",
        str(cache),
        f"torch=={torch}",
    ]
    log = cache / "download.log"
    say(f"cuda wheels: pip download torch=={torch} from {PYPI_SIMPLE} into {cache} (log {log})")
    t0 = time.monotonic()
    with log.open("a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, env=_pip_env(), stdout=fh, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        raise CudaWheelsError(f"pip download failed (exit {proc.returncode}); read {log}")
    wheels = sorted(cache.glob("*.whl"))
    torch_files = {
        w.name: wheel_name_version(w.name)[1] for w in wheels if w.name.startswith("torch-")
    }
    if list(torch_files.values()) != [torch]:  # one wheel, no local label such as +cpu
        raise CudaWheelsError(f"expected one PyPI torch {torch} wheel, found {sorted(torch_files)}")
    files: list[dict[str, Any]] = [
        {"file": w.name, "size": w.stat().st_size, "sha256": _sha256(w)} for w in wheels
    ]
    say(f"cuda wheels: checking {len(files)} sha256 sums against {PYPI_SIMPLE} (JSON pages)")
    index = fetch_index(wheel_name_version(f["file"])[0] for f in files)
    problems = hash_problems(files, index)
    if problems:
        raise CudaWheelsError("files differ from PyPI's index:\n  " + "\n  ".join(problems))
    total = sum(int(f["size"]) for f in files)
    new = sum(int(f["size"]) for f in files if f["file"] not in have)
    manifest = {
        "torch": torch,
        "index": PYPI_SIMPLE,
        "abi": ABI,
        "platforms": plats,
        "pip": subprocess.run(
            [sys.executable, "-m", "pip", "--version"], capture_output=True, text=True, check=False
        ).stdout.split(" from ")[0],
        "downloaded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "download_seconds": round(seconds, 1),
        "downloaded_bytes": new,
        "already_present": sorted(have),
        "sha256_checked_against_index": True,
        "total_size": total,
        "files": files,
    }
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    stamp.write_text(spec)
    say(
        f"cuda wheels: {len(files)} files, {total / 1e9:.2f} GB, downloaded {new / 1e9:.2f} GB "
        f"in {seconds:.0f}s; manifest {manifest_path}"
    )
    return manifest


PROBE = r"""
import importlib.metadata as md, json, torch
out = {"torch_version": torch.__version__, "cuda_version": torch.version.cuda,
       "cuda_available": torch.cuda.is_available()}
try:
    v = torch.cuda.nccl.version()
    out["nccl_version"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
except Exception as exc:
    out["nccl_version"] = None
    out["nccl_error"] = f"{type(exc).__name__}: {exc}"
try:
    out["cudnn_version"] = torch.backends.cudnn.version()
except Exception as exc:
    out["cudnn_version"] = None
    out["cudnn_error"] = f"{type(exc).__name__}: {exc}"
out["distributions"] = {d.metadata["Name"]: d.version for d in md.distributions()}
libs = set()
with open("/proc/self/maps") as maps:
    for line in maps:
        path = line.split()[-1]
        if "/lib" in path and any(k in path for k in ("cudart", "nccl", "cudnn", "libcuda.")):
            libs.add(path)
out["loaded_libraries"] = sorted(libs)
print(json.dumps(out))
"""


def check(cache: Path, python: str, keep_venv: bool, expect_cuda_device: bool, out: Path) -> int:
    manifest_path = cache / MANIFEST
    if not (cache / STAMP).is_file() or not manifest_path.is_file():
        raise CudaWheelsError(
            f"no complete download in {cache}: run `python -m tbctl.cuda_wheels download` "
            "(make testbed-cuda-wheels) first"
        )
    manifest = json.loads(manifest_path.read_text())
    problems = cache_problems(cache, manifest)
    if problems:
        raise CudaWheelsError(
            f"{cache} differs from its manifest (delete it and download again):\n  "
            + "\n  ".join(problems)
        )
    torch = str(manifest["torch"])
    plan = _plan(torch)
    versions = manifest_versions(manifest)
    venv = Path(tempfile.mkdtemp(prefix="gftb-cuda-check-"))
    env = _pip_env()
    try:
        say(f"cuda check: throwaway venv {venv} ({python})")
        subprocess.run([python, "-m", "venv", str(venv)], check=True, env=env)
        vpy = str(venv / "bin" / "python")
        cmd = [vpy, "-m", "pip", "install", "--quiet", "--no-index"]
        cmd += ["--find-links", str(cache), "--only-binary=:all:", f"torch=={torch}"]
        say(f"cuda check: pip install --no-index --find-links {cache} torch=={torch}")
        t0 = time.monotonic()
        subprocess.run(cmd, check=True, env=env)
        install_seconds = time.monotonic() - t0
        t0 = time.monotonic()
        proc = subprocess.run(
            [vpy, "-c", PROBE], env=env, capture_output=True, text=True, check=False
        )
        import_seconds = time.monotonic() - t0
        if proc.returncode != 0:
            raise CudaWheelsError(f"the probe failed (exit {proc.returncode}):\n{proc.stderr}")
        probe = json.loads(proc.stdout.strip().splitlines()[-1])
        venv_size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file())
    finally:
        if not keep_venv:
            shutil.rmtree(venv, ignore_errors=True)
    rows = compare(plan, probe, versions, expect_cuda_device)
    result = {
        "torch": torch,
        "plan": {k: plan[k] for k in ("variant", "expected_build", "cuda", "nccl", "index_url")},
        "python": subprocess.run(
            [python, "--version"], capture_output=True, text=True, check=False
        ).stdout.strip(),
        "install_seconds": round(install_seconds, 1),
        "import_probe_seconds": round(import_seconds, 1),
        "venv_bytes": venv_size,
        "venv": str(venv) if keep_venv else None,
        "probe": probe,
        **report(rows),
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"plan: torch {torch} -> {plan['expected_build']} "
        f"(CUDA {plan['cuda']}, NCCL {plan['nccl']})"
    )
    for r in rows:
        print(r.line())
    print(
        f"install {install_seconds:.0f}s, venv {venv_size / 1e9:.2f} GB; JSON: {out}; "
        + ("all compared fields match" if result["ok"] else f"MISMATCH: {result['mismatches']}")
    )
    return 0 if result["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tbctl.cuda_wheels", description=__doc__)
    ap.add_argument("--cache", type=Path, default=CUDA_CACHE, help=f"default {CUDA_CACHE}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("download", help="pip download PyPI's CUDA torch and its wheels (once)")
    d.add_argument("--torch", help="torch release (default: the pin in requirements/)")
    c = sub.add_parser("check", help="install the download in a throwaway venv, compare")
    c.add_argument("--python", default="python3.11", help="interpreter of the throwaway venv")
    c.add_argument("--keep-venv", action="store_true", help="keep the throwaway venv")
    c.add_argument(
        "--expect-cuda-device",
        action="store_true",
        help="expect torch.cuda.is_available() True (default False: no GPU here)",
    )
    c.add_argument("--json-out", type=Path, help="default <cache>/check.json")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "download":
            download(args.cache, args.torch or read_pin())
            return 0
        return check(
            args.cache,
            args.python,
            args.keep_venv,
            args.expect_cuda_device,
            args.json_out or args.cache / CHECK_JSON,
        )
    except (TestbedError, PlanRefused, subprocess.CalledProcessError, OSError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
