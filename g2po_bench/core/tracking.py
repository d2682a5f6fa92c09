"""Experiment tracking: a run's metrics, evaluations and pictures sent to TensorBoard and Weights & Biases.

One interface (:class:`Tracker`) over the backends that ``logging.backends`` selects
(:class:`g2po_bench.core.config.LoggingConfig`):

- ``jsonl``: the run folder's own records (``metrics.jsonl``, ``eval.json``, :mod:`.rundir`),
  written by the caller; always on.
- ``console``: one line per iteration on the terminal or log (:meth:`Tracker.print`).
- ``tensorboard``: event files in ``<run>/tensorboard`` through ``torch.utils.tensorboard``
  (which needs the ``tensorboard`` package; extra ``tracking``). Scalars in TensorBoard's own
  format, float32 (a value reads back as ``metrics.jsonl``'s rounded to float32; TensorBoard's
  default loader shows no float64 scalars); the resolved config goes to the HParams dashboard
  and, as YAML, to the Text dashboard.
- ``wandb``: a Weights & Biases run (``wandb.init`` with ``logging.project``, ``entity``,
  ``group``, ``tags``, ``wandb_mode``; the resolved config as ``config``); its files live in
  ``<run>/wandb``. The API key comes from W&B's own sources (``WANDB_API_KEY`` or ``wandb
  login``): nothing here reads, passes or writes it.

The optional packages are imported only when their backend is selected; a selected backend
whose package is missing fails with one line (:class:`TrackingError`, also raised by
:func:`check_installed` when the config is loaded, before any work).

**The step** is the training iteration (0: the evaluation before RL). **Each step is sent
once**, whatever happens to the process: the caller publishes a step only when it is recorded
for good (a checkpointed iteration; :mod:`g2po_bench.algorithms.backends.lifecycle`), and
``<run>/tracking.json`` keeps the last published step and the W&B run id. A run that resumes
(after a kill, a preemption, a requeue) opens the same W&B run (``id`` + ``resume="allow"``)
and the same TensorBoard folder (``purge_step`` = the next step, so events a killed attempt
wrote past the bookkeeping are hidden by TensorBoard's reader), and steps at or below the
published one are not sent again. (A hard kill also ends W&B's service process: steps it
still held in memory are lost from the W&B run; TensorBoard's files are flushed every step.)

Pictures (a task group's state graph every ``logging.graph_every`` iterations, the learning
curve at the end) are PNG files drawn by the caller's :class:`RunPictures` (the analysis
package draws them; this module only sends files).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import secrets
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from g2po_bench.core.rundir import atomic_write_json, code_version, machine_info, machine_label

__all__ = ["Tracker", "TrackingError", "RunPictures", "check_installed", "metric_scalars",
           "evaluation_scalars", "evaluation_steps", "run_steps", "flatten_config", "run_info",
           "track_evaluation", "STATE_FILE", "TRAIN_TEMPERATURE_PREFIX",
           "TENSORBOARD_DIR", "WANDB_DIR", "EXTRAS"]

STATE_FILE = "tracking.json"
#: tracker names of the evaluations at the training temperature (``eval.at_train_temperature``)
TRAIN_TEMPERATURE_PREFIX = "eval_at_train_temperature"
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"

#: backend -> (module that must be importable, the install line)
EXTRAS = {
    "tensorboard": ("tensorboard", "pip install 'g2po-bench[tracking]' (or pip install tensorboard)"),
    "wandb": ("wandb", "pip install 'g2po-bench[tracking]' (or pip install wandb)"),
}


class TrackingError(RuntimeError):
    """A selected tracker cannot be used (package missing, W&B refused to start); one line."""


class RunPictures(Protocol):
    """Draws a run's pictures as PNG files (implemented by :mod:`g2po_bench.analysis.pictures`)."""

    def state_graph(self, run_root: Path, iteration: int, group: int, out: Path) -> Path | None:
        """One task group's state graph at ``iteration`` (``group`` -1: the most informative),
        written to ``out``; None when there is nothing to draw (no step table)."""

    def learning_curve(self, run_root: Path, out: Path) -> Path | None:
        """Held-out and training success against the iteration, written to ``out``; None when the
        run has no evaluation."""


def check_installed(backends: Iterable[str]) -> None:
    """Raise :class:`TrackingError` when a selected backend's package is not installed.

    Args:
        backends: names from ``logging.backends``.

    Raises:
        TrackingError: one line naming the backend and the install command.
    """
    for b in backends:
        if b in EXTRAS:
            module, how = EXTRAS[b]
            if importlib.util.find_spec(module) is None:
                raise TrackingError(f"logging.backends selects {b!r} but the {module} package is not "
                                    f"installed: {how}, or drop {b} from logging.backends")


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        f = float(v)
        return f if math.isfinite(f) else None
    try:  # numpy scalars
        import numpy as np

        if isinstance(v, np.generic) and np.issubdtype(type(v), np.number):
            f = float(v)
            return f if math.isfinite(f) else None
    except ImportError:  # pragma: no cover
        pass
    return None


def metric_scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The trackable values of one ``metrics.jsonl`` record: every finite number (booleans as 0/1)
    under its own name, except ``iteration`` (the step itself); None, text and lists are left out.

    Returns:
        name -> float.
    """
    out = {}
    for k, v in record.items():
        if k == "iteration":
            continue
        f = _number(v)
        if f is not None:
            out[k] = f
    return out


def evaluation_scalars(ev: Mapping[str, Any], prefix: str = "eval") -> dict[str, float]:
    """The trackable values of one EVAL record (:mod:`g2po_bench.core.rundir`): success rate and
    its 95 % CI bounds, episodes, score, mean steps, invalid fraction, truncation figures, and per
    task type the success rate and its CI bounds.

    Names: ``<prefix>/success_rate``, ``<prefix>/success_ci_low``, ``<prefix>/success_ci_high``,
    ``<prefix>/num_episodes``, ``<prefix>/score``, ``<prefix>/mean_steps``,
    ``<prefix>/invalid_frac``, ``<prefix>/truncated_prompts``, ``<prefix>/truncated_responses``,
    ``<prefix>/success/<type>``, ``<prefix>/success_ci_low/<type>``,
    ``<prefix>/success_ci_high/<type>`` (``metrics.jsonl`` uses the same names for what it holds).
    Success figures are fractions in [0, 1]. Missing or None fields are left out.
    """
    out: dict[str, float] = {}

    def put(name: str, v: Any) -> None:
        f = _number(v)
        if f is not None:
            out[f"{prefix}/{name}"] = f

    for k in ("success_rate", "num_episodes", "score", "mean_steps", "invalid_frac", "truncated_prompts",
              "truncated_responses"):
        put(k, ev.get(k))
    ci = ev.get("success_ci")
    if ci:
        put("success_ci_low", ci[0])
        put("success_ci_high", ci[1])
    for t, r in (ev.get("per_task_type") or {}).items():
        put(f"success/{t}", r)
    for t, c in (ev.get("per_task_type_ci") or {}).items():
        if c:
            put(f"success_ci_low/{t}", c[0])
            put(f"success_ci_high/{t}", c[1])
    return out


def evaluation_steps(history: Iterable[Mapping[str, Any]],
                     at_train_temperature: Mapping[str, Any] | None = None) -> dict[int, dict[str, float]]:
    """Step -> trackable values of a run's evaluations: every EVAL of ``history`` under ``eval/...``
    and the evaluations at the training temperature (``eval.json`` ``at_train_temperature``:
    ``before``/``final``, its ``temperature`` key ignored) under
    ``eval_at_train_temperature/...`` (:func:`evaluation_scalars`), at their iteration."""
    out: dict[int, dict[str, float]] = {}
    for ev in history:
        out.setdefault(int(ev["iteration"]), {}).update(evaluation_scalars(ev, "eval"))
    for key, ev in (at_train_temperature or {}).items():
        if key != "temperature" and isinstance(ev, Mapping):
            out.setdefault(int(ev["iteration"]), {}).update(evaluation_scalars(ev, TRAIN_TEMPERATURE_PREFIX))
    return out


def run_steps(metrics: Iterable[Mapping[str, Any]], evals: Mapping[str, Any] | None) -> dict[int, dict[str, float]]:
    """Step -> everything a tracker gets of a run folder's records: :func:`evaluation_steps` of
    ``eval.json`` (``evals``, may be None) with the ``metrics.jsonl`` line of the iteration
    (:func:`metric_scalars`) on top; sorted by step."""
    out = evaluation_steps((evals or {}).get("history", []), (evals or {}).get("at_train_temperature"))
    for rec in metrics:
        out.setdefault(int(rec["iteration"]), {}).update(metric_scalars(rec))
    return dict(sorted(out.items()))


def flatten_config(d: Mapping[str, Any], prefix: str = "") -> dict[str, bool | int | float | str]:
    """A nested config as dotted keys with TensorBoard HParams values (bool, int, float, str):
    None becomes ``"null"``, lists and other values their JSON text."""
    out: dict[str, bool | int | float | str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten_config(v, key + "."))
        elif isinstance(v, (bool, int, float, str)):
            out[key] = v
        else:
            out[key] = json.dumps(v, sort_keys=True, default=str)
    return out


class _TensorBoard:
    """TensorBoard event files (``torch.utils.tensorboard.SummaryWriter``)."""

    takes_images = True

    def __init__(self, folder: Path, purge_step: int, config: Mapping[str, Any], info: Mapping[str, Any],
                 config_yaml: str | None):
        # lazy: the tracking extra (tensorboard) is optional, imported only when selected
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        first = not any(folder.glob("events.out.tfevents.*"))
        self.writer = SummaryWriter(log_dir=str(folder), purge_step=purge_step)
        info_md = "\n".join(f"- **{k}**: `{v}`" for k, v in info.items())
        if first:
            exp, ssi, sei = hparams(flatten_config(config),
                                    {"eval/success_rate": 0.0, "train/success_rate": 0.0})
            fw = self.writer._get_file_writer()
            for s in (exp, ssi, sei):
                fw.add_summary(s)
            if config_yaml:
                self.writer.add_text("run/config", "```yaml\n" + config_yaml + "\n```", global_step=0)
            self.writer.add_text("run/info", info_md, global_step=0)
        else:  # a resumed attempt: what ran it (commit and machine may differ from the first)
            self.writer.add_text("run/resumed", info_md, global_step=purge_step)
        self.writer.flush()

    def publish(self, step: int, scalars: Mapping[str, float], images: Mapping[str, Path]) -> None:
        for k, v in scalars.items():
            # TensorBoard's scalar format: float32 (its fast Rust loader shows no float64 tensors)
            self.writer.add_scalar(k, v, global_step=step)
        for tag, path in images.items():
            self.writer.add_image(tag, _read_png(path), global_step=step, dataformats="HWC")
        self.writer.flush()

    def close(self, state: str) -> None:
        self.writer.close()


def _read_png(path: Path):
    """(H, W, 3) uint8 array of a PNG file (matplotlib's reader; alpha dropped)."""
    import matplotlib.image as mpimg  # lazy: only a tracker that shows pictures reads PNG files
    import numpy as np

    arr = mpimg.imread(str(path))
    if arr.dtype != np.uint8:
        arr = (np.clip(arr, 0.0, 1.0) * 255).round().astype(np.uint8)
    if arr.ndim == 2:
        arr = np.stack([arr] * 3, axis=-1)
    return arr[..., :3]


class _WandB:
    """A Weights & Biases run (``wandb.init`` / ``log`` / ``finish``)."""

    takes_images = True

    def __init__(self, folder: Path, *, run_id: str, name: str, lg, group: str | None, kind: str,
                 config: Mapping[str, Any], info: Mapping[str, Any]):
        import wandb  # lazy: the tracking extra (wandb) is optional, imported only when selected

        self.wandb = wandb
        folder.mkdir(parents=True, exist_ok=True)
        try:
            self.run = wandb.init(
                project=lg.project, entity=lg.entity, group=group, tags=list(lg.tags) or None, name=name,
                id=run_id, resume="allow", dir=str(folder.parent), job_type=kind, mode=lg.wandb_mode,
                config={**config, "run_info": dict(info)}, settings=wandb.Settings(console="off", silent=True),
            )
        except Exception as exc:  # noqa: BLE001 - wandb's own errors (no key, no network): one line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TrackingError(f"W&B could not start run {name!r} (project {lg.project!r}): {first}. Set "
                                "WANDB_API_KEY (or run `wandb login`), or logging.wandb_mode=offline "
                                "(sync later with `wandb sync`)") from None

    def publish(self, step: int, scalars: Mapping[str, float], images: Mapping[str, Path]) -> None:
        data: dict[str, Any] = dict(scalars)
        for tag, path in images.items():
            data[tag] = self.wandb.Image(str(path))
        # committed now, not when a later step comes: a run killed after this step keeps it
        self.run.log(data, step=step, commit=True)

    def close(self, state: str) -> None:
        if state == "interrupted":
            self.run.mark_preempting()
        self.run.finish(exit_code=0 if state == "done" else 1)


class Tracker:
    """The trackers of one run (see the module docstring).

    Args:
        root: the run folder (``tracking.json``, ``tensorboard/`` and ``wandb/`` go there).
        logging: the ``logging`` config section (:class:`g2po_bench.core.config.LoggingConfig`).
        run_id: the run id: the W&B run's name (``logging`` has no name of its own).
        config: the resolved config (a plain nested dict): TensorBoard HParams, W&B config.
        info: what ran it (run id, commit, machine, backend, ...): TensorBoard text, W&B
            config ``run_info``.
        kind: ``"train"``, ``"evaluation"`` or ``"baseline"`` (W&B ``job_type``).
        group: W&B group; None takes ``logging.group``.
        config_yaml: the config as ``config.yaml`` holds it (TensorBoard's Text dashboard).
        log: ``log(line)`` for console lines and notes (default ``print``).
        fresh: start a new tracker run even when ``tracking.json`` names one (a training run
            started from scratch after its records were deleted).

    Raises:
        TrackingError: a selected backend's package is missing, or W&B refused to start.
    """

    def __init__(self, root: str | os.PathLike, logging, *, run_id: str, config: Mapping[str, Any],
                 info: Mapping[str, Any], kind: str = "train", group: str | None = None,
                 config_yaml: str | None = None, log: Callable[[str], Any] | None = None, fresh: bool = False):
        self.root = Path(root)
        self.logging = logging
        self.log = log or (lambda line: print(line, flush=True))
        self.console = "console" in logging.backends
        check_installed(logging.backends)
        state = {} if fresh else self._read_state()
        self.published = int(state.get("published_step", -1))
        self.state: dict[str, Any] = {"published_step": self.published}
        self.backends: list[Any] = []
        group = group if group is not None else logging.group
        if "tensorboard" in logging.backends:
            folder = self.root / TENSORBOARD_DIR
            self.backends.append(_TensorBoard(folder, self.published + 1, config, info, config_yaml))
            self.state["tensorboard"] = {"dir": TENSORBOARD_DIR}
        if "wandb" in logging.backends:
            wid = (state.get("wandb") or {}).get("id") or _wandb_id(run_id)
            self.state["wandb"] = {"id": wid, "project": logging.project, "entity": logging.entity,
                                   "group": group, "name": run_id}
            self._write_state()  # the id first: a kill during the first steps keeps the same W&B run
            self.backends.append(_WandB(self.root / WANDB_DIR, run_id=wid, name=run_id, lg=logging, group=group,
                                        kind=kind, config=config, info=info))
        self._write_state()

    @property
    def published_step(self) -> int:
        """The last step sent to the trackers (-1: none yet)."""
        return self.published

    @property
    def wants_images(self) -> bool:
        """Whether a selected backend shows pictures (so drawing them is worth the time)."""
        return any(getattr(b, "takes_images", False) for b in self.backends)

    def print(self, line: str) -> None:
        """One console line (the ``console`` backend; nothing when it is not selected)."""
        if self.console:
            self.log(line)

    def publish(self, step: int, scalars: Mapping[str, float], images: Mapping[str, Path] | None = None) -> bool:
        """Send step ``step``'s values (and PNG pictures) to every backend, unless it was sent
        before (``step`` <= :attr:`published_step`).

        Args:
            step: the iteration (0: before RL); steps must come in increasing order.
            scalars: name -> finite float (:func:`metric_scalars`, :func:`evaluation_scalars`).
            images: tag -> PNG file.

        Returns:
            True when sent, False when skipped as already sent.
        """
        if step <= self.published:
            return False
        for b in self.backends:
            b.publish(step, scalars, images or {})
        self.published = step
        self.state["published_step"] = step
        if self.backends:
            self._write_state()
        return True

    def close(self, state: str = "done") -> None:
        """Flush and close every backend; ``state``: ``"done"``, ``"failed"`` or ``"interrupted"``
        (W&B: exit code 0 for done, else 1; an interrupted run is marked preempting)."""
        backends, self.backends = self.backends, []
        for b in backends:
            b.close(state)

    # ------------------------------------------------------------------ tracking.json
    def _read_state(self) -> dict[str, Any]:
        try:
            return json.loads((self.root / STATE_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def _write_state(self) -> None:
        if self.backends or "wandb" in self.state or "tensorboard" in self.state:
            atomic_write_json(self.root / STATE_FILE, self.state)


def _wandb_id(run_id: str) -> str:
    """A new W&B run id: the run id's first characters and 8 random ones (unique in a project
    even when two people train the same config; W&B ids allow letters, digits, - and _)."""
    stem = "".join(c if c.isalnum() or c in "-_" else "-" for c in run_id)[:48]
    return f"{stem}-{secrets.token_hex(4)}"



def run_info(run_id: str, **extra: Any) -> dict[str, Any]:
    """What ran a run, for the trackers: ``run_id``, ``commit`` and ``dirty``
    (:func:`g2po_bench.core.rundir.code_version`), ``machine`` (one line,
    :func:`g2po_bench.core.rundir.machine_label`) and ``extra``."""
    code = code_version() or {}
    return {"run_id": run_id, **extra, "commit": code.get("commit"), "dirty": code.get("dirty"),
            "machine": machine_label(machine_info())}


def track_evaluation(root: str | os.PathLike, logging, *, name: str, ev: Mapping[str, Any], step: int,
                     config: Mapping[str, Any], info: Mapping[str, Any], kind: str = "evaluation",
                     config_yaml: str | None = None, log: Callable[[str], Any] | None = None) -> bool:
    """Send one evaluation (``g2po eval``, a prompting baseline) to the selected trackers as a
    tracker run of its own: the config, ``info`` and :func:`evaluation_scalars` of ``ev`` (prefix
    ``eval``) at ``step`` (the checkpoint's iteration, or 0). Its files go to ``root`` (the
    evaluation's folder); the W&B group is ``logging.group`` (a sweep's name for the runs of a
    sweep), the W&B job type ``kind``.

    Returns:
        True when a tracker (TensorBoard or W&B) received it, False when none is selected.

    Raises:
        TrackingError: a selected backend's package is missing, or W&B refused to start.
    """
    if not {"tensorboard", "wandb"} & set(logging.backends):
        return False
    tracker = Tracker(root, logging, run_id=name, config=config, info=info, kind=kind, config_yaml=config_yaml, log=log)
    state = "failed"
    try:
        tracker.publish(int(step), evaluation_scalars(ev, "eval"))
        state = "done"
    finally:
        tracker.close(state)
    return True
