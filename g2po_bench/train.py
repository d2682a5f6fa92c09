"""Entry points of a run: training and evaluation, dispatched to the configured backend.

This is the one function the CLI, the sweeps launcher and the tests call; it chooses the
trainer backend (``backend=local`` or ``backend=openrlhf``) and imports it lazily, so the
OpenRLHF stack is never needed for local runs.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from g2po_bench.algorithms.backends.common import evaluate_panel
from g2po_bench.algorithms.backends.loop import run_folder
from g2po_bench.algorithms.backends.openrlhf import require_stack
from g2po_bench.algorithms.backends.openrlhf.cluster import read_allocation
from g2po_bench.algorithms.backends.progress import format_rate_ci
from g2po_bench.benchmarks.evaluation import select_panel
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.core.checkpoints import verify_checkpoint
from g2po_bench.core.config import (
    RESUME_MUTABLE_KEYS,
    ConfigError,
    RunConfig,
    config_to_dict,
    config_to_yaml,
    read_recorded_config,
    resolve_run_id,
    resume_differences,
)
from g2po_bench.core.errors import CheckpointError, MissingDependencyError
from g2po_bench.core.rundir import RunDir, atomic_write_json, atomic_write_text, code_version
from g2po_bench.core.runlock import RunLock
from g2po_bench.core.tracking import run_info, track_evaluation
from g2po_bench.runconfig import load_config
from g2po_bench.runtime.workers import EnvPool

__all__ = ["run_train", "run_eval", "load_train_config", "check_resume", "check_fresh_run_folder",
           "check_run_for_eval", "eval_output_dir"]


def load_train_config(config_file: str | Path | None = None, overrides: list[str] | None = None, *,
                      preset: str | None = None) -> RunConfig:
    """The config ``g2po train`` runs (:func:`g2po_bench.runconfig.load_config` of the same layers),
    except for a resume: with ``resume=true`` and a run folder that records a ``config.yaml``, that
    recorded config is the base and the preset, file and overrides go on top of it, so
    ``g2po train run_id=RUN resume=true train.iterations=N`` continues the recorded run (whatever
    the defaults say) with N iterations. The run folder is the one the layers alone name
    (``<output_dir>/<run_id>``, the default run id being the config's hash), and it stays that
    folder. :func:`run_train` then refuses a key the resume may not change (:func:`check_resume`).

    Raises:
        ConfigError: as :func:`~g2po_bench.runconfig.load_config`, or a recorded config that no
            longer loads (the message names the file and the key).
    """
    cfg = load_config(config_file, overrides, preset=preset)
    if not cfg.resume:
        return cfg
    run = RunDir(Path(cfg.output_dir) / resolve_run_id(cfg))
    if not run.config_path.is_file():
        return cfg
    resumed = load_config(config_file, overrides, preset=preset, base_file=run.config_path)
    # the folder found stays the run's folder (the recorded output_dir may name where it was)
    resumed.output_dir, resumed.run_id = cfg.output_dir, cfg.run_id
    if resolve_run_id(resumed) != run.run_id:
        resumed.run_id = run.run_id
    return resumed


def _show(value) -> str:
    """A config value as it is written on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def check_resume(cfg: RunConfig) -> None:
    """Refuse a resume (``resume=true``) that would not continue the run in its folder, before any
    work and without touching the folder.

    A resume continues the run's recorded ``config.yaml``: only the keys of
    :data:`g2po_bench.core.config.RESUME_MUTABLE_KEYS` may differ from it (iterations, tracking,
    display, workers and threads, checkpoint frequency, crash retries). The run's checkpoints must
    hold an intact one (:meth:`g2po_bench.core.rundir.RunDir.find_checkpoint`), and
    ``train.iterations`` may not be below its iteration. A folder without ``config.yaml`` or
    without a checkpoint has nothing to check (a resume then starts the run).

    Raises:
        ConfigError: a key that may not change differs (every such key is named with its
            recorded value), or ``train.iterations`` is below the checkpoint's iteration.
        CheckpointError: the run holds checkpoints and none is intact (the file at fault named).
    """
    if not cfg.resume:
        return
    run = RunDir(Path(cfg.output_dir) / resolve_run_id(cfg))
    if run.config_path.is_file():
        diffs = resume_differences(read_recorded_config(run.config_path), cfg)
        if diffs:
            keys = ", ".join(f"{k}={_show(new)} (recorded: {_show(old)})" for k, new, old in diffs)
            raise ConfigError(
                f"resume: {keys} {'differs' if len(diffs) == 1 else 'differ'} from the run's recorded config "
                f"({run.config_path}); a resume continues the recorded config, and only "
                f"{', '.join(RESUME_MUTABLE_KEYS)} may change. Drop the override, or start a separate run "
                "with run_id=NAME")
    if not run.has_checkpoint():
        return
    choice = run.find_checkpoint()
    if choice.path is None:
        raise CheckpointError(
            f"resume: no intact checkpoint in {run.root / 'checkpoints'}: {choice.describe_rejected(run.root)}. "
            "Nothing was changed; delete the run folder to start over, or start a separate run with run_id=NAME")
    if choice.iteration is not None and cfg.train.iterations < choice.iteration:
        raise ConfigError(
            f"resume: train.iterations={cfg.train.iterations} is below the iteration of the run's checkpoint "
            f"({choice.iteration}, {run.root}); pass train.iterations={choice.iteration} or more")


def run_train(cfg: RunConfig, console=None, pictures=None) -> RunDir:
    """Train ``cfg`` with its backend; returns the run folder (``<output_dir>/<run_id>``).

    ``pictures``: the tracker pictures' drawer (:class:`g2po_bench.core.tracking.RunPictures`;
    the CLI passes :class:`g2po_bench.analysis.pictures.AnalysisPictures`, a package above this
    one); None sends no pictures.

    Raises:
        ConfigError: a fresh start (``resume=false``) in a folder that already holds a finished
            or checkpointed run (:func:`check_fresh_run_folder`), or a resume that changes a key
            the run's recorded config fixes (:func:`check_resume`); nothing is touched.
        CheckpointError: a resume of a run none of whose checkpoints is intact (:func:`check_resume`).
        MissingDependencyError: ``backend=openrlhf`` without OpenRLHF and its GPU stack (an
            ``ImportError``; the message says how to install them).
        RunFolderBusy: another process holds the run folder (a ``g2po train`` or sweep job of the
            same run id); refused before any work, naming the run and that process.
        RunFolderLost: the run folder was replaced while this process trained it; it wrote nothing
            more into it.
        ValueError/RuntimeError from the backend; the run's ``status.json`` says ``failed``.
    """
    if cfg.backend == "openrlhf":
        require_stack()  # a missing GPU stack is one line, and nothing is written
    # one process per run folder (docs/run-folder.md): held from before the checks to the end
    with _hold_run_folder(cfg):
        check_fresh_run_folder(cfg)
        check_resume(cfg)
        return _train_with_backend(cfg, console, pictures)


def _hold_run_folder(cfg: RunConfig):
    """The lock on the run folder (:class:`g2po_bench.core.runlock.RunLock`) for the process that
    trains it: every process but the ranks > 0 of a multi-node OpenRLHF job, which only lend their
    GPUs to the head's Ray cluster."""
    if cfg.backend == "openrlhf":
        alloc = read_allocation()
        if alloc.multi_node and not alloc.is_head:
            return contextlib.nullcontext()
    return RunLock.acquire(run_folder(cfg))


def _train_with_backend(cfg: RunConfig, console, pictures) -> RunDir:
    if cfg.backend == "local":
        # lazy: the local trainer loads torch and transformers (about 5 s); commands that only
        # check a config or a run folder must not wait for them
        from g2po_bench.algorithms.backends.local.trainer import train

        return train(cfg, console=console, pictures=pictures)
    if cfg.backend == "openrlhf":
        try:
            # lazy: OpenRLHF (Ray, DeepSpeed, vLLM) is an optional GPU dependency
            from g2po_bench.algorithms.backends.openrlhf import train as orl_train
        except ImportError as exc:
            raise MissingDependencyError(
                "backend=openrlhf needs the OpenRLHF extra: pip install -e '.[openrlhf]' on a GPU machine "
                f"({exc})"
            ) from None
        return orl_train(cfg, console=console, pictures=pictures)
    raise ValueError(f"unknown backend {cfg.backend!r}")


def check_fresh_run_folder(cfg: RunConfig) -> None:
    """Refuse to start ``cfg`` afresh over a run that holds results.

    The run folder is ``<output_dir>/<run_id>``, and the default run id is a hash of the config,
    so running the same command twice names the same folder. A fresh start (``resume=false``)
    there would empty ``metrics.jsonl`` and ``eval.json`` of a finished run and mix its step
    tables with the new ones. When the folder holds a finished run (``status.json`` ``done``)
    or a checkpoint, this raises before any work starts; a folder with neither (a run that
    failed or was stopped before its first checkpoint) is started over as before.

    Raises:
        ConfigError: the message names the folder, what it holds, and the three ways on:
            ``resume=true`` (continue it; with a larger ``train.iterations`` to extend it),
            ``run_id=NAME`` (a separate run) or deleting the folder.
    """
    if cfg.resume:
        return

    run = RunDir(Path(cfg.output_dir) / resolve_run_id(cfg))
    root = run.root
    status = run.read_status() or {}
    if status.get("state") != "done" and not run.has_checkpoint():
        return
    what = (f"a finished run ({status.get('iteration')} of {status.get('total_iterations')} iterations)"
            if status.get("state") == "done" else
            f"a run stopped at iteration {status.get('iteration', '?')} ({status.get('state', 'unknown state')}) "
            "with a checkpoint")
    raise ConfigError(
        f"run folder {root} already holds {what}; starting it afresh would overwrite its results. "
        f"Pass resume=true to continue it (run_id={run.run_id} resume=true train.iterations=N extends it), "
        "run_id=NAME for a separate run, or delete the folder to start over")


def check_run_for_eval(run_dir: str | Path) -> tuple[Path, Path]:
    """The config file and policy checkpoint of a training run folder, checked before any
    model is loaded (``g2po eval --run RUN``).

    Args:
        run_dir: a run folder written by ``g2po train`` (``<output_dir>/<run_id>``).

    Returns:
        (``RUN/config.yaml``, ``RUN/checkpoints/latest/policy``).

    Raises:
        ConfigError: the folder does not exist, is not a training run (no ``config.yaml``), or
            has no checkpoint yet; the message says what to pass instead.
        CheckpointError: ``checkpoints/latest`` is corrupt (:func:`g2po_bench.core.checkpoints.verify_checkpoint`):
            the message names the file and, when ``checkpoints/previous`` is intact, how to evaluate it.
    """
    run = Path(run_dir)
    if not run.is_dir():
        what = "is a file, not a folder" if run.exists() else "the folder does not exist"
        raise ConfigError(f"--run {str(run)!r}: {what}; pass a run folder written by "
                          "`g2po train` (e.g. results/runs/<run_id>), or model.path=MODEL_FOLDER instead of --run")
    config = run / "config.yaml"
    if not config.is_file():
        raise ConfigError(f"--run {str(run)!r} has no config.yaml, so it is not a training run folder; pass a "
                          "folder written by `g2po train` (e.g. results/runs/<run_id>)")
    policy = run / "checkpoints" / "latest" / "policy"
    if not (policy / "config.json").is_file():
        status = RunDir(run).read_status() or {}
        if status.get("state") == "done" or int(status.get("iteration") or 0) > 0:
            # a record without its weights: committed and copied run folders leave checkpoints/ out
            done = (f"finished ({status.get('iteration')} of {status.get('total_iterations')} iterations)"
                    if status.get("state") == "done" else f"stopped at iteration {status.get('iteration')}")
            raise ConfigError(
                f"--run {str(run)!r} {done}, but its folder holds no checkpoint ({policy} is missing): the record "
                "was copied or committed without checkpoints/ (results/ keeps a run's records, not its weights); "
                "its evaluations are in RUN/eval.json; to get the weights, train the same config again (`g2po train "
                "--config RUN/config.yaml run_id=null output_dir=results/runs resume=false`), or evaluate a model "
                "folder with model.path=FOLDER")
        raise ConfigError(f"--run {str(run)!r} has no checkpoint ({policy}/config.json is missing: the run has "
                          "not finished an iteration yet); wait for its first checkpoint, resume it with "
                          "resume=true, or evaluate a model folder with model.path=FOLDER")
    problem = verify_checkpoint(policy.parent)
    if problem is not None:
        choice = RunDir(run).find_checkpoint()
        other = (f"; {choice.path.relative_to(run).as_posix()} (iteration {choice.iteration}) is intact: evaluate "
                 f"it with model.path={choice.path / 'policy'}" if choice.path is not None else "")
        raise CheckpointError(f"--run {str(run)!r}: the checkpoint is corrupt: {problem}{other}")
    return config, policy


def eval_output_dir(cfg: RunConfig, run_dir: str | Path | None, model_path: Path, name: str | None = None) -> Path:
    """Where an evaluation is written, never inside another run's folder nor over an earlier
    evaluation: ``RUN/evals/<name>`` for ``--run RUN``, else
    ``<output_dir>/evals/<env>-<model folder name>-<name>``; ``name`` defaults to the UTC
    time ``YYYYmmdd-HHMMSS``.

    Raises:
        ConfigError: an explicit ``name`` whose folder already exists.
    """
    base = Path(run_dir) / "evals" if run_dir is not None else Path(cfg.output_dir) / "evals"
    prefix = "" if run_dir is not None else f"{cfg.env.name}-{model_path.name}-"
    if name is not None:
        if not name or "/" in name or name.startswith("."):
            raise ConfigError(f"--name {name!r}: give a plain folder name, e.g. --name after-sweep")
        out = base / f"{prefix}{name}"
        if out.exists():
            raise ConfigError(f"evaluation folder {str(out)!r} already exists; pass another --name (or none for a "
                              "timestamped folder)")
        return out
    return base / (prefix + time.strftime("%Y%m%d-%H%M%S", time.gmtime()))


def _claim(out: Path) -> Path:
    """Create ``out`` (or ``out-2``, ``out-3``, ... when taken) and return it; atomic."""
    out.parent.mkdir(parents=True, exist_ok=True)
    for k in range(1, 1000):
        cand = out if k == 1 else out.with_name(f"{out.name}-{k}")
        try:
            cand.mkdir()
            return cand
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create an evaluation folder next to {str(out)!r}")


def run_eval(cfg: RunConfig, run_dir: str | Path | None = None, console=None, *,
             overrides: list[str] | None = None, name: str | None = None) -> Path:
    """Evaluate ``run_dir``'s latest checkpoint (or ``model.path``) on the eval panel of ``cfg``.

    With ``run_dir``, ``cfg`` should be the run's own config (``RUN/config.yaml`` with any
    ``overrides`` on top, as ``g2po eval --run RUN key=value`` builds it), so the environment,
    panel, step limit, prompt and model settings are the run's.

    Writes ``config.yaml`` (the config used) and ``eval.json`` (``kind: "evaluation"``,
    ``run``, ``model``, ``checkpoint_iteration``, ``overrides``, ``panel``, ``code`` (the git commit,
    :func:`g2po_bench.core.rundir.code_version`) and the EVAL record as ``history``/``before``/``final``/``best``)
    into a new folder (:func:`eval_output_dir`) and returns it. With a tracker in
    ``logging.backends`` (``tensorboard``, ``wandb``) the evaluation is also logged as a tracker
    run of its own (:func:`g2po_bench.core.tracking.track_evaluation`; step: the checkpoint's
    iteration).

    Raises:
        ConfigError: no model given, a run folder without a checkpoint, a taken ``name``;
            raised before any model is loaded.
    """
    # lazy: torch and transformers (about 5 s), loaded once the run folder and config are checked
    from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer
    from g2po_bench.algorithms.backends.local.transformers_policy import LocalPolicy

    checkpoint_iteration = None
    if run_dir is not None:
        _, model_path = check_run_for_eval(run_dir)
        state = Path(run_dir) / "checkpoints" / "latest" / "trainer_state.json"
        try:
            checkpoint_iteration = json.loads(state.read_text()).get("iteration")
        except (OSError, ValueError, AttributeError):
            checkpoint_iteration = None
    elif cfg.model.path is not None:
        model_path = Path(cfg.model.path)
    else:
        raise ConfigError("g2po eval needs --run RUN_DIR (a training run folder) or model.path=MODEL_FOLDER")
    out_path = eval_output_dir(cfg, run_dir, model_path, name)
    bench = get_benchmark(cfg.env.name)
    panel = select_panel(bench.load_tasks(cfg.env, cfg.env.eval_split), cfg.eval.num_tasks)
    model, tok = load_model_and_tokenizer(model_path, dtype=cfg.model.dtype, device=cfg.model.device)
    policy = LocalPolicy(model, tok, max_prompt_tokens=cfg.train.max_prompt_tokens)
    with EnvPool(bench, cfg.env, cfg.env.num_workers) as pool:
        ev = evaluate_panel(cfg, policy, pool, bench, panel, 0)  # as the trainers evaluate
    out = RunDir(_claim(out_path))
    atomic_write_text(out.config_path, config_to_yaml(cfg))
    atomic_write_json(out.eval_path, {
        "kind": "evaluation", "env": cfg.env.name, "model": str(model_path),
        "run": str(Path(run_dir).resolve()) if run_dir is not None else None,
        "checkpoint_iteration": checkpoint_iteration, "overrides": list(overrides or []),
        "panel": {"split": cfg.env.eval_split, "num_tasks": cfg.eval.num_tasks, "size": len(panel),
                  "episodes_per_task": cfg.eval.episodes_per_task, "temperature": cfg.eval.temperature},
        "code": code_version(), "history": [ev], "before": ev, "final": ev, "best": ev,
    })
    # the trackers get the evaluation as a run of its own (a training run's tracker steps only
    # increase; this one is named after the trained run and its folder), in the run's W&B group
    name = (f"{Path(run_dir).resolve().name}-eval-{out.root.name}" if run_dir is not None
            else out.root.name)
    track_evaluation(out.root, cfg.logging, name=name, ev=ev, step=checkpoint_iteration or 0,
                     config=config_to_dict(cfg), config_yaml=config_to_yaml(cfg),
                     info=run_info(name, kind="evaluation", model=str(model_path),
                                   run=str(Path(run_dir).resolve()) if run_dir is not None else None,
                                   checkpoint_iteration=checkpoint_iteration),
                     log=console.print if console is not None else None)
    if console is not None:

        per_type = ", ".join(f"{t} {100 * r:.1f} %" for t, r in sorted(ev["per_task_type"].items()))
        console.print(f"held-out success {format_rate_ci(ev)} at temperature {cfg.eval.temperature:g}; "
                      f"per task type: {per_type}")
    return out.root
