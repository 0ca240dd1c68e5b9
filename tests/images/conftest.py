"""The images built for real: podman with runc, every store in a temporary directory.

This machine has no Docker daemon and no registry, so the images are built from Debian's
packages alone: a bookworm base made with debootstrap (Debian's Python 3.11), a uv image
holding the uv that PyPI ships at the Dockerfile's pinned version, then the four services
from the project's Dockerfile with ``--build-arg`` for both bases. The base images are for
these tests only and are never pushed: the base carries this machine's CA bundle so that uv
can reach PyPI from inside a build.

Run by ``make test-images`` (marker ``images``), never by ``make test``. Needs root (podman
rootful, debootstrap); ``scripts/install-image-tools.sh`` installs the tools.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "images"
CHART = ROOT / "charts" / "coffer"
DOCKERFILE = ROOT / "Dockerfile"
SERVICES = ("auth", "metadata", "blob", "edge")

SUITE = "bookworm"
BASE_PACKAGES = ("python3.11", "libmagic1")  # libmagic1: blob's media type detection
# Bump when base_rootfs() changes what goes into the tarball: it is part of the cache key.
BASE_RECIPE = 1
BASE_IMAGE = f"localhost/coffer-test-python:3.11-{SUITE}"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")

# crun 1.8 (bookworm's default runtime) refuses this kernel's hybrid cgroup layout; runc
# works. podman's default ulimits are refused here (setrlimit: operation not permitted).
# Host networking only: a bridge network would make podman change the host's firewall
# and ip_forward, which these tests must leave alone.
CONTAINERS_CONF = """\
[containers]
netns = "host"
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""

# The four images, their build layers and the builds' uv cache took 1.6 GB.
TMPFS_SIZE = "6g"

# What the run took, printed at the end (docs/operations.md quotes these figures).
REPORT: dict[str, str] = {}


def dockerfile_arg(name: str) -> str:
    """The default of a global ``ARG`` of the Dockerfile."""
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith(f"ARG {name}="):
            return line.split("=", 1)[1].strip()
    raise AssertionError(f"the Dockerfile has no ARG {name}=")


APP_VERSION = str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])
UV_VERSION = dockerfile_arg("UV_IMAGE").rsplit(":", 1)[1]
UV_IMAGE = f"localhost/coffer-test-uv:{UV_VERSION}"


def image_name(svc: str) -> str:
    """The name the chart's defaults give the service's image (repository:appVersion)."""
    return f"coffer-{svc}:{APP_VERSION}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if REPORT:
        terminalreporter.section("images: sizes and times")
        for what, figure in REPORT.items():
            terminalreporter.write_line(f"{what:<40} {figure}")


def timed(what: str, started: float) -> None:
    REPORT[what] = f"{time.monotonic() - started:6.1f} s"


def run(command: list[str], *, timeout: float = 600, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run a command; a failure fails the test with the end of its output."""
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, command))} exited {proc.returncode}\n"
            f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-5000:]}",
            pytrace=False,
        )
    return proc  # type: ignore[no-any-return]


def unmount_below(path: Path) -> None:
    """Unmount whatever is still mounted under ``path``, deepest first."""
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(f"{path}/")), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", mount], check=False)


@dataclass
class Podman:
    """podman whose stores, run dirs and temporary files all live under ``home``, a tmpfs.

    A tmpfs because this disk is mounted with ``discard``: deleting the ~10^5 files of the
    image layers took 53 to 69 s per image there (measured with one image, on a loaded
    machine), against nothing for an unmount. The stores peak at about 1.6 GB of memory.
    """

    home: Path
    driver: str = field(init=False)
    on_tmpfs: bool = field(init=False)

    def __post_init__(self) -> None:
        mount = [
            "mount",
            "-t",
            "tmpfs",
            "-o",
            f"size={TMPFS_SIZE},mode=0700",
            "coffer-podman",
            str(self.home),
        ]
        self.on_tmpfs = subprocess.run(mount, capture_output=True).returncode == 0
        for sub in ("root", "run", "libpod", "tmp", "logs", "env"):
            (self.home / sub).mkdir(parents=True)
        (self.home / "containers.conf").write_text(CONTAINERS_CONF)
        # The kernel's overlayfs as root; vfs (slow, but needs nothing) where there is none.
        filesystems = Path("/proc/filesystems").read_text().split()
        self.driver = "overlay" if "overlay" in filesystems else "vfs"

    @property
    def env(self) -> dict[str, str]:
        # TMPDIR also holds buildah's cache mounts (the uv cache of the builds).
        return {
            **os.environ,
            "CONTAINERS_CONF": str(self.home / "containers.conf"),
            "TMPDIR": str(self.home / "tmp"),
        }

    def command(self, *args: str) -> list[str]:
        return [
            "podman",
            "--root",
            str(self.home / "root"),
            "--runroot",
            str(self.home / "run"),
            "--tmpdir",
            str(self.home / "libpod"),
            "--storage-driver",
            self.driver,
            "--cgroup-manager",
            "cgroupfs",
            "--events-backend",
            "file",
            *args,
        ]

    def __call__(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return run(self.command(*args), timeout=timeout, env=self.env)

    def try_(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run podman and return whatever happened (for probes and clean-up)."""
        return subprocess.run(
            self.command(*args), capture_output=True, text=True, timeout=timeout, env=self.env
        )

    def close(self) -> None:
        """Remove every container, then the whole directory (images and all) at once."""
        started = time.monotonic()
        self.try_("rm", "--all", "--force", "--time", "0")
        unmount_below(self.home)
        if self.on_tmpfs:
            subprocess.run(["umount", str(self.home)], check=True)
        subprocess.run(["rm", "-rf", "--one-file-system", str(self.home)], check=False)
        assert not self.home.exists(), f"{self.home} could not be removed"
        timed("removal of the stores", started)


@pytest.fixture(scope="session")
def podman() -> Iterator[Podman]:
    if os.geteuid() != 0:
        pytest.fail("make test-images needs root (rootful podman, debootstrap)", pytrace=False)
    missing = [tool for tool in ("podman", "runc", "conmon", "debootstrap") if not shutil.which(tool)]
    if missing:
        pytest.fail(f"missing {missing}: run scripts/install-image-tools.sh (make test-images does)")
    engine = Podman(Path(tempfile.mkdtemp(prefix="coffer-podman-")))
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture(scope="session")
def report() -> dict[str, str]:
    """Figures to print at the end, by what they measure."""
    return REPORT


# ------------------------------------------------------------------------------ base images


def debian_mirror() -> str:
    """The Debian archive apt uses on this machine (deb822 or one-line sources)."""
    sources = Path("/etc/apt/sources.list.d")
    for path in sorted(sources.glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields = dict(
                line.split(":", 1) for line in stanza.splitlines() if ":" in line and not line.startswith("#")
            )
            fields = {k.strip(): v.split() for k, v in fields.items()}
            if "deb" in fields.get("Types", []) and SUITE in fields.get("Suites", []):
                return fields["URIs"][0]
    for path in [Path("/etc/apt/sources.list"), *sorted(sources.glob("*.list"))]:
        for line in path.read_text().splitlines() if path.exists() else []:
            words = re.sub(r"\[[^]]*\]", "", line).split()  # deb [options] URI suite components
            if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                return words[1]
    pytest.fail(f"no Debian {SUITE} archive among apt's sources for debootstrap", pytrace=False)


def base_rootfs(scratch: Path) -> Path:
    """A tarball of Debian ``SUITE`` (minbase) with Python 3.11, cached in .cache/images/
    under a key of what it holds: suite, packages, archive, this recipe and the CA bundle."""
    mirror = debian_mirror()
    recipe = json.dumps([SUITE, BASE_PACKAGES, mirror, BASE_RECIPE]).encode()
    key = hashlib.sha256(recipe + CA_BUNDLE.read_bytes()).hexdigest()[:16]
    tarball = CACHE / f"debian-{SUITE}-python3.11-{key}.tar"
    if tarball.exists():
        REPORT["debootstrap base"] = f"cached ({tarball.name})"
        return tarball
    CACHE.mkdir(parents=True, exist_ok=True)
    for stale in CACHE.glob(f"debian-{SUITE}-*.tar*"):
        stale.unlink()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="debootstrap-", dir=scratch) as work:
        rootfs = Path(work) / "rootfs"
        try:
            run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={','.join(BASE_PACKAGES)}",
                    SUITE,
                    str(rootfs),
                    mirror,
                ],
                timeout=900,
            )
        finally:
            unmount_below(rootfs)
        # What a slim image leaves out too: package caches and lists, docs, manuals, locales.
        for pattern in (
            "var/cache/apt/archives/*.deb",
            "var/lib/apt/lists/*",
            "usr/share/doc",
            "usr/share/man",
        ):
            for path in rootfs.glob(pattern):
                shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
        for path in ("usr/share/info", "usr/share/locale"):
            shutil.rmtree(rootfs / path, ignore_errors=True)
        (rootfs / "etc/ssl/certs").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CA_BUNDLE, rootfs / "etc/ssl/certs/ca-certificates.crt")
        partial = tarball.with_suffix(".tar.partial")
        run(
            [
                "tar",
                "--numeric-owner",
                "-C",
                str(rootfs),
                "--exclude=./dev/*",
                "--exclude=./proc/*",
                "--exclude=./sys/*",
                "-cf",
                str(partial),
                ".",
            ]
        )
        partial.rename(tarball)
    timed("debootstrap base (then cached)", started)
    return tarball


@pytest.fixture(scope="session")
def base_image(podman: Podman) -> str:
    tarball = base_rootfs(podman.home / "tmp")
    started = time.monotonic()
    podman(
        "import",
        "--change",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--change",
        "ENV LANG=C.UTF-8",
        "--change",
        f"ENV SSL_CERT_FILE=/etc/ssl/certs/{CA_BUNDLE.name}",
        "--change",
        'CMD ["python3.11"]',
        str(tarball),
        BASE_IMAGE,
    )
    timed("import of the base", started)
    return BASE_IMAGE


def uv_command() -> list[str]:
    found = shutil.which("uv")
    return [found] if found else [sys.executable, "-m", "uv"]


@pytest.fixture(scope="session")
def uv_image(podman: Podman) -> str:
    """/uv and /uvx, like the registry's uv image, from the uv wheel on PyPI."""
    started = time.monotonic()
    wheel = podman.home / "uv-wheel"
    run(
        [
            *uv_command(),
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--python",
            sys.executable,
            "--target",
            str(wheel),
            f"uv=={UV_VERSION}",
        ],
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
    )
    run(
        [
            "tar",
            "--owner=0",
            "--group=0",
            "-C",
            str(wheel / "bin"),
            "-cf",
            str(podman.home / "uv.tar"),
            "uv",
            "uvx",
        ]
    )
    podman("import", str(podman.home / "uv.tar"), UV_IMAGE)
    timed(f"uv {UV_VERSION} image from PyPI", started)
    return UV_IMAGE


@pytest.fixture(scope="session")
def images(podman: Podman, base_image: str, uv_image: str) -> dict[str, str]:
    """The four service images, built from the Dockerfile and tagged as the chart names them."""
    built: dict[str, str] = {}
    for svc in SERVICES:
        started = time.monotonic()
        log = podman.home / "logs" / f"build-{svc}.log"
        proc = subprocess.run(
            podman.command(
                "build",
                "--pull=never",
                "--network=host",
                "--file",
                str(DOCKERFILE),
                "--build-arg",
                f"SERVICE={svc}",
                "--build-arg",
                f"PYTHON_IMAGE={base_image}",
                "--build-arg",
                f"UV_IMAGE={uv_image}",
                "--tag",
                image_name(svc),
                str(ROOT),
            ),
            env=podman.env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            timeout=600,
        )
        if proc.returncode != 0:
            pytest.fail(f"building coffer-{svc} failed:\n{log.read_text()[-6000:]}", pytrace=False)
        timed(f"build coffer-{svc}", started)
        size = int(podman("image", "inspect", "--format", "{{.Size}}", image_name(svc)).stdout)
        REPORT[f"size coffer-{svc}"] = f"{size / 1e6:6.0f} MB"
        built[svc] = image_name(svc)
    size = int(podman("image", "inspect", "--format", "{{.Size}}", base_image).stdout)
    REPORT["size of the base (Debian + Python 3.11)"] = f"{size / 1e6:6.0f} MB"
    if podman.on_tmpfs:  # the tmpfs holds nothing else
        REPORT["stores after the builds (tmpfs)"] = f"{shutil.disk_usage(podman.home).used / 1e6:6.0f} MB"
    return built
