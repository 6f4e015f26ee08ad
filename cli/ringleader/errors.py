"""The CLI's and the SDK's errors: each carries the one line a person reads (which field, file or object)."""

from __future__ import annotations


class RingleaderError(Exception):
    """Bad input or an answer from the cluster that stops the command: `str(e)` is one line saying what and where.
    `exit_code` is the CLI's exit status for it (docs/cli.md)."""

    exit_code = 3


class UsageError(RingleaderError):
    """The command's own input is wrong: a missing script, a bad option value."""

    exit_code = 2


class NotFound(RingleaderError):
    """No TrainingJob of that name in the namespace."""


class NoTrainingJobApi(RingleaderError):
    """The cluster does not serve ringleader.dev/v1alpha1 trainingjobs (the CRD is not installed)."""


class InvalidSpec(RingleaderError):
    """The API server refused the object; the message names the field."""

    exit_code = 2


class WaitTimeout(RingleaderError):
    """The job did not end within the time given."""

    exit_code = 124
