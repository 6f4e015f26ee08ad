"""Sharded checkpoints: `torch.distributed.checkpoint` (DCP) files, read without running code from them.

Under strategy `sharded` each worker holds only its shard of the parameters (stages 2-3) and of the optimizer
state; every worker writes its shard into `<step directory>/shards/` (`__<rank>_0.distcp` and the coordinator's
`.metadata`, whose index says which bytes of which tensor each file holds). Any number of workers can read them
back: each reads the pieces of every tensor its own shard covers, so a job resumes at another world size.

DCP itself unpickles two things with the full pickle machinery, either of which runs code a crafted file
names: the `.metadata` index (`pickle.load`) and every non-tensor value (`torch.load(weights_only=False)`).
Here the index goes through an unpickler that builds only DCP's own metadata classes and a few plain torch
values, and non-tensor values through `torch.load(weights_only=True)`, as the tensors already are. A file that
asks for anything else is a CheckpointError naming it.
"""

from __future__ import annotations

import io
import pathlib
import pickle
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ringleader_trainer.checkpoints.store import CheckpointError
from ringleader_trainer.exitcodes import one_line

SHARDS_DIR = "shards"
METADATA_FILE = ".metadata"
_DCP_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem")
_TORCH_VALUES = (torch.dtype, torch.layout, torch.memory_format)
_PLAIN = {("torch", "Size"): torch.Size, ("collections", "OrderedDict"): OrderedDict,
          ("pathlib", "PosixPath"): pathlib.PosixPath, ("pathlib", "PurePosixPath"): pathlib.PurePosixPath}  # fmt: skip


class _MetadataUnpickler(pickle.Unpickler):
    """Builds DCP's metadata classes, torch.Size, dtypes, layouts and memory formats, and nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _PLAIN:
            return _PLAIN[module, name]
        if module == "torch.serialization" and name == "_get_layout":  # maps a layout's name to the layout
            return torch.serialization._get_layout
        if "." not in name:
            if module == "torch" and isinstance(value := getattr(torch, name, None), _TORCH_VALUES):
                return value
            if module in _DCP_MODULES:
                found = getattr(__import__(module, fromlist=[name]), name, None)
                if isinstance(found, type) and found.__module__ == module:  # a class defined there: no functions
                    return found
                if name == "_MEM_FORMAT_ENCODING" and found is not None:  # an enum of memory formats
                    return found
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a checkpoint's index")


def read_metadata(path: Path) -> Metadata:
    """The `.metadata` index of a DCP checkpoint directory, read with the restricted unpickler."""
    with (path / METADATA_FILE).open("rb") as f:
        metadata = _MetadataUnpickler(f).load()
    if not isinstance(metadata, Metadata):
        raise pickle.UnpicklingError(f"{path / METADATA_FILE} holds a {type(metadata).__name__}, not DCP metadata")
    return metadata


class _SafeReader(FileSystemReader):
    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        metadata = read_metadata(Path(self.path))
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id  # type: ignore[union-attr]  # as FileSystemReader does
        return metadata


class _SafePlanner(DefaultLoadPlanner):
    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        # Read it as weights only; what DCP then unpickles (fully) is our own re-serialization of those plain values.
        plain = io.BytesIO()
        torch.save(torch.load(value, weights_only=True), plain)
        plain.seek(0)
        super().load_bytes(read_item, plain)


def save(step_path: Path, state: dict[str, Any]) -> None:
    """Every worker writes its shard of `state` under `step_path` (a collective: every worker calls it, and it
    returns on each once the coordinator has written the index, so the step's shards are whole by then)."""
    dcp_save(state, checkpoint_id=step_path / SHARDS_DIR)


def load(step_path: Path, state: dict[str, Any]) -> None:
    """Fill `state` (this worker's tensors, as `save` was given them, at any world size) from the shards under
    `step_path` (a collective). CheckpointError, naming the directory, when they cannot be read safely."""
    path = step_path / SHARDS_DIR
    try:
        dcp_load(state, storage_reader=_SafeReader(path), planner=_SafePlanner())
    except (Exception, CheckpointException) as e:  # CheckpointException is a BaseException
        raise CheckpointError(f"sharded checkpoint {path} cannot be loaded: {one_line(_cause(e))}") from e


def _cause(exc: BaseException) -> BaseException:
    """What went wrong on some rank: DCP wraps each rank's failure (with its traceback) in one exception whose
    own text names only the ranks."""
    if isinstance(exc, CheckpointException) and exc.failures:
        failure = next(iter(exc.failures.values()))
        inner = failure[0] if isinstance(failure, tuple) else failure
        if isinstance(inner, BaseException):
            return inner
    return exc
