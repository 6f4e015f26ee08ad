"""The shell entry points fail with one clear line when a prerequisite is missing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def run_without_go(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RINGLEADER_CACHE": str(tmp_path / "cache")}
    assert not any(Path(p, "go").exists() for p in env["PATH"].split(os.pathsep)), "test needs a PATH without go"
    return subprocess.run(
        ["bash", str(REPO / "devcluster" / script)], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_build_without_go_says_what_to_install(tmp_path: Path) -> None:
    res = run_without_go("build-binaries.sh", tmp_path)
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "no Go toolchain" in lines[0] and "1.24" in lines[0]
    assert not any((tmp_path / "cache").glob("kubernetes-*"))


def test_system_check_without_go_says_so(tmp_path: Path) -> None:
    res = run_without_go("check-system.sh", tmp_path)
    assert res.returncode == 1
    assert "Go" in res.stderr.strip().splitlines()[-1]
