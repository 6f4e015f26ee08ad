"""Reading what `buildah bud` prints while it builds a Dockerfile: each step as it starts (progress for the
user), and, when the build fails, one line naming the Dockerfile, the step and why. Pure: fed line by line."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

STEP = re.compile(r"^STEP (\d+/\d+): (.*)$")
# buildah's own lines around a failed RUN: not the reason a user needs
BUILDAH = re.compile(r"^(subprocess exited with status \d+|--> \S+|COMMIT\b.*|Getting image source signatures)$")
FINAL = re.compile(r"^(Error: |error building at STEP)")
EXIT = re.compile(r"exit status (\d+)")
INSTRUCTION_WIDTH = 100


@dataclass
class BuildLog:
    """The build of `dockerfile` so far: the step running and the last line it printed."""

    dockerfile: str
    step: str = ""  # "3/12"
    instruction: str = ""  # "RUN python -m venv /opt/venv ..."
    last: str = ""  # the step's last line of output, buildah's own lines left out
    final: str = ""  # buildah's closing error line ("Error: building at STEP ...: exit status 1")

    def feed(self, line: str) -> bool:
        """Take one line of output; True when it starts a step (a line worth showing as progress)."""
        text = line.strip()
        started = STEP.match(text)
        if started:
            self.step, self.instruction, self.last = started[1], started[2], ""
            return True
        if FINAL.match(text):
            self.final = text
        elif text and not BUILDAH.match(text):
            self.last = text
        return False

    def failure(self, returncode: int) -> str:
        """One line for a build that ended with `returncode`: the Dockerfile, the step that failed with its
        exit status, and the step's last line of output (else buildah's error)."""
        reason = self.last or self.final or f"exit code {returncode}"
        if not self.step:  # it failed before its first step: the Dockerfile itself, the base image, storage
            return f"building {self.dockerfile} failed: {self.final or reason}"
        status = EXIT.search(self.final)
        code = f" (exit status {status[1]})" if status else ""
        instruction = textwrap.shorten(self.instruction, INSTRUCTION_WIDTH, placeholder=" ...", break_on_hyphens=False)
        return f"building {self.dockerfile} failed at STEP {self.step} `{instruction}`{code}: {reason}"
