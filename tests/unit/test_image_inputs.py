"""An image is rebuilt exactly when something it is built from changes."""

from __future__ import annotations

from pathlib import Path

import pytest
from ringleader_devcluster import images


def test_the_inputs_key_follows_the_dockerfile_and_the_copied_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(images, "REPO_ROOT", tmp_path)
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "Dockerfile").write_text("FROM base\n")
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    image = images.Image("localhost/x:dev", "Dockerfile", ("pkg",))
    base = Path("python-abc.tar")
    key = images._inputs_key(image, base)
    (tmp_path / "pkg" / "__pycache__" / "a.pyc").write_bytes(b"\0")
    assert images._inputs_key(image, base) == key  # bytecode caches are not inputs
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    changed = images._inputs_key(image, base)
    assert changed != key
    (tmp_path / "Dockerfile").write_text("FROM base\nUSER 1\n")
    assert images._inputs_key(image, base) != changed
    assert images._inputs_key(image, Path("python-def.tar")) != images._inputs_key(image, base)
