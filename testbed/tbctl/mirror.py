"""Local mirrors: signed dnf repositories (NVIDIA layout + module streams), a PEP 503
wheelhouse, and the HTTP server that serves them on the bridge address."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import render
from .config import BRIDGE_ADDRESS, CACHE_DIR, HTTP_PORT, REPO_DIR, RUN_DIR, mirror_url
from .cuda_wheels import CUDA_CACHE
from .cuda_wheels import STAMP as CUDA_STAMP
from .sh import TestbedError, cmdline, processes, run, say, wait_for

MIRROR = RUN_DIR / "mirror"
GNUPG = RUN_DIR / "gnupg"
RPMBUILD = RUN_DIR / "rpmbuild"
LOG = RUN_DIR / "mirror.log"
HTTP_PID = RUN_DIR / "http.pid"
HTTP_LOG = RUN_DIR / "http.log"
WHEEL_CACHE = CACHE_DIR / "wheels"
STAMP = MIRROR / ".complete"
EL_MAJORS = (8, 9, 10)
SIGNING_UID = "gpufleet testbed signing key <testbed@gpufleet.invalid>"
FOREIGN_UID = "gpufleet testbed FOREIGN key (must be refused) <foreign@gpufleet.invalid>"
TESTBED_KEY_NAME = "RPM-GPG-KEY-gpufleet-testbed"
FOREIGN_KEY_NAME = "RPM-GPG-KEY-gpufleet-foreign"
# What a node env needs from the wheelhouse (torch comes from /opt/wheels through pip's
# find-links; versions follow requirements/constraints.txt).
NODE_REQUIREMENTS = (
    "torch==2.13.0",
    "numpy",
    "nvidia-ml-py",
    "pytest",
    "pytest-timeout",
    "jinja2",
    "pyyaml",
    "pip",
    "setuptools",
    "wheel",
)


def _gpg(*args: str, what: str) -> str:
    env = dict(os.environ, GNUPGHOME=str(GNUPG))
    return run(["gpg", "--batch", "--no-tty", *args], what=what, env=env, capture=True).stdout


def fingerprint(uid: str) -> str:
    out = _gpg("--with-colons", "--fingerprint", uid, what=f"reading the fingerprint of {uid}")
    for line in out.splitlines():
        if line.startswith("fpr:"):
            return line.split(":")[9]
    raise TestbedError(f"no fingerprint for {uid} in {GNUPG}")


def ensure_keys() -> tuple[str, str]:
    GNUPG.mkdir(parents=True, exist_ok=True)
    GNUPG.chmod(0o700)
    fprs = []
    for uid in (SIGNING_UID, FOREIGN_UID):
        env = dict(os.environ, GNUPGHOME=str(GNUPG))
        have = (
            subprocess.run(
                ["gpg", "--batch", "--list-keys", uid], env=env, capture_output=True, check=False
            ).returncode
            == 0
        )
        if not have:
            say(f"mirror: generating GPG key '{uid}'")
            _gpg(
                "--pinentry-mode",
                "loopback",
                "--passphrase",
                "",
                "--quick-gen-key",
                uid,
                "rsa3072",
                "sign",
                "never",
                what=f"generating the GPG key {uid}",
            )
        fprs.append(fingerprint(uid))
    return fprs[0], fprs[1]


def stop_gpg_agent() -> None:
    if GNUPG.is_dir():
        subprocess.run(
            ["gpgconf", "--kill", "all"],
            env=dict(os.environ, GNUPGHOME=str(GNUPG)),
            capture_output=True,
            check=False,
        )


def kernel_release() -> str:
    return os.uname().release


def _build_one(pkg: render.Pkg, dist: str, outdir: Path) -> Path:
    work = RPMBUILD / dist.strip(".") / pkg.name
    if work.exists():
        shutil.rmtree(work)
    tree = work / "src" / "tree"
    tree.mkdir(parents=True)
    for path, (mode, text) in pkg.files.items():
        dest = tree / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
        dest.chmod(mode)
    spec = work / f"{pkg.name}.spec"
    spec.write_text(render.spec(pkg))
    run(
        [
            "rpmbuild",
            "-bb",
            "--quiet",
            "--define",
            f"_topdir {work}",
            "--define",
            f"dist {dist}",
            "--define",
            f"_sourcedir {work / 'src'}",
            "--define",
            "_rpmdir %{_topdir}/RPMS",
            spec,
        ],
        what=f"rpmbuild of the stand-in {pkg.name} ({dist})",
        log=LOG,
        fix=f"read {LOG} and {spec}",
    )
    built = work / "RPMS" / pkg.arch / pkg.filename(dist)
    if not built.is_file():
        raise TestbedError(f"rpmbuild did not produce {built}; read {LOG}")
    outdir.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy2(built, outdir / built.name))


def _sign(rpms: list[Path], fpr: str) -> None:
    run(
        [
            "rpmsign",
            "--addsign",
            "--define",
            f"_gpg_name {fpr}",
            "--define",
            f"_gpg_path {GNUPG}",
            "--define",
            f"__gpg {shutil.which('gpg') or '/usr/bin/gpg'}",
            *rpms,
        ],
        what=f"signing {len(rpms)} RPMs with {fpr}",
        log=LOG,
        fix=f"read {LOG}",
    )


def _createrepo(repo: Path, modules: str | None, fpr: str) -> None:
    run(
        ["createrepo_c", "--quiet", "--general-compress-type=gz", repo],
        what=f"createrepo_c {repo}",
        log=LOG,
        fix=f"read {LOG}",
    )
    if modules is not None:
        # after createrepo_c: createrepo drops module metadata it does not know about
        mfile = RPMBUILD / f"modules-{repo.parent.name}.yaml"
        mfile.write_text(modules)
        shutil.copy(mfile, RPMBUILD / "modules.yaml")
        run(
            [
                "modifyrepo_c",
                "--mdtype=modules",
                "--compress-type=gz",
                RPMBUILD / "modules.yaml",
                repo / "repodata",
            ],
            what=f"modifyrepo_c (nvidia-driver modules) {repo}",
            log=LOG,
            fix=f"read {LOG}",
        )
    repomd = repo / "repodata" / "repomd.xml"
    asc = repomd.with_suffix(".xml.asc")
    asc.unlink(missing_ok=True)
    _gpg(
        "--local-user",
        fpr,
        "--armor",
        "--detach-sign",
        "--output",
        str(asc),
        str(repomd),
        what=f"signing {repomd}",
    )


def key_file_name(fpr: str) -> str:
    """NVIDIA names the key after its short id (D42D0685.pub); the testbed does the same."""
    return f"{fpr[-8:]}.pub"


def build_repos() -> tuple[str, str]:
    t0 = time.monotonic()
    fpr, foreign = ensure_keys()
    if STAMP.is_file() and STAMP.read_text().strip() == fpr:
        say(f"mirror: repositories already built ({MIRROR})")
        return fpr, foreign
    for sub in ("cuda", "epel", "base", "foreign", "keys"):
        shutil.rmtree(MIRROR / sub, ignore_errors=True)
    keys = MIRROR / "keys"
    keys.mkdir(parents=True)
    pub = _gpg("--armor", "--export", fpr, what="exporting the testbed key")
    (keys / TESTBED_KEY_NAME).write_text(pub)
    (keys / FOREIGN_KEY_NAME).write_text(
        _gpg("--armor", "--export", foreign, what="exporting the foreign key")
    )
    kr = kernel_release()
    say(
        f"mirror: building stand-in RPMs for EL {', '.join(map(str, EL_MAJORS))} "
        f"(kernel-devel for {kr}) (log: {LOG})"
    )
    jobs = []
    repos: dict[Path, tuple[str, list[render.Pkg], str]] = {}
    for major in EL_MAJORS:
        dist = f".el{major}"
        pkgs = render.catalog(kr, major)
        dirs = {
            "cuda": MIRROR / "cuda" / f"rhel{major}" / "x86_64",
            "epel": MIRROR / "epel" / str(major),
            "base": MIRROR / "base" / str(major),
        }
        cuda_pkgs = [p for p in pkgs if p.repo == "cuda"]
        for name, d in dirs.items():
            repos[d] = (name, cuda_pkgs if name == "cuda" else [], dist)
        for p in pkgs:
            jobs.append((p, dist, dirs[p.repo]))
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        built = list(pool.map(lambda j: _build_one(*j), jobs))
    foreign_rpm = _build_one(render.foreign_package(), ".el9", MIRROR / "foreign")
    say(f"mirror: signing {len(built)} RPMs with the testbed key {fpr}")
    _sign(built, fpr)
    _sign([foreign_rpm], foreign)
    for d, (name, cuda_pkgs, dist) in repos.items():
        major = int(dist.removeprefix(".el"))
        modules = render.modules_yaml(cuda_pkgs, dist) if name == "cuda" and major < 10 else None
        _createrepo(d, modules, fpr)
        if name == "cuda":
            (d / key_file_name(fpr)).write_text(pub)
    _createrepo(MIRROR / "foreign", None, foreign)
    (MIRROR / "foreign" / FOREIGN_KEY_NAME).write_text((keys / FOREIGN_KEY_NAME).read_text())
    STAMP.write_text(fpr + "\n")
    say(f"mirror: dnf repositories ready in {time.monotonic() - t0:.0f}s")
    return fpr, foreign


def _sha256(path: Path) -> str:
    cache = path.with_name(path.name + ".sha256")
    if cache.is_file() and cache.stat().st_mtime >= path.stat().st_mtime:
        return cache.read_text().strip()
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    cache.write_text(h.hexdigest() + "\n")
    return h.hexdigest()


def download_wheels(pip: list[str]) -> None:
    """pip download the node env's wheels once (cp311, manylinux x86_64) into the cache."""
    stamp = WHEEL_CACHE / ".complete"
    want = "\n".join(NODE_REQUIREMENTS)
    if stamp.is_file() and stamp.read_text() == want:
        return
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    say(f"wheelhouse: pip download of {len(NODE_REQUIREMENTS)} requirements into {WHEEL_CACHE}")
    constraints = REPO_DIR / "requirements" / "constraints.txt"
    run(
        [
            *pip,
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--only-binary=:all:",
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
            "--abi",
            "cp311",
            "--platform",
            "manylinux_2_28_x86_64",
            "--platform",
            "manylinux_2_17_x86_64",
            "--platform",
            "manylinux2014_x86_64",
            "--platform",
            "any",
            "-c",
            constraints,
            "-d",
            WHEEL_CACHE,
            *NODE_REQUIREMENTS,
        ],
        what="pip download of the node wheels",
        log=CACHE_DIR / "wheels.log",
        fix="read the log; PyPI must be reachable once (the result is cached)",
    )
    stamp.write_text(want)


def build_wheelhouse(pip: list[str]) -> None:
    download_wheels(pip)
    files = MIRROR / "pypi" / "files"
    if (MIRROR / "pypi" / ".complete").is_file():
        say("wheelhouse: already built")
        return
    shutil.rmtree(MIRROR / "pypi", ignore_errors=True)
    files.mkdir(parents=True)
    say("wheelhouse: building the gpufleet wheel from the repository (pip wheel --no-deps .)")
    build_tmp = RUN_DIR / "gpufleet-wheel"
    shutil.rmtree(build_tmp, ignore_errors=True)
    run(
        [*pip, "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", build_tmp, REPO_DIR],
        what="building the gpufleet wheel",
        log=LOG,
        fix=f"read {LOG}",
    )
    wheels = list(WHEEL_CACHE.glob("*.whl")) + list(build_tmp.glob("*.whl"))
    projects: dict[str, list[tuple[str, str]]] = {}
    for w in wheels:
        dest = files / w.name
        os.link(w, dest) if w.stat().st_dev == files.stat().st_dev else shutil.copy2(w, dest)
        projects.setdefault(render.wheel_project(w.name), []).append((w.name, _sha256(w)))
    shutil.rmtree(build_tmp, ignore_errors=True)
    for rel, text in render.simple_index(projects, "../../files").items():
        page = MIRROR / "pypi" / "simple" / rel
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(text)
    (MIRROR / "pypi" / ".complete").write_text("")
    say(
        f"wheelhouse: {len(wheels)} wheels, {len(projects)} projects at {mirror_url()}/pypi/simple/"
    )


# What the CUDA index serves besides the CUDA closure: the node requirements but torch
# (the cache's torch is the CPU build, labelled +cpu: on a PyPI-layout index it must not be,
# the pin torch===2.13.0 would not take it, but a site's wrong file should not be there).
CUDA_INDEX = MIRROR / "pypi-cuda"


def build_cuda_index() -> Path:
    """``pypi-cuda/simple/``: a PyPI-layout index of PyPI's real CUDA build of the pinned
    torch (``tbctl.cuda_wheels download``'s cache: torch unlabelled, nvidia-*, triton), the
    other node requirements and the gpufleet wheel; ``pypi-cuda/files/`` is also a
    find-links page (the HTTP server's directory listing). Hard links, no copies."""
    stamp = CUDA_INDEX / ".complete"
    if stamp.is_file():
        say("wheelhouse: CUDA index already built")
        return CUDA_INDEX
    if not (CUDA_CACHE / CUDA_STAMP).is_file():
        raise TestbedError(
            f"no CUDA wheels in {CUDA_CACHE}: run `make testbed-cuda-wheels` (or "
            "`python -m tbctl.cuda_wheels download`) first"
        )
    shutil.rmtree(CUDA_INDEX, ignore_errors=True)
    files = CUDA_INDEX / "files"
    files.mkdir(parents=True)
    cuda = sorted(CUDA_CACHE.glob("*.whl"))
    have = {render.wheel_project(w.name) for w in cuda}
    rest = [
        w
        for w in sorted((MIRROR / "pypi" / "files").glob("*.whl"))
        if render.wheel_project(w.name) not in have
    ]
    projects: dict[str, list[tuple[str, str]]] = {}
    for w in [*cuda, *rest]:
        dest = files / w.name
        os.link(w, dest) if w.stat().st_dev == files.stat().st_dev else shutil.copy2(w, dest)
        projects.setdefault(render.wheel_project(w.name), []).append((w.name, _sha256(w)))
    for rel, text in render.simple_index(projects, "../../files").items():
        page = CUDA_INDEX / "simple" / rel
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(text)
    stamp.write_text("")
    size = sum(w.stat().st_size for w in [*cuda, *rest])
    say(
        f"wheelhouse: CUDA index, {len(cuda) + len(rest)} wheels ({size / 1e9:.2f} GB) at "
        f"{mirror_url()}/pypi-cuda/simple/ (find-links page {mirror_url()}/pypi-cuda/files/)"
    )
    return CUDA_INDEX


# ---------------------------------------------------------------------------------------
# HTTP server


def _pid_alive(pidfile: Path, needle: str) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    cmd = cmdline(pid)
    return pid if cmd is not None and needle in cmd else None


def http_running() -> int | None:
    return _pid_alive(HTTP_PID, f"--directory {MIRROR}")


def _http_ok() -> bool:
    try:
        with urllib.request.urlopen(f"{mirror_url()}/keys/{TESTBED_KEY_NAME}", timeout=2) as r:
            status: int = r.status  # urlopen's response is untyped (typeshed: Any)
            return status == 200
    except OSError:
        return False


def start_http() -> None:
    pid = http_running()
    if pid and _http_ok():
        say(f"mirror: HTTP server already serving {mirror_url()}/ (pid {pid})")
        return
    if pid:
        os.kill(pid, signal.SIGTERM)
    say(f"mirror: starting HTTP server on {BRIDGE_ADDRESS}:{HTTP_PORT} serving {MIRROR}")
    with HTTP_LOG.open("a") as log:
        proc = subprocess.Popen(
            [
                "/usr/bin/python3",
                "-m",
                "http.server",
                "--bind",
                BRIDGE_ADDRESS,
                "--directory",
                str(MIRROR),
                str(HTTP_PORT),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd="/",
        )
    HTTP_PID.write_text(f"{proc.pid}\n")
    if not wait_for(_http_ok, 10):
        raise TestbedError(
            f"the mirror HTTP server (pid {proc.pid}) does not answer on {mirror_url()}/; "
            f"read {HTTP_LOG}; is port {HTTP_PORT} taken? (set TESTBED_HTTP_PORT)"
        )


def _find_http() -> int | None:
    """The server by its command line, for when the pid file is lost."""
    for pid, cmd in processes():
        if "http.server" in cmd and f"--directory {MIRROR}" in cmd:
            return pid
    return None


def stop_http() -> None:
    pid = http_running() or _find_http()
    if pid:
        say(f"mirror: stopping HTTP server (pid {pid})")
        os.kill(pid, signal.SIGTERM)
        if not wait_for(lambda: not Path(f"/proc/{pid}").exists(), 5):
            os.kill(pid, signal.SIGKILL)
    HTTP_PID.unlink(missing_ok=True)
