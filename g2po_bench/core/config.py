"""The run config: one typed object per run, loaded from YAML and dotted ``key=value`` overrides.

docs/design-notes.md "Rules of the house": typed dataclasses, loaded from YAML, overridable from
the command line; the resolved config is saved with every run and is enough to rerun it. Presets
(``benchmarks/<name>/presets/*.yaml``) reproduce the reference settings (the papers' and verl-agent
``examples/gigpo_trainer/run_alfworld.sh`` and ``run_webshop.sh``; docs/design-notes.md
"Training-loop facts"); the dataclass defaults are the CPU default of the main job (``g2po train``
with no arguments: a tiny model on generated ALFWorld games, about 10-15 minutes on 2 cores).

This module is the ground floor: it knows the schema and the checks that need nothing but the
schema (:func:`parse_config`, :func:`validate_config`). The checks of a benchmark's own settings
and of an estimator's options belong to the benchmark and the estimator; the suite's entry point
:func:`g2po_bench.runconfig.load_config` adds them (and finds presets by name). Validation
happens before any work starts: an unknown key, a value of the wrong type or an out-of-range
value raises :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from g2po_bench.core.tracking import TrackingError, check_installed

__all__ = [
    "ConfigError",
    "EnvConfig",
    "AlgorithmConfig",
    "ModelConfig",
    "TrainConfig",
    "EvalConfig",
    "LoggingConfig",
    "RunConfig",
    "parse_config",
    "validate_config",
    "resolve_logprob_source",
    "config_to_dict",
    "config_to_yaml",
    "config_hash",
    "resolve_run_id",
    "resolve_device",
    "expand_shorthands",
    "require",
    "output_folder_problem",
    "COMMON_ALGORITHM_KEYS",
    "SECTION_SHORTHANDS",
    "LOSS_AGG_MODES",
    "NON_SEMANTIC_KEYS",
    "TRACKER_BACKENDS",
    "RESUME_MUTABLE_KEYS",
    "read_recorded_config",
    "resume_differences",
]

RL_TASK_POOLS = ("all", "without_demos")  # train.rl_tasks
# estimator inputs (algorithms/registry/spec.py INPUTS) that backend=openrlhf cannot supply
OPENRLHF_LACKS = ("entropies",)
OLD_LOGPROBS = ("auto", "recompute", "sampler")  # train.old_logprobs
#: train.loss_agg_mode: how a loss is aggregated over tokens and samples (verl core_algos agg_loss)
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
#: the rules that cut step samples into optimizer steps (algorithms/backends/batching.py)
MINI_BATCH_RULES = ("fixed", "balanced")
#: train.mini_batch_split: a rule, or "auto" (resolved when the config is loaded: balanced for
#: backend=local, fixed for backend=openrlhf, which cuts its own mini-batches)
MINI_BATCH_SPLITS = ("auto", *MINI_BATCH_RULES)
#: the keys of ``algorithm`` that every estimator receives (the registry's common options): each has
#: one spelling, ``algorithm.<key>``; the same name under ``algorithm.options`` is refused
COMMON_ALGORITHM_KEYS = ("mode", "gamma", "step_weight", "invalid_penalty", "success_reward")
#: ``section=VALUE`` on the command line means the section's main key (the prompting baselines'
#: shorthands, for every command): ``env=webshop`` is ``env.name=webshop``
SECTION_SHORTHANDS = {"env": "env.name", "algorithm": "algorithm.name", "model": "model.path"}


class ConfigError(ValueError):
    """A config key or value is wrong; the message names the key and how to fix it."""


@dataclass
class EnvConfig:
    """Which benchmark, which tasks, and how states are keyed.

    ``data_dir`` None means the embedded default: games generated offline from the
    ``alfworld`` wheel (ALFWorld) or the synthetic catalogue (WebShop), cached under
    ``generated_dir``. A path means a folder in the benchmark's own layout (e.g.
    ``../shared/data/alfworld`` with ``json_2.1.1/<split>/...``).
    """

    name: str = "alfworld"  # benchmark: alfworld | webshop | appworld | toy (`g2po config --presets` lists presets)
    data_dir: str | None = None  # null: the embedded default (generated offline); a path: the benchmark's own data layout
    train_split: str = "train"  # split the RL and warm-start tasks come from
    eval_split: str = "valid_seen"  # held-out split of the evaluation panel
    task_types: list[str] = field(default_factory=list)  # empty = all task types
    max_train_tasks: int = 0  # train on the first N tasks of train_split only (0 = all): tests, quick studies
    max_steps: int = 15  # step limit of an episode (environment steps, counted from its start)
    # "auto": the estimator's reference key (GiGPO: "raw", the raw observation; G2PO and the
    # rest: "reference"); load_config resolves it, so the saved config records the key used
    state_key: str = "auto"  # "auto" | "reference" | "raw"
    history_length: int = 3  # past (observation, action) pairs shown in the prompt
    # end an episode (a failure) after this many consecutive actions the engine refused
    # (ALFWorld's "Nothing happens."; Observation.info["refused"]); 0 = never, the reference (the
    # step limit alone ends an episode; the GPU presets set 0). The CPU proxy uses 2: a stuck tiny
    # model otherwise repeats a refused command until max_steps, those duplicate steps dominate
    # the batch, and iterations take twice as long (measured: 32 s -> 17 s)
    stop_after_refusals: int = 2
    # count a refused action as an invalid one: penalised by algorithm.invalid_penalty like a
    # malformed output (the reference penalises malformed outputs only; a CPU-proxy option)
    refused_is_invalid: bool = False
    num_workers: int = 0  # 0 = one per CPU this process may use (affinity, SLURM, cgroup quota)
    # recycle an environment worker process after it started this many episodes (0 = never);
    # bounds whatever memory an environment library keeps per game beyond what the benchmark
    # bounds itself (g2po_bench/runtime/workers.py; ALFWorld's engine drops each game's interned facts and
    # keeps ~16 games' translations, benchmarks/alfworld/engine.py "Memory"). The CPU proxy's 2
    # workers start 64 episodes each per iteration on 16 games: 1024 recycles every 16 iterations
    # (a recycle costs ~2.5 s of process start-up); the GPU presets, with many more workers, keep 256
    worker_max_episodes: int = 1024
    # generated-game settings (embedded default)

    generated_dir: str = "results/cache/alfworld_generated"  # cache folder of the ALFWorld games generated offline
    generated_train_games: int = 1200  # ALFWorld games generated offline for the train split
    generated_eval_games: int = 120  # ALFWorld games generated offline for the held-out split
    generated_max_receptacles: int = 2  # at most this many receptacles per generated scene, plus the appliance the task needs
    # "seen": eval games on the training floor plans (new games, like ALFWorld's valid_seen,
    # the papers' in-distribution split); "unseen": ALFRED's held-out floor plans (valid_unseen)
    generated_eval_scenes: str = "seen"
    generated_seed: int = 0  # seed of the offline game generation
    # the folder of the benchmarks' caches that are not games (WebShop's synthetic catalogue and
    # search index); relative paths are relative to the working directory
    cache_dir: str = "results/cache"
    webshop_observation_mode: str = "text"  # "text" | "text_rich"
    # "reference": the verl-agent/G2PO step prompt (real models); "compact": a short transcript
    # for the tiny CPU model (ALFWorld and WebShop: build_compact_prompt of their prompt.py);
    # "auto" (resolved when the config is loaded, the saved config records the result): compact
    # for ALFWorld with the tiny model (model.path unset), reference otherwise
    prompt: str = "auto"
    # the purchase reward: "original" (the reference's get_reward, quirks included) or
    # "lenient" (this project's earlier, more accepting option matching; not comparable)
    webshop_reward: str = "original"
    # nouns of the reward's type term: a spaCy model ("en_core_web_sm", the reference's) or
    # "heuristic" (word lists; no spaCy needed); a missing model fails, never falls back
    webshop_nouns: str = "en_core_web_sm"
    # the expert of the warm start's demonstrations (benchmarks/webshop/expert.py): "reference"
    # (finds the target, searching the instruction, the target's title or its scraping query,
    # turning results pages) or "instruction" (searches the instruction and buys the best product
    # of the first results page: what a policy that sees only the page can learn; the CPU preset's)
    webshop_expert: str = "reference"
    # the reward RL trains on (Benchmark.step_reward): "success" (the reference, verl-agent/G2PO:
    # algorithm.success_reward on a purchase that scores 1, else 0) or "score" (the original
    # WebShop's graded reward, as Yao et al. 2022 train on it: algorithm.success_reward x the
    # purchase reward in [0, 1] on the buying step). Evaluations report success and score either way.
    # G2PO, CRBC and GraphGPO value an episode's end by its success, not its reward: under "score"
    # G2PO penalises buying below a score of 1 (docs/webshop-cpu.md)
    webshop_train_reward: str = "success"
    # AppWorld (benchmarks/appworld): the interpreter with the appworld package (None = find
    # it: $G2PO_APPWORLD_PYTHON, this one, ~/.cache/g2po/appworld-venv), where the synthetic
    # default tasks are built when data_dir is None, the environment's own interaction limit
    # (reference default 50; the rollout's max_steps usually ends episodes first), AppWorld's
    # per-cell timeout (reference 50 s), the hard per-request limit that kills a hanging
    # server (the episode fails), and the difficulty levels kept (reference [1, 2]; [] = all)

    appworld_python: str | None = None  # interpreter with the appworld package (null: $G2PO_APPWORLD_PYTHON, this one, ~/.cache/g2po/appworld-venv)
    appworld_generated_dir: str = "results/cache/appworld_synthetic"  # cache folder of the synthetic AppWorld tasks
    appworld_max_interactions: int = 50  # AppWorld's own step limit of an episode (reference 50)
    appworld_timeout_seconds: int = 50  # AppWorld's own per-cell time limit, seconds (reference 50)
    appworld_cell_timeout: float = 60.0  # hard limit of one cell, seconds: a hang beyond it ends the episode as failed and restarts the server
    appworld_difficulties: list[int] = field(default_factory=list)  # AppWorld task difficulties kept (empty = all)
    # an evaluation split whose game count differs from the official one (ALFWorld valid_seen 140,
    # valid_unseen 134: benchmarks/alfworld/download.py EXPECTED_SPLITS; e.g. games without the
    # "solvable" key from an older or partial download, which the loader leaves out) fails before
    # any work unless this is true; either way a warning names the games left out
    allow_incomplete_eval_split: bool = False


@dataclass
class AlgorithmConfig:
    """The advantage estimator and its options (one page per estimator: docs/estimators/).

    ``name`` is a registered estimator (``g2po algorithms`` lists them). ``options`` carries
    estimator-specific extras (ablation switches); unknown ones fail before any work.
    ``module`` names one more module to import before validation (``pkg.module``: an estimator
    of a package that is not installed with an entry point; ``docs/extending.md``); None (the
    default) imports nothing and is left out of the config hash.
    """

    name: str = "g2po"  # registered estimator (`g2po algorithms` lists them)
    mode: str = "mean_std_norm"  # "mean_std_norm" (ALFWorld reference) | "mean_norm" (WebShop)
    gamma: float = 0.95  # discount of the step returns (reference 0.95)
    step_weight: float = 1.0  # G2PO w / GiGPO omega
    invalid_penalty: float = 0.1  # reward subtracted for an invalid action (reference 0.1)
    success_reward: float = 10.0  # episode reward of a success (reference 10)
    options: dict[str, Any] = field(default_factory=dict)  # estimator-specific options (`g2po algorithms` lists each one's)
    module: str | None = None  # one more module to import before validation (an out-of-tree estimator)


@dataclass
class ModelConfig:
    """The policy model. ``path`` None builds the tiny CPU model (Llama-style, byte-level BPE)."""

    path: str | None = None  # model folder (Hugging Face layout); null: the tiny CPU model built locally
    hidden_size: int = 128  # tiny model: hidden size
    num_layers: int = 2  # tiny model: transformer layers
    num_heads: int = 4  # tiny model: attention heads
    intermediate_size: int = 256  # tiny model: MLP width
    vocab_size: int = 1024  # tiny model: byte-level BPE vocabulary size
    max_position_embeddings: int = 1024  # tiny model: longest sequence, tokens
    # tiny model: its tokenizer keeps each string a policy of the benchmark copies into its actions as
    # one token, added to the BPE (Benchmark.tokenizer_words; WebShop: the catalogue's product ids,
    # as pages show them and in lower case, and its option values). Off, the BPE cuts an id such as
    # B07XTK3P89 into about 6 pieces, and a 2-layer model trained from scratch copies them from a
    # results page poorly (docs/webshop-cpu.md)
    item_tokens: bool = False
    dtype: str = "float32"  # "float32" | "bfloat16"
    device: str = "auto"  # "auto" | "cpu" | "cuda"
    # torch intra-op threads on a CPU: 0 = every CPU this process may use (g2po_bench.runtime.cpus.usable_cpus:
    # affinity, SLURM_CPUS_PER_TASK / a sweep job's resources.cpus, cgroup quota). The model and the
    # environment workers take turns, so the model can use every core: on 2 idle cores an RL
    # iteration of the CPU default takes 10 s with 2 threads and 15 s with 1 (docs/cpu-proxy.md).
    # Another thread count sums in another order: the same config and seed give other numbers on a
    # machine with other CPUs (timing.json records torch_threads); set it for bit-exact reruns
    num_threads: int = 0


@dataclass
class TrainConfig:
    """The training loop (reference values: docs/design-notes.md "Training-loop facts")."""

    iterations: int = 54  # RL iterations (one batch of rollouts and its update each)
    groups_per_batch: int = 16  # tasks per batch (reference 16)
    group_size: int = 8  # rollouts per task (reference 8)
    temperature: float = 1.0  # sampling temperature of the training rollouts
    top_p: float = 1.0  # nucleus sampling of the training rollouts (1.0: off)
    max_prompt_tokens: int = 768  # prompts longer than this keep their last tokens (counted as train/truncated_prompts)
    max_response_tokens: int = 24  # response length limit per step, tokens
    lr: float = 3e-4  # actor AdamW learning rate
    weight_decay: float = 0.01  # actor AdamW (reference actor.optim.weight_decay)
    kl_coef: float = 0.05  # the CPU proxy's; the reference (and the GPU presets) use 0.01
    kl_estimator: str = "k3"  # "k1" | "k2" | "k3" (low-variance)
    clip_ratio: float = 0.2  # PPO clip ratio epsilon of the policy loss
    entropy_coef: float = 0.001  # entropy bonus coefficient of the policy loss
    max_grad_norm: float = 1.0  # gradient norm clip per optimizer step
    mini_batch_size: int = 128  # step samples per optimizer step
    # how an iteration's step samples are cut into optimizer steps (algorithms/backends/batching.py):
    # "fixed" = chunks of mini_batch_size, the last one holds the remainder (1 row when 129 rows meet
    # a size of 128; the reference's cut, kept by the reference presets); "balanced" = the fewest
    # mini-batches of at most mini_batch_size rows, sizes differing by at most one row (none under
    # mini_batch_size // 2 when there are more rows than that); "auto" (resolved when the config is
    # loaded, the saved config records the result) = balanced for backend=local, fixed for openrlhf
    mini_batch_split: str = "auto"
    micro_batch_size: int = 16  # step samples per forward/backward
    ppo_epochs: int = 1  # passes over each iteration's rollouts
    # the old (behaviour-policy) log-probs of the PPO ratio: "recompute" (a forward pass of the
    # policy before the update, as verl and OpenRLHF do), "sampler" (the log-probs the local
    # sampler computed while drawing the tokens: the same weights and sampling definition, so in
    # float32 the same numbers up to rounding, measured |gap| <= 1e-5; saves one forward pass per
    # step sample) or "auto" (sampler for backend=local with model.dtype=float32, else recompute)
    old_logprobs: str = "auto"
    value_lr: float = 1e-5  # critic AdamW lr (reference critic.optim.lr)
    value_clip: float = 0.5  # critic value clip (reference critic.cliprange_value)
    sft_epochs: int = 2  # warm start on expert walkthroughs (0 = off)
    sft_lr: float = 3e-3  # warm-start (SFT) learning rate
    sft_batch_size: int = 16  # warm-start (SFT) batch size, steps
    # score each SFT batch in length-sorted micro-batches of at most this many steps (gradient
    # accumulated, the same token-mean loss up to rounding; 0 = the whole batch in one pass, padded
    # to its longest step). WebShop's results pages are 10x its search page: less padding
    sft_micro_batch_size: int = 0
    sft_max_tasks: int = 1200  # expert demonstrations from at most this many training tasks
    # also imitate the expert's first step alone on this many more training tasks (0 = none; evenly
    # spread, those of sft_max_tasks left out): short prompts, cheap steps. WebShop's first step
    # copies the instruction into search[...], which a tiny model learns from thousands of examples,
    # not from the ~1,000 whole demonstrations a CPU budget affords (docs/webshop-cpu.md)
    sft_first_step_tasks: int = 0
    # fraction of the demonstrations the benchmark's expert_detour edits (0 = the expert's own plans
    # only): ALFWorld's first visit another receptacle (a searching expert, benchmarks/alfworld
    # expert_detour); WebShop's buy before their last option click (a hasty expert whose purchase
    # misses a named value and fails, benchmarks/webshop/expert.py expert_detour; docs/webshop-cpu.md)
    sft_detour_prob: float = 1.0
    # probability that a detour to a closed receptacle (drawer, cabinet, fridge, ...) opens it and
    # looks inside before going on; 0 = walks on without looking (the detour before this option),
    # which leaves every "open" of the demonstrations followed by taking the target
    sft_detour_open_prob: float = 1.0
    # ALFWorld demonstrations from a dawdling expert: before each action at a receptacle it first
    # examines the receptacle with this probability, repeatedly (benchmarks/alfworld expert_stall;
    # the demonstrations still win within env.max_steps); 0 = no wasted steps
    sft_stall_prob: float = 0.0
    # fraction of the ALFWorld detour demonstrations in which the expert first tries to take the
    # object at the wrong receptacle (refused), then goes on: the warm start sees a recovery from a
    # refused action (benchmarks/alfworld expert_mistake; the mistake itself is never imitated)
    sft_recovery_prob: float = 0.0
    # which training tasks RL draws its groups from: "all", or "without_demos" (only the tasks the
    # warm start's expert demonstrations did not come from, so RL cannot profit from SFT having
    # memorised a game; needs train.sft_max_tasks below the number of training tasks)
    rl_tasks: str = "all"
    checkpoint_every: int = 1  # checkpoint every k iterations (a resume continues from the last)
    # an iteration where most episodes crashed is rolled out again after restarting the
    # environment workers, at most this many times; then the run fails with the reason
    crash_retries: int = 2
    # the warm start (expert replay + SFT) is built once per warm-start settings into
    # <warm_start_cache>/<key>/ and shared by every run with the same settings, whatever its seed
    # or estimator (null or "" = build it inside the run folder); see algorithms/backends/local/warm_start.py
    warm_start_cache: str | None = "results/cache/warm_start"
    warm_start_seed: int = 0  # seed of the tiny model's initialisation and of the SFT shuffling
    # reference defaults (verl ppo_trainer.yaml / core_algos.py as the G2PO repository ships them)

    value_weight_decay: float = 0.01  # critic AdamW (reference critic.optim.weight_decay)
    clip_ratio_c: float | None = 3.0  # dual-clip PPO bound for A < 0 (None: off)
    kl_clamp: float | None = 10.0  # k3 KL clamped to [-kl_clamp, kl_clamp] per token (None: off)
    # "token-mean" | "seq-mean-token-sum" | "seq-mean-token-mean" | "seq-mean-token-sum-norm"
    loss_agg_mode: str = "token-mean"
    # memory and throughput of the local backend on a GPU

    gradient_checkpointing: bool = False  # recompute layer activations in the backward pass
    logprob_chunk_tokens: int = 1024  # response tokens per LM-head/log-softmax chunk
    ref_device: str = "auto"  # the frozen reference policy: "auto" (the policy's device) | "cpu"
    rollout_batch_tokens: int = 0  # generate() budget: rows x (prompt + response) tokens; 0 = one batch


@dataclass
class EvalConfig:
    """Evaluation on a fixed task panel (held-out split) at temperature 0.4."""

    every: int = 12  # evaluate every k iterations (and before and after training)
    num_tasks: int = 0  # 0 = the whole split (the CPU default: its 120 generated held-out games)
    temperature: float = 0.4  # sampling temperature of the evaluation (reference 0.4)
    episodes_per_task: int = 1  # episodes per panel task
    # also evaluate the panel at train.temperature, before RL and after the last iteration (both
    # backends; eval.json "at_train_temperature"): decoding at 0.4 can hide what RL learned
    # (docs/cpu-proxy.md); the GPU presets turn it off
    at_train_temperature: bool = True


TRACKER_BACKENDS = ("jsonl", "console", "tensorboard", "wandb")  # logging.backends
WANDB_MODES = ("online", "offline")  # logging.wandb_mode (null: W&B's own default, $WANDB_MODE or online)


@dataclass
class LoggingConfig:
    """Where a run's metrics, evaluations and pictures go (:mod:`g2po_bench.core.tracking`).

    ``jsonl`` (the run folder's ``metrics.jsonl`` and ``eval.json``) is always on; ``console``
    prints one line per iteration; ``tensorboard`` writes event files to ``<run>/tensorboard``
    (``torch.utils.tensorboard``; extra ``tracking``); ``wandb`` logs to Weights & Biases
    (files under ``<run>/wandb``; the API key only from the environment, ``WANDB_API_KEY`` or
    ``wandb login``). Not part of the config hash: tracking never changes a result or a run id.
    """

    backends: list[str] = field(default_factory=lambda: ["jsonl", "console"])  # jsonl (always on), console, tensorboard, wandb
    project: str = "g2po-bench"  # W&B project
    entity: str | None = None  # W&B entity (team or user; null: the key's default)
    group: str | None = None  # W&B group (null: the sweep's name for a sweep's runs, else none)
    tags: list[str] = field(default_factory=list)  # W&B tags
    wandb_mode: str | None = None  # "online" | "offline" | null (W&B's default: $WANDB_MODE, else online)
    # a picture of one task group's state graph every this many iterations (0 = never): needs
    # record_graphs; tensorboard/wandb only
    graph_every: int = 0
    graph_group: int = -1  # the task group drawn (-1: the most informative, analysis.state_graph.choose_group)
    learning_curve: bool = True  # the learning-curve picture after the last iteration (tensorboard/wandb)


@dataclass
class RunConfig:
    """One run. ``run_id`` None derives ``<env>-<algorithm>-s<seed>-<hash>`` from the config."""

    seed: int = 0  # seed of the run (sampling, task order, shuffles)
    backend: str = "local"  # "local" | "openrlhf"
    output_dir: str = "results/runs"  # folder of the run folders
    run_id: str | None = None  # null: <env>-<algorithm>-s<seed>-<config hash>
    resume: bool = False  # continue the run folder's last checkpoint
    progress: bool = True  # progress lines on the console
    env: EnvConfig = field(default_factory=EnvConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    # write <run>/steps/iter_<K>.parquet every iteration (g2po_bench/core/steptable.py; `g2po graph`
    # draws a group's state graph from it). On for the CPU default (about 10 KB per
    # iteration); the GPU presets turn it off. Does not change results (not in the hash).
    # Both backends record (algorithms/backends/lifecycle.py).
    record_graphs: bool = True


# ---------------------------------------------------------------------------- loading
def expand_shorthands(overrides: list[str] | None) -> list[str]:
    """``env=NAME``, ``algorithm=NAME`` and ``model=PATH`` as ``env.name=NAME``, ``algorithm.name=NAME``
    and ``model.path=PATH`` (:data:`SECTION_SHORTHANDS`); every other override, and a section given
    a mapping (``env={name: toy}``), unchanged. Items without ``=`` are left for the caller to refuse."""
    out = []
    for item in overrides or []:
        key, sep, value = item.partition("=")
        full = SECTION_SHORTHANDS.get(key.strip())
        if sep and full and not value.strip().startswith(("{", "[")):
            item = f"{full}={value}"
        out.append(item)
    return out


def _str_field(dotted: str) -> bool:
    """True when ``dotted`` (e.g. ``"run_id"``, ``"model.path"``) is a ``str`` (or ``str | None``)
    field of :class:`RunConfig`; False for other types and unknown keys."""
    import dataclasses
    import types
    import typing

    cls: Any = RunConfig
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(cls):
            return False
        hints = typing.get_type_hints(cls)
        if part not in hints:
            return False
        hint = hints[part]
        if i < len(parts) - 1:
            cls = hint
            continue
        args = typing.get_args(hint)
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)  # not list[str]
        return hint is str or (union and str in args and all(a in (str, type(None)) for a in args))
    return False


def _dotlist_layer(overrides: list[str]) -> DictConfig:
    """``OmegaConf.from_dotlist`` with one fix: a value for a ``str`` field keeps its text. YAML reads
    ``off``, ``on``, ``yes``, ``no`` as booleans (and ``123`` as a number); the schema would then store
    ``"False"``: ``run_id=off`` made the run folder ``False``. ``null`` still means None."""
    layer = OmegaConf.from_dotlist(overrides)
    for item in overrides:
        key, _, raw = item.partition("=")
        key = key.strip()
        if not _str_field(key) or raw.strip() in ("null", "~"):
            continue
        parsed = OmegaConf.select(layer, key)
        if parsed is not None and not isinstance(parsed, str):
            OmegaConf.update(layer, key, raw, merge=False)
    return layer


def parse_config(
    config_file: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    preset_file: str | Path | None = None,
    check_paths: bool = True,
    base_file: str | Path | None = None,
) -> RunConfig:
    """A RunConfig checked against the schema: dataclass defaults < base file < preset < YAML file <
    overrides.

    Only what the schema alone can check is checked here (:func:`validate_config`); the suite's
    entry point :func:`g2po_bench.runconfig.load_config` adds the benchmark's and the estimator's
    checks and resolves the ``auto`` settings. Call that one to start a run.

    Args:
        config_file: a YAML file with any subset of the keys.
        overrides: dotted ``key=value`` strings, e.g. ``["algorithm.name=gigpo", "seed=3"]``.
        preset_file: a preset YAML file (a benchmark's ``presets/<name>.yaml``).
        check_paths: False skips the checks that ``model.path`` and ``env.data_dir`` exist (a
            sweep's dry run plans with placeholders for folders not given yet).
        base_file: a YAML file under every other layer: the recorded ``config.yaml`` of the run a
            resume continues (:func:`g2po_bench.train.load_train_config`).

    Raises:
        ConfigError: unknown key, wrong type, bad value, missing or unreadable file.
    """
    base = OmegaConf.structured(RunConfig)
    layers: list[DictConfig] = []
    try:
        for path in (base_file, preset_file, config_file):
            if path is not None:
                layers.append(_read_yaml(Path(path)))
        for item in overrides or []:
            if "=" not in item:
                raise ConfigError(
                    f"override {item!r} is not of the form key=value (e.g. algorithm.name=gigpo)"
                )
        overrides = expand_shorthands(overrides)
        if overrides:
            layers.append(_dotlist_layer(list(overrides)))
        merged = OmegaConf.merge(base, *layers)
        # a ``???`` in a preset or file does not override on merge: find those left unset
        missing = sorted(
            key
            for i, layer in enumerate(layers)
            for key in OmegaConf.missing_keys(layer)
            if not any(_is_set(later, key) for later in layers[i + 1:])
        )
        if missing:
            raise ConfigError(
                f"config key(s) {', '.join(missing)} must be set (the preset or file leaves them "
                f"as ???): add {' '.join(k + '=...' for k in missing)} to the command line"
            )
        cfg: RunConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except ConfigError:
        raise
    except OmegaConfBaseException as exc:
        raise ConfigError(_omegaconf_message(exc)) from None
    resolve_logprob_source(cfg)
    # jsonl is always on: the saved config says so whatever the list held
    cfg.logging.backends = ["jsonl", *dict.fromkeys(b for b in cfg.logging.backends if b != "jsonl")]
    validate_config(cfg, check_paths=check_paths)
    return cfg


def _read_yaml(path: Path) -> DictConfig:
    """One layer of a config from a YAML file. Raises ConfigError for a missing or unreadable file."""
    if not path.exists():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        loaded = OmegaConf.load(path)
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"config file {str(path)!r} is not readable YAML ({first})") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of keys")
    return loaded


def resolve_logprob_source(cfg: RunConfig) -> None:
    """Replace ``train.old_logprobs=auto`` and ``train.mini_batch_split=auto`` by what they mean
    for this run (in place). Log-probs: ``"sampler"`` for ``backend=local`` with
    ``model.dtype=float32`` (the sampler's log-probs are then the policy's up to rounding),
    ``"recompute"`` otherwise (bfloat16 cached decoding and one full forward differ; OpenRLHF
    recomputes with its actor). Mini-batches: ``"balanced"`` for ``backend=local`` (no optimizer
    step under half a mini-batch), ``"fixed"`` for ``backend=openrlhf`` (it cuts its own)."""
    if cfg.train.old_logprobs == "auto":
        exact = cfg.backend == "local" and cfg.model.dtype == "float32"
        cfg.train.old_logprobs = "sampler" if exact else "recompute"
    if cfg.train.mini_batch_split == "auto":
        cfg.train.mini_batch_split = "balanced" if cfg.backend == "local" else "fixed"
    # jsonl is always on: the saved config says so whatever the list held
    cfg.logging.backends = ["jsonl", *dict.fromkeys(b for b in cfg.logging.backends if b != "jsonl")]


def _is_set(layer: DictConfig, dotted: str) -> bool:
    node = OmegaConf.select(layer, dotted, default="???", throw_on_missing=False)
    return node != "???"


def _omegaconf_message(exc: OmegaConfBaseException) -> str:
    key = getattr(exc, "full_key", None) or getattr(exc, "key", None)
    msg = str(exc).splitlines()[0]
    if "Key" in msg and "not in" in msg:
        sentence = msg if msg.endswith(("?", ".")) else msg + "."
        return f"unknown config key {key!r}: {sentence} Run `g2po config` to list the keys."
    if key:
        return f"bad value for config key {key!r}: {msg}"
    return msg


def require(cond: bool, key: str, msg: str) -> None:
    """Raise :class:`ConfigError` ``bad value for config key '<key>': <msg>`` unless ``cond``.

    The one form of a config error, for the checks here and the benchmarks' own
    (:meth:`g2po_bench.benchmarks.base.Benchmark.validate_config`)."""
    if not cond:
        raise ConfigError(f"bad value for config key {key!r}: {msg}")


def output_folder_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be (made) a folder to write into: it, or a folder above it, is a file
    (the ``mkdir`` would fail with ``FileExistsError``/``NotADirectoryError``); None when it can."""
    p = Path(path).expanduser()
    for q in (p, *p.parents):
        if q.exists():
            return None if q.is_dir() else (f"{str(q)!r} is a file, not a folder" if q == p
                                            else f"{str(q)!r}, a folder above it, is a file")
    return None


def _validate_folders(cfg: RunConfig, check_paths: bool) -> None:
    """The run folder's place (``output_dir``, ``run_id``) and, with ``check_paths``, that
    ``env.data_dir`` and ``model.path`` exist. Raises ConfigError."""
    need = require
    problem = output_folder_problem(cfg.output_dir)
    need(problem is None, "output_dir", f"{problem}; name a folder")
    if cfg.run_id is not None:
        need(bool(cfg.run_id) and "/" not in cfg.run_id and "\\" not in cfg.run_id and cfg.run_id not in (".", ".."),
             "run_id", f"{cfg.run_id!r}: give a plain folder name (no '/'), e.g. run_id=g2po-lr3e-4")
    if cfg.env.data_dir is not None and check_paths:
        need(Path(cfg.env.data_dir).exists(), "env.data_dir", f"folder {cfg.env.data_dir!r} does not exist")
    if cfg.model.path is not None and check_paths:
        need(Path(cfg.model.path).is_dir(), "model.path", f"folder {cfg.model.path!r} does not exist")
        need(not cfg.model.item_tokens, "model.item_tokens",
             "true (a preset may set it) builds the tiny model's tokenizer, and model.path is a model folder "
             "with its own tokenizer: add model.item_tokens=false")


def validate_config(cfg: RunConfig, *, check_paths: bool = True) -> None:
    """Range and choice checks that need nothing but the schema. Raises ConfigError.

    A benchmark checks its own settings (``env.webshop_*``, ``env.appworld_*``, task types, ...)
    and an estimator its options; :func:`g2po_bench.runconfig.load_config` runs those too.
    ``check_paths`` False leaves out the checks that ``env.data_dir`` and ``model.path`` exist."""
    need = require
    need(cfg.env.state_key in ("auto", "reference", "raw"), "env.state_key", "choose auto, reference or raw")
    need(cfg.env.max_steps >= 1, "env.max_steps", "must be >= 1")
    need(cfg.env.max_train_tasks >= 0, "env.max_train_tasks", "must be >= 0 (0 = the whole training split)")
    need(cfg.env.history_length >= 0, "env.history_length", "must be >= 0")
    need(cfg.env.stop_after_refusals >= 0, "env.stop_after_refusals", "must be >= 0 (0 = off)")
    need(cfg.env.generated_train_games >= 0, "env.generated_train_games", "must be >= 0")
    need(cfg.env.generated_eval_games >= 0, "env.generated_eval_games", "must be >= 0")
    need(cfg.env.num_workers >= 0, "env.num_workers", "must be >= 0 (0 = one per usable CPU)")
    need(cfg.env.worker_max_episodes >= 0, "env.worker_max_episodes", "must be >= 0 (0 = never recycle)")
    need(cfg.env.prompt in ("auto", "reference", "compact"), "env.prompt", "choose auto, reference or compact")
    _validate_folders(cfg, check_paths)
    for key in COMMON_ALGORITHM_KEYS:
        if key in cfg.algorithm.options:
            value = cfg.algorithm.options[key]
            raise ConfigError(
                f"bad value for config key 'algorithm.options.{key}': {key} is a setting of every estimator, "
                f"written algorithm.{key}; use algorithm.{key}={_override_text(value)} instead (algorithm.options "
                "holds an estimator's own options: `g2po algorithms` lists them)")
    need(cfg.algorithm.mode in ("mean_std_norm", "mean_norm"), "algorithm.mode", "choose mean_std_norm or mean_norm")
    need(0.0 <= cfg.algorithm.gamma <= 1.0, "algorithm.gamma", "must be in [0, 1]")
    need(cfg.algorithm.invalid_penalty >= 0, "algorithm.invalid_penalty", "must be >= 0")
    need(cfg.backend in ("local", "openrlhf"), "backend", "choose local or openrlhf")
    need(cfg.model.dtype in ("float32", "bfloat16"), "model.dtype", "choose float32 or bfloat16")
    need(cfg.model.device in ("auto", "cpu", "cuda"), "model.device", "choose auto, cpu or cuda")
    need(cfg.model.num_threads >= 0, "model.num_threads", "must be >= 0 (0 = every usable CPU)")
    t = cfg.train
    need(t.iterations >= 0, "train.iterations", "must be >= 0")
    need(t.groups_per_batch >= 1, "train.groups_per_batch", "must be >= 1")
    need(t.group_size >= 1, "train.group_size", "must be >= 1")
    need(t.temperature > 0, "train.temperature", "must be > 0")
    need(0 < t.top_p <= 1, "train.top_p", "must be in (0, 1]")
    need(t.max_response_tokens >= 1, "train.max_response_tokens", "must be >= 1")
    need(t.max_prompt_tokens >= 16, "train.max_prompt_tokens", "must be >= 16")
    need(t.lr > 0, "train.lr", "must be > 0")
    need(t.kl_estimator in ("k1", "k2", "k3"), "train.kl_estimator", "choose k1, k2 or k3")
    need(t.old_logprobs in OLD_LOGPROBS, "train.old_logprobs", f"choose one of {', '.join(OLD_LOGPROBS)}")
    need(not (cfg.backend == "openrlhf" and t.old_logprobs == "sampler"), "train.old_logprobs",
         "sampler is the local backend's (OpenRLHF recomputes the old log-probs with its actor); "
         "use auto or recompute with backend=openrlhf")
    need(t.mini_batch_size >= 1 and t.micro_batch_size >= 1, "train.mini_batch_size", "must be >= 1")
    need(t.ppo_epochs >= 1, "train.ppo_epochs", "must be >= 1")
    need(t.mini_batch_split in MINI_BATCH_SPLITS, "train.mini_batch_split",
         f"choose one of {', '.join(MINI_BATCH_SPLITS)}")
    need(cfg.backend == "local" or t.mini_batch_split == "fixed", "train.mini_batch_split",
         f"{t.mini_batch_split!r} is the local backend's (OpenRLHF cuts its own mini-batches); use fixed "
         "with backend=openrlhf")
    need(t.weight_decay >= 0 and t.value_weight_decay >= 0, "train.weight_decay", "weight decays must be >= 0")
    need(t.value_lr > 0, "train.value_lr", "must be > 0")
    need(t.clip_ratio_c is None or t.clip_ratio_c > 1, "train.clip_ratio_c",
         "the dual-clip bound must be > 1 (reference 3.0), or null to turn dual clip off")
    need(t.kl_clamp is None or t.kl_clamp > 0, "train.kl_clamp", "must be > 0 (reference 10.0), or null for no clamp")
    need(t.loss_agg_mode in LOSS_AGG_MODES, "train.loss_agg_mode", f"choose one of {', '.join(LOSS_AGG_MODES)}")
    need(t.sft_epochs >= 0, "train.sft_epochs", "must be >= 0")
    need(t.sft_max_tasks >= 1, "train.sft_max_tasks", "must be >= 1")
    need(t.sft_first_step_tasks >= 0, "train.sft_first_step_tasks", "must be >= 0 (0 = none)")
    need(t.sft_micro_batch_size >= 0, "train.sft_micro_batch_size", "must be >= 0 (0 = the whole batch at once)")
    need(0.0 <= t.sft_detour_prob <= 1.0, "train.sft_detour_prob", "must be in [0, 1]")
    need(0.0 <= t.sft_detour_open_prob <= 1.0, "train.sft_detour_open_prob", "must be in [0, 1]")
    need(0.0 <= t.sft_stall_prob < 1.0, "train.sft_stall_prob", "must be in [0, 1)")
    need(0.0 <= t.sft_recovery_prob <= 1.0, "train.sft_recovery_prob", "must be in [0, 1]")
    need(t.rl_tasks in RL_TASK_POOLS, "train.rl_tasks", f"choose one of {', '.join(RL_TASK_POOLS)}")
    need(t.checkpoint_every >= 1, "train.checkpoint_every", "must be >= 1")
    need(t.top_p == 1.0, "train.top_p",
         "must be 1 for training: the trainer rescores the full distribution; with top_p < 1 a token "
         "outside the current policy's nucleus has log-prob -inf in the PPO ratio and KL")
    need(t.logprob_chunk_tokens >= 1, "train.logprob_chunk_tokens", "must be >= 1")
    need(t.ref_device in ("auto", "cpu"), "train.ref_device", "choose auto (the policy's device) or cpu")
    need(t.rollout_batch_tokens >= 0, "train.rollout_batch_tokens", "must be >= 0 (0 = no limit)")
    need(t.crash_retries >= 0, "train.crash_retries", "must be >= 0 (0 = fail at the first crashed-heavy iteration)")
    need(cfg.eval.every >= 0, "eval.every", "must be >= 0 (0 = only before and after)")
    need(cfg.eval.num_tasks >= 0, "eval.num_tasks", "must be >= 0 (0 = whole split)")
    need(cfg.eval.temperature >= 0, "eval.temperature", "must be >= 0 (0 = greedy)")
    lg = cfg.logging
    for b in lg.backends:
        need(b in TRACKER_BACKENDS, "logging.backends", f"{b!r}; choose from {', '.join(TRACKER_BACKENDS)}")
    need(lg.wandb_mode is None or lg.wandb_mode in WANDB_MODES, "logging.wandb_mode",
         "choose online, offline, or null (W&B's default: $WANDB_MODE, else online)")
    need(bool(lg.project) and "/" not in lg.project, "logging.project", "a W&B project name without '/'")
    need(lg.graph_every >= 0, "logging.graph_every", "must be >= 0 (0 = no state-graph pictures)")
    need(lg.graph_group >= -1, "logging.graph_group", "a task group id, or -1 for the most informative one")
    need(lg.graph_every == 0 or cfg.record_graphs, "logging.graph_every",
         "the state-graph pictures are drawn from the step tables: set record_graphs=true or logging.graph_every=0")
    try:
        check_installed(lg.backends)
    except TrackingError as exc:
        raise ConfigError(f"bad value for config key 'logging.backends': {exc}") from None


def _override_text(value: Any) -> str:
    """``value`` as the right-hand side of a ``key=value`` override."""
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)


def config_to_dict(cfg: RunConfig) -> dict[str, Any]:
    """Plain dict of the config (JSON/YAML-serialisable)."""
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]


def config_to_yaml(cfg: RunConfig) -> str:
    """The resolved config as YAML (what ``config.yaml`` of a run holds)."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


#: top-level keys that never change a result: left out of :func:`config_hash`, so adding or
#: changing them keeps run ids (``logging``: where metrics also go, :mod:`g2po_bench.core.tracking`)
NON_SEMANTIC_KEYS = ("run_id", "resume", "progress", "output_dir", "record_graphs", "logging")

#: keys added after runs were recorded, left out of :func:`config_hash` while they hold their
#: default, so that every config that existed before keeps its hash (and its run id: committed
#: sweeps plan the same run folders). A key set to another value enters the hash.
HASH_NEUTRAL_DEFAULTS: dict[str, Any] = {
    "env.cache_dir": "results/cache",
    "env.allow_incomplete_eval_split": False,
    "train.mini_batch_split": "fixed",
    "algorithm.module": None,
    "env.webshop_expert": "reference",
    "train.sft_micro_batch_size": 0,
    "model.item_tokens": False,
    "train.sft_first_step_tasks": 0,
    "env.max_train_tasks": 0,
    "env.webshop_train_reward": "success",
}


#: what a resume may change (``resume=true``; docs/run-folder.md "Resuming a run"): where the run
#: folder is and how it is found, the display and the trackers, the iterations (to extend a run),
#: how often a checkpoint is written, how often a crashed-heavy iteration is retried, the
#: environment worker processes and the torch threads. A dotted key covers its section. Any other
#: key is what the run is (environment, estimator, model, data, seed, training and evaluation
#: settings): a resume continues the recorded value, and a different one is refused.
RESUME_MUTABLE_KEYS = (
    "run_id", "output_dir", "resume", "progress", "record_graphs", "logging",
    "train.iterations", "train.checkpoint_every", "train.crash_retries",
    "env.num_workers", "env.worker_max_episodes", "model.num_threads",
)


def read_recorded_config(path: str | Path) -> dict[str, Any]:
    """A recorded ``config.yaml`` as a plain dict over the schema's defaults (a key added since it
    was written holds its default), without the checks of :func:`validate_config` (the folders it
    names may have moved since).

    Raises:
        ConfigError: the file is missing, not YAML, or holds a key the schema does not know.
    """
    try:
        merged = OmegaConf.merge(OmegaConf.structured(RunConfig), _read_yaml(Path(path)))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"recorded config {str(path)!r}: {_omegaconf_message(exc)}") from None
    return OmegaConf.to_container(merged, resolve=True)  # type: ignore[return-value]


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def resume_differences(recorded: dict[str, Any], cfg: RunConfig) -> list[tuple[str, Any, Any]]:
    """The keys where ``cfg`` differs from a run's recorded config and a resume may not change
    them (not under :data:`RESUME_MUTABLE_KEYS`).

    Args:
        recorded: the run's ``config.yaml`` (:func:`read_recorded_config`).
        cfg: the config the resume was asked to run.

    Returns:
        ``[(dotted key, value in cfg, recorded value), ...]`` sorted by key; empty when the resume
        continues the recorded config.
    """
    old, new = _flatten(recorded), _flatten(config_to_dict(cfg))
    mutable = tuple(RESUME_MUTABLE_KEYS)
    out = []
    for key in sorted(set(old) | set(new)):
        if any(key == m or key.startswith(m + ".") for m in mutable):
            continue
        if old.get(key) != new.get(key):
            out.append((key, new.get(key), old.get(key)))
    return out


def resolve_device(device: str) -> str:
    """What ``model.device`` means on this machine: ``"auto"`` is ``"cuda"`` when torch sees a
    CUDA device, else ``"cpu"``; ``"cpu"`` and ``"cuda"`` stay as they are (the trainer's rule,
    ``algorithms/backends/local/model.py`` ``resolve_device``). Imports torch only for ``"auto"``."""
    if device != "auto":
        return device
    try:
        # lazy: torch takes seconds to import; only a run id of a config with device auto needs it
        import torch
    except ImportError:  # no torch: nothing can run on a GPU here
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def config_hash(cfg: RunConfig, length: int = 10, *, device: str | None = None) -> str:
    """Stable hash of the result-relevant part of the config (ignores run_id, resume, progress,
    output_dir, record_graphs, logging, and the keys of :data:`HASH_NEUTRAL_DEFAULTS` at their
    default); two configs with the same hash produce the same run.

    ``model.device=auto`` enters the hash as the device it means: ``device`` (``"cpu"`` or
    ``"cuda"``, what the caller knows the run gets, e.g. a sweep job's resources) or, when None,
    :func:`resolve_device` on this machine. So a config with ``auto`` and the same config with
    the device it resolves to name the same run (a plain ``g2po train`` on a CPU machine is the
    committed ``cpu_proxy`` run, recorded with ``model.device=cpu``), and one config trained on a
    CPU and on a GPU gets two ids, as its numbers differ."""
    d = config_to_dict(cfg)
    for k in NON_SEMANTIC_KEYS:
        d.pop(k, None)
    for dotted, default in HASH_NEUTRAL_DEFAULTS.items():
        *parents, leaf = dotted.split(".")
        section = d
        for part in parents:
            section = section.get(part, {})
        if leaf in section and section[leaf] == default:
            del section[leaf]
    model = d.get("model", {})
    if model.get("device") == "auto":
        model["device"] = device if device is not None else resolve_device("auto")
    blob = json.dumps(d, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def resolve_run_id(cfg: RunConfig, *, device: str | None = None) -> str:
    """The run id: ``cfg.run_id`` if set, else ``<env>-<algorithm>-s<seed>-<config hash>``
    (``device``: see :func:`config_hash`)."""
    if cfg.run_id:
        return cfg.run_id
    return f"{cfg.env.name}-{cfg.algorithm.name}-s{cfg.seed}-{config_hash(cfg, device=device)}"
