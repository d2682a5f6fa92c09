"""The run config: one typed object per run, loaded from YAML and dotted ``key=value`` overrides.

DESIGN.md "Rules of the house": typed dataclasses, loaded from YAML, overridable from the
command line; the resolved config is saved with every run and is enough to rerun it. Presets
(``g2po/presets/*.yaml``) reproduce the reference settings (ALGORITHMS.md "Training loop
facts"); the dataclass defaults are the CPU default of the main job (``g2po train`` with no
arguments: a tiny model on generated ALFWorld games, about 10-15 minutes on 2 cores).

Validation happens in :func:`load_config` before any work starts: an unknown key, a value of
the wrong type or an out-of-range value raises :class:`ConfigError` naming the key.
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

from g2po_bench.benchmarks.alfworld.games import TASK_TYPES as ALFWORLD_TASK_TYPES

__all__ = [
    "ConfigError",
    "EnvConfig",
    "AlgorithmConfig",
    "ModelConfig",
    "TrainConfig",
    "EvalConfig",
    "RunConfig",
    "load_config",
    "config_to_yaml",
    "config_hash",
    "PRESET_DIR",
]

PRESET_DIR = Path(__file__).resolve().parents[1] / "presets"
RL_TASK_POOLS = ("all", "without_demos")  # train.rl_tasks
# estimator inputs (algorithms/registry.py INPUTS) that backend=openrlhf cannot supply
OPENRLHF_LACKS = ("entropies",)
OLD_LOGPROBS = ("auto", "recompute", "sampler")  # train.old_logprobs



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

    name: str = "alfworld"
    data_dir: str | None = None
    train_split: str = "train"
    eval_split: str = "valid_seen"
    task_types: list[str] = field(default_factory=list)  # empty = all task types
    max_steps: int = 15
    # "auto": the estimator's reference key (GiGPO: "raw", the raw observation; G2PO and the
    # rest: "reference"); load_config resolves it, so the saved config records the key used
    state_key: str = "auto"  # "auto" | "reference" | "raw"
    history_length: int = 3
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
    # bounds the memory environment libraries keep per game (benchmarks/workers.py; ALFWorld
    # ~1.4 MiB per distinct game). The CPU proxy's 2 workers start 64 episodes each per iteration
    # on 16 games: 1024 recycles every 16 iterations (~0.4 GB per worker; a recycle costs ~2.5 s
    # of process start-up); the GPU presets, with many more workers, keep 256
    worker_max_episodes: int = 1024
    # generated-game settings (embedded default)
    generated_dir: str = "results/cache/alfworld_generated"
    generated_train_games: int = 1200
    generated_eval_games: int = 120
    generated_max_receptacles: int = 2
    # "seen": eval games on the training floor plans (new games, like ALFWorld's valid_seen,
    # the papers' in-distribution split); "unseen": ALFRED's held-out floor plans (valid_unseen)
    generated_eval_scenes: str = "seen"
    generated_seed: int = 0
    webshop_observation_mode: str = "text"  # "text" | "text_rich"
    # "reference": the verl-agent/G2PO step prompt (real models); "compact": a short transcript
    # for the tiny CPU model (ALFWorld only, benchmarks/alfworld/prompt.py build_compact_prompt);
    # "auto" (resolved when the config is loaded, the saved config records the result): compact
    # for ALFWorld with the tiny model (model.path unset), reference otherwise
    prompt: str = "auto"
    # the purchase reward: "original" (the reference's get_reward, quirks included) or
    # "lenient" (this project's earlier, more accepting option matching; not comparable)
    webshop_reward: str = "original"
    # nouns of the reward's type term: a spaCy model ("en_core_web_sm", the reference's) or
    # "heuristic" (word lists; no spaCy needed); a missing model fails, never falls back
    webshop_nouns: str = "en_core_web_sm"
    # AppWorld (benchmarks/appworld): the interpreter with the appworld package (None = find
    # it: $G2PO_APPWORLD_PYTHON, this one, ~/.cache/g2po/appworld-venv), where the synthetic
    # default tasks are built when data_dir is None, the environment's own interaction limit
    # (reference default 50; the rollout's max_steps usually ends episodes first), AppWorld's
    # per-cell timeout (reference 50 s), the hard per-request limit that kills a hanging
    # server (the episode fails), and the difficulty levels kept (reference [1, 2]; [] = all)
    appworld_python: str | None = None
    appworld_generated_dir: str = "results/cache/appworld_synthetic"
    appworld_max_interactions: int = 50
    appworld_timeout_seconds: int = 50
    appworld_cell_timeout: float = 60.0
    appworld_difficulties: list[int] = field(default_factory=list)


@dataclass
class AlgorithmConfig:
    """The advantage estimator and its options (ALGORITHMS.md).

    ``name`` is a registered estimator (``g2po algorithms`` lists them). ``options`` carries
    estimator-specific extras (ablation switches); unknown ones fail before any work.
    ``module`` names one more module to import before validation (``pkg.module``: an estimator
    of a package that is not installed with an entry point; ``docs/extending.md``); None (the
    default) imports nothing and is left out of the config hash.
    """

    name: str = "g2po"
    mode: str = "mean_std_norm"  # "mean_std_norm" (ALFWorld reference) | "mean_norm" (WebShop)
    gamma: float = 0.95
    step_weight: float = 1.0  # G2PO w / GiGPO omega
    invalid_penalty: float = 0.1
    success_reward: float = 10.0
    options: dict[str, Any] = field(default_factory=dict)
    module: str | None = None


@dataclass
class ModelConfig:
    """The policy model. ``path`` None builds the tiny CPU model (Llama-style, byte-level BPE)."""

    path: str | None = None
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 256
    vocab_size: int = 1024
    max_position_embeddings: int = 1024
    dtype: str = "float32"  # "float32" | "bfloat16"
    device: str = "auto"  # "auto" | "cpu" | "cuda"
    # torch intra-op threads on a CPU: 0 = every CPU this process may use (g2po_bench.benchmarks.cpus.usable_cpus:
    # affinity, SLURM_CPUS_PER_TASK / a sweep job's resources.cpus, cgroup quota). The model and the
    # environment workers take turns, so the model can use every core: on 2 idle cores an RL
    # iteration of the CPU default takes 10 s with 2 threads and 15 s with 1 (results/proxy/README.md).
    # Another thread count sums in another order: the same config and seed give other numbers on a
    # machine with other CPUs (timing.json records torch_threads); set it for bit-exact reruns
    num_threads: int = 0


@dataclass
class TrainConfig:
    """The training loop (ALGORITHMS.md "Training loop facts" give the reference values)."""

    iterations: int = 54
    groups_per_batch: int = 16  # tasks per batch (reference 16)
    group_size: int = 8  # rollouts per task (reference 8)
    temperature: float = 1.0
    top_p: float = 1.0
    max_prompt_tokens: int = 768
    max_response_tokens: int = 24
    lr: float = 3e-4
    weight_decay: float = 0.01  # actor AdamW (reference actor.optim.weight_decay)
    kl_coef: float = 0.05  # the CPU proxy's; the reference (and the GPU presets) use 0.01
    kl_estimator: str = "k3"  # "k1" | "k2" | "k3" (low-variance)
    clip_ratio: float = 0.2
    entropy_coef: float = 0.001
    max_grad_norm: float = 1.0
    mini_batch_size: int = 128  # step samples per optimizer step
    micro_batch_size: int = 16  # step samples per forward/backward
    ppo_epochs: int = 1
    # the old (behaviour-policy) log-probs of the PPO ratio: "recompute" (a forward pass of the
    # policy before the update, as verl and OpenRLHF do), "sampler" (the log-probs the local
    # sampler computed while drawing the tokens: the same weights and sampling definition, so in
    # float32 the same numbers up to rounding, measured |gap| <= 1e-5; saves one forward pass per
    # step sample) or "auto" (sampler for backend=local with model.dtype=float32, else recompute)
    old_logprobs: str = "auto"
    value_lr: float = 1e-5  # critic AdamW lr (reference critic.optim.lr)
    value_clip: float = 0.5  # critic value clip (reference critic.cliprange_value)
    sft_epochs: int = 2  # warm start on expert walkthroughs (0 = off)
    sft_lr: float = 3e-3
    sft_batch_size: int = 16
    sft_max_tasks: int = 1200  # expert demonstrations from at most this many training tasks
    # fraction of ALFWorld demonstrations that first visit another receptacle (a searching expert,
    # benchmarks/alfworld expert_detour); 0 = the planner's walkthroughs only
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
    checkpoint_every: int = 1
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
    temperature: float = 0.4
    episodes_per_task: int = 1
    # also evaluate the panel at train.temperature, before RL and after the last iteration (both
    # backends; eval.json "at_train_temperature"): decoding at 0.4 can hide what RL learned
    # (results/proxy/README.md); the GPU presets turn it off
    at_train_temperature: bool = True


@dataclass
class RunConfig:
    """One run. ``run_id`` None derives ``<env>-<algorithm>-s<seed>-<hash>`` from the config."""

    seed: int = 0
    backend: str = "local"  # "local" | "openrlhf"
    output_dir: str = "results/runs"
    run_id: str | None = None
    resume: bool = False
    progress: bool = True
    env: EnvConfig = field(default_factory=EnvConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # write <run>/steps/iter_<K>.parquet every iteration (results/steptable.py; `g2po graph`
    # draws a group's state graph from it). On for the CPU default (about 10 KB per
    # iteration); the GPU presets turn it off. Does not change results (not in the hash).
    # The local backend records; the OpenRLHF backend does not yet.
    record_graphs: bool = True


# ---------------------------------------------------------------------------- loading
def _str_field(dotted: str) -> bool:
    """True when ``dotted`` (e.g. ``"run_id"``, ``"model.path"``) is a ``str`` (or ``str | None``)
    field of :class:`RunConfig`; False for other types and unknown keys."""
    import dataclasses
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
        return hint is str or (bool(args) and str in args and all(a in (str, type(None)) for a in args))
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


def load_config(
    config_file: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    preset: str | None = None,
) -> RunConfig:
    """Build a validated RunConfig: dataclass defaults < preset < YAML file < overrides.

    Args:
        config_file: a YAML file with any subset of the keys.
        overrides: dotted ``key=value`` strings, e.g. ``["algorithm.name=gigpo", "seed=3"]``.
        preset: name of a file in ``g2po/presets`` (without ``.yaml``), e.g. ``alfworld_1.5b``.

    Raises:
        ConfigError: unknown key, wrong type, bad value, missing file; before any work starts.
    """
    base = OmegaConf.structured(RunConfig)
    layers: list[DictConfig] = []
    try:
        if preset:
            path = PRESET_DIR / f"{preset}.yaml"
            if not path.exists():
                known = ", ".join(sorted(p.stem for p in PRESET_DIR.glob("*.yaml")))
                raise ConfigError(f"unknown preset {preset!r}; known presets: {known}")
            layers.append(OmegaConf.load(path))
        if config_file is not None:
            path = Path(config_file)
            if not path.exists():
                raise ConfigError(f"config file {str(path)!r} does not exist")
            try:
                loaded = OmegaConf.load(path)
            except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise ConfigError(f"config file {str(path)!r} is not readable YAML ({first})") from None
            if not isinstance(loaded, DictConfig):
                raise ConfigError(f"config file {str(path)!r} must hold a mapping of keys")
            layers.append(loaded)
        for item in overrides or []:
            if "=" not in item:
                raise ConfigError(
                    f"override {item!r} is not of the form key=value (e.g. algorithm.name=gigpo)"
                )
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
                "as ???), e.g. model.path=/models/Qwen2.5-1.5B-Instruct"
            )
        cfg: RunConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except ConfigError:
        raise
    except OmegaConfBaseException as exc:
        raise ConfigError(_omegaconf_message(exc)) from None
    resolve_auto(cfg)
    import_algorithm_module(cfg)
    validate_config(cfg)
    resolve_state_key(cfg)
    return cfg


def resolve_auto(cfg: RunConfig) -> None:
    """Replace ``"auto"`` settings by what they mean for this run (in place).

    ``env.prompt``: ``"compact"`` for ALFWorld with the tiny CPU model (``model.path`` unset, or a
    folder of it: a warm start or checkpoint policy, marked by ``g2po_tiny.json``), ``"reference"``
    otherwise (real models get the reference prompt of verl-agent/G2PO).

    ``train.old_logprobs``: ``"sampler"`` for ``backend=local`` with ``model.dtype=float32`` (the
    sampler's log-probs are then the policy's up to rounding), ``"recompute"`` otherwise (bfloat16
    cached decoding and one full forward differ; OpenRLHF recomputes with its actor).
    """
    if cfg.env.prompt == "auto":
        tiny = cfg.model.path is None or (Path(cfg.model.path) / "g2po_tiny.json").is_file()
        cfg.env.prompt = "compact" if cfg.env.name == "alfworld" and tiny else "reference"
    if cfg.train.old_logprobs == "auto":
        exact = cfg.backend == "local" and cfg.model.dtype == "float32"
        cfg.train.old_logprobs = "sampler" if exact else "recompute"


def import_algorithm_module(cfg: RunConfig) -> None:
    """Import ``algorithm.module`` (when set) so that its estimators are registered before the
    config is validated (:func:`g2po_bench.algorithms.registry.import_estimator_module`).

    Raises:
        ConfigError: the module cannot be imported.
    """
    if not cfg.algorithm.module:
        return
    from g2po_bench.algorithms.registry import import_estimator_module

    try:
        import_estimator_module(cfg.algorithm.module)
    except ValueError as exc:
        raise ConfigError(f"bad value for config key 'algorithm.module': {exc}") from None


def resolve_state_key(cfg: RunConfig) -> str:
    """Replace ``env.state_key=auto`` by the estimator's reference rule (ALGORITHMS.md "State
    keys": GiGPO groups by the raw observation, G2PO by its reference key; the registry's
    ``state_key`` of each estimator); an explicit ``reference`` or ``raw`` is kept.

    Returns:
        the rule now in ``cfg.env.state_key``.
    """
    if cfg.env.state_key == "auto":
        from g2po_bench.algorithms.registry import estimator_spec

        cfg.env.state_key = estimator_spec(cfg.algorithm.name).state_key
    return cfg.env.state_key


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


def validate_config(cfg: RunConfig) -> None:
    """Range and choice checks that types alone do not catch. Raises ConfigError."""

    def need(cond: bool, key: str, msg: str) -> None:
        if not cond:
            raise ConfigError(f"bad value for config key {key!r}: {msg}")

    need(cfg.env.name in ("alfworld", "webshop", "toy", "appworld"), "env.name",
         f"{cfg.env.name!r}; choose alfworld, webshop, appworld or toy")
    need(cfg.env.state_key in ("auto", "reference", "raw"), "env.state_key", "choose auto, reference or raw")
    need(cfg.env.generated_eval_scenes in ("seen", "unseen"), "env.generated_eval_scenes", "choose seen or unseen")
    need(cfg.env.max_steps >= 1, "env.max_steps", "must be >= 1")
    need(cfg.env.history_length >= 0, "env.history_length", "must be >= 0")
    need(cfg.env.stop_after_refusals >= 0, "env.stop_after_refusals", "must be >= 0 (0 = off)")
    need(cfg.env.generated_train_games >= 0, "env.generated_train_games", "must be >= 0")
    need(cfg.env.generated_eval_games >= 0, "env.generated_eval_games", "must be >= 0")
    need(cfg.env.generated_max_receptacles >= 0, "env.generated_max_receptacles", "must be >= 0")
    need(cfg.env.num_workers >= 0, "env.num_workers", "must be >= 0 (0 = one per usable CPU)")
    need(cfg.env.worker_max_episodes >= 0, "env.worker_max_episodes", "must be >= 0 (0 = never recycle)")
    need(
        cfg.env.webshop_observation_mode in ("text", "text_rich"),
        "env.webshop_observation_mode",
        "choose text or text_rich",
    )
    need(cfg.env.prompt in ("auto", "reference", "compact"), "env.prompt", "choose auto, reference or compact")
    need(cfg.env.prompt == "reference" or cfg.env.name in ("alfworld", "toy"), "env.prompt",
         f"the compact prompt exists for ALFWorld only; use env.prompt=reference with env.name={cfg.env.name}")
    need(cfg.env.webshop_reward in ("original", "lenient"), "env.webshop_reward", "choose original or lenient")
    if cfg.env.name == "webshop":
        from g2po_bench.benchmarks.webshop.nouns import NounExtractorError, check_noun_extractor

        try:
            check_noun_extractor(cfg.env.webshop_nouns)
        except NounExtractorError as exc:
            raise ConfigError(f"bad value for config key 'env.webshop_nouns': {exc}") from None
    if cfg.env.name == "alfworld":
        for t in cfg.env.task_types:
            need(t in ALFWORLD_TASK_TYPES, "env.task_types", f"{t!r}; known: {', '.join(ALFWORLD_TASK_TYPES)}")
    need(cfg.env.appworld_max_interactions >= 1, "env.appworld_max_interactions", "must be >= 1")
    need(cfg.env.appworld_timeout_seconds >= 1, "env.appworld_timeout_seconds", "must be >= 1 (seconds)")
    need(cfg.env.appworld_cell_timeout > 0, "env.appworld_cell_timeout", "must be > 0 (seconds)")
    for d in cfg.env.appworld_difficulties:
        need(d in (1, 2, 3), "env.appworld_difficulties", f"{d!r}; AppWorld difficulties are 1, 2 and 3")
    if cfg.env.data_dir is not None:
        need(Path(cfg.env.data_dir).exists(), "env.data_dir", f"folder {cfg.env.data_dir!r} does not exist")
    need(cfg.algorithm.mode in ("mean_std_norm", "mean_norm"), "algorithm.mode", "choose mean_std_norm or mean_norm")
    need(0.0 <= cfg.algorithm.gamma <= 1.0, "algorithm.gamma", "must be in [0, 1]")
    need(cfg.algorithm.invalid_penalty >= 0, "algorithm.invalid_penalty", "must be >= 0")
    from g2po_bench.algorithms.registry import available_estimators, check_options

    need(
        cfg.algorithm.name in available_estimators(),
        "algorithm.name",
        f"{cfg.algorithm.name!r}; registered estimators: {', '.join(available_estimators())}",
    )
    try:
        check_options(cfg.algorithm.name, dict(cfg.algorithm.options))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad value for config key 'algorithm.options': {exc}") from None
    if cfg.backend == "openrlhf":
        from g2po_bench.algorithms.registry import INPUTS, estimator_inputs

        # inputs the OpenRLHF backend's rollouts (vLLM sampling) do not carry
        lacking = [k for k in estimator_inputs(cfg.algorithm.name, dict(cfg.algorithm.options))
                   if k in OPENRLHF_LACKS]
        need(not lacking, "backend",
             f"estimator {cfg.algorithm.name!r} needs the input(s) {', '.join(lacking)} "
             f"({'; '.join(INPUTS[k].description for k in lacking)}), which backend=openrlhf does not "
             "record (its vLLM sampler reports no entropies); use backend=local")
    need(cfg.backend in ("local", "openrlhf"), "backend", "choose local or openrlhf")
    need(cfg.model.dtype in ("float32", "bfloat16"), "model.dtype", "choose float32 or bfloat16")
    need(cfg.model.device in ("auto", "cpu", "cuda"), "model.device", "choose auto, cpu or cuda")
    need(cfg.model.num_threads >= 0, "model.num_threads", "must be >= 0 (0 = every usable CPU)")
    if cfg.model.path is not None:
        need(Path(cfg.model.path).is_dir(), "model.path", f"folder {cfg.model.path!r} does not exist")
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
    need(t.weight_decay >= 0 and t.value_weight_decay >= 0, "train.weight_decay", "weight decays must be >= 0")
    need(t.value_lr > 0, "train.value_lr", "must be > 0")
    need(t.clip_ratio_c is None or t.clip_ratio_c > 1, "train.clip_ratio_c",
         "the dual-clip bound must be > 1 (reference 3.0), or null to turn dual clip off")
    need(t.kl_clamp is None or t.kl_clamp > 0, "train.kl_clamp", "must be > 0 (reference 10.0), or null for no clamp")
    from g2po_bench.algorithms.losses import LOSS_AGG_MODES

    need(t.loss_agg_mode in LOSS_AGG_MODES, "train.loss_agg_mode", f"choose one of {', '.join(LOSS_AGG_MODES)}")
    need(t.sft_epochs >= 0, "train.sft_epochs", "must be >= 0")
    need(t.sft_max_tasks >= 1, "train.sft_max_tasks", "must be >= 1")
    need(0.0 <= t.sft_detour_prob <= 1.0, "train.sft_detour_prob", "must be in [0, 1]")
    need(0.0 <= t.sft_detour_open_prob <= 1.0, "train.sft_detour_open_prob", "must be in [0, 1]")
    need(0.0 <= t.sft_stall_prob < 1.0, "train.sft_stall_prob", "must be in [0, 1)")
    need(0.0 <= t.sft_recovery_prob <= 1.0, "train.sft_recovery_prob", "must be in [0, 1]")
    need(t.rl_tasks in RL_TASK_POOLS, "train.rl_tasks", f"choose one of {', '.join(RL_TASK_POOLS)}")
    need(not (t.rl_tasks == "without_demos" and cfg.env.name == "alfworld" and cfg.env.data_dir is None
              and cfg.env.generated_train_games <= t.sft_max_tasks), "train.rl_tasks",
         f"without_demos leaves no training task: the warm start imitates all {cfg.env.generated_train_games} "
         f"generated training games (train.sft_max_tasks={t.sft_max_tasks}); lower train.sft_max_tasks or raise "
         "env.generated_train_games")
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


def config_to_dict(cfg: RunConfig) -> dict[str, Any]:
    """Plain dict of the config (JSON/YAML-serialisable)."""
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # type: ignore[return-value]


def config_to_yaml(cfg: RunConfig) -> str:
    """The resolved config as YAML (what ``config.yaml`` of a run holds)."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


_NON_SEMANTIC_KEYS = ("run_id", "resume", "progress", "output_dir", "record_graphs")
# keys added after runs were committed: left out of the hash while at their default, so the
# run ids of existing configs (e.g. the committed cpu_proxy sweep) do not change
_HASHED_UNLESS_DEFAULT = {("algorithm", "module"): None}


def config_hash(cfg: RunConfig, length: int = 10) -> str:
    """Stable hash of the result-relevant part of the config (ignores run_id, resume, progress,
    output_dir, record_graphs, and ``algorithm.module`` while it is None); two configs with the
    same hash produce the same run."""
    d = config_to_dict(cfg)
    for k in _NON_SEMANTIC_KEYS:
        d.pop(k, None)
    for (section, key), default in _HASHED_UNLESS_DEFAULT.items():
        if d.get(section, {}).get(key, default) == default:
            d.get(section, {}).pop(key, None)
    blob = json.dumps(d, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def resolve_run_id(cfg: RunConfig) -> str:
    """The run id: ``cfg.run_id`` if set, else ``<env>-<algorithm>-s<seed>-<config hash>``."""
    if cfg.run_id:
        return cfg.run_id
    return f"{cfg.env.name}-{cfg.algorithm.name}-s{cfg.seed}-{config_hash(cfg)}"
