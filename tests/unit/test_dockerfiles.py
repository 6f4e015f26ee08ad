"""The images' Dockerfiles keep what changes often in the last, small layers."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def instructions(dockerfile: Path) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    joined = dockerfile.read_text().replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_trainer_image_installs_its_dependencies_before_copying_its_code() -> None:
    """A one-line change to the trainer must not rebuild the 5 GB torch layer: the package's code is copied only
    after the last RUN, and the dependencies are installed from the requirements file alone."""
    steps = instructions(REPO / "trainer-image" / "Dockerfile")
    runs = [i for i, s in enumerate(steps) if s.startswith("RUN ")]
    code = [i for i, s in enumerate(steps) if s.startswith("COPY ") and "ringleader_trainer" in s]
    assert runs and code and max(runs) < min(code)
    install = next(i for i in runs if "pip install" in steps[i])
    assert "-r requirements/trainer.txt" in steps[install]
    copied_before = [s for s in steps[: max(runs)] if s.startswith("COPY ")]
    assert copied_before == ["COPY requirements/trainer.txt requirements/trainer.txt"]
