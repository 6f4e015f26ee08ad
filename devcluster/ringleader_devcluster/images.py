"""Ringleader's images without a Docker engine: a Python base image made locally with debootstrap, and the
project's own Dockerfiles built on it with buildah, rebuilt only when their inputs change: pushed to the dev
cluster's registry, which the real node pulls from (`publish`), or kept as OCI archives in the cache (`build`,
for `docker load` or `kind load image-archive`; the node imports its small from-scratch images this way).

    python -m ringleader_devcluster images [--push] [operator] [trainer]   # `make images` without Docker

The base, `localhost/ringleader/python:3.11-bookworm`, stands in for python:3.11-slim-bookworm (which this
machine cannot pull): Debian bookworm's minimal system with python3 and its venv module, `python` as python3.
It trusts this machine's CA bundle (pip inside a build goes through the same TLS proxy as pip here does).
The Dockerfiles take it through their BASE_IMAGE build argument and build unchanged otherwise.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import registry, wheels
from .buildlog import BuildLog
from .layout import REPO_ROOT, Layout
from .tools import RealNodeError, remove_empty_dirs, run, run_lines

BASE_IMAGE = "localhost/ringleader/python:3.11-bookworm"
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# buildah makes these at every start; removed when empty after each build, as they were before it.
BUILDAH_RUN_DIRS = (Path("/run/containers/networks"), Path("/run/containers"))
WORKING = "{container}"  # stands for buildah's working container in a build step
# Left out of the base: package caches and lists, documentation, translations.
STRIP = ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info")


@dataclass(frozen=True)
class Image:
    """A Dockerfile of the repository and the files its build reads (what decides a rebuild); `wheels`: its build
    installs the trainer's wheels from the cache's folder of them (wheels.py), mounted at WHEELS_MOUNT."""

    name: str
    dockerfile: str
    inputs: tuple[str, ...]
    wheels: bool = False


OPERATOR = Image("localhost/ringleader/operator:dev", "Dockerfile", ("api", "operator"))
TRAINER = Image(
    "localhost/ringleader/trainer:dev",
    "trainer-image/Dockerfile",
    ("requirements/trainer.txt", "trainer-image/ringleader_trainer", "examples"),
    wheels=True,
)
WHEELS_MOUNT = "/wheels"  # where a build sees the wheels (the Dockerfile's WHEELS build argument)

IMAGES = {"operator": OPERATOR, "trainer": TRAINER}


def say(msg: str, t0: float | None = None) -> None:
    suffix = f" ({time.monotonic() - t0:.1f}s)" if t0 is not None else ""
    print(f"[images] {msg}{suffix}", flush=True)


def _buildah(layout: Layout) -> list[str]:
    return ["buildah", "--root", str(layout.cache / "buildah" / "root"), "--runroot", str(layout.state / "buildah")]


def _keyed(folder: Path, name: str, key: str, suffix: str = "") -> Path:
    """Where the build of image `name` from inputs `key` is recorded in `folder` (an archive, a push marker)."""
    return folder / f"{name.rsplit('/', 1)[-1].replace(':', '-')}-{key[:12]}{suffix}"


def _replace_earlier(path: Path, made: Callable[[], object]) -> None:
    """Record a new build at `path` (`made` creates it) and drop the earlier builds of the same image beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in path.parent.glob(path.name.rsplit("-", 1)[0] + "-*" + path.suffix):
        old.unlink()
    made()


def _archive(layout: Layout, name: str, key: str) -> Path:
    return _keyed(layout.cache / "images", name, key, ".tar")


def _save(layout: Layout, name: str, archive: Path) -> None:
    """Push image `name` from buildah's storage into `archive` (written aside, then moved into place)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    run([*_buildah(layout), "push", "--quiet", name, f"oci-archive:{partial}:{name}"], f"buildah push {name}", 1800)
    _replace_earlier(archive, lambda: partial.rename(archive))


def scratch_archive(layout: Layout, name: str, steps: list[list[str]], key: str = "") -> Path:
    """An OCI archive of a from-scratch image (kept in the cache, made once, named by `key`, else by its steps):
    each step is a buildah command whose WORKING argument stands for the working container."""
    archive = _archive(layout, name, key or hashlib.sha256(repr(steps).encode()).hexdigest())
    if archive.exists():
        return archive
    buildah = _buildah(layout)
    working = run([*buildah, "from", "scratch"], "buildah from scratch").strip()
    try:
        for step in steps:
            run([*buildah, *(working if a == WORKING else a for a in step)], f"buildah {step[0]} for {name}", 600)
        run([*buildah, "commit", "--quiet", working, name], f"buildah commit {name}", 600)
    finally:
        subprocess.run([*buildah, "rm", working], capture_output=True, check=False, timeout=60)
        remove_empty_dirs(BUILDAH_RUN_DIRS)
    _save(layout, name, archive)
    return archive


def mirror() -> str:
    """The Debian mirror apt uses on this machine (debootstrap fetches the same way)."""
    for sources in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    return DEFAULT_MIRROR


def base_archive(layout: Layout) -> Path:
    """The base image's archive, made once (about a minute: debootstrap, then packed with buildah)."""
    key = hashlib.sha256(f"{SUITE} {BASE_PACKAGES} {STRIP}".encode()).hexdigest()
    archive = _archive(layout, BASE_IMAGE, key)
    if archive.exists():
        return archive
    if shutil.which("debootstrap") is None:
        raise RealNodeError("debootstrap is missing: apt-get install debootstrap (make dev-cluster installs it)")
    t0 = time.monotonic()
    say(f"making the base image {BASE_IMAGE} with debootstrap ({SUITE}, {', '.join(BASE_PACKAGES)}; about a minute)")
    with tempfile.TemporaryDirectory(dir=layout.cache) as tmp:
        rootfs = Path(tmp) / "rootfs"
        run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(rootfs), mirror()],
            "debootstrap",
            timeout=900,
        )
        for path in STRIP:
            shutil.rmtree(rootfs / path, ignore_errors=True)
            (rootfs / path).mkdir(parents=True, exist_ok=True)
        if HOST_CA_BUNDLE.exists():  # this machine's trust, for pip inside builds (see the module docstring)
            shutil.copy2(HOST_CA_BUNDLE, rootfs / "etc/ssl/certs/ca-certificates.crt")
        (rootfs / "etc/pip.conf").write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
        layer = Path(tmp) / "rootfs.tar"
        run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(layer), "."], "tar of the base image", 300)
        steps = [
            ["add", WORKING, str(layer), "/"],
            ["config", "--env", "LANG=C.UTF-8", "--cmd", '["python3"]', WORKING],
        ]
        scratch_archive(layout, BASE_IMAGE, steps, key)  # named by the packages, not the temporary layer's path
    say(f"base image ready: {archive.stat().st_size / 2**20:.0f} MiB", t0)
    return archive


def _inputs_key(image: Image, base: Path, context: Path = REPO_ROOT) -> str:
    """A digest of everything the image is built from: its Dockerfile, the files it copies (as they are in the
    working tree of `context`), and the base image's archive name."""
    digest = hashlib.sha256(base.name.encode())
    for rel in (image.dockerfile, *image.inputs):
        root = context / rel
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for f in files:
            if "__pycache__" in f.parts:
                continue
            digest.update(str(f.relative_to(context)).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()


def _bud(layout: Layout, image: Image, context: Path) -> None:
    """Build the image from its Dockerfile on the base image into buildah's storage, showing each step as it
    starts; a failure is one line naming the step. buildah keeps the layers (`--layers`), so a change to code
    copied last rebuilds only the layers after it."""
    base = base_archive(layout)
    buildah = _buildah(layout)
    if subprocess.run(
        [*buildah, "inspect", "--type", "image", BASE_IMAGE], capture_output=True, check=False
    ).returncode:
        run([*buildah, "pull", "--quiet", f"oci-archive:{base}"], "buildah pull of the base image", 600)
    log = BuildLog(image.dockerfile)
    t0 = time.monotonic()

    def progress(line: str) -> None:
        if log.feed(line):
            say(f"{image.dockerfile} {line.strip()}", t0)

    # The wheels are mounted for the build's steps only: they are in no layer.
    wheel_args = (
        ["--volume", f"{wheels.download(layout)}:{WHEELS_MOUNT}:ro", "--build-arg", f"WHEELS={WHEELS_MOUNT}"]
        if image.wheels else []
    )  # fmt: skip
    try:
        code = run_lines(
            [*buildah, "bud", "--layers", "--force-rm", "--isolation", "chroot", "--network", "host", "--pull-never",
             "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", *wheel_args, "-f", image.dockerfile, "-t", image.name, "."],
            f"building {image.dockerfile}",
            progress,
            timeout=3600,  # the trainer's layers hold torch's CUDA wheels, about 5 GB
            cwd=context,
        )  # fmt: skip
    finally:
        remove_empty_dirs(BUILDAH_RUN_DIRS)
    if code != 0:
        raise RealNodeError(log.failure(code))


def build(layout: Layout, image: Image) -> Path:
    """The image's archive, built when its inputs changed (kept in the cache for `ctr images import`, `docker
    load` or `kind load image-archive`)."""
    archive = _archive(layout, image.name, _inputs_key(image, base_archive(layout)))
    if archive.exists():
        return archive
    t0 = time.monotonic()
    say(f"building {image.name} from {image.dockerfile} (buildah)")
    _bud(layout, image, REPO_ROOT)
    _save(layout, image.name, archive)
    say(f"{image.name} ready: {archive.stat().st_size / 2**20:.0f} MiB", t0)
    return archive


def publish(layout: Layout, image: Image, context: Path = REPO_ROOT) -> str:
    """Build the image when its inputs changed and push it to the dev cluster's registry, which already holds
    its unchanged layers; return the name pods use (pulled with `imagePullPolicy: Always`, so a node takes
    the newest push). `context` is the build's folder (the repository; a copy of it in the rebuild benchmark)."""
    key = _inputs_key(image, base_archive(layout), context)
    marker = _keyed(registry.storage(layout) / "pushed", image.name, key)
    if marker.exists():
        return image.name
    t0 = time.monotonic()
    first = (
        "" if marker.parent.exists() else " (a first build takes minutes: the trainer image installs torch's wheels)"
    )
    say(f"building {image.name} from {image.dockerfile} (buildah) and pushing it to the dev cluster's registry{first}")
    _bud(layout, image, context)
    # Uncompressed, as `kind load` hands a node its images: the registry is on this machine, so gzip would only
    # cost CPU twice (the push compressing the trainer's 5 GB, the node's pull inflating them).
    run([*_buildah(layout), "push", "--quiet", "--disable-compression", "--tls-verify=false", image.name,
         registry.reference(image.name)], f"buildah push {image.name}", 1800)  # fmt: skip
    _replace_earlier(marker, marker.touch)
    say(f"{image.name} pushed", t0)
    return image.name


def prepare(layout: Layout, image: Image) -> None:
    """Build the image into buildah's layer store, pushing it nowhere (`publish` then finds every layer built and
    only pushes)."""
    t0 = time.monotonic()
    say(f"building {image.name} from {image.dockerfile} (buildah)")
    _bud(layout, image, REPO_ROOT)
    say(f"{image.name} built", t0)


def main(argv: list[str] | None = None) -> int:
    """`python3 -m ringleader_devcluster.images [--push] NAME...`, with the standard library only (before the venv
    exists): `prepare` each image or, with --push, start the registry (its binary built first:
    build-binaries.sh --registry-only) and `publish` each, so that `make demo` pushes while the Go builds run."""
    args = sys.argv[1:] if argv is None else argv
    push = "--push" in args
    names = [a for a in args if a != "--push"]
    if unknown := set(names) - set(IMAGES):
        print(f"images: no image named {', '.join(sorted(unknown))}: one of {', '.join(IMAGES)}", file=sys.stderr)
        return 2
    layout = Layout.from_env()
    try:
        if push:
            registry.start(layout)
        for name in names:
            (publish if push else prepare)(layout, IMAGES[name])
    except (RealNodeError, subprocess.CalledProcessError) as e:
        print(f"images: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
