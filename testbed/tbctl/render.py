"""Pure renderers: everything here turns data into text, with no side effects.

Unit tests cover this module without root, network or testbed tools
(tests/unit/testbed/test_testbed_render.py).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from .config import NODE_TEXTFILE_DIR, ElRelease, Node

# ---------------------------------------------------------------------------------------
# EL identity of a node


def os_release(rel: ElRelease) -> str:
    """/etc/os-release of an EL node, modelled on the real distribution's file."""
    lines = {
        "NAME": rel.name,
        "VERSION": rel.pretty_name.removeprefix(rel.name).strip(),
        "ID": rel.distro_id,
        "ID_LIKE": rel.id_like,
        "VERSION_ID": rel.version_id,
        "PLATFORM_ID": rel.platform_id,
        "PRETTY_NAME": rel.pretty_name,
        "ANSI_COLOR": "0;32",
        "CPE_NAME": rel.cpe,
        "HOME_URL": rel.home_url,
        "GPUFLEET_TESTBED": "1",
        "GPUFLEET_TESTBED_NOTE": "Debian bookworm root filesystem posing as this EL release",
    }
    return "".join(f'{k}="{v}"\n' for k, v in lines.items())


def release_files(rel: ElRelease) -> dict[str, str]:
    """Path -> content of every file that names the release (os-release and *-release)."""
    line = rel.release_line + "\n"
    return {
        "/etc/os-release": os_release(rel),
        "/usr/lib/os-release": os_release(rel),
        "/etc/redhat-release": line,
        "/etc/system-release": line,
        rel.release_file: line,
        "/etc/system-release-cpe": rel.cpe + "\n",
    }


# ---------------------------------------------------------------------------------------
# Stand-in RPM packages

DRIVER_BRANCHES = {"580": "580.95.05", "575": "575.57.08"}
DRIVER_EPOCH = 3  # NVIDIA's driver packages carry epoch 3
TOOLKITS = {"13.0": "13.0.2", "12.8": "12.8.1", "12.6": "12.6.3"}
MODULE_NAME = "nvidia-driver"
# What the stand-in streams' fm profile adds to their default profile (the roles read the
# names from this metadata; NVIDIA's real profile is not copied, only its shape).
FM_PROFILE_EXTRA = ("nvidia-fabricmanager",)
NVLSM_VERSION = "2025.06.0"
DCGM_VERSION = "4.0.0"
IB_VERSION = "0.1"
MODULE_DEFAULT_STREAM = "latest-dkms"
STANDIN_NOTE = (
    "gpufleet testbed stand-in: same name and file locations as the real package, "
    "no real content; this node has no NVIDIA GPU."
)


@dataclass
class Pkg:
    name: str
    version: str
    repo: str  # cuda | epel | base | foreign
    summary: str
    release: str = "1"
    epoch: int | None = None
    arch: str = "x86_64"
    requires: list[str] = field(default_factory=list)
    provides: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    files: dict[str, tuple[int, str]] = field(default_factory=dict)  # path -> (mode, text)
    # module membership (EL8/9 only): stream names whose artifacts list this package
    streams: list[str] = field(default_factory=list)
    post: str = ""  # %post scriptlet (sh), run by rpm in the node
    postun: str = ""  # %postun scriptlet ($1 = 0: erased, 1: upgraded or downgraded)

    def evr(self, dist: str) -> str:
        ep = f"{self.epoch}:" if self.epoch is not None else ""
        return f"{ep}{self.version}-{self.release}{dist}"

    def nevra(self, dist: str) -> str:
        ep = self.epoch if self.epoch is not None else 0
        return f"{self.name}-{ep}:{self.version}-{self.release}{dist}.{self.arch}"

    def filename(self, dist: str) -> str:
        return f"{self.name}-{self.version}-{self.release}{dist}.{self.arch}.rpm"


def sanitize_rpm_version(text: str) -> tuple[str, str]:
    """Split a kernel release (uname -r) into an RPM Version and Release (no '-' allowed).

    '6.18.44-fc-v669' -> ('6.18.44', 'fc_v669');
    '5.14.0-570.el9.x86_64' -> ('5.14.0', '570.el9.x86_64')
    """
    head, _, tail = text.partition("-")
    clean = re.compile(r"[^A-Za-z0-9._+~^]")
    version = clean.sub("_", head) or "0"
    release = clean.sub("_", tail.replace("-", "_")) or "0"
    return version, release


def uname_r_evr(kernel_release: str) -> str:
    """The kernel release as an RPM version: exact when it has one '-' (every real EL kernel)."""
    if kernel_release.count("-") <= 1:
        return kernel_release
    version, release = sanitize_rpm_version(kernel_release)
    return f"{version}-{release}"


def nvcc_script(cuda: str, full: str) -> str:
    return f"""#!/bin/sh
# gpufleet testbed stand-in for nvcc of CUDA {cuda}: it reports the release and compiles nothing.
case "$1" in
  --version|-V)
    echo "nvcc: NVIDIA (R) Cuda compiler driver -- gpufleet TESTBED STAND-IN, compiles nothing"
    echo "Cuda compilation tools, release {cuda}, V{full}"
    echo "Build testbed_{cuda}"
    exit 0 ;;
esac
echo "nvcc (gpufleet testbed stand-in for CUDA {cuda}): cannot compile; only --version works" >&2
exit 1
"""


def driver_branch_of(version: str) -> str:
    """580.95.05 -> 580."""
    return version.split(".", 1)[0]


#: where the stand-in DKMS "builds" the module for a kernel (dkms installs to extra/ on EL)
DKMS_MODULE = "/lib/modules/{kernel}/extra/nvidia.ko.xz"


def dkms_post(version: str) -> str:
    """%post of a stand-in kmod-nvidia-*-dkms: as `dkms autoinstall`, "build" the module for
    every kernel whose build tree (kernel-devel) is installed; the "module" is a text file
    with its version, read by the TESTBED_GPU pose (its boot and its modinfo)."""
    return (
        "for tree in /usr/src/kernels/*/; do\n"
        '  [ -f "$tree/Makefile" ] || continue\n'
        '  k=$(basename "$tree")\n'
        f'  f="{DKMS_MODULE.format(kernel="$k")}"\n'
        '  mkdir -p "$(dirname "$f")"\n'
        f'  printf "version={version}\\nvermagic=%s\\n" "$k" > "$f"\n'
        "done\n"
        "exit 0\n"
    )


#: %postun: the module goes with the package only when it is erased ($1 = 0); an upgrade or
#: a downgrade (a branch change) leaves the one the new package's %post wrote
DKMS_POSTUN = f'[ "$1" = 0 ] && rm -f {DKMS_MODULE.format(kernel="*")}\nexit 0\n'


def driver_packages(branch: str, version: str) -> list[Pkg]:
    ep = DRIVER_EPOCH
    dv = f"{ep}:{version}"
    open_streams = [f"{branch}-open", "open-dkms"]
    dkms_streams = [f"{branch}-dkms", "latest-dkms"]
    precompiled = [branch, "latest"]
    common = open_streams + dkms_streams + precompiled

    def doc(n: str) -> dict[str, tuple[int, str]]:
        return {f"/usr/share/doc/{n}/TESTBED-STANDIN": (0o644, STANDIN_NOTE + "\n")}

    def kmod_dkms(flavour: str, kind: str, note: str, src_dir: str) -> Pkg:
        """kmod-nvidia-open-dkms or kmod-nvidia-latest-dkms: each conflicts with the other."""
        other = "latest" if flavour == "open" else "open"
        return Pkg(
            f"kmod-nvidia-{flavour}-dkms",
            version,
            "cuda",
            f"NVIDIA {kind} kernel module sources {version} for DKMS {note}",
            epoch=ep,
            requires=["dkms", f"nvidia-kmod-common = {dv}"],
            provides=[f"nvidia-kmod = {dv}"],
            conflicts=[f"kmod-nvidia-{other}-dkms"],
            files={f"/usr/src/{src_dir}/TESTBED-STANDIN": (0o644, STANDIN_NOTE + "\n")},
            streams=open_streams if flavour == "open" else dkms_streams,
            post=dkms_post(version),
            postun=DKMS_POSTUN,
        )

    def userspace(name: str, what: str, note: str, *needs: str) -> Pkg:
        """A driver user-space stand-in: in every stream, a doc file, requires ``needs`` at dv."""
        return Pkg(
            name,
            version,
            "cuda",
            f"{what} {version} (stand-in: {note})",
            epoch=ep,
            requires=[f"{n} = {dv}" for n in needs],
            files=doc(name),
            streams=common,
        )

    fm_version = f"Fabric Manager version is : {version}"
    fabricmanager = Pkg(
        "nvidia-fabricmanager",
        version,
        "cuda",
        f"NVIDIA Fabric Manager {version} (stand-in: the unit and a daemon that reports its "
        "version and refuses to run, no NVSwitch)",
        files={
            "/usr/lib/systemd/system/nvidia-fabricmanager.service": (
                0o644,
                "[Unit]\n"
                "Description=NVIDIA fabric manager service (gpufleet testbed stand-in)\n"
                "After=network-online.target\n\n"
                "[Service]\n"
                "ExecStart=/usr/bin/nv-fabricmanager -c "
                "/usr/share/nvidia/nvswitch/fabricmanager.cfg\n"
                "Type=forking\n\n"
                "[Install]\n"
                "WantedBy=multi-user.target\n",
            ),
            "/usr/bin/nv-fabricmanager": (
                0o755,
                "#!/bin/sh\n"
                f'case "$1" in --version|-v) echo "{fm_version}"; exit 0;; esac\n'
                "echo 'nv-fabricmanager: gpufleet testbed stand-in; no NVSwitch here' >&2\n"
                "exit 1\n",
            ),
            "/usr/share/nvidia/nvswitch/fabricmanager.cfg": (
                0o644,
                "# gpufleet testbed stand-in of the Fabric Manager configuration\n",
            ),
        },
        streams=common,
    )
    return [
        fabricmanager,
        Pkg(
            "nvidia-open",
            version,
            "cuda",
            f"NVIDIA open kernel module driver {branch} (meta, testbed stand-in)",
            epoch=ep,
            requires=[
                f"kmod-nvidia-open-dkms = {dv}",
                f"nvidia-driver = {dv}",
                f"nvidia-driver-cuda = {dv}",
                f"nvidia-persistenced = {dv}",
            ],
            streams=open_streams,
        ),
        Pkg(
            "cuda-drivers",
            version,
            "cuda",
            f"CUDA driver meta package, proprietary kernel module, branch {branch} (stand-in)",
            requires=[
                f"kmod-nvidia-latest-dkms = {dv}",
                f"nvidia-driver = {dv}",
                f"nvidia-driver-cuda = {dv}",
                f"nvidia-persistenced = {dv}",
            ],
            streams=dkms_streams,
        ),
        Pkg(
            f"cuda-drivers-{branch}",
            version,
            "cuda",
            f"CUDA driver meta package pinned to branch {branch} (stand-in)",
            requires=[f"cuda-drivers = {version}"],
            streams=dkms_streams,
        ),
        kmod_dkms("open", "open", "(stand-in)", f"nvidia-open-{version}"),
        kmod_dkms("latest", "proprietary", "(stand-in)", f"nvidia-{version}"),
        userspace(
            "nvidia-driver",
            "NVIDIA driver user space",
            "no libraries, no tools",
            "nvidia-driver-libs",
            "nvidia-kmod-common",
        ),
        userspace(
            "nvidia-driver-cuda",
            "NVIDIA CUDA driver tools",
            "deliberately ships NO nvidia-smi",
            "nvidia-driver",
            "nvidia-driver-libs",
        ),
        userspace("nvidia-driver-libs", "NVIDIA driver libraries", "no libcuda, no libnvidia-ml"),
        Pkg(
            "nvidia-kmod-common",
            version,
            "cuda",
            f"Common files for the NVIDIA kernel modules {version} (nouveau blacklist)",
            epoch=ep,
            arch="noarch",
            files={
                "/usr/lib/modprobe.d/nvidia.conf": (
                    0o644,
                    "# Installed by nvidia-kmod-common (gpufleet testbed stand-in)\n"
                    "blacklist nouveau\n"
                    "options nouveau modeset=0\n"
                    "softdep nvidia post: nvidia-uvm\n",
                ),
            },
            streams=common,
        ),
        Pkg(
            "nvidia-persistenced",
            version,
            "cuda",
            f"NVIDIA persistence daemon {version} (stand-in: runs where nvidia-smi answers, "
            "i.e. on a TESTBED_GPU pose with the driver loaded; refuses to run elsewhere)",
            epoch=ep,
            files={
                "/usr/lib/systemd/system/nvidia-persistenced.service": (
                    0o644,
                    "[Unit]\n"
                    "Description=NVIDIA Persistence Daemon (gpufleet testbed stand-in)\n"
                    "Wants=syslog.target\n\n"
                    "[Service]\n"
                    "Type=forking\n"
                    "ExecStart=/usr/bin/nvidia-persistenced --verbose\n"
                    "ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n\n"
                    "[Install]\n"
                    "WantedBy=multi-user.target\n",
                ),
                "/usr/bin/nvidia-persistenced": (
                    0o755,
                    "#!/bin/sh\n"
                    "if nvidia-smi -L >/dev/null 2>&1; then\n"
                    "  mkdir -p /var/run/nvidia-persistenced\n"
                    "  setsid sleep infinity </dev/null >/dev/null 2>&1 &\n"
                    "  echo $! > /var/run/nvidia-persistenced/nvidia-persistenced.pid\n"
                    "  exit 0\n"
                    "fi\n"
                    "echo 'nvidia-persistenced: gpufleet testbed stand-in; "
                    "no NVIDIA GPU with a loaded driver here' >&2\n"
                    "exit 1\n",
                ),
            },
            streams=common,
        ),
    ]


def hgx_packages() -> list[Pkg]:
    """NVLSM and DCGM (cuda repository), rdma-core and the verbs utilities (base): stand-ins
    with the real names and the units the roles enable, no real content."""

    def doc(n: str) -> dict[str, tuple[int, str]]:
        return {f"/usr/share/doc/{n}/TESTBED-STANDIN": (0o644, STANDIN_NOTE + "\n")}

    dcgm = [
        Pkg(
            f"datacenter-gpu-manager-4-cuda{major}",
            DCGM_VERSION,
            "cuda",
            f"NVIDIA DCGM 4 for CUDA {major} (stand-in: nvidia-dcgm unit, dcgmi reports no GPU)",
            files={
                "/usr/lib/systemd/system/nvidia-dcgm.service": (
                    0o644,
                    "[Unit]\nDescription=NVIDIA DCGM service (gpufleet testbed stand-in)\n\n"
                    "[Service]\nExecStart=/usr/bin/nv-hostengine -n\n\n"
                    "[Install]\nWantedBy=multi-user.target\n",
                ),
                "/usr/bin/dcgmi": (
                    0o755,
                    "#!/bin/sh\necho 'dcgmi: gpufleet testbed stand-in; no NVIDIA GPU' >&2\n"
                    "exit 1\n",
                ),
            },
            conflicts=[
                f"datacenter-gpu-manager-4-cuda{other}" for other in ("12", "13") if other != major
            ],
        )
        for major in ("12", "13")
    ]
    return [
        Pkg(
            "nvlsm",
            NVLSM_VERSION,
            "cuda",
            "NVIDIA NVLink Subnet Manager (stand-in)",
            files=doc("nvlsm"),
        ),
        *dcgm,
        *(
            Pkg(
                n, IB_VERSION, "base", f"{n} (stand-in: no RDMA stack in the testbed)", files=doc(n)
            )
            for n in ("rdma-core", "libibverbs-utils", "infiniband-diags")
        ),
    ]


def toolkit_package(cuda: str, full: str) -> Pkg:
    dash = cuda.replace(".", "-")
    prefix = f"/usr/local/cuda-{cuda}"
    version_json = (
        "{\n"
        f'  "cuda": {{"name": "CUDA SDK", "version": "{full}"}},\n'
        f'  "cuda_nvcc": {{"name": "CUDA NVCC", "version": "{full}"}},\n'
        '  "gpufleet_testbed": "stand-in tree, no libraries"\n'
        "}\n"
    )
    return Pkg(
        f"cuda-toolkit-{dash}",
        full,
        "cuda",
        f"CUDA Toolkit {cuda} (testbed stand-in tree under {prefix}, no driver)",
        files={
            f"{prefix}/bin/nvcc": (0o755, nvcc_script(cuda, full)),
            f"{prefix}/version.json": (0o644, version_json),
            f"{prefix}/lib64/TESTBED-STANDIN": (0o644, STANDIN_NOTE + "\n"),
            f"{prefix}/include/TESTBED-STANDIN": (0o644, STANDIN_NOTE + "\n"),
        },
    )


# Packages the roles may ask dnf for whose real programs come from the Debian root
# filesystem: empty markers so that the RPM database knows them.
MARKERS = (
    "gcc",
    "make",
    "elfutils-libelf-devel",
    "pciutils",
    "kmod",
    "tar",
    "gzip",
    "which",
    "procps-ng",
    "iproute",
    "sudo",
    "openssh-server",
    "firewalld",
    "python3-firewall",
    "dnf-plugins-core",
    "python3-dnf-plugin-versionlock",
    "python3.11",
    "python3.11-pip",
    "python3.11-devel",
)


def catalog(kernel_release: str, el_major: int) -> list[Pkg]:
    """Every stand-in package of one EL major release."""
    kver, krel = sanitize_rpm_version(kernel_release)
    pkgs: list[Pkg] = []
    for branch, version in DRIVER_BRANCHES.items():
        pkgs += driver_packages(branch, version)
    pkgs += [toolkit_package(c, f) for c, f in TOOLKITS.items()]
    pkgs += hgx_packages()
    pkgs += [
        Pkg(
            "dkms",
            "3.2.1",
            "epel",
            "Dynamic Kernel Module Support (stand-in: builds nothing)",
            arch="noarch",
            files={
                "/usr/sbin/dkms": (
                    0o755,
                    "#!/bin/sh\n"
                    "# gpufleet testbed stand-in for dkms\n"
                    'case "$1" in --version|-V) echo "dkms-3.2.1 (gpufleet testbed stand-in)";'
                    " exit 0;; status) exit 0;; esac\n"
                    'echo "dkms (gpufleet testbed stand-in): nothing to build, no GPU" >&2\n'
                    "exit 0\n",
                )
            },
        ),
        Pkg(
            "epel-release",
            str(el_major),
            "epel",
            f"EPEL {el_major} release marker (stand-in: ships no .repo file, no metalink)",
            release="1",
            arch="noarch",
        ),
        Pkg(
            "kernel-headers",
            kver,
            "base",
            f"Kernel headers for {kernel_release} (stand-in)",
            release=krel,
            files={"/usr/include/linux/TESTBED-STANDIN": (0o644, STANDIN_NOTE + "\n")},
        ),
        Pkg(
            "kernel-devel",
            kver,
            "base",
            f"Kernel build tree for {kernel_release} (stand-in)",
            release=krel,
            # RPM versions hold one '-' at most (V-R). A real EL uname -r has exactly one
            # (5.14.0-570.el9.x86_64); when the host's has more, the versioned provide uses
            # the sanitized V-R and the literal name below still matches `kernel-devel-$(uname -r)`.
            provides=[
                f"kernel-devel-uname-r = {uname_r_evr(kernel_release)}",
                f"kernel-devel-{kernel_release}",
            ],
            files={
                f"/usr/src/kernels/{kernel_release}/Makefile": (
                    0o644,
                    f"# gpufleet testbed stand-in kernel tree for {kernel_release}\n",
                )
            },
        ),
        Pkg(
            "kernel-devel-matched",
            kver,
            "base",
            f"Meta package: kernel-devel matching the running kernel {kernel_release} (stand-in)",
            release=krel,
            requires=[f"kernel-devel-uname-r = {uname_r_evr(kernel_release)}"],
        ),
        Pkg("gcc-c++", "11.5.0", "base", "C++ compiler (marker: none in the testbed)"),
    ]
    pkgs += [
        Pkg(m, "0.0.1", "base", f"testbed marker: {m} comes from the node's Debian root filesystem")
        for m in MARKERS
    ]
    # rpmbuild makes each package with a scriptlet (the stand-in DKMS's %post) require the
    # scriptlet's interpreter; on EL, bash provides /bin/sh
    pkgs.append(
        Pkg(
            "bash",
            "5.2.26",
            "base",
            "testbed marker: /bin/sh comes from the node's Debian root filesystem",
            provides=["/bin/sh"],
        )
    )
    return pkgs


def foreign_package() -> Pkg:
    return Pkg(
        "gpufleet-foreign-test",
        "1.0",
        "foreign",
        "Signed with the testbed's FOREIGN key: dnf must refuse it with gpgcheck=1",
        arch="noarch",
        files={"/usr/share/gpufleet-foreign-test/README": (0o644, "must never install\n")},
    )


def spec(pkg: Pkg) -> str:
    """An RPM spec that installs pkg.files from the tree %{_sourcedir}/tree."""
    out = [
        "%global debug_package %{nil}",
        "%global __os_install_post %{nil}",
        "%define _build_id_links none",
        f"Name: {pkg.name}",
        f"Version: {pkg.version}",
        f"Release: {pkg.release}%{{?dist}}",
    ]
    if pkg.epoch is not None:
        out.append(f"Epoch: {pkg.epoch}")
    out += [
        f"Summary: {pkg.summary}",
        "License: MIT",
        "URL: https://example.invalid/gpufleet-testbed",
        f"BuildArch: {pkg.arch}",
        # The node's RPM database is empty (Debian root): no automatic /bin/sh, libc requires.
        "AutoReqProv: no",
    ]
    out += [f"Requires: {r}" for r in pkg.requires]
    out += [f"Provides: {p}" for p in pkg.provides]
    out += [f"Conflicts: {c}" for c in pkg.conflicts]
    out += ["", "%description", STANDIN_NOTE, "", "%prep", "", "%build", "", "%install"]
    if pkg.files:
        out.append("cp -a %{_sourcedir}/tree/. %{buildroot}/")
    for section, body in (("%post", pkg.post), ("%postun", pkg.postun)):
        if body:
            out += ["", section, body.rstrip("\n")]
    out += ["", "%files"]
    out += [_rpm_path(p) for p in sorted(pkg.files)]
    return "\n".join(out) + "\n"


def _rpm_path(path: str) -> str:
    # rpm globs in %files; quote paths that have spaces (none do) and keep plain ones plain
    return f'"{path}"' if " " in path else path


# ---------------------------------------------------------------------------------------
# HGX pose (TESTBED_HGX): a node whose PCI list shows NVSwitches and whose recorded sysfs
# tree shows InfiniBand ports. No GPU is shown: a node with GPUs would try to load a driver
# that the testbed cannot load; the GPU architectures come in through gpufleet_gpu_archs, as
# for an image-baking node.

#: board -> (NVSwitch PCI device id, switches, GPU architectures). 22a3 is the NVSwitch of
#: HGX H100/H200; the B200 id is illustrative (tests/fixtures/hgx/generate.py).
HGX_BOARDS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "h100": ("22a3", 4, ("sm_90",)),
    "b200": ("2900", 2, ("sm_100",)),
}
HGX_LSPCI_FILE = "/etc/gpufleet-testbed/lspci-nn.txt"
HGX_IB_ROOT = "/var/lib/gpufleet-testbed/infiniband"
#: the pose's HCA ports: two active NDR InfiniBand ports, one without link partner, one
#: RoCE front-end port (hca, state, phys_state, link layer, rate)
HGX_PORTS = (
    ("mlx5_0", "4: ACTIVE", "5: LinkUp", "InfiniBand", "400 Gb/sec (4X NDR)"),
    ("mlx5_1", "4: ACTIVE", "5: LinkUp", "InfiniBand", "400 Gb/sec (4X NDR)"),
    ("mlx5_2", "1: DOWN", "2: Polling", "InfiniBand", "10 Gb/sec (4X SDR)"),
    ("mlx5_3", "4: ACTIVE", "5: LinkUp", "Ethernet", "100 Gb/sec (4X EDR)"),
)

LSPCI_WRAPPER = f"""#!/bin/bash
# gpufleet testbed (TESTBED_HGX, TESTBED_GPU): this node poses as an NVSwitch system or a
# GPU node. `lspci -nn` also lists the NVIDIA devices of {HGX_LSPCI_FILE} (with -D: their PCI
# domain), then the real bus.
domain="" nn=0
for a in "$@"; do
  case "$a" in -D) domain="0000:" ;; -nn) nn=1 ;; esac
done
if [ "$nn" = 1 ] && [ -r {HGX_LSPCI_FILE} ]; then sed "s/^/$domain/" {HGX_LSPCI_FILE}; fi
exec /usr/bin/lspci "$@"
"""


def hgx_lspci(board: str) -> str:
    """The NVSwitches of ``board`` as `lspci -nn` prints them (no domain)."""
    dev, count, _ = HGX_BOARDS[board]
    return "".join(
        f"{5 + i:02x}:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:{dev}] (rev a1)\n"
        for i in range(count)
    )


def hgx_files(board: str) -> dict[str, tuple[str, int]]:
    """Path -> (content, mode) of the pose inside a node."""
    files = {
        "/usr/local/sbin/lspci": (LSPCI_WRAPPER, 0o755),
        HGX_LSPCI_FILE: (hgx_lspci(board), 0o644),
    }
    for hca, state, phys, layer, rate in HGX_PORTS:
        base = f"{HGX_IB_ROOT}/{hca}/ports/1"
        for name, text in (("state", state), ("phys_state", phys), ("link_layer", layer),
                           ("rate", rate)):  # fmt: skip
            files[f"{base}/{name}"] = (text + "\n", 0o644)
    return files


def hgx_host_vars(board: str) -> dict[str, Any]:
    """Inventory variables of a posing node: its GPU architectures and the recorded HCAs."""
    return {
        "testbed_hgx": board,
        "gpufleet_gpu_archs": list(HGX_BOARDS[board][2]),
        "infiniband_sysfs_root": HGX_IB_ROOT,
        "cluster_network_ib_sysfs_root": HGX_IB_ROOT,
    }


# ---------------------------------------------------------------------------------------
# GPU pose (TESTBED_GPU): a node whose PCI list shows two H100 PCIe GPUs, whose /sys/module is
# the pose's (nodes.START_SCRIPT: nouveau until blacklisted, then nvidia when the stand-in
# DKMS built it for the running kernel), with the commands that answer from that state. The
# roles read it as on a real node: `lspci`, /sys/module/nvidia, `modinfo`, `nvidia-smi`.

GPU_PCI = (("17:00.0", "GPU-5b8a2c1e-0d3f-4b8e-9a51-2f6c0d7e8a10"),
           ("65:00.0", "GPU-9c3e4f2a-7b1d-4e6f-8a2c-5d0e1f3a4b20"))  # fmt: skip
GPU_NAME = "NVIDIA H100 PCIe"
GPU_LOST_FILE = "/etc/gpufleet-testbed/gpu-lost"

NVIDIA_SMI = f"""#!/bin/bash
# gpufleet testbed (TESTBED_GPU): nvidia-smi of the pose. It answers from the driver state
# the node booted with (/sys/module/nvidia/version); with {GPU_LOST_FILE} present the GPUs
# are "lost" (a fault the tests inject).
v=$(cat /sys/module/nvidia/version 2>/dev/null)
if [ -z "$v" ]; then
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. \
Make sure that the latest NVIDIA driver is installed and running."
  exit 9
fi
if [ -e {GPU_LOST_FILE} ]; then
  echo "Unable to determine the device handle for GPU00000000:{GPU_PCI[0][0]}: Unknown Error"
  exit 15
fi
buses=({" ".join(bus for bus, _ in GPU_PCI)})
uuids=({" ".join(uuid for _, uuid in GPU_PCI)})
query=""
for a in "$@"; do case "$a" in --query-gpu=*) query=${{a#--query-gpu=}} ;; esac; done
for i in "${{!buses[@]}}"; do
  if [ -n "$query" ]; then
    out=()
    IFS=, read -ra fields <<< "$query"
    for f in "${{fields[@]}}"; do
      case "$f" in
        index) out+=("$i") ;;
        name) out+=("{GPU_NAME}") ;;
        driver_version) out+=("$v") ;;
        uuid) out+=("${{uuids[$i]}}") ;;
        pci.bus_id) out+=("00000000:${{buses[$i]}}") ;;
        *) out+=("[N/A]") ;;
      esac
    done
    (IFS=,; echo "${{out[*]}}" | sed 's/,/, /g')
  else
    echo "GPU $i: {GPU_NAME} (UUID: ${{uuids[$i]}})"
  fi
done
"""

MODINFO = f"""#!/bin/bash
# gpufleet testbed (TESTBED_GPU): modinfo of the nvidia module reads the one the stand-in
# DKMS built for the running kernel ({DKMS_MODULE}); any other module: the real modinfo.
args=("$@") field="" name=""
while [ $# -gt 0 ]; do
  case "$1" in -F) field=$2; shift 2 ;; -F*) field=${{1#-F}}; shift ;; -*) shift ;;
    *) name=$1; shift ;; esac
done
if [ "$name" = nvidia ]; then
  f=/lib/modules/$(uname -r)/extra/nvidia.ko.xz
  [ -r "$f" ] || {{ echo "modinfo: ERROR: Module nvidia not found." >&2; exit 1; }}
  if [ -n "$field" ]; then sed -n "s/^$field=//p" "$f"; exit 0; fi
  echo "filename: $f"; sed 's/=/: /' "$f"
  exit 0
fi
[ -x /usr/sbin/modinfo ] && exec /usr/sbin/modinfo "${{args[@]}}"
echo "modinfo: ERROR: Module $name not found." >&2
exit 1
"""


def gpu_lspci() -> str:
    """The pose's GPUs as `lspci -nn` prints them (no domain)."""
    return "".join(
        f"{bus} 3D controller [0302]: NVIDIA Corporation GH100 [H100 PCIe] [10de:2331] (rev a1)\n"
        for bus, _ in GPU_PCI
    )


def gpu_files() -> dict[str, tuple[str, int]]:
    """Path -> (content, mode) of the GPU pose inside a node."""
    return {
        "/usr/local/sbin/lspci": (LSPCI_WRAPPER, 0o755),
        HGX_LSPCI_FILE: (gpu_lspci(), 0o644),
        "/usr/local/bin/nvidia-smi": (NVIDIA_SMI, 0o755),
        "/usr/local/sbin/modinfo": (MODINFO, 0o755),
    }


# ---------------------------------------------------------------------------------------
# Module metadata (EL8/EL9 only)


def modules_yaml(pkgs: list[Pkg], dist: str, version: int = 20251130000000) -> str:
    """modules.yaml for the nvidia-driver module: one modulemd document per stream + defaults."""
    streams: dict[str, list[Pkg]] = {}
    for p in pkgs:
        for s in p.streams:
            streams.setdefault(s, []).append(p)
    docs: list[dict[str, Any]] = []
    for stream in sorted(streams):
        members = streams[stream]
        names = {p.name for p in members}
        if "nvidia-open" in names:
            default = ["nvidia-open"]
            src = ["kmod-nvidia-open-dkms"]
        elif "cuda-drivers" in names:
            default = ["cuda-drivers"]
            src = ["kmod-nvidia-latest-dkms"]
        else:  # precompiled streams: the testbed has no precompiled kmod packages
            default = ["nvidia-driver", "nvidia-driver-cuda"]
            src = ["nvidia-driver"]
        ks = [n for n in default if n not in ("cuda-drivers", "nvidia-open")] + [
            "nvidia-driver-cuda",
            "nvidia-persistenced",
        ]
        docs.append(
            {
                "document": "modulemd",
                "version": 2,
                "data": {
                    "name": MODULE_NAME,
                    "stream": stream,
                    "version": version,
                    "context": "4e9c8a1b",
                    "arch": "x86_64",
                    "summary": "Nvidia driver for "
                    + stream
                    + " branch (gpufleet testbed stand-in)",
                    "description": "Stand-in module stream of the gpufleet testbed. "
                    + STANDIN_NOTE,
                    "license": {"module": ["MIT"]},
                    "profiles": {
                        "default": {"rpms": sorted(set(default))},
                        "ks": {"rpms": sorted(set(ks))},
                        "fm": {"rpms": sorted({*default, *FM_PROFILE_EXTRA})},
                        "src": {"rpms": sorted(set(src))},
                    },
                    "artifacts": {"rpms": sorted(p.nevra(dist) for p in members)},
                },
            }
        )
    docs.append(
        {
            "document": "modulemd-defaults",
            "version": 1,
            "data": {
                "module": MODULE_NAME,
                "stream": MODULE_DEFAULT_STREAM,
                "profiles": {s: ["default"] for s in sorted(streams)},
            },
        }
    )
    return yaml.safe_dump_all(
        docs, explicit_start=True, explicit_end=True, sort_keys=False, default_flow_style=False
    )


# ---------------------------------------------------------------------------------------
# dnf repo file for the node itself (used by the tests; the roles write their own)


def repo_file(repos: dict[str, tuple[str, str]], gpgcheck: bool = True) -> str:
    """repos: id -> (baseurl, gpgkey_url)."""
    out = []
    for rid, (url, key) in repos.items():
        out += [
            f"[{rid}]",
            f"name=gpufleet testbed {rid}",
            f"baseurl={url}",
            "enabled=1",
            f"gpgcheck={int(gpgcheck)}",
            f"gpgkey={key}",
            "",
        ]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# Python wheelhouse (PEP 503 simple index)


def normalize_project(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_project(filename: str) -> str:
    return normalize_project(filename.split("-", 1)[0])


def simple_index(projects: dict[str, list[tuple[str, str]]], files_prefix: str) -> dict[str, str]:
    """projects: normalized name -> [(filename, sha256)]. Returns relative path -> HTML."""
    pages = {}
    root = ["<!DOCTYPE html>", "<html><body>"]
    for proj in sorted(projects):
        root.append(f'<a href="{proj}/">{proj}</a><br/>')
        body = ["<!DOCTYPE html>", f"<html><head><title>{proj}</title></head><body>"]
        for fn, sha in sorted(projects[proj]):
            href = html.escape(f"{files_prefix}/{fn}#sha256={sha}")
            body.append(f'<a href="{href}">{html.escape(fn)}</a><br/>')
        body.append("</body></html>")
        pages[f"{proj}/index.html"] = "\n".join(body) + "\n"
    root.append("</body></html>")
    pages["index.html"] = "\n".join(root) + "\n"
    return pages


# ---------------------------------------------------------------------------------------
# SSH


def sshd_config(address: str, port: int = 22) -> str:
    return f"""# Written by the gpufleet testbed (node sshd); read before the Debian defaults.
ListenAddress {address}:{port}
HostKey /etc/ssh/gftb_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PidFile /run/sshd.pid
AuthorizedKeysFile .ssh/authorized_keys
MaxStartups 64:30:128
MaxSessions 64
"""


def known_hosts(entries: list[tuple[list[str], str]]) -> str:
    """entries: ([names/addresses], 'ssh-ed25519 AAAA...')."""
    return "".join(f"{','.join(names)} {key.strip()}\n" for names, key in entries)


# ---------------------------------------------------------------------------------------
# Inventory


@dataclass(frozen=True)
class MirrorInfo:
    url: str  # http://10.213.0.1:8213
    cuda_key_file: str  # file name of the key next to each cuda repo
    fingerprint: str  # testbed key fingerprint (40 hex)
    bridge_address: str
    cidr: str
    slurm: bool = False  # Slurm runs on the nodes (tbctl.slurm)
    torch_wheels: str = "cpu"  # cpu: torch's CPU build; cuda: PyPI's real CUDA build
    monitor: bool = False  # node_exporter and Prometheus run (tbctl.monitor)


def wheelhouse_host_vars(url: str) -> dict[str, Any]:
    """TORCH_WHEELS=cuda: the last node takes torch from a find-links wheelhouse with no
    index (the CUDA index's files page), as an air-gapped site with `pip download` output
    would."""
    return {
        "gpufleet_torch_source": "wheelhouse",
        "gpufleet_pip_index_url": "",
        "gpufleet_pip_find_links": [f"{url}/pypi-cuda/files/"],
    }


def inventory_hosts(
    nodes: list[Node], key_file: str, known_hosts_file: str, wheelhouse_url: str = ""
) -> dict[str, Any]:
    hosts = {}
    for n in nodes:
        hosts[n.name] = {
            "ansible_host": n.address,
            "gpufleet_cluster_address": n.address,
            "testbed_el_release": n.release.pretty_name,
            # Mirror URLs below use this, not a fact: they are read before facts exist
            # (python_bootstrap runs with gather_facts off).
            "testbed_el_major": n.release.major,
            **(hgx_host_vars(n.hgx) if n.hgx else {}),
            **({"testbed_gpu": True} if n.gpu else {}),
            **(
                wheelhouse_host_vars(wheelhouse_url)
                if wheelhouse_url and n is nodes[-1] and len(nodes) > 1
                else {}
            ),
        }
    return {
        "all": {
            "children": {"gpu_nodes": {"hosts": hosts}},
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": key_file,
                "ansible_ssh_common_args": (
                    f"-o UserKnownHostsFile={known_hosts_file} -o StrictHostKeyChecking=yes "
                    "-o IdentitiesOnly=yes"
                ),
                "ansible_python_interpreter": "/usr/bin/python3.11",
            },
        }
    }


def inventory_group_vars(m: MirrorInfo) -> dict[str, Any]:
    return {
        # -- the nodes: no GPU, CPU verification ------------------------------------
        "gpufleet_allow_no_gpu": True,
        "gpufleet_require_gpu": False,
        "gpufleet_cluster_cidr": m.cidr,
        # image-baking: the driver/toolkit stand-ins get installed; torch is the CPU build
        # (labelled +cpu in the wheelhouse, as on the PyTorch index), or with
        # TORCH_WHEELS=cuda PyPI's real cu130 build from a PyPI-layout index (auto: pypi)
        "gpufleet_cuda_variant": "cu130",
        **(
            {"torch_env_wheel_variant": "cpu", "gpufleet_torch_source": "pytorch-index"}
            if m.torch_wheels == "cpu"
            else {}
        ),
        "torch_env_manager": "venv",
        "torch_env_python": "/usr/bin/python3.11",
        # -- mirrors (all served by the testbed on the bridge address) -------------
        "gpufleet_cuda_repo_baseurl": f"{m.url}/cuda",
        "gpufleet_cuda_repo_gpgkey_url": "",  # per EL major, see below
        "gpufleet_cuda_repo_gpgkey_fingerprint": m.fingerprint,
        "gpufleet_epel_baseurl": f"{m.url}/epel/{{{{ testbed_el_major }}}}",
        "gpufleet_epel_gpgkey_url": f"{m.url}/keys/RPM-GPG-KEY-gpufleet-testbed",
        "gpufleet_epel_gpgkey_fingerprint": m.fingerprint,
        "gpufleet_base_repo_baseurl": f"{m.url}/base/{{{{ testbed_el_major }}}}",
        "gpufleet_base_repo_gpgkey_url": f"{m.url}/keys/RPM-GPG-KEY-gpufleet-testbed",
        "gpufleet_base_repo_gpgkey_fingerprint": m.fingerprint,
        "gpufleet_pip_index_url": (
            f"{m.url}/pypi/simple/" if m.torch_wheels == "cpu" else f"{m.url}/pypi-cuda/simple/"
        ),
        "gpufleet_pip_trusted_hosts": [m.bridge_address],
        "nvidia_driver_manage_crb": False,
        # The nodes are Debian root filesystems without SELinux (docs/testbed.md); on a
        # real EL node gpufleet requires enforcing and never changes it.
        "cluster_network_require_selinux_enforcing": False,
        # -- Slurm, when the testbed runs it (testbed-up --slurm): gpufleet's health check
        # as slurmd's HealthCheckProgram, slurm.conf edited by the role as the site asks
        **(
            {
                "gpufleet_slurm_health": True,
                "slurm_health_edit_slurm_conf": True,
                "slurm_health_interval": 15,
            }
            if m.slurm
            else {}
        ),
        # -- the site's monitoring, when the testbed runs it (testbed-up --monitor): the
        # health timer writes into the textfile directory of Debian's node_exporter, every
        # 15 s (docs/monitoring.md)
        **(
            {
                "gpufleet_health_timer": True,
                "gpufleet_health_textfile_dir": NODE_TEXTFILE_DIR,
                "health_timer_interval": "15s",
            }
            if m.monitor
            else {}
        ),
    }


GROUP_VARS_HEADER = """\
# yamllint disable-file
---
# Written by `make testbed-up` (testbed/tbctl): the variables that point gpufleet's roles at
# the simulated cluster and its local mirrors. Regenerated on every testbed-up; edit
# testbed/tbctl/render.py (inventory_group_vars) instead of this file.
#
# Mirrors: {url}/ (python http.server on the testbed bridge, plain HTTP)
#   cuda/rhel{{8,9,10}}/x86_64/   NVIDIA-layout repo (+ nvidia-driver module streams on 8/9)
#   epel/{{8,9,10}}/              dkms, epel-release
#   base/{{8,9,10}}/              kernel-devel(-matched), kernel-headers, gcc-c++, markers
#   pypi/simple/                PEP 503 index: torch 2.13.0 CPU, deps, gpufleet wheel
#   pypi-cuda/simple/, files/   TORCH_WHEELS=cuda: PyPI's CUDA build (PyPI layout), find-links page
# Every RPM and every repomd.xml is signed with the testbed key
#   {fpr}
# conda channels are not reachable here: the testbed uses torch_env_manager: venv.
"""


def group_vars_text(m: MirrorInfo) -> str:
    data = inventory_group_vars(m)
    data["gpufleet_cuda_repo_gpgkey_url"] = (
        f"{m.url}/cuda/rhel{{{{ testbed_el_major }}}}/x86_64/{m.cuda_key_file}"
    )
    return GROUP_VARS_HEADER.format(url=m.url, fpr=m.fingerprint) + yaml.safe_dump(
        data, sort_keys=False, default_flow_style=False, width=72
    )


def hosts_text(
    nodes: list[Node], key_file: str, known_hosts_file: str, wheelhouse_url: str = ""
) -> str:
    head = (
        "# yamllint disable-file\n---\n"
        "# Written by `make testbed-up`: the simulated EL cluster (one netns per node).\n"
    )
    body = yaml.safe_dump(
        inventory_hosts(nodes, key_file, known_hosts_file, wheelhouse_url),
        sort_keys=False,
        width=72,
    )
    return head + body
