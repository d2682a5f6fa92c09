"""What every trainer backend shares, so that the choice of backend changes no result semantics.

- The estimator: the training loop (:mod:`.loop`, one for every backend) calls the run's bound estimator
  (:func:`g2po_bench.algorithms.registry.bind_run_estimator`, bound once when the loop is made) with the
  iteration's rollouts and critic values, so one config gives the same per-step advantages for
  the same rollouts, whether trained locally or on OpenRLHF; :func:`needs_critic` says whether
  the trainer trains a critic. Nothing here knows an estimator.
- :func:`eval_summary`: the ``eval.json`` record of ``g2po_bench/core/rundir.py`` from the evaluation
  history.
- :func:`load_task_splits`, :func:`training_rollouts`, :func:`evaluate_panel`,
  :func:`rollout_metrics`, :func:`eval_metrics`: one iteration's task choice, rollout
  collection, evaluation and logged names, the same on every backend (a run's metrics.jsonl
  reads the same whichever backend wrote it).
- :func:`step_table_columns`, :func:`record_step_table`: the per-iteration step table of
  :mod:`g2po_bench.core.steptable` (``record_graphs=true``), from which ``g2po graph`` draws a group.
- :class:`TruncationWarnings`: the one-time warnings when prompts are cut to
  ``train.max_prompt_tokens`` (training and evaluation alike).

numpy and the benchmark harness only: importable without torch or OpenRLHF.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import numpy as np

from g2po_bench.algorithms.registry import (
    INPUTS,
    AdvantageResult,
    estimator_inputs,
    run_estimator_options,
)
from g2po_bench.benchmarks.evaluation import evaluate, select_panel
from g2po_bench.benchmarks.rollout import RolloutBatch, collect_rollouts, success_by_task_type
from g2po_bench.core.steptable import BASE_COLUMNS, write_step_table

__all__ = ["STALE_SAMPLER_GAP", "StaleSamplerWarning", "SamplerGapMonitor", "needs_critic",
           "eval_summary", "eval_record",
           "at_train_temperature", "train_temperature_eval_due", "load_task_splits", "training_tasks",
           "training_rollouts", "training_rollout_settings", "evaluate_panel", "record_evaluation",
           "rollout_metrics", "eval_metrics",
           "step_table_columns", "record_step_table", "ACTION_CHARS", "TruncationWarnings",
           "PromptTruncationWarning"]

#: longest action text kept in a step table (invalid outputs carry the parser's fallback text)
ACTION_CHARS = 80


def needs_critic(cfg) -> bool:
    """Whether the configured estimator, with the run's options
    (:func:`g2po_bench.algorithms.registry.run_estimator_options`), declares the input ``values`` (critic
    V(s_t)): the trainer then trains a critic."""
    return "values" in estimator_inputs(cfg.algorithm.name, run_estimator_options(cfg))


def eval_summary(cfg, history: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``eval.json`` content for an evaluation ``history`` (EVAL records, oldest first):
    ``before`` is the iteration-0 evaluation, ``final`` the last, ``best`` the highest success
    (ties: higher score, then earlier iteration). ``panel`` records the split, ``num_tasks`` asked
    for, ``size`` (tasks in the panel played, from the latest evaluation), episodes per task and
    temperature."""
    best = max(history, key=lambda e: (e["success_rate"], -np.inf if e.get("score") is None else e["score"],
                                       -e["iteration"]))
    return {
        "env": cfg.env.name,
        "panel": {"split": cfg.env.eval_split, "num_tasks": cfg.eval.num_tasks,
                  "size": history[-1].get("panel_size"),
                  "episodes_per_task": cfg.eval.episodes_per_task, "temperature": cfg.eval.temperature},
        "history": history,
        "before": next((e for e in history if e["iteration"] == 0), None),
        "final": history[-1],
        "best": best,
    }


def at_train_temperature(cfg):
    """``cfg`` with ``eval.temperature`` set to ``train.temperature``: the evaluation that
    ``eval.at_train_temperature`` adds before RL and after the last iteration (same panel, same
    evaluation seed). Decoding at the reference 0.4 can hide what RL changed in the sampled
    policy (docs/cpu-proxy.md)."""
    return dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, temperature=cfg.train.temperature))


def train_temperature_eval_due(cfg, evals: dict[str, dict[str, Any]], which: str, iteration: int) -> bool:
    """Whether ``eval.at_train_temperature`` still has to play ``which`` ("before" or "final") at
    ``iteration``: on, and no record of that iteration yet (a resumed run does not replay it; a
    run resumed with more iterations replays "final" at its new last iteration)."""
    return bool(cfg.eval.at_train_temperature) and (evals.get(which) or {}).get("iteration") != iteration


def eval_record(cfg, history: list[dict[str, Any]], train_temperature_evals: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``eval.json``: :func:`eval_summary` of ``history`` plus, when any were played,
    ``at_train_temperature`` = ``{"temperature": train.temperature, "before": EVAL, "final": EVAL}``
    (``train_temperature_evals`` keyed "before"/"final"). Both backends write this record."""
    rec = eval_summary(cfg, history)
    if train_temperature_evals:
        rec["at_train_temperature"] = {"temperature": cfg.train.temperature, **train_temperature_evals}
    return rec


def training_tasks(cfg, bench) -> list:
    """The training tasks of ``cfg.env``: ``cfg.env.train_split`` in the benchmark's order, its
    first ``cfg.env.max_train_tasks`` only when that is > 0 (tests and quick studies)."""
    tasks = bench.load_tasks(cfg.env, cfg.env.train_split)
    return tasks[:cfg.env.max_train_tasks] if cfg.env.max_train_tasks > 0 else tasks


def load_task_splits(cfg, bench) -> tuple[list, list]:
    """(training tasks, evaluation panel) of ``cfg.env``: :func:`training_tasks` and the panel of
    ``cfg.eval.num_tasks`` tasks of ``cfg.env.eval_split``
    (:func:`g2po_bench.benchmarks.evaluation.select_panel`).

    Raises:
        ValueError: the training split holds no task.
    """
    train_tasks = training_tasks(cfg, bench)
    if not train_tasks:
        raise ValueError(f"no training tasks in split {cfg.env.train_split!r}")
    panel = select_panel(bench.load_tasks(cfg.env, cfg.env.eval_split), cfg.eval.num_tasks)
    return train_tasks, panel


def demonstration_tasks(cfg, train_tasks: list) -> list:
    """The training tasks whose expert walkthroughs the local warm start replays (its SFT data,
    and the tiny model's tokenizer corpus): at most ``train.sft_max_tasks`` of ``train_tasks``,
    evenly spaced over the list (deterministic)."""
    k = cfg.train.sft_max_tasks
    if len(train_tasks) <= k:
        return list(train_tasks)
    idx = np.linspace(0, len(train_tasks) - 1, k).round().astype(int)
    return [train_tasks[i] for i in sorted(set(idx.tolist()))]


def first_step_tasks(cfg, train_tasks: list) -> list:
    """The training tasks whose expert's *first* step alone the warm start imitates besides the
    whole demonstrations (``train.sft_first_step_tasks``): at most that many of ``train_tasks``
    without those of :func:`demonstration_tasks`, evenly spaced over them (deterministic)."""
    k = cfg.train.sft_first_step_tasks
    if k <= 0:
        return []
    whole = {t.task_id for t in demonstration_tasks(cfg, train_tasks)}
    rest = [t for t in train_tasks if t.task_id not in whole]
    if len(rest) <= k:
        return rest
    idx = np.linspace(0, len(rest) - 1, k).round().astype(int)
    return [rest[i] for i in sorted(set(idx.tolist()))]


def rl_tasks(cfg, train_tasks: list) -> list:
    """The tasks RL draws its groups from (``train.rl_tasks``): all of ``train_tasks``, or with
    ``"without_demos"`` those :func:`demonstration_tasks` left out, in their order.

    Raises:
        ValueError: ``"without_demos"`` leaves no task (the demonstrations use every training
            task: lower ``train.sft_max_tasks`` or generate more training games).
    """
    if cfg.train.rl_tasks == "all":
        return list(train_tasks)
    used = {t.task_id for t in demonstration_tasks(cfg, train_tasks)}
    left = [t for t in train_tasks if t.task_id not in used]
    if not left:
        raise ValueError(
            f"train.rl_tasks=without_demos leaves no training task: the warm start's demonstrations come "
            f"from all {len(train_tasks)} of them; set train.sft_max_tasks below {len(train_tasks)} or "
            f"generate more training games (env.generated_train_games)")
    return left


def training_rollouts(cfg, policy, pool, bench, train_tasks, iteration: int, on_step=None) -> RolloutBatch:
    """Iteration ``iteration``'s rollouts: ``train.groups_per_batch`` tasks drawn without
    replacement (seeded by ``(seed, iteration)``), ``train.group_size`` episodes each, sampled
    at ``train.temperature``/``train.top_p`` (GiGPO/G2PO protocol: groups of N on one task).
    ``on_step(t, num_active)`` is called before every lock-step step (progress display)."""
    rng = np.random.default_rng([cfg.seed, iteration])
    k = min(cfg.train.groups_per_batch, len(train_tasks))
    chosen = [train_tasks[i] for i in sorted(rng.choice(len(train_tasks), size=k, replace=False))]
    return collect_rollouts(policy, pool, bench, chosen, seed=cfg.seed * 100003 + iteration, on_step=on_step,
                            **training_rollout_settings(cfg))


def training_rollout_settings(cfg) -> dict[str, Any]:
    """The keywords of :func:`g2po_bench.benchmarks.rollout.collect_rollouts` that make a training
    iteration's episodes (everything but the tasks, the seed and the progress callback): group
    size, step limit, sampling temperature and top-p, response length, history, success reward,
    prompt style, refusal stop and ``refused_is_invalid``. The credit instrument
    (:mod:`g2po_bench.analysis.credit`) samples and continues episodes with the same settings."""
    return {
        "group_size": cfg.train.group_size, "max_steps": cfg.env.max_steps,
        "temperature": cfg.train.temperature, "top_p": cfg.train.top_p,
        "max_new_tokens": cfg.train.max_response_tokens, "history_length": cfg.env.history_length,
        "success_reward": cfg.algorithm.success_reward, "prompt_style": cfg.env.prompt,
        "stop_after_refusals": cfg.env.stop_after_refusals, "refused_is_invalid": cfg.env.refused_is_invalid,
    }


def evaluate_panel(cfg, policy, pool, bench, panel, iteration: int, on_progress=None) -> dict[str, Any]:
    """The evaluation record (:func:`g2po_bench.benchmarks.evaluation.evaluate`) of ``panel`` at
    ``eval.temperature`` with the training step limit, response length and history, as many
    episodes at a time as a training iteration plays (``train.groups_per_batch x
    train.group_size``: the pool already holds that many slots; 128 episodes at once play the
    CPU default's panel 16 % faster than 32). ``on_progress(done_episodes, total_episodes)`` is
    called as episode batches finish."""
    per_batch = cfg.train.groups_per_batch * cfg.train.group_size
    return evaluate(
        policy, pool, bench, panel, iteration=iteration, max_steps=cfg.env.max_steps,
        batch_tasks=max(1, per_batch // max(1, cfg.eval.episodes_per_task)),
        temperature=cfg.eval.temperature, max_new_tokens=cfg.train.max_response_tokens,
        seed=cfg.seed + 7919, episodes_per_task=cfg.eval.episodes_per_task,
        history_length=cfg.env.history_length, prompt_style=cfg.env.prompt, on_progress=on_progress,
        stop_after_refusals=cfg.env.stop_after_refusals,
    )


def record_evaluation(history: list[dict[str, Any]], ev: dict[str, Any]) -> list[dict[str, Any]]:
    """``history`` with ``ev`` appended, after dropping records of iteration >= ``ev``'s (a
    resumed run re-evaluates an iteration it had evaluated before it was killed)."""
    return [e for e in history if e["iteration"] < ev["iteration"]] + [ev]


def rollout_metrics(rb: RolloutBatch) -> dict[str, Any]:
    """The ``train/*`` metrics of one iteration's rollouts: success rate, mean episode length
    (steps), invalid-action fraction, number of steps, crashed episodes, episodes ended by
    ``env.stop_after_refusals`` (``train/stuck``) and all episodes, mean response length
    (tokens), ``train/truncated_prompts`` (this iteration's training steps whose prompt was
    cut to ``train.max_prompt_tokens``: a count per iteration, not a running total),
    ``train/truncated_responses`` (fraction of this iteration's steps whose response was cut
    at ``train.max_response_tokens``), the success rate per task type, and where the environment
    reports scores ``train/score`` (WebShop: mean reward x 100 over every episode, a non-buyer 0).
    Both truncation figures come from the rollout (``Generation.info``), so every backend reports
    them alike."""
    trajs = rb.trajectories
    scores = [t.get("score") for t in trajs]
    scored = {"train/score": float(np.mean(scores))} if trajs and all(s is not None for s in scores) else {}
    return {
        **scored,
        "train/truncated_prompts": rb.truncated_prompts,
        "train/truncated_responses": rb.truncated_response_frac,
        "train/success_rate": rb.success_rate,
        "train/episode_len": float(np.mean([t["num_steps"] for t in trajs])) if trajs else 0.0,
        "train/invalid_frac": float((~rb.steps.action_valid).mean()) if len(rb.steps) else 0.0,
        "train/steps": len(rb.steps),
        "train/crashed": int(sum(t["crashed"] for t in trajs)),
        "train/stuck": int(sum(t.get("stuck", False) for t in trajs)),
        "train/episodes": len(trajs),
        "train/response_tokens": float(np.mean([len(r) for r in rb.response_ids])) if rb.response_ids else 0.0,
        **{f"train/success/{k}": v for k, v in success_by_task_type(trajs).items()},
    }


def eval_metrics(ev: dict[str, Any]) -> dict[str, Any]:
    """The ``eval/*`` metrics of an evaluation record: success rate, score, invalid-action
    fraction, ``eval/truncated_prompts`` (count of this evaluation's steps whose prompt was
    cut), ``eval/truncated_responses`` (fraction of its steps whose response was cut at the
    token limit) and the success rate per task type."""
    return {"eval/success_rate": ev["success_rate"], "eval/score": ev["score"],
            "eval/invalid_frac": ev["invalid_frac"],
            "eval/truncated_prompts": ev["truncated_prompts"],
            "eval/truncated_responses": ev["truncated_responses"],
            **{f"eval/success/{k}": v for k, v in ev["per_task_type"].items()}}


def step_table_columns(cfg, rb: RolloutBatch, res: AdvantageResult,
                       values: np.ndarray | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The columns and metadata of one iteration's step table (:mod:`g2po_bench.core.steptable`).

    Args:
        cfg: the RunConfig (estimator name and options).
        rb: the iteration's RolloutBatch (B rows; ``actions`` may be empty, then "" is recorded).
        res: the estimator's AdvantageResult on ``rb.steps`` (advantages and row terms).
        values: (B,) critic values V(s_t), critic estimators only.

    Returns:
        ``(columns, meta)``: column name -> B values, and the JSON-serialisable metadata
        (``env``, ``estimator``, ``options`` without array-valued ones, ``row_terms``).

    Raises:
        ValueError: a row term is named like a base column.
    """

    st = rb.steps
    n = len(st)
    traj_task = {t["traj_id"]: (t["task_id"], t["task_type"]) for t in rb.trajectories}
    tasks = [traj_task.get(int(t), ("", "")) for t in st.traj_id]
    actions = rb.actions if len(rb.actions) == n else [""] * n
    columns: dict[str, Any] = {
        "group_id": st.group_id, "traj_id": st.traj_id, "step": st.step, "state_key": st.state_key,
        "state_label": rb.state_labels, "action": [a[:ACTION_CHARS] for a in actions],
        "valid": st.action_valid, "reward": st.reward, "success": st.success,
        "task_id": [t[0] for t in tasks], "task_type": [t[1] for t in tasks],
        "advantage": res.advantages,
    }
    for key, arr in res.row_terms.items():
        if key in BASE_COLUMNS:
            raise ValueError(f"row term {key!r} collides with a step-table column; rename it")
        columns[key] = arr
    if values is not None:
        columns["critic_value"] = np.asarray(values, dtype=np.float64)
    # the other declared inputs that have a step-table column (e.g. EMPG's entropies) are
    # recorded too, so that `g2po graph` can recompute the estimator from the table
    options = run_estimator_options(cfg)
    for key in estimator_inputs(cfg.algorithm.name, options):
        column = INPUTS[key].step_table_column
        attr = INPUTS[key].rollout_attribute
        value = getattr(rb, attr, None) if attr else None
        if column and column not in columns and value is not None and len(value) == n:
            columns[column] = value
    if res.returns is not None:
        columns["return"] = res.returns
    json.dumps(options)  # the config's options are plain YAML values
    meta = {"env": cfg.env.name, "estimator": cfg.algorithm.name, "options": options,
            "row_terms": sorted(res.row_terms)}
    return columns, meta


def record_step_table(run_root, cfg, rb: RolloutBatch, res: AdvantageResult, iteration: int,
                      values: np.ndarray | None = None) -> dict[str, float]:
    """Write iteration ``iteration``'s step table when ``cfg.record_graphs`` is on.

    Returns:
        ``{"record/bytes": file size in bytes, "record_s": seconds spent}`` for metrics.jsonl,
        or ``{}`` when recording is off.
    """
    if not getattr(cfg, "record_graphs", False):
        return {}

    t0 = time.time()
    columns, meta = step_table_columns(cfg, rb, res, values)
    path = write_step_table(run_root, iteration, columns, meta)
    return {"record/bytes": path.stat().st_size, "record_s": time.time() - t0}


class PromptTruncationWarning(UserWarning):
    """Prompts were longer than ``train.max_prompt_tokens`` and kept only their last tokens."""


#: ``train/sampler_logprob_gap`` (mean absolute difference per token between the sampler's own
#: log-probs and the trainer's old log-probs of the same tokens) above which the sampler is taken
#: to have drawn from other weights than the trainer's old policy (a stale sampler, TRL issue
#: 5312), per compute dtype (``model.dtype``). Measured with ``python scripts/sampler_gap.py`` on the
#: tiny default-size model (hidden 128, 2 layers, vocabulary 1024; 6 prompts x 24 tokens, 4 batches;
#: 2-core AMD EPYC CPU, torch 2.13):
#: same weights 1.3e-7 - 2.0e-7 in float32 and 4.7e-4 - 7.1e-4 in bfloat16 (rounding noise); one
#: update behind, float32: 4.1e-2 - 1.6e-1 at lr 3e-4 (the CPU default), 1.9e-4 - 5.8e-4 at lr 1e-6
#: (the reference's). The float32 threshold sits 500x above its noise and catches both; the bfloat16
#: one 7x above the noise measured there (GPU kernels and large models were not measured): a
#: sampler one update behind at lr 1e-6 (7.5e-4 - 9.1e-4 in bfloat16) is within bfloat16 noise and
#: cannot be told from it.
STALE_SAMPLER_GAP = {"float32": 1e-4, "bfloat16": 5e-3}


class StaleSamplerWarning(UserWarning):
    """``train/sampler_logprob_gap`` exceeded :data:`STALE_SAMPLER_GAP`: the sampler's weights
    differ from the trainer's old policy."""


class SamplerGapMonitor:
    """Warn once per run when ``train/sampler_logprob_gap`` exceeds the threshold of the compute
    dtype (:data:`STALE_SAMPLER_GAP`), naming the iteration.

    Args:
        compute_dtype: ``model.dtype`` ("float32" or "bfloat16"; another name uses the bfloat16 one).
        log: ``log(message)`` (the trainer's console); None issues a :class:`StaleSamplerWarning`.
        warned: the ``record`` of an earlier warning of this run (a resumed run warns no second time).

    Call :meth:`observe` with each iteration's metrics record; :attr:`record` is then
    ``{"iteration", "gap", "threshold", "compute_dtype"}`` of the warning (None before), what the
    run keeps in ``status.json`` ``warnings.stale_sampler``.
    """

    def __init__(self, compute_dtype: str, log=None, warned: dict[str, Any] | None = None):
        self.compute_dtype = str(compute_dtype)
        self.threshold = STALE_SAMPLER_GAP.get(self.compute_dtype, STALE_SAMPLER_GAP["bfloat16"])
        self.log = log
        self.record: dict[str, Any] | None = dict(warned) if warned else None

    def observe(self, rec: dict[str, Any], iteration: int) -> str | None:
        """The warning issued for this record (None when the gap is absent, within the threshold,
        or the run has warned before)."""
        gap = rec.get("train/sampler_logprob_gap")
        if gap is None or self.record is not None or not gap > self.threshold:
            return None
        self.record = {"iteration": int(iteration), "gap": float(gap), "threshold": self.threshold,
                       "compute_dtype": self.compute_dtype}
        msg = (f"warning: the sampler drew from other weights than the trainer's at iteration {iteration}: "
               f"train/sampler_logprob_gap {gap:.3g} > {self.threshold:g} (the {self.compute_dtype} rounding noise "
               "stays below it), so the PPO ratio and the KL are computed against another policy than the one "
               "that sampled. Check that the sampler's weights are updated after every optimizer step. "
               "Recorded in status.json warnings.stale_sampler (warned once).")
        if self.log is not None:
            self.log(msg)
        else:
            import warnings

            warnings.warn(msg, StaleSamplerWarning, stacklevel=2)
        return msg


class TruncationWarnings:
    """Warn once per run and phase (training, evaluation) the first time prompts are cut.

    Args:
        max_prompt_tokens: the limit (``cfg.train.max_prompt_tokens``), quoted in the message.
        log: ``log(message)`` (e.g. the trainer's console); None issues a Python
            :class:`PromptTruncationWarning` instead.

    Call :meth:`observe` with each metrics record (``train/*`` and/or ``eval/*`` keys).
    """

    def __init__(self, max_prompt_tokens: int, log=None):
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.log = log
        self.warned: set[str] = set()

    def observe(self, rec: dict[str, Any], iteration: int) -> list[str]:
        """Warn for each phase whose ``<phase>/truncated_prompts`` in ``rec`` is > 0 for the
        first time; returns the messages issued (empty when none)."""
        out = []
        for phase, what in (("train", "training"), ("eval", "evaluation")):
            n = rec.get(f"{phase}/truncated_prompts") or 0
            if n > 0 and phase not in self.warned:
                self.warned.add(phase)
                out.append(f"warning: {n} {what} prompt(s) at iteration {iteration} were longer than "
                           f"train.max_prompt_tokens={self.max_prompt_tokens} tokens and kept only their last "
                           f"{self.max_prompt_tokens}; raise train.max_prompt_tokens or shorten the history "
                           f"(env.history_length). Counted per iteration as {phase}/truncated_prompts "
                           "(warned once).")
        for msg in out:
            if self.log is not None:
                self.log(msg)
            else:
                import warnings

                warnings.warn(msg, PromptTruncationWarning, stacklevel=2)
        return out
