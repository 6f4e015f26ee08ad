"""An image is rebuilt exactly when something it is built from changes."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from ringleader_devcluster import images, realnode, registry
from ringleader_devcluster.layout import Layout
from ringleader_devcluster.tools import RealNodeError


def test_the_inputs_key_follows_the_dockerfile_and_the_copied_files(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "Dockerfile").write_text("FROM base\n")
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    image = images.Image("localhost/x:dev", "Dockerfile", ("pkg",))
    base = Path("python-abc.tar")
    key = images._inputs_key(image, base, tmp_path)
    (tmp_path / "pkg" / "__pycache__" / "a.pyc").write_bytes(b"\0")
    assert images._inputs_key(image, base, tmp_path) == key  # bytecode caches are not inputs
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    changed = images._inputs_key(image, base, tmp_path)
    assert changed != key
    (tmp_path / "Dockerfile").write_text("FROM base\nUSER 1\n")
    assert images._inputs_key(image, base, tmp_path) != changed
    assert images._inputs_key(image, Path("python-def.tar"), tmp_path) != images._inputs_key(image, base, tmp_path)


def test_images_named_localhost_are_pulled_from_the_registry_and_others_refused() -> None:
    assert (
        registry.reference("localhost/ringleader/trainer:dev") == f"docker://{registry.ADDRESS}/ringleader/trainer:dev"
    )
    with pytest.raises(RealNodeError, match=r"ghcr\.io/x/y:1"):
        registry.reference("ghcr.io/x/y:1")
    config = registry.config(Path("/cache/registry"))
    assert config["http"] == {"addr": registry.ADDRESS} and registry.ADDRESS.startswith("127.0.0.1:")
    mirror = tomllib.loads(realnode.containerd_config(realnode.Paths.of(Layout(Path("/c"), Path("/s")))))
    mirrors = mirror["plugins"]["io.containerd.grpc.v1.cri"]["registry"]["mirrors"]
    assert mirrors == {registry.MIRRORED_HOST: {"endpoint": [f"http://{registry.ADDRESS}"]}}
