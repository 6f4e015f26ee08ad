"""The layer contracts in pyproject.toml ([tool.importlinter], run by `make lint`) catch a pure module that
imports the I/O layer: shown on a copy of the packages with one such import added."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "operator": "ringleader_operator",
    "api": "ringleader_api",
    "cli": "ringleader",
    "trainer-image": "ringleader_trainer",
    "devcluster": "ringleader_devcluster",
}
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(root / d) for d in PACKAGES)}
    command = [str(LINT_IMPORTS), "--no-cache"]
    return subprocess.run(command, check=False, cwd=root, env=env, capture_output=True, text=True, timeout=120)


def copy_packages(to: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", to / "pyproject.toml")
    for directory, package in PACKAGES.items():
        shutil.copytree(ROOT / directory / package, to / directory / package,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip


def test_the_contracts_hold_for_the_packages_as_they_are(tmp_path: Path) -> None:
    copy_packages(tmp_path)
    result = lint_imports(tmp_path)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


def test_a_policy_importing_the_kubernetes_layer_breaks_the_contract(tmp_path: Path) -> None:
    copy_packages(tmp_path)
    ttl = tmp_path / "operator" / "ringleader_operator" / "policies" / "ttl.py"
    ttl.write_text(ttl.read_text().replace("from ..conditions import", "from .. import kube\nfrom ..conditions import"))
    result = lint_imports(tmp_path)
    assert result.returncode == 1
    assert "The operator's decisions do no I/O BROKEN" in result.stdout
    assert "ringleader_operator.policies.ttl -> ringleader_operator.kube" in result.stdout
