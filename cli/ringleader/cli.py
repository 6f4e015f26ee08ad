"""`ringleader` and `kubectl ringleader`: submit, watch, logs, describe, diagnose, list, delete, suspend, resume,
scale, convert. docs/cli.md shows each.

Exit status: 0 done (watch: the job Succeeded), 1 the job Failed, 2 bad input (a missing script, an invalid spec),
3 the cluster could not be used (no kubeconfig, no TrainingJob API, an unknown job), 124 a wait timed out,
130 interrupted. Every error is one line on stderr.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.text import Text
from ringleader_api import JobPhase, PSMode, RestartPolicy, Strategy, TrainingJob

from . import convert, logmerge, submission, views
from . import diagnose as diagnosis
from .errors import RingleaderError, UsageError
from .jobstate import JobState

if TYPE_CHECKING:
    from .client import Client

PROG = "ringleader"
RANK_STYLES = ("cyan", "green", "magenta", "blue", "yellow", "bright_cyan", "bright_green", "bright_magenta")
_DURATION = re.compile(r"^(\d+)([smhd])$")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Run and follow Ringleader TrainingJobs.")
    p.add_argument("-n", "--namespace", help="the namespace (default: the kubeconfig context's, else default)")
    p.add_argument("--kubeconfig", help="the kubeconfig file (default: KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", help="the kubeconfig context to use")
    p.add_argument("--request-timeout", type=float, default=30.0, metavar="SECONDS", help="per API request")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _submit_parser(sub)
    w = sub.add_parser("watch", help="follow a job's progress to its end; exits with its outcome")
    w.add_argument("name")
    w.add_argument("--timeout", type=_duration, help="give up after this long (30s, 10m, 2h)")

    _logs_parser(sub)
    for name, text in (("describe", "one screen: phase, progress, ranks, recent events"),
                       ("delete", "delete a job (its pods and script go with it)"),
                       ("suspend", "suspend a job (its ranks save and stop)"),
                       ("resume", "resume a suspended job from its checkpoint")):  # fmt: skip
        sub.add_parser(name, help=text).add_argument("name")
    d = sub.add_parser("diagnose", help="why a job failed or does not run, and what to do")
    d.add_argument("name", nargs="?")
    d.add_argument("--save-state", metavar="FILE", help="also write the job state read (JSON)")
    d.add_argument("--from-state", metavar="FILE", help="diagnose a state written by --save-state")
    sub.add_parser("list", help="the namespace's jobs")
    _scale_and_convert_parsers(sub)
    return p


def _submit_parser(sub: Any) -> None:
    s = sub.add_parser(
        "submit", help="run a Python script as a TrainingJob (script in a ConfigMap)",
        usage="%(prog)s SCRIPT [options] [-- SCRIPT_ARGS ...]",
    )  # fmt: skip
    s.add_argument("script", help="the training script (.py); started as `python -u SCRIPT ARGS` in every rank")
    s.add_argument("--workers", type=_positive, default=2, help="worker ranks (default 2)")
    s.add_argument("--strategy", choices=[x.value for x in Strategy], default=Strategy.ALLREDUCE.value)
    s.add_argument("--ps", type=_positive, dest="parameter_servers", help="parameter servers (parameter-server)")
    s.add_argument("--ps-mode", choices=[x.value for x in PSMode], default=PSMode.SYNCHRONOUS.value)
    s.add_argument("--gpus", type=_non_negative, default=0, help="GPUs per worker pod")
    s.add_argument(
        "--image", default=submission.DEFAULT_IMAGE, help=f"image with Python and torch ({submission.DEFAULT_IMAGE})"
    )
    s.add_argument("--name", help="the job's name (default: the script's name and a random suffix)")
    s.add_argument("--requirements", help="a requirements.txt pip installs in each pod before the script")
    s.add_argument("--cpu", help="CPU request per pod (e.g. 2, 500m)")
    s.add_argument("--memory", help="memory request and limit per pod (e.g. 4Gi)")
    s.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="an environment variable")
    s.add_argument("--restart-policy", choices=[x.value for x in RestartPolicy], default=RestartPolicy.ON_FAILURE.value)
    s.add_argument("--backoff-limit", type=_non_negative, help="restarts allowed across the job (default 3)")
    s.add_argument("--checkpoint-every", type=_positive, metavar="STEPS", help="checkpoint every STEPS (default 100 "
                   "with --checkpoint-claim); scripts on the trainer's API resume from them")  # fmt: skip
    s.add_argument("--checkpoint-claim", metavar="PVC", help="a PersistentVolumeClaim to keep checkpoints on")
    s.add_argument("--deadline", type=_duration, help="fail the job if it runs longer (30m, 12h)")
    s.add_argument("--priority-class", help="the pods' PriorityClass")
    s.add_argument("--node-selector", action="append", default=[], metavar="KEY=VALUE", help="a node label to require")
    s.add_argument("--toleration", action="append", default=[], metavar="KEY[=VALUE][:EFFECT]",
                   help="tolerate a taint (e.g. nvidia.com/gpu:NoSchedule)")  # fmt: skip
    s.add_argument("--dry-run", action="store_true", help="print the ConfigMap and TrainingJob as YAML; create nothing")
    s.add_argument("--watch", action="store_true", help="follow the job to its end (as `watch`)")


def _logs_parser(sub: Any) -> None:
    lg = sub.add_parser("logs", help="every rank's log lines merged by time")
    lg.add_argument("name")
    lg.add_argument("--rank", help="one rank: worker-0, worker-1, ..., ps-0")
    lg.add_argument("-f", "--follow", action="store_true", help="stream until the job ends, across restarts")
    lg.add_argument("--since", type=_duration, help="only lines newer than this (30s, 5m, 1h)")
    lg.add_argument("--tail", type=_non_negative, help="only each rank's last N lines")
    lg.add_argument("--json", action="store_true", help="the trainer's JSON lines as written")
    lg.add_argument("--max-ranks", type=_positive, default=logmerge.MAX_RANKS,
                    help=f"ranks read at most, the first ones ({logmerge.MAX_RANKS})")  # fmt: skip
    lg.add_argument("--timestamps", action="store_true", help="each line's time")


def _scale_and_convert_parsers(sub: Any) -> None:
    sc = sub.add_parser("scale", help="set an elastic job's worker count")
    sc.add_argument("name")
    sc.add_argument("workers", type=_positive)
    cv = sub.add_parser("convert", help="a Kubeflow PyTorchJob manifest as a TrainingJob (printed; nothing created)")
    cv.add_argument("file", help="the manifest (YAML, several documents allowed; - for standard input)")
    cv.add_argument("-o", "--output", metavar="FILE", help="write the result here instead of standard output")


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The options, and what follows the first `--` as the script's own arguments (`args.args`)."""
    argv = list(argv)
    script_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser().parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if script_args and args.command != "submit":
        parser().error("arguments after -- are the script's: only for submit")
    args.args = script_args
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    out, err = Console(highlight=False), Console(stderr=True, highlight=False)
    try:
        return COMMANDS[args.command](args, out)
    except RingleaderError as e:
        err.print(f"{PROG}: error: {e}", markup=False, soft_wrap=True)
        return e.exit_code
    except KeyboardInterrupt:
        return 130


def client_of(args: argparse.Namespace) -> Client:
    from .client import Client  # the Kubernetes client's import is heavy: not for --help, --dry-run, --from-state

    return Client(args.namespace, args.kubeconfig, args.context, args.request_timeout)


# --- commands ---------------------------------------------------------------------------------------------------


def cmd_submit(args: argparse.Namespace, out: Console) -> int:
    env = dict(_pair(e, "--env") for e in args.env)
    options: dict[str, Any] = {
        "args": args.args, "workers": args.workers, "strategy": args.strategy, "parameter_servers":
        args.parameter_servers, "ps_mode": args.ps_mode, "gpus": args.gpus, "image": args.image, "name": args.name,
        "requirements": args.requirements, "cpu": args.cpu, "memory": args.memory, "env": env,
        "restart_policy": args.restart_policy, "backoff_limit": args.backoff_limit,
        "checkpoint_every": args.checkpoint_every, "checkpoint_claim": args.checkpoint_claim,
        "deadline_seconds": args.deadline, "priority_class": args.priority_class,
        "node_selector": dict(_pair(n, "--node-selector") for n in args.node_selector),
        "tolerations": tuple(args.toleration),
    }  # fmt: skip
    if args.dry_run:  # the files are read, no cluster is asked
        sub = submission.from_files(args.script, args.namespace or "default", **options)
        configmap, job = submission.build(sub, submission.job_name(sub.script_name, sub.name))
        out.print(yaml.safe_dump_all([configmap, job], sort_keys=False), end="", markup=False, soft_wrap=True)
        return 0
    client = client_of(args)
    name = client.submit(args.script, **options)
    out.print(name, markup=False)
    if args.watch:
        return follow(client, name, out, None)
    return 0


def cmd_watch(args: argparse.Namespace, out: Console) -> int:
    return follow(client_of(args), args.name, out, args.timeout)


def follow(client: Client, name: str, out: Console, timeout: float | None) -> int:
    """Follow `name` to its end: a progress bar on a terminal, a line per change otherwise. 0 when it Succeeded."""
    if out.is_terminal:
        with Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[line]}"),
            console=out, transient=False,
        ) as bar:  # fmt: skip
            task = bar.add_task(name, total=None, line="waiting for the operator")
            phase = client.wait(name, timeout, on_change=lambda job: _draw(bar, task, job))
    else:
        phase = client.wait(name, timeout, on_change=lambda job: _line(out, views.status_line(job)))
    final = client.get(name)
    if out.is_terminal:
        out.print(Text(views.status_line(final), views.PHASE_STYLES.get(views.phase_of(final), "")))
    if phase == JobPhase.FAILED:
        out.print(f"why: ringleader diagnose {name}", markup=False)
        return 1
    return 0


def _line(out: Console, text: str) -> None:
    out.print(text, markup=False, soft_wrap=True)  # one line whatever its length: logs and pipes read it whole


def _draw(bar: Progress, task: TaskID, job: TrainingJob) -> None:
    p = job.status.progress
    total = p.total_steps if p is not None and p.total_steps else None
    bar.update(task, total=total, completed=p.step if p is not None else 0,
               line=f"{views.phase_of(job)} {views.progress_line(job)}")  # fmt: skip


def cmd_logs(args: argparse.Namespace, out: Console) -> int:
    client = client_of(args)
    styles: dict[str, str] = {}
    lines = client.logs(args.name, args.rank, args.follow, args.since, args.tail, args.max_ranks)
    for line in lines:
        style = styles.setdefault(line.rank, RANK_STYLES[len(styles) % len(RANK_STYLES)])
        out.print(log_text(line, style, args.json, args.timestamps), soft_wrap=True)
    return 0


def log_text(line: logmerge.LogLine, style: str, raw: bool, timestamps: bool) -> Text:
    """One merged line: `worker-1 | text`, a marker in bold; the trainer's JSON rendered unless `raw`."""
    stamp = f"{line.time.isoformat(timespec='milliseconds')} " if timestamps else ""
    if line.marker:
        return Text(f"{stamp}{line.text}", style=f"bold {style}")
    body = line.text if raw else logmerge.render(line.text)
    return Text.assemble(stamp, (f"{line.rank:>9} | ", style), body)


def cmd_describe(args: argparse.Namespace, out: Console) -> int:
    out.print(views.describe(client_of(args).state(args.name), datetime.now(UTC)))
    return 0


def cmd_diagnose(args: argparse.Namespace, out: Console) -> int:
    if args.from_state:
        state = JobState.load(_existing(args.from_state, "--from-state"))
    elif args.name:
        state = client_of(args).state(args.name)
    else:
        raise UsageError("diagnose needs a job's NAME (or --from-state FILE)")
    if args.save_state:
        state.save(Path(args.save_state))
    found = diagnosis.diagnose(state)
    out.print(found.text(), markup=False, soft_wrap=True)
    return 1 if any(f.severity == "error" for f in found.findings) else 0


def cmd_list(args: argparse.Namespace, out: Console) -> int:
    out.print(views.jobs_table(client_of(args).list(), datetime.now(UTC)))
    return 0


def _simple(verb: str, done: str) -> Callable[[argparse.Namespace, Console], int]:
    def run(args: argparse.Namespace, out: Console) -> int:
        getattr(client_of(args), verb)(args.name)
        out.print(f"trainingjob {args.name} {done}", markup=False)
        return 0

    return run


def cmd_scale(args: argparse.Namespace, out: Console) -> int:
    client_of(args).scale(args.name, args.workers)
    out.print(f"trainingjob {args.name} scaled to {args.workers} workers", markup=False)
    return 0


class _PlainDumper(yaml.SafeDumper):
    """Writes an object used twice (a template the input gave by a YAML alias) in full each time."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def cmd_convert(args: argparse.Namespace, out: Console) -> int:
    """Print (or write) the manifest with each PyTorchJob as a TrainingJob; each warning a line on stderr."""
    if args.file == "-":
        text, source = sys.stdin.read(), "standard input"
    else:
        path = Path(args.file)
        try:
            text, source = path.read_text(), str(path)
        except OSError as e:
            raise UsageError(f"{args.file}: {e.strerror or e}") from None
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise UsageError(f"{source}: not YAML{where}: {getattr(e, 'problem', None) or e}") from None
    converted = convert.convert_documents(documents)
    err = Console(stderr=True, highlight=False)
    for warning in converted.warnings:
        err.print(f"{PROG}: warning: {warning}", markup=False, soft_wrap=True)
    result = yaml.dump_all(converted.documents, Dumper=_PlainDumper, sort_keys=False)
    if args.output:
        Path(args.output).write_text(result)
    else:
        out.print(result, end="", markup=False, soft_wrap=True)
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace, Console], int]] = {
    "submit": cmd_submit, "watch": cmd_watch, "logs": cmd_logs, "describe": cmd_describe,
    "diagnose": cmd_diagnose, "list": cmd_list, "delete": _simple("delete", "deleted"),
    "suspend": _simple("suspend", "suspended"), "resume": _simple("resume", "resumed"), "scale": cmd_scale,
    "convert": cmd_convert,
}  # fmt: skip


# --- argument types -----------------------------------------------------------------------------------------------


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 1")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: not negative")
    return value


def _duration(text: str) -> int:
    """30s, 5m, 2h, 1d (or plain seconds) as seconds."""
    if text.isdigit():
        return int(text)
    m = _DURATION.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration like 30s, 5m, 2h")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def _pair(text: str, flag: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise UsageError(f"{flag} {text!r}: NAME=VALUE")
    return name, value


def _existing(path: str, flag: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{flag} {path}: no such file")
    return p


if __name__ == "__main__":
    sys.exit(main())
