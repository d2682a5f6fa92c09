"""Load every run folder under a results folder into pandas DataFrames.

A run folder is any folder (at any depth under ``results_dir``) holding at least one of
``config.yaml``, ``metrics.jsonl``, ``eval.json``, ``status.json`` (the layout of
:mod:`g2po_bench.core.rundir`); the search does not descend into a run folder. ``results_dir`` may be
``results/``, ``results/runs/`` or a sweep's output folder.

Nothing about one run is fatal: a run that cannot be used is *skipped* and reported as a
:class:`RunProblem`; a run with a lesser defect is *included* and reported too. Two included
runs of the same method/size/env/seed are an error (:class:`DuplicateRunsError`, naming the
folders and the config keys they differ in): each would count as a separate seed. The variant of a
run is computed over the whole set (:func:`g2po_bench.analysis.naming.variants_in_set`): a common
option that differs between runs of one method is part of their variants on every benchmark.

Skipped (``RunProblem.action == "skipped"``):

- an evaluation-only folder written by ``g2po eval`` (``eval.json`` with ``"kind":
  "evaluation"``, or, as older versions wrote them, an ``eval.json`` with a ``model`` key and no
  ``metrics.jsonl`` nor ``status.json``): an evaluation of a checkpoint, not a training seed
  (the reason starts with ``evaluation-only``); ``g2po eval --run RUN`` now writes inside
  ``RUN/evals/``, which the search never enters;

- no ``config.yaml``, or one that does not parse as a YAML mapping, or lacks ``env.name`` or
  (for a training run) ``algorithm.name`` (corrupt or partial run);
- ``status.json`` says ``"failed"`` (the reason carries the run's error);
- no usable evaluation at all (``eval.json`` missing or corrupt, no ``eval/success_rate`` in
  ``metrics.jsonl``), including runs still running that have not evaluated yet;
- an evaluation whose ``success_rate`` is not a number in [0, 1];
- no ``status.json`` and no final evaluation (a partial run).

Included with a warning (``action == "included"``): unreadable ``status.json`` next to a final
evaluation, torn lines in ``metrics.jsonl``, a finished run without a ``final`` evaluation
(its latest one is used), several runs of the same method/size/env/seed, a
*crashed-heavy* iteration in ``metrics.jsonl`` (more than half of its episodes crashed,
:mod:`g2po_bench.core.crashes`; column ``metrics.crashed_heavy`` counts them), an estimator that
is not registered here (its ``algorithm.module`` does not import: the row keeps the raw name;
:func:`g2po_bench.analysis.naming.estimator_problem`).

Runs still in progress (``status.json`` state ``"running"``, or ``"interrupted"`` by a signal
and waiting for a relaunch to resume) are included with their latest
evaluation and flagged ``in_progress = True``. "Latest" is, in order: ``eval.json``'s
``final`` (the local trainer rewrites it at every evaluation), the last entry of ``history``,
the last ``eval/success_rate`` of ``metrics.jsonl`` (per task type from
``eval/success/<type>`` or ``eval/per_task_type/<type>``, score from ``eval/score``),
``before`` (iteration 0); ``final.source`` says which was used.

Frames (:class:`LoadedRuns`):

``runs`` (one row per included run):
    identity: ``run_id`` (path relative to ``results_dir``, posix), ``path``, ``env``,
    ``algorithm``, ``kind`` ("train" | "baseline"), ``method``, ``variant``, ``method_label``,
    ``model_size``, ``seed`` (Int64), ``step_weight`` (float);
    state: ``state`` ("running" | "done" | "unknown"), ``in_progress`` (bool),
    ``status.iteration``, ``status.total_iterations``, ``status.updated``;
    provenance from ``status.json``: ``code.commit`` (40 hex), ``code.dirty`` (bool) and
    ``machine`` (:func:`g2po_bench.core.rundir.machine_label`), None where the run did not record them;
    evaluations, for ``E`` in ``final``, ``best``, ``before``: ``E.iteration``,
    ``E.success_rate`` (fraction), ``E.score``, ``E.num_episodes``, ``E.mean_steps``,
    ``E.task.<task type>`` (fraction), plus ``final.source``;
    ``metrics.rows`` and ``metrics.last_iteration``;
    and every config key flattened with dots (``env.name``, ``algorithm.mode``,
    ``algorithm.options.<k>``, ``train.lr``, ``seed``, ...; lists joined with ","; a config key
    that collides with a derived column is kept as ``config.<key>``).
``curves`` (one row per line of ``metrics.jsonl`` of every included run, plus runs still
    running without an evaluation): the identity columns above (``run_id``, ``env``,
    ``method``, ``variant``, ``method_label``, ``model_size``, ``seed``, ``in_progress``) and
    every logged key as its own column (``iteration``, ``time_s``, ``train/...``, ``loss/...``,
    ``adv/...``, ``eval/...``), sorted by run and iteration.
``evals`` (one row per evaluation of every included run): identity columns, ``source``
    ("before" | "history" | "final" | "metrics"), ``iteration``, ``success_rate``, ``score``,
    ``num_episodes``, ``mean_steps``, ``task.<task type>``; one row per (run, iteration).

Example::

    from g2po_bench.analysis.load import load_runs
    loaded = load_runs("results/runs")
    loaded.runs[["method", "model_size", "seed", "final.success_rate"]]
    for p in loaded.problems: print(p)
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from g2po_bench.analysis.naming import (
    estimator_problem,
    get_path,
    is_baseline,
    method_label,
    method_name,
    model_size_of,
    variant_of,
    variants_in_set,
)
from g2po_bench.benchmarks.registry import benchmark_names, get_benchmark
from g2po_bench.core.crashes import CRASHED_HEAVY_FRACTION, crashed_heavy_iterations
from g2po_bench.core.rundir import RunDir, machine_label

__all__ = ["RunProblem", "LoadedRuns", "DuplicateRunsError", "load_runs", "find_run_dirs", "IDENTITY_COLUMNS",
           "mark_short_runs", "baseline_shortfall"]

RUN_FILES = ("config.yaml", "metrics.jsonl", "eval.json", "status.json")
IDENTITY_COLUMNS = (
    "run_id",
    "env",
    "method",
    "variant",
    "method_label",
    "model_size",
    "seed",
    "in_progress",
)
EVAL_FIELDS = ("iteration", "success_rate", "score", "num_episodes", "mean_steps")


@dataclass(frozen=True)
class RunProblem:
    """A defect of one run folder. ``action``: "skipped" (not in the frames) or "included"."""

    run_id: str
    path: str
    action: str
    reason: str

    def __str__(self) -> str:
        return f"{self.run_id}: {self.action}: {self.reason}"


@dataclass
class LoadedRuns:
    """What :func:`load_runs` returns (see the module docstring for the columns)."""

    results_dir: Path
    runs: pd.DataFrame
    curves: pd.DataFrame
    evals: pd.DataFrame
    problems: list[RunProblem] = field(default_factory=list)
    results_dirs: list[Path] = field(default_factory=list)  # every folder searched (``results_dir`` first)

    @property
    def skipped(self) -> list[RunProblem]:
        return [p for p in self.problems if p.action == "skipped"]

    @property
    def warnings(self) -> list[RunProblem]:
        return [p for p in self.problems if p.action == "included"]


class _Skip(Exception):
    pass


class DuplicateRunsError(ValueError):
    """Several run folders have the same (env, method and variant, model size, seed); the
    message names every such folder. Each would count as a separate seed: remove or move all
    but one, or give them distinct seeds."""


def find_run_dirs(results_dir: str | os.PathLike) -> list[Path]:
    """Run folders under ``results_dir`` (itself included), sorted; hidden folders are ignored."""
    root = Path(results_dir)
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        if any(f in filenames for f in RUN_FILES):
            found.append(Path(dirpath))
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    return sorted(found)


def load_runs(
    results_dir: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    column_overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> LoadedRuns:
    """Load all run folders under ``results_dir`` (one folder, or several read as one set).

    Args:
        results_dir: a folder to search for run folders (see the module docstring), or a list
            of folders (e.g. an ablation sweep's runs and the committed comparison's): their runs
            are one set (variants, duplicates and paired differences across them); a run id is
            the path under its folder, prefixed with the folder's name where two folders hold
            the same path.
        column_overrides: ``{run_id: {column: value}}`` applied to a run's row after the
            derived columns are computed, e.g. ``{"abc": {"model_size": "7B"}}`` (the
            identity columns of its curves and evals follow). ``method``/``variant``
            overrides also update ``method_label``.

    Returns:
        :class:`LoadedRuns` (frames may be empty but always have the identity columns).

    Raises:
        FileNotFoundError: ``results_dir`` (or one of them) does not exist.
        DuplicateRunsError: two included runs share env, method (with variant), model size and
            seed; the message names their folders.
    """
    roots = ([Path(results_dir)] if isinstance(results_dir, (str, os.PathLike))
             else [Path(p) for p in results_dir])
    if not roots:
        raise FileNotFoundError("no results folder given")
    for root in roots:
        if not root.is_dir():
            raise FileNotFoundError(f"results folder {str(root)!r} does not exist")
    overrides = {k: dict(v) for k, v in (column_overrides or {}).items()}
    rows: list[dict[str, Any]] = []
    curves: list[dict[str, Any]] = []
    evals: list[dict[str, Any]] = []
    problems: list[RunProblem] = []
    configs: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    found = [(root, run_path) for root in roots for run_path in find_run_dirs(root)]
    for root, run_path in found:
        rel = run_path.relative_to(root).as_posix()
        run_id = rel if rel != "." else run_path.name
        if run_id in seen:  # the same path under two of the folders
            run_id = f"{root.name}/{run_id}"
        seen.add(run_id)
        local: list[RunProblem] = []
        try:
            row, run_curves, run_evals, cfg = _load_one(run_path, run_id, local, overrides.get(run_id))
        except _Skip as exc:
            problems.extend(local)
            problems.append(RunProblem(run_id, str(run_path), "skipped", str(exc)))
            continue
        problems.extend(local)
        configs[run_id] = cfg
        if row is not None:
            rows.append(row)
            evals.extend(run_evals)
        curves.extend(run_curves)
    _apply_set_variants(configs, overrides, rows, curves, evals)
    runs_df = _frame(rows, IDENTITY_COLUMNS)
    if len(runs_df):
        runs_df["seed"] = pd.to_numeric(runs_df["seed"], errors="coerce").astype("Int64")
        runs_df["in_progress"] = runs_df["in_progress"].astype(bool)
        _check_duplicates(runs_df)
    curves_df = _frame(curves, IDENTITY_COLUMNS)
    if len(curves_df) and "iteration" in curves_df:
        curves_df = curves_df.sort_values(["run_id", "iteration"], kind="stable").reset_index(drop=True)
    evals_df = _frame(evals, (*IDENTITY_COLUMNS, "source", *EVAL_FIELDS))
    if len(evals_df):
        evals_df = evals_df.sort_values(["run_id", "iteration"], kind="stable").reset_index(drop=True)
    return LoadedRuns(roots[0], runs_df, curves_df, evals_df, problems, roots)


def _apply_set_variants(configs: dict[str, dict[str, Any]], overrides: Mapping[str, Mapping[str, Any]],
                        *frames: list[dict[str, Any]]) -> None:
    """Give every record of ``frames`` (run rows, curve rows, eval rows) the variant its run has
    among all the loaded runs (:func:`g2po_bench.analysis.naming.variants_in_set`), in place; a
    ``column_overrides`` entry that sets the run's method, variant or label wins."""
    variants = variants_in_set(configs)
    for records in frames:
        for rec in records:
            run_id = rec.get("run_id")
            if run_id not in variants or rec.get("variant") == variants[run_id]:
                continue
            if {"method", "variant", "method_label"} & set(overrides.get(run_id, {})):
                continue
            rec["variant"] = variants[run_id]
            rec["method_label"] = method_label(rec["method"], rec["variant"])


# ---------------------------------------------------------------------------- one run
def mark_short_runs(runs: pd.DataFrame, min_iterations: int) -> pd.DataFrame:
    """``runs`` with ``iterations`` (RL iterations of a training run: ``status.total_iterations``,
    else ``train.iterations``; NaN for a baseline) and ``short_run`` (bool) columns.

    A training run is *short* when it has fewer RL iterations than ``min_iterations`` or than the
    longest training run of the same environment and model size in ``runs``: its numbers stand in
    a table beside longer runs (or the published ones) but measure less training. A prompting-baseline
    run is short when it played less than the published protocol (:func:`baseline_shortfall`: a
    panel of ``eval.num_tasks`` tasks instead of the whole split, or fewer steps than the
    benchmark's published step limit). The report marks the cells that include one with "†" and
    lists them with the reason.

    Args:
        runs: ``LoadedRuns.runs``.
        min_iterations: the length below which any training run is short (``g2po report
            --min-iterations``; default the CPU default's ``train.iterations``).
    """
    out = runs.copy()
    if out.empty:
        out["iterations"] = pd.Series(dtype=float)
        out["short_run"] = pd.Series(dtype=bool)
        return out

    def planned(r: pd.Series) -> float:
        if r.get("kind") != "train":
            return math.nan
        for key in ("status.total_iterations", "train.iterations"):
            v = r.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                return float(v)
        return math.nan

    out["iterations"] = out.apply(planned, axis=1).astype(float)
    longest = out.groupby(["env", "model_size"], dropna=False)["iterations"].transform("max")
    bar = np.maximum(longest.fillna(0.0).to_numpy(dtype=float), float(min_iterations))
    its = out["iterations"].to_numpy(dtype=float)
    reduced = out.apply(lambda r: baseline_shortfall(r) is not None, axis=1).to_numpy(dtype=bool)
    out["short_run"] = (np.isfinite(its) & (its < bar)) | reduced
    return out


def baseline_shortfall(run: Mapping[str, Any]) -> str | None:
    """How a prompting-baseline run played less than the published protocol, or None (a training
    run, or a baseline on the whole evaluation split with at least the benchmark's published step
    limit, :attr:`g2po_bench.benchmarks.base.Benchmark.reference_max_steps`).

    Args:
        run: a row of ``LoadedRuns.runs`` (``kind``, ``env``, ``env.max_steps``, ``eval.num_tasks``,
            ``env.eval_split``).

    Returns:
        e.g. ``"1 task, 2 steps (the published protocol: the whole valid_seen split, 50 steps)"``.
    """
    if run.get("kind") != "baseline":
        return None
    tasks, steps = _count(run.get("eval.num_tasks")), _count(run.get("env.max_steps"))
    env = str(run.get("env"))
    reference = get_benchmark(env).reference_max_steps if env in benchmark_names() else None
    few_tasks = tasks is not None and tasks > 0
    few_steps = steps is not None and reference is not None and steps < reference
    if not (few_tasks or few_steps):
        return None
    split = run.get("env.eval_split") or "evaluation"
    played = [f"{tasks} task{'s' * (tasks != 1)}" if few_tasks else f"the whole {split} split",
              f"{steps} step{'s' * (steps != 1)}" if steps is not None else "an unknown step limit"]
    protocol = f"the whole {split} split" + (f", {reference} steps" if reference is not None else "")
    return f"{', '.join(played)} (the published protocol: {protocol})"


def _count(value: Any) -> int | None:
    """An integer config value of a runs row, or None (missing, NaN, not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    return int(value) if math.isfinite(float(value)) else None


def _warn_about_run(warn, status: dict[str, Any] | None, status_error: str | None, state: str,
                    latest: tuple[str, dict[str, Any]], ev_error: str | None, torn: int, cfg: dict[str, Any]) -> None:
    """The problems of a run that is included anyway (``warn(reason)``); raises _Skip for a partial
    run without status and without a final evaluation."""
    if status is None and latest[0] != "final":
        raise _Skip(f"partial run: {status_error or 'no status.json'} and no final evaluation")
    if status is None:
        warn(f"{status_error or 'no status.json'}; using the final evaluation")
    if ev_error:
        warn(f"{ev_error}; using {latest[0]} evaluation from metrics.jsonl")
    if torn:
        warn(f"{torn} torn line(s) in metrics.jsonl skipped")


def _run_row(path: Path, cfg: dict[str, Any], ident: dict[str, Any], status: dict[str, Any] | None, state: str,
             metrics: list[dict[str, Any]], heavy: list[int]) -> dict[str, Any]:
    """The runs-frame row of a run before its evaluation columns: the flattened config, its identity,
    status, code, machine and metrics counts."""
    row: dict[str, Any] = {}
    for key, value in _flatten(cfg).items():
        row[key] = value
    for key, value in ident.items():
        if key in row and row[key] != value and key != "seed":
            row[f"config.{key}"] = row[key]
        row[key] = value
    row["path"] = str(path)
    row["algorithm"] = ident["algorithm"]
    row["kind"] = "baseline" if is_baseline(cfg) else "train"
    w = get_path(cfg, "algorithm.step_weight")
    row["step_weight"] = float(w) if isinstance(w, (int, float)) and not isinstance(w, bool) else math.nan
    row["state"] = state
    for k in ("iteration", "total_iterations", "updated"):
        row[f"status.{k}"] = status.get(k) if status else None
    code = status.get("code") if status else None
    row["code.commit"] = code.get("commit") if isinstance(code, dict) else None
    row["code.dirty"] = code.get("dirty") if isinstance(code, dict) else None
    machine = status.get("machine") if status else None
    row["machine"] = machine_label(machine) if isinstance(machine, dict) else None
    row["metrics.rows"] = len(metrics)
    row["metrics.crashed_heavy"] = len(heavy)
    its = [r.get("iteration") for r in metrics if isinstance(r.get("iteration"), (int, float))]
    row["metrics.last_iteration"] = max(its) if its else None
    return row


def _eval_rows(candidates: list[tuple[str, dict[str, Any]]], ident: dict[str, Any]) -> list[dict[str, Any]]:
    """One evals-frame row per evaluated iteration (the first source in ``_SOURCE_RANK`` order wins)."""
    eval_rows = []
    seen: set[Any] = set()
    for source, e in sorted(candidates, key=lambda se: _SOURCE_RANK[se[0]]):
        it = e.get("iteration")
        if it in seen:
            continue
        seen.add(it)
        rec = {**ident, "source": source}
        rec.update({k[len("x."):]: v for k, v in _eval_columns("x", e).items()})
        eval_rows.append(rec)
    return eval_rows


def _load_one(
    path: Path, run_id: str, problems: list[RunProblem], override: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """(run row or None, curve rows, eval rows, config) of one run; raises _Skip to skip it."""
    rd = RunDir(path)

    def warn(reason: str) -> None:
        problems.append(RunProblem(run_id, str(path), "included", reason))

    ev_only = _evaluation_only(rd)
    if ev_only is not None:
        raise _Skip(ev_only)

    cfg = _read_config(rd)
    status, status_error = _read_status(rd)
    state = str(status.get("state", "unknown")) if status else "unknown"
    if state == "failed":
        raise _Skip(f"run failed: {status.get('error') or 'no error message'}")
    metrics, torn = _read_metrics(rd)
    ev, ev_error = _read_eval(rd)

    ident = _identity(cfg, run_id, state, override)
    curve_rows = [{**ident, **rec} for rec in metrics]

    candidates = _eval_candidates(ev, metrics, run_id)  # list of (source, EVAL)
    latest = _latest(candidates)
    if latest is None:
        where = f" (iteration {status.get('iteration')}/{status.get('total_iterations')})" if status else ""
        if state == "running":
            reason = f"running, no evaluation yet{where}"
            if ev_error:
                reason += f"; {ev_error}"
            problems.append(RunProblem(run_id, str(path), "skipped", reason))
            return None, curve_rows, [], cfg
        raise _Skip(ev_error or "no evaluation (eval.json missing and no eval/ metrics): partial run")
    _warn_about_run(warn, status, status_error, state, latest, ev_error, torn, cfg)
    heavy = crashed_heavy_iterations(metrics, _episodes_per_iteration(cfg))
    if heavy:
        warn(f"crashed-heavy iteration(s) {', '.join(map(str, heavy))} in metrics.jsonl: more than "
             f"{CRASHED_HEAVY_FRACTION:.0%} of the episodes crashed (the environment failed, not the policy); "
             "its results are not comparable: rerun it")
    if state == "done" and latest[0] != "final":
        total = status.get("total_iterations") if status else None
        if not (total == 0 and latest[0] == "before"):
            warn(f"status done but eval.json has no final evaluation; using the {latest[0]} one (iteration {latest[1].get('iteration')})")

    unregistered = estimator_problem(cfg)
    if unregistered:
        warn(unregistered)

    row = _run_row(path, cfg, ident, status, state, metrics, heavy)
    row.update(_eval_columns("final", latest[1]))
    row["final.source"] = latest[0]
    best = ev.get("best") if isinstance(ev, dict) else None
    if not _valid_eval(best):
        trained = [e for s, e in candidates if s != "before"] or [e for _, e in candidates]
        best = max(trained, key=lambda e: (float(e["success_rate"]), float(e.get("iteration") or 0)))
    row.update(_eval_columns("best", best))
    before = ev.get("before") if isinstance(ev, dict) else None
    row.update(_eval_columns("before", before if _valid_eval(before) else None))
    eval_rows = _eval_rows(candidates, ident)
    return row, curve_rows, eval_rows, cfg


_EVAL_TASK_PREFIXES = ("eval/success/", "eval/per_task_type/")
_SOURCE_RANK = {"final": 0, "before": 1, "history": 2, "metrics": 3}


def _identity(cfg: dict[str, Any], run_id: str, state: str, override: dict[str, Any] | None) -> dict[str, Any]:
    method = method_name(cfg)
    variant = variant_of(cfg)
    algorithm = get_path(cfg, "algorithm.name") if not is_baseline(cfg) else method
    ident: dict[str, Any] = {
        "run_id": run_id,
        "env": str(get_path(cfg, "env.name") or get_path(cfg, "env") or "unknown"),
        "method": method,
        "variant": variant,
        "method_label": method_label(method, variant),
        "model_size": model_size_of(cfg),
        "seed": cfg.get("seed"),
        "in_progress": state in ("running", "interrupted"),
        "algorithm": str(algorithm or ""),
    }
    if override:
        ident.update(override)
        if ("method" in override or "variant" in override) and "method_label" not in override:
            ident["method_label"] = method_label(ident["method"], ident["variant"])
    return ident


def _episodes_per_iteration(cfg: dict[str, Any]) -> int | None:
    """``train.groups_per_batch * train.group_size`` of a run config (None when absent)."""
    g, n = get_path(cfg, "train.groups_per_batch"), get_path(cfg, "train.group_size")
    if isinstance(g, int) and isinstance(n, int) and g > 0 and n > 0:
        return g * n
    return None


def _read_config(rd: RunDir) -> dict[str, Any]:
    if not rd.config_path.exists():
        raise _Skip("no config.yaml (corrupt or partial run)")
    try:
        cfg = yaml.safe_load(rd.config_path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise _Skip(f"config.yaml does not parse: {str(exc).splitlines()[0]}") from None
    if not isinstance(cfg, dict):
        raise _Skip("config.yaml is not a mapping of keys")
    if not (get_path(cfg, "env.name") or isinstance(cfg.get("env"), str)):
        raise _Skip("config.yaml has no env.name (corrupt or not a run config)")
    if not is_baseline(cfg) and not get_path(cfg, "algorithm.name"):
        raise _Skip("config.yaml has no algorithm.name and is not a baseline run (corrupt or not a run config)")
    return cfg


def _read_json_object(path: Path, note: str = "") -> tuple[dict[str, Any] | None, str | None]:
    """``(object, None)`` from a JSON file holding an object; ``(None, None)`` when the file does
    not exist; ``(None, why)`` when it does not parse or holds something else (``why`` names the
    file and ends with ``note``)."""
    if not path.exists():
        return None, None
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None, f"{path.name} does not parse{note}"
    if not isinstance(obj, dict):
        return None, f"{path.name} is not an object{note}"
    return obj, None


def _read_status(rd: RunDir) -> tuple[dict[str, Any] | None, str | None]:
    return _read_json_object(rd.status_path)


def _read_metrics(rd: RunDir) -> tuple[list[dict[str, Any]], int]:
    """Records of metrics.jsonl and the number of torn/non-object lines skipped."""
    if not rd.metrics_path.exists():
        return [], 0
    try:
        text = rd.metrics_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return [], 0
    records: list[dict[str, Any]] = []
    bad = 0
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(rec, dict):
            records.append(rec)
        else:
            bad += 1
    return records, bad


def _read_eval(rd: RunDir) -> tuple[dict[str, Any] | None, str | None]:
    return _read_json_object(rd.eval_path, " (corrupt)")


def _valid_eval(e: Any) -> bool:
    if not isinstance(e, dict):
        return False
    sr = e.get("success_rate")
    return isinstance(sr, (int, float)) and not isinstance(sr, bool) and math.isfinite(sr)


def _check_range(e: dict[str, Any], where: str, run_id: str) -> None:
    sr = float(e["success_rate"])
    if not 0.0 <= sr <= 1.0:
        raise _Skip(f"{where}: success_rate {sr} is not a fraction in [0, 1]")
    for t, v in (e.get("per_task_type") or {}).items():
        if isinstance(v, (int, float)) and not 0.0 <= float(v) <= 1.0:
            raise _Skip(f"{where}: per_task_type[{t!r}] = {v} is not a fraction in [0, 1]")


def _eval_candidates(ev: dict[str, Any] | None, metrics: list[dict[str, Any]], run_id: str) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(ev, dict):
        if _valid_eval(ev.get("before")):
            out.append(("before", ev["before"]))
        for e in ev.get("history") or []:
            if _valid_eval(e):
                out.append(("history", e))
        if _valid_eval(ev.get("final")):
            out.append(("final", ev["final"]))
        if _valid_eval(ev.get("best")):
            _check_range(ev["best"], "eval.json best", run_id)
    for rec in metrics:
        sr = rec.get("eval/success_rate")
        if isinstance(sr, (int, float)) and not isinstance(sr, bool) and math.isfinite(sr):
            per = {
                k.split("/", 2)[2]: v
                for k, v in rec.items()
                if k.startswith(_EVAL_TASK_PREFIXES) and isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            out.append(
                (
                    "metrics",
                    {
                        "iteration": rec.get("iteration"),
                        "success_rate": sr,
                        "per_task_type": per,
                        "score": rec.get("eval/score"),
                        "num_episodes": rec.get("eval/num_episodes"),
                        "mean_steps": rec.get("eval/mean_steps"),
                    },
                )
            )
    for source, e in out:
        _check_range(e, f"eval.json {source}" if source != "metrics" else "metrics.jsonl eval/", run_id)
    return out


def _latest(candidates: list[tuple[str, dict[str, Any]]]) -> tuple[str, dict[str, Any]] | None:
    for wanted in ("final", "history", "metrics", "before"):
        pool = [e for s, e in candidates if s == wanted]
        if pool:
            return wanted, max(pool, key=lambda e: float(e.get("iteration") or 0))
    return None


def _num(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return math.nan
    return float(v)


def _eval_columns(prefix: str, e: dict[str, Any] | None) -> dict[str, Any]:
    if e is None:
        return {f"{prefix}.{k}": math.nan for k in EVAL_FIELDS}
    out: dict[str, Any] = {f"{prefix}.{k}": _num(e.get(k)) for k in EVAL_FIELDS}
    for t, v in sorted((e.get("per_task_type") or {}).items()):
        out[f"{prefix}.task.{t}"] = _num(v)
    return out


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        elif isinstance(v, (list, tuple)):
            out[key] = ",".join(str(x) for x in v)
        else:
            out[key] = v
    return out


def _frame(records: list[dict[str, Any]], columns: tuple[str, ...]) -> pd.DataFrame:
    if not records:
        return pd.DataFrame(columns=list(columns))
    df = pd.DataFrame.from_records(records)
    first = [c for c in columns if c in df.columns]
    return df[first + [c for c in df.columns if c not in first]]


def _evaluation_only(rd: RunDir) -> str | None:
    """The skip reason of an evaluation-only folder (module docstring), else None."""
    if not rd.eval_path.is_file():
        return None
    ev, _ = _read_eval(rd)
    if not isinstance(ev, dict) or "baseline" in ev:
        return None
    legacy = "model" in ev and not rd.metrics_path.exists() and not rd.status_path.exists()
    if ev.get("kind") != "evaluation" and not legacy:
        return None
    of = ev.get("run") or ev.get("model") or "a model"
    return f"evaluation-only folder (g2po eval of {of}), not a training run: not counted as a seed"


def _check_duplicates(runs: pd.DataFrame) -> None:
    key = ["env", "method_label", "model_size", "seed"]
    dup = runs[runs.duplicated(key, keep=False) & runs["seed"].notna()]
    if dup.empty:
        return
    groups = []
    for (env, label, size, seed), grp in dup.groupby(key, sort=True):
        grp = grp.sort_values("path")
        folders = " and ".join(repr(p) for p in grp["path"])
        differ = _differing_settings(grp)
        note = f" (their configs differ in {differ})" if differ else ""
        groups.append(f"{label}, {size}, {env}, seed {seed}: {folders}{note}")
    raise DuplicateRunsError(
        "runs with the same method/size/env/seed would each count as a seed: " + "; ".join(groups)
        + ". Remove or move all but one of each (or report on a folder holding one), or rerun with another seed"
    )


#: the config sections whose keys change what a run does (``logging``, ``output_dir``, ``run_id``,
#: ``resume``, ``progress`` never do: :data:`g2po_bench.core.config.NON_SEMANTIC_KEYS`)
_RESULT_SECTIONS = ("env.", "algorithm.", "model.", "train.", "eval.")


def _differing_settings(grp: pd.DataFrame, limit: int = 4) -> str:
    """``"train.lr (0.0003 / 0.001), ..."``: the result-relevant config keys whose values differ
    between the runs of ``grp`` (at most ``limit`` named), or "" when none does."""
    out = []
    for col in grp.columns:
        if not (col.startswith(_RESULT_SECTIONS) or col == "backend"):
            continue
        values = [None if (isinstance(v, float) and math.isnan(v)) else v for v in grp[col]]
        if len({repr(v) for v in values}) > 1:
            out.append(f"{col} ({' / '.join(str(v) for v in values)})")
    more = f" and {len(out) - limit} more key(s)" if len(out) > limit else ""
    return ", ".join(out[:limit]) + more
