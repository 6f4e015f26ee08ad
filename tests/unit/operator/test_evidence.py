"""What a failed rank's termination message says (evidence.read), pure, over messages as kubelets keep them: the
trainer's exit record, a script's traceback (under torchrun, its summary after it), and what a hostile pod
might write there."""

from __future__ import annotations

import json

import pytest
from ringleader_operator.evidence import EXCEPTION_CHARACTERS, MESSAGE_CHARACTERS, Said, read

TRACEBACK = """\
step 10 loss 0.41
Traceback (most recent call last):
  File "/app/train.py", line 40, in <module>
    main()
  File "/app/train.py", line 31, in main
    step(batch)
  File "/app/model.py", line 12, in step
    raise ValueError("bad shape (3, 4)")
ValueError: bad shape (3, 4)
"""
TORCHRUN_SUMMARY = """\
E1128 23:01:02.123000 1 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
"""
RECORD = {"event": "exit", "code": 1, "exception": "ValueError", "message": "bad shape",
          "frames": ["train.py:31 in main", "model.py:12 in step"]}  # fmt: skip


@pytest.mark.parametrize(
    ("output", "want"),
    [
        (TRACEBACK, Said("ValueError", "bad shape (3, 4)", ("train.py:40 in <module>", "train.py:31 in main",
                                                             "model.py:12 in step"))),
        # The trainer's record wins over the traceback printed before it.
        (TRACEBACK + json.dumps(RECORD) + "\n", Said("ValueError", "bad shape", ("train.py:31 in main",
                                                                                  "model.py:12 in step"), code=1)),
        ('ringleader-trainer: stopped: ...\n{"event": "exit", "code": 202, "savedStep": 540}\n',
         Said(saved_step=540, code=202)),
        # torchrun's own traceback comes last: its exception is the agent's (ChildFailedError), no message.
        (TRACEBACK + TORCHRUN_SUMMARY, Said("torch.distributed.elastic.multiprocessing.errors.ChildFailedError", "",
                                            ("torchrun:8 in <module>",))),
        ("no luck\n", Said()),
        ("", Said()),
        # Hostile or broken: a record of the wrong types, a step out of range, a bool for a number, a JSON list.
        ('{"event": "exit", "code": "1", "exception": 7, "savedStep": -1, "frames": "x"}\n', Said()),
        ('{"event": "exit", "code": true, "savedStep": 1e300}\n', Said()),
        ('["exit"]\n', Said()),
        ('{"event": "exit", "code": 1, "exception": "Bad\\u0000Name\\nSecond"}\n', Said("BadName Second", code=1)),
    ],
    ids=["traceback", "record", "stopped", "torchrun", "no-words", "empty", "wrong-types", "bool-and-float",
         "list", "control-characters"],
)  # fmt: skip
def test_read(output: str, want: Said) -> None:
    assert read(output) == want


def test_every_field_is_bounded() -> None:
    record = {"event": "exit", "code": 1, "exception": "E" * 500, "message": "m" * 1000, "frames": ["f" * 200] * 5}
    said = read(json.dumps(record))
    assert len(said.exception) == EXCEPTION_CHARACTERS and len(said.message) == MESSAGE_CHARACTERS
    assert len(said.frames) == 3 and all(len(f) == 160 for f in said.frames)
    assert read(json.dumps({**record, "message": "m" * 10_000})) == Said()  # a line no trainer writes
    huge = "x" * 10_000_000 + "\n" + TRACEBACK  # only the tail is looked at
    assert read(huge).exception == "ValueError"


def test_describe_names_the_error_and_where() -> None:
    assert Said("ValueError", "bad", ("a.py:1 in f", "b.py:2 in g")).describe() == "ValueError: bad (b.py:2 in g)"
    assert Said("KeyboardInterrupt").describe() == "KeyboardInterrupt"
    assert Said().describe() == ""
