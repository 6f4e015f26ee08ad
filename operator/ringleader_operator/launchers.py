"""torchrun's side of the environment contract, pure (docs/env-contract.md).

Kubeflow's operators start a worker as `torchrun train.py` with no options and write torchrun's options as
`PET_*` variables, which torchrun's argument parser reads as its defaults. Without them torchrun forms a world
of one node on 127.0.0.1 in every pod, overrides the operator's RANK and WORLD_SIZE, and N independent trainings
each believe they are the whole job. `torchrun_env` writes the variables: one node per worker pod, the pod's
index as its node rank, worker 0's stable name as the master.

`split_world` reads a worker container's command and args the way torchrun's parser would and names an option
that contradicts the contract (`--standalone`, an `--nnodes` range without the job's pod count, a fixed
`--node-rank`, a loopback master or rendezvous endpoint); the same for `PET_*` variables the pod template sets
itself. What it cannot see (a launcher inside a script file, options computed at run time) is listed in the docs.
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, NoReturn

# torchrun's options and whether each takes a value (torch.distributed.run.get_args_parser, torch 2.15); a unit
# test holds this table to torch's own parser. The first spelling is the option's name in messages.
OPTIONS: dict[tuple[str, ...], bool] = {
    ("-h", "--help"): False,
    ("--nnodes",): True,
    ("--nproc-per-node", "--nproc_per_node"): True,
    ("--rdzv-backend", "--rdzv_backend"): True,
    ("--rdzv-endpoint", "--rdzv_endpoint"): True,
    ("--rdzv-id", "--rdzv_id"): True,
    ("--rdzv-conf", "--rdzv_conf"): True,
    ("--standalone",): False,
    ("--max-restarts", "--max_restarts"): True,
    ("--monitor-interval", "--monitor_interval"): True,
    ("--start-method", "--start_method"): True,
    ("--event-log-handler", "--event_log_handler"): True,
    ("--role",): True,
    ("-m", "--module"): False,
    ("--no-python", "--no_python"): False,
    ("--run-path", "--run_path"): False,
    ("--log-dir", "--log_dir"): True,
    ("-r", "--redirects"): True,
    ("-t", "--tee"): True,
    ("--log-line-prefix-template", "--log_line_prefix_template"): True,
    ("--local-ranks-filter", "--local_ranks_filter"): True,
    ("--duplicate-stdout-filters", "--duplicate_stdout_filters"): True,
    ("--duplicate-stderr-filters", "--duplicate_stderr_filters"): True,
    ("--node-rank", "--node_rank"): True,
    ("--master-addr", "--master_addr"): True,
    ("--master-port", "--master_port"): True,
    ("--local-addr", "--local_addr"): True,
    ("--logs-specs", "--logs_specs"): True,
    ("--numa-binding", "--numa_binding"): True,
    ("--signals-to-handle", "--signals_to_handle"): True,
    ("--shutdown-timeout", "--shutdown_timeout"): True,
    ("--virtual-local-rank", "--virtual_local_rank"): False,
    ("--print-completion", "--print_completion"): True,
}
# torch.distributed.launch (deprecated) parses the same options and one more flag.
LAUNCH_OPTIONS: dict[tuple[str, ...], bool] = {**OPTIONS, ("--use-env", "--use_env"): False}
TORCHRUN_MODULES = {"torch.distributed.run": OPTIONS, "torch.distributed.launch": LAUNCH_OPTIONS}
SHELLS = {"sh", "bash", "dash", "ash", "zsh", "ksh"}
# Python's own options that take the next argument as their value.
PYTHON_VALUE_OPTIONS = {"-X", "-W"}
# What a shell may put in front of the command it runs.
PREFIXES = {"exec", "env", "time", "nohup", "command"}


RDZV_PORT = 29400  # torch's default port of the c10d rendezvous store (on worker 0)


@dataclass(frozen=True)
class C10d:
    """torchrun's elastic rendezvous for a job (spec.torchrun.rendezvous c10d): between `low` and `high` pods, the
    rendezvous `run_id` (the job's UID: a new job never meets an old one's agents), `max_restarts` per agent."""

    low: int
    high: int
    run_id: str
    max_restarts: int


def torchrun_env(
    workers: int, index: int, master_addr: str, master_port: int, procs: int = 1, c10d: C10d | None = None
) -> dict[str, str]:
    """The `PET_*` variables of worker `index` of `workers` pods: torchrun with no options forms the whole job,
    one node per pod, `procs` processes per node (spec.workers.procsPerPod; `--nproc-per-node` on the command
    line may raise it). Static: a rendezvous of exactly `workers` nodes at `master_addr`, node ranks by pod index.
    With `c10d`: torchrun's elastic rendezvous of `low:high` nodes whose store worker 0's agent hosts at
    `master_addr`:RDZV_PORT (said outright, `is_host`, rather than guessed from host names), node ranks as the
    rendezvous gives them."""
    if c10d is None:
        return {
            "PET_NNODES": str(workers),
            "PET_NPROC_PER_NODE": str(procs),
            "PET_NODE_RANK": str(index),
            "PET_MASTER_ADDR": master_addr,
            "PET_MASTER_PORT": str(master_port),
        }
    return {
        "PET_NNODES": f"{c10d.low}:{c10d.high}",
        "PET_NPROC_PER_NODE": str(procs),
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": f"{master_addr}:{RDZV_PORT}",
        "PET_RDZV_ID": c10d.run_id,
        "PET_RDZV_CONF": f"is_host={'true' if index == 0 else 'false'}",
        "PET_MAX_RESTARTS": str(c10d.max_restarts),
        # torch shares the rendezvous's TCP store with the workers by default, set up at the first round: when a
        # later round (after a lost pod) gives rank 0 to another node, the agents end up on different stores and
        # time out after 60 s in rank assignment. A store per round, built from the rendezvous, avoids it.
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }


TORCHRUN_ENV = frozenset(torchrun_env(1, 0, "", 0)) | frozenset(torchrun_env(1, 0, "", 0, c10d=C10d(1, 1, "", 0)))


@dataclass(frozen=True)
class Token:
    """One word of the command line and the pod field it came from (`command` or `args`)."""

    text: str
    field: str


class _Unparsable(Exception):
    """argparse gave up: the command cannot be read as torchrun would, so nothing is refused."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Unparsable(message)


@functools.cache
def _parser(launcher: str) -> _Parser:
    """A parser reading `launcher`'s options as torch's does (same spellings, abbreviations, positionals)."""
    parser = _Parser(add_help=False)
    for names, takes_value in TORCHRUN_MODULES[launcher].items():
        if takes_value:
            parser.add_argument(*names, dest=_dest(names), default=None)
        else:
            parser.add_argument(*names, dest=_dest(names), action="store_true")
    parser.add_argument("training_script", nargs="?")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return parser


def _dest(names: tuple[str, ...]) -> str:
    return names[-1].lstrip("-").replace("-", "_")


def _launcher(words: Sequence[str]) -> tuple[str, int] | None:
    """(launcher module, how many words start it) when `words` start torchrun, `python -m torch.distributed.run`
    or `python -m torch.distributed.launch`; None for any other program."""
    name = PurePosixPath(words[0]).name if words else ""
    if name == "torchrun":
        return "torch.distributed.run", 1
    if not name.startswith("python"):
        return None
    i = 1
    while i < len(words):
        word = words[i]
        if word == "-m":
            module = words[i + 1] if i + 1 < len(words) else ""
            return (module, i + 2) if module in TORCHRUN_MODULES else None
        if not word.startswith("-"):
            return None  # python runs a script: not torchrun
        i += 2 if word in PYTHON_VALUE_OPTIONS else 1
    return None


def _simple_commands(tokens: Sequence[Token]) -> Iterable[list[Token]]:
    """The command as exec'd, and for `sh -c '...'` each simple command of the shell script."""
    words = [t.text for t in tokens]
    yield list(tokens)
    if not words or PurePosixPath(words[0]).name not in SHELLS:
        return
    for i, word in enumerate(words[1:], start=1):
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            if i + 1 >= len(words):
                return
            field = tokens[i + 1].field
            for line in words[i + 1].splitlines():
                try:
                    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
                    lexer.whitespace_split = True
                    parts = list(lexer)
                except ValueError:
                    continue
                command: list[Token] = []
                for part in [*parts, ";"]:
                    if part and set(part) <= set(";&|()"):
                        yield _strip_prefixes(command)
                        command = []
                    else:
                        command.append(Token(part, field))
            return


def _strip_prefixes(command: list[Token]) -> list[Token]:
    """`exec torchrun ...`, `FOO=1 torchrun ...`: the program the shell runs, with its words."""
    i = 0
    while i < len(command) and (command[i].text in PREFIXES or _is_assignment(command[i].text)):
        i += 1
    return command[i:]


def _is_assignment(word: str) -> bool:
    name, sep, _ = word.partition("=")
    return bool(sep) and name.isidentifier()


def _loopback(endpoint: str) -> bool:
    """Whether `host[:port]` names this pod itself (localhost, 127.0.0.0/8, ::1, 0.0.0.0)."""
    host = endpoint.strip()
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def _node_range(value: str) -> tuple[int, int] | None:
    """`--nnodes 4` or `2:8` as (min, max); None where the value is not literal (e.g. `$(N)`)."""
    low, sep, high = value.partition(":")
    try:
        return (int(low), int(high)) if sep else (int(low), int(low))
    except ValueError:
        return None


def contradiction(option: str, value: str | bool, worlds: range) -> str | None:
    """Why torchrun's `option` (its first spelling, e.g. `--nnodes`) set to `value` splits a job whose worker pod
    count may be any of `worlds` (one number unless the job is elastic), or None when it does not."""
    pods = f"{worlds.start}" if len(worlds) == 1 else f"{worlds.start} to {worlds.stop - 1}"
    if option == "--standalone" and value:
        return f"forms a world of one node in each of the job's {pods} worker pods"
    nodes = _node_range(value) if option == "--nnodes" and isinstance(value, str) else None
    if nodes is not None and (nodes[0] > worlds.start or nodes[1] < worlds.stop - 1):
        return f"contradicts the job's {pods} worker pods (one node per pod)"
    if option == "--node-rank" and isinstance(value, str) and value.strip().isdigit():
        return "gives every worker pod the same node rank"
    if option in ("--master-addr", "--rdzv-endpoint") and isinstance(value, str) and _loopback(value):
        return "points each worker pod at itself, not at worker 0"
    return None


@dataclass(frozen=True)
class Split:
    """An option or variable that splits the world: where it is and why."""

    where: str
    option: str
    value: str | bool
    why: str

    def __str__(self) -> str:
        shown = self.option if self.value is True else f"{self.option} {self.value}"
        return (
            f"{self.where}: torchrun's {shown} {self.why}; remove it: the operator sets torchrun's PET_* variables "
            "so that `torchrun script.py` forms the whole job (docs/env-contract.md)"
        )


def _command_splits(tokens: Sequence[Token], worlds: range, where: str) -> Iterable[Split]:
    for command in _simple_commands(tokens):
        words = [t.text for t in command]
        if (launcher := _launcher(words)) is None:
            continue
        module, start = launcher
        try:
            parsed = vars(_parser(module).parse_known_args(words[start:])[0])
        except _Unparsable:
            continue
        for names in TORCHRUN_MODULES[module]:
            value = parsed.get(_dest(names))
            if value is None or value is False or (why := contradiction(names[0], value, worlds)) is None:
                continue
            field = next((t.field for t in command[start:] if _spells(t.text, names)), command[0].field)
            yield Split(f"{where}.{field}", names[0], value, why)


def _spells(word: str, names: tuple[str, ...]) -> bool:
    """Whether `word` is one of the option's spellings, whole or abbreviated (`--stand`), with or without `=`."""
    given = word.split("=", maxsplit=1)[0]
    return given.startswith("-") and any(n.startswith(given) for n in names)


def _env_splits(env: Sequence[Mapping[str, Any]], worlds: range, where: str) -> Iterable[Split]:
    """PET_* variables the template sets itself (they win over the operator's)."""
    for i, var in enumerate(env):
        name, value = str(var.get("name", "")), var.get("value")
        if not name.startswith("PET_") or not isinstance(value, str):
            continue
        option = "--" + name.removeprefix("PET_").lower().replace("_", "-")
        flag: str | bool = value.strip().lower() in ("1", "true", "yes", "on") if option == "--standalone" else value
        if (why := contradiction(option, flag, worlds)) is not None:
            yield Split(f"{where}.env[{i}] {name}", option, flag, why)


def split_world(container: Mapping[str, Any], worlds: range, where: str) -> Split | None:
    """The first torchrun option or PET_* variable of a worker `container` that contradicts the contract for a
    job whose worker pod count may be any of `worlds`; None when the job has only ever one worker pod or nothing
    contradicts it. `where` names the container (`spec.workers.template.spec.containers[0]`)."""
    if worlds.stop - 1 <= 1:
        return None
    tokens = [Token(str(w), "command") for w in container.get("command") or []]
    tokens += [Token(str(w), "args") for w in container.get("args") or []]
    splits = [*_env_splits(container.get("env") or [], worlds, where), *_command_splits(tokens, worlds, where)]
    return splits[0] if splits else None
