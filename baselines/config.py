"""The ``baseline`` section of a baseline run's config, and loading it next to the RunConfig.

A baseline run is configured like any run (:class:`g2po_bench.core.config.RunConfig`: ``env.*``,
``model.*``, ``eval.*``, ``seed``, ...) plus a ``baseline`` section (:class:`BaselineConfig`)
that names the method and the policy backend. Both come from one YAML file and/or dotted
``key=value`` overrides; the ``baseline.*`` keys are split off here, the rest goes through
:func:`g2po_bench.runconfig.load_config` unchanged (so every RunConfig check applies).

Shorthands on the command line (baseline runs only): ``baseline=react`` means
``baseline.name=react``, ``model=PATH`` means ``model.path=PATH``, ``env=NAME`` means
``env.name=NAME``; ``model.path=smollm2`` means the cached SmolLM2-135M-Instruct folder
(:func:`g2po_bench.baselines.smollm2.ensure_smollm2`, converted on first use: by the run, never by
``g2po config``, which prints the folder it will be).

Step limit: a baseline plays with the benchmark's published step limit
(:attr:`g2po_bench.benchmarks.base.Benchmark.reference_max_steps`: ALFWorld 50, WebShop 15,
AppWorld 30) unless the overrides, the config file or a preset set ``env.max_steps`` (the
dataclass default 15 is the CPU proxy's RL horizon, not the prompting protocol's).

What each baseline uses from the RunConfig: ``env.*`` (benchmark, data, ``max_steps``,
``eval_split``, ``history_length`` for direct prompting), ``eval.num_tasks`` (the panel,
:func:`g2po_bench.benchmarks.evaluation.select_panel`), ``eval.temperature``, ``eval.episodes_per_task``,
``train.max_prompt_tokens`` (local/vLLM prompt truncation), ``model.*`` (local/vLLM), ``seed``,
``output_dir``, ``run_id``. Sampling uses top-p 1, as the RL evaluation does.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from g2po_bench.baselines.smollm2 import ModelPackageMissing, ensure_smollm2, smollm2_folder
from g2po_bench.benchmarks.registry import get_benchmark, preset_file
from g2po_bench.core.config import ConfigError, RunConfig, config_to_dict, parse_config
from g2po_bench.runconfig import check_run_config, load_config

__all__ = ["POLICY_KINDS", "BaselineConfig", "BASELINE_NAMES", "is_baseline_request", "load_baseline_config",
           "baseline_run_dict", "baseline_run_id", "validate_baseline"]

#: the policy backends a baseline can use (:func:`g2po_bench.baselines.policies.make_policy`)
POLICY_KINDS = ("local", "vllm", "openai")

BASELINE_NAMES = ("direct", "react", "reflexion")
_SHORTHANDS = {"baseline": "baseline.name", "model": "model.path", "env": "env.name"}
#: sections a baseline config.yaml carries besides the RunConfig keys
_EXTRA_SECTIONS = ("baseline", "tags", "kind")


@dataclass
class BaselineConfig:
    """The ``baseline`` section (see the module docstring)."""

    name: str = "react"  # "direct" | "react" | "reflexion"
    policy: str = "local"  # "local" | "vllm" | "openai"
    # openai-compatible endpoint (policy=openai)
    base_url: str | None = None  # e.g. http://127.0.0.1:8000/v1
    api_model: str | None = None  # the model name sent to the server
    api_key_env: str = "OPENAI_API_KEY"  # environment variable holding the key ("" = send none)
    request_timeout: float = 120.0
    max_retries: int = 5
    max_concurrency: int = 8
    # generation
    max_new_tokens: int = 256  # per step (0 = train.max_response_tokens)
    batch_size: int = 16  # prompts per generate call of the local policy
    torch_threads: int = 0  # 0 = leave torch's default
    # ReAct / Reflexion prompts
    prompt_style: str = "chat"  # "chat" (one user message) | "completion" (transcript continuation; local/vllm)
    num_examples: int = 2  # few-shot transcripts of the task's type per prompt
    examples_split: str | None = None  # None = env.train_split (valid_train if that split is missing)
    history_steps: int = 0  # past steps shown in full (0 = all that fit)
    max_prompt_chars: int = 0  # 0 = 2.5 x train.max_prompt_tokens (keeps prompts under the token limit)
    # Reflexion
    max_trials: int = 3
    max_reflections: int = 3
    reflection_tokens: int = 128


def _split_key(item: str) -> tuple[str, str]:
    key, _, value = item.partition("=")
    return key.strip(), value


def is_baseline_request(overrides: list[str] | None, config_file: str | os.PathLike | None = None) -> bool:
    """True when the overrides set ``baseline``/``baseline.*`` or the YAML file has a ``baseline`` key."""
    for item in overrides or []:
        key = _split_key(item)[0]
        if key == "baseline" or key.startswith("baseline."):
            return True
    if config_file is not None and Path(config_file).exists():
        try:
            data = yaml.safe_load(Path(config_file).read_text(encoding="utf-8"))
        except yaml.YAMLError:
            return False
        return isinstance(data, dict) and data.get("baseline") not in (None, "", {})
    return False


def _expand(overrides: list[str]) -> list[str]:
    out = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value (e.g. baseline.name=react)")
        key, value = _split_key(item)
        out.append(f"{_SHORTHANDS.get(key, key)}={value}")
    return out


def _resolve_model_alias(items: list[str], convert: bool = True) -> tuple[list[str], Path | None]:
    """``model.path=smollm2`` as the cached SmolLM2 folder: ``(items, None)`` with the folder
    (converted first if needed); with ``convert`` False a folder not converted yet is left to be
    converted by the run: ``(items without model.path, the folder it will be)``."""
    out, pending = [], None
    for item in items:
        key, value = _split_key(item)
        if key == "model.path" and value.strip().lower() in ("smollm2", "smollm2-135m-instruct"):
            folder, converted = smollm2_folder()
            if not convert and not converted:
                pending = folder
                continue
            try:
                value = str(ensure_smollm2())
            except ModelPackageMissing as exc:
                raise ConfigError(f"model.path=smollm2: {exc}") from None
        out.append(f"{key}={value}")
    return out, pending


def _run_config(config_file: str | None, items: list[str], preset: str | None, pending_model: Path | None) -> RunConfig:
    """:func:`g2po_bench.runconfig.load_config`; with ``pending_model`` (a model folder that does
    not exist yet) the config is checked with it in ``model.path`` but without the folder check."""
    if pending_model is None:
        return load_config(config_file, items, preset=preset)
    try:
        path = preset_file(preset) if preset else None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    cfg = parse_config(config_file, items, preset_file=path)
    cfg.model.path = str(pending_model)
    check_run_config(cfg)
    return cfg


def load_baseline_config(
    config_file: str | os.PathLike | None = None,
    overrides: list[str] | None = None,
    *,
    preset: str | None = None,
    convert_model: bool = True,
) -> tuple[RunConfig, BaselineConfig]:
    """(RunConfig, BaselineConfig) from a YAML file (a baseline run's ``config.yaml`` works)
    and overrides; defaults < preset < file < overrides.

    Args:
        convert_model: False leaves ``model.path=smollm2`` unconverted when it is not in the
            cache yet (``model.path`` then names the folder the run will convert it into; what
            ``g2po config`` prints, with no side effect); True converts it (a run).

    Raises:
        ConfigError: unknown key, wrong type or bad value (naming the key), before any work.
    """
    items, pending_model = _resolve_model_alias(_expand(list(overrides or [])), convert=convert_model)
    base_items = [i for i in items if _split_key(i)[0].startswith("baseline.")]
    run_items = [i for i in items if not _split_key(i)[0].startswith("baseline.")]
    layers = []
    tmp_path = None
    file_env = None
    try:
        if config_file is not None:
            path = Path(config_file)
            if not path.exists():
                raise ConfigError(f"config file {str(path)!r} does not exist")
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            if not isinstance(data, dict):
                raise ConfigError(f"config file {str(path)!r} must hold a mapping of keys")
            file_env = data.get("env")
            section = data.pop("baseline", None)
            for k in _EXTRA_SECTIONS[1:]:
                data.pop(k, None)
            if isinstance(section, str):
                section = {"name": section}
            if section:
                layers.append(OmegaConf.create(section))
            fd, tmp_path = tempfile.mkstemp(suffix=".yaml", prefix="g2po-baseline-")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                yaml.safe_dump(data, fh)
        cfg = _run_config(tmp_path, run_items, preset, pending_model)
        reference = get_benchmark(cfg.env.name).reference_max_steps
        step_limit_set = preset is not None or any(_split_key(i)[0] == "env.max_steps" for i in run_items) or (
            isinstance(file_env, dict) and "max_steps" in file_env)
        if reference is not None and not step_limit_set and cfg.env.max_steps != reference:
            # the published protocol's step limit, not the CPU default's (ALFWorld 50, not 15)
            cfg = _run_config(tmp_path, [*run_items, f"env.max_steps={reference}"], preset, pending_model)
    finally:
        if tmp_path is not None:
            os.unlink(tmp_path)
    if base_items:
        layers.append(OmegaConf.from_dotlist([i[len("baseline."):] for i in base_items]))
    try:
        merged = OmegaConf.merge(OmegaConf.structured(BaselineConfig), *layers)
        bcfg: BaselineConfig = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or getattr(exc, "key", None)
        msg = str(exc).splitlines()[0]
        raise ConfigError(f"bad config key or value 'baseline.{key}': {msg}" if key else msg) from None
    validate_baseline(cfg, bcfg)
    return cfg, bcfg


def validate_baseline(cfg: RunConfig, b: BaselineConfig) -> None:
    """Choice and range checks of the baseline section. Raises ConfigError naming the key."""

    def need(cond: bool, key: str, msg: str) -> None:
        if not cond:
            raise ConfigError(f"bad value for config key 'baseline.{key}': {msg}")

    need(b.name in BASELINE_NAMES, "name", f"{b.name!r}; choose {', '.join(BASELINE_NAMES)}")
    need(b.policy in POLICY_KINDS, "policy", f"{b.policy!r}; choose {', '.join(POLICY_KINDS)}")
    if b.policy == "openai":
        need(bool(b.base_url), "base_url", "policy=openai needs the endpoint, e.g. baseline.base_url=http://127.0.0.1:8000/v1")
        need(bool(b.api_model), "api_model", "policy=openai needs the served model name, e.g. baseline.api_model=gpt-4o")
        need(b.request_timeout > 0, "request_timeout", "must be > 0")
        need(b.max_retries >= 0, "max_retries", "must be >= 0")
        need(b.max_concurrency >= 1, "max_concurrency", "must be >= 1")
    elif cfg.model.path is None:
        raise ConfigError(f"baseline.policy={b.policy} needs model.path=<model folder> "
                          "(or model.path=smollm2 for the small CPU instruct model)")
    need(b.prompt_style in ("chat", "completion"), "prompt_style", f"{b.prompt_style!r}; choose chat or completion")
    need(not (b.prompt_style == "completion" and b.policy == "openai"), "prompt_style",
         "completion prompts need a local or vllm policy (chat-completions endpoints apply a chat template)")
    need(not (b.prompt_style == "completion" and b.name == "direct"), "prompt_style",
         "direct prompting uses the RL step prompt as a chat message; completion is for react/reflexion")
    need(b.max_new_tokens >= 0, "max_new_tokens", "must be >= 0 (0 = train.max_response_tokens)")
    need(b.batch_size >= 1, "batch_size", "must be >= 1")
    need(b.torch_threads >= 0, "torch_threads", "must be >= 0")
    need(b.num_examples >= 0, "num_examples", "must be >= 0")
    need(b.history_steps >= 0, "history_steps", "must be >= 0 (0 = all that fit)")
    need(b.max_prompt_chars >= 0, "max_prompt_chars", "must be >= 0")
    need(b.max_trials >= 1, "max_trials", "must be >= 1")
    need(b.max_reflections >= 0, "max_reflections", "must be >= 0")
    need(b.reflection_tokens >= 1, "reflection_tokens", "must be >= 1")
    if b.examples_split is not None:
        need(b.examples_split != cfg.env.eval_split, "examples_split",
             f"{b.examples_split!r} is the evaluation split; few-shot examples must come from training tasks")


def baseline_run_dict(cfg: RunConfig, b: BaselineConfig) -> dict[str, Any]:
    """The run's ``config.yaml`` content: the RunConfig keys, ``kind: baseline``, the
    ``baseline`` section, and ``tags.model_size`` (the served model) for remote policies."""
    d = config_to_dict(cfg)
    d["kind"] = "baseline"
    d["baseline"] = asdict(b)
    if b.policy == "openai" and b.api_model:
        d["tags"] = {"model_size": b.api_model}
    return d


# (``logging``: where metrics also go, never a result: leaving it out keeps the run ids of baselines
# configured before the section existed)
_NON_SEMANTIC = ("run_id", "resume", "progress", "output_dir", "logging")


def baseline_run_id(cfg: RunConfig, b: BaselineConfig, length: int = 10) -> str:
    """``cfg.run_id`` if set, else ``<env>-<baseline>-s<seed>-<hash of the config>``."""
    if cfg.run_id:
        return cfg.run_id
    d = baseline_run_dict(cfg, b)
    for k in _NON_SEMANTIC:
        d.pop(k, None)
    h = hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:length]
    return f"{cfg.env.name}-{b.name}-s{cfg.seed}-{h}"
