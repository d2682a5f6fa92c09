"""Read back what the trackers wrote, with their own formats: TensorBoard's event reader and the
records of an offline Weights & Biases run.

An offline W&B run is a folder ``<dir>/wandb/offline-run-<time>-<id>/`` whose ``run-<id>.wandb``
file holds the run's records: a 7-byte header (``:W&B``, a 2-byte magic, a version byte), then
LevelDB-log framed chunks (4-byte checksum, 2-byte little-endian length, 1-byte type: 1 whole,
2 first, 3 middle, 4 last) in 32 KiB blocks, each record a ``wandb_internal_pb2.Record``
protobuf. wandb 0.31 ships no Python reader of its own (its reader moved to the Go core), so
:func:`wandb_records` parses that framing and decodes the records with wandb's protobuf classes.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

_BLOCK = 32768
_HEADER = 7


def wandb_record_blobs(path: str | Path) -> list[bytes]:
    """The record payloads of one ``.wandb`` file, in order."""
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    pos, chunks, out = _HEADER, [], []
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pos += 7
        if kind == 0 and n == 0:
            pos += left - 7
            continue
        chunks.append(data[pos:pos + n])
        pos += n
        if kind in (1, 4):
            out.append(b"".join(chunks))
            chunks = []
    return out


def wandb_records(path: str | Path, wait_s: float = 60.0) -> list[Any]:
    """The decoded records (``wandb.proto.wandb_internal_pb2.Record``) of one ``.wandb`` file,
    once it is complete: W&B's service writes the file on its own after ``finish()`` returns, so
    this waits (at most ``wait_s`` seconds) for the closing ``exit`` record while the file is
    still being written (changed in the last 10 s; a killed run's file never gets one)."""
    from wandb.proto import wandb_internal_pb2 as pb

    deadline = time.time() + wait_s
    while True:
        recs = []
        for blob in wandb_record_blobs(path):
            r = pb.Record()
            r.ParseFromString(blob)
            recs.append(r)
        done = any(r.WhichOneof("record_type") == "exit" for r in recs)
        if done or time.time() > deadline or time.time() - Path(path).stat().st_mtime > 10:
            return recs
        time.sleep(0.2)


def wandb_offline_runs(folder: str | Path) -> list[Path]:
    """The ``.wandb`` files of the offline runs under ``folder`` (``<run>/wandb``), oldest first."""
    return sorted(Path(folder).glob("wandb/offline-run-*/run-*.wandb"))


def wandb_history(path: str | Path) -> list[dict[str, Any]]:
    """Every history row of a ``.wandb`` file: ``{"_step": int, key: decoded JSON value, ...}``
    (nested keys joined with ``/``)."""
    rows = []
    for r in wandb_records(path):
        if r.WhichOneof("record_type") != "history":
            continue
        row = {}
        for item in r.history.item:
            key = item.key or "/".join(item.nested_key)
            row[key] = json.loads(item.value_json)
        rows.append(row)
    return rows


def wandb_run_record(path: str | Path) -> Any:
    """The ``run`` record of a ``.wandb`` file (id, display name, group, tags, config)."""
    for r in wandb_records(path):
        if r.WhichOneof("record_type") == "run":
            return r.run
    raise AssertionError(f"{path} has no run record")


def wandb_config(run_record) -> dict[str, Any]:
    """The config of a run record as a dict (values decoded from JSON)."""
    out = {}
    for item in run_record.config.update:
        key = item.key or "/".join(item.nested_key)
        out[key] = json.loads(item.value_json)
    return out


def tensorboard_accumulator(folder: str | Path):
    """TensorBoard's own event reader over a run folder, as its dashboards read it (the plugin
    event accumulator: scalars, images, texts and hparams as tagged tensors; events purged by a
    ``purge_step`` are gone), loaded whole."""
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea

    acc = pea.EventAccumulator(str(folder), size_guidance={pea.TENSORS: 0})
    acc.Reload()
    return acc


def tensorboard_scalars(folder: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a TensorBoard run folder (the Scalars dashboard's tags): tag -> [(step,
    value), ...] as TensorBoard keeps them."""
    from tensorboard.util import tensor_util

    acc = tensorboard_accumulator(folder)
    return {tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
            for tag in acc.PluginTagToContent("scalars")}
