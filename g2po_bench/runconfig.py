"""The run config as the suite loads it: the schema, the benchmarks' presets and every check.

:func:`load_config` is the one way to get a config to run: it layers dataclass defaults < preset <
YAML file < ``key=value`` overrides (:func:`g2po_bench.core.config.parse_config`), then runs the
checks of the benchmark (:meth:`~g2po_bench.benchmarks.base.Benchmark.validate_config`) and of the
estimator (bound to the run's options and tried on a synthetic batch) and resolves the ``auto``
settings, all before any work starts (docs/design-notes.md "Rules of the house": a broken config
fails before any work starts). Presets live in the benchmarks' own ``presets/`` folders
(:func:`g2po_bench.benchmarks.registry.preset_files`).

The estimator of a run is bound here (:func:`g2po_bench.algorithms.registry.bind_run_estimator`:
its options checked once) and tried on a synthetic batch; the trainers bind it the same way when
they start and call it every iteration.
"""

from __future__ import annotations

from pathlib import Path

from g2po_bench.algorithms.registry import (
    INPUTS,
    bind_run_estimator,
    estimator_spec,
    import_estimator_module,
)
from g2po_bench.benchmarks.registry import (
    benchmark_load_errors,
    benchmark_names,
    get_benchmark,
    preset_file,
    preset_files,
)
from g2po_bench.core.config import OPENRLHF_LACKS, ConfigError, RunConfig, parse_config, require

__all__ = ["load_config", "check_run_config", "resolve_state_key", "preset_names"]


def preset_names() -> list[str]:
    """Sorted names of every benchmark's presets (``--preset``)."""
    return sorted(preset_files())


def load_config(
    config_file: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    preset: str | None = None,
    check_paths: bool = True,
    base_file: str | Path | None = None,
) -> RunConfig:
    """Build a validated RunConfig: dataclass defaults < base file < preset < YAML file < overrides.

    Args:
        config_file: a YAML file with any subset of the keys.
        overrides: dotted ``key=value`` strings, e.g. ``["algorithm.name=gigpo", "seed=3"]``.
        preset: a preset name (``g2po config --help`` lists them), e.g. ``alfworld_1.5b``.
        check_paths: False skips the checks that ``model.path`` and ``env.data_dir`` exist (a
            sweep's dry run with placeholders for folders not given yet).
        base_file: a YAML file under every other layer (the recorded ``config.yaml`` of the run a
            resume continues: :func:`g2po_bench.train.load_train_config`).

    Returns:
        The RunConfig with ``env.prompt``, ``env.state_key`` and ``train.old_logprobs`` resolved
        (the saved config records what ``auto`` meant).

    Raises:
        ConfigError: unknown key or preset, wrong type, bad value, missing file; before any work.
    """
    path = None
    if preset:
        try:
            path = preset_file(preset)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    cfg = parse_config(config_file, overrides, preset_file=path, check_paths=check_paths, base_file=base_file)
    check_run_config(cfg)
    return cfg


def check_run_config(cfg: RunConfig) -> None:
    """The checks a schema cannot do: ``env.name`` is a registered benchmark and its own settings
    hold, ``algorithm.module`` (if set) imports, ``algorithm.name`` is a registered estimator, its
    options hold (the run's options bound by :func:`~g2po_bench.algorithms.registry.bind_run_estimator`),
    it runs on a small synthetic batch (:meth:`~g2po_bench.algorithms.registry.BoundEstimator.trial`)
    and the backend records the inputs it declares; resolves
    ``env.prompt=auto`` (the benchmark's default style) and ``env.state_key=auto`` (the
    estimator's rule), in place.

    Raises:
        ConfigError: naming the key and how to fix it.
    """
    names = benchmark_names()
    failed = "".join(f"; {label} failed to load ({why})" for label, why in benchmark_load_errors().items())
    require(cfg.env.name in names, "env.name", f"{cfg.env.name!r}; choose one of {', '.join(names)}{failed}")
    bench = get_benchmark(cfg.env.name)
    if cfg.env.prompt == "auto":
        cfg.env.prompt = bench.default_prompt_style(cfg)
    bench.validate_config(cfg)
    if cfg.algorithm.module:
        try:
            import_estimator_module(cfg.algorithm.module)
        except ValueError as exc:
            raise ConfigError(f"bad value for config key 'algorithm.module': {exc}") from None
    try:
        estimator_spec(cfg.algorithm.name)
    except ValueError as exc:  # unknown: the message lists the registered ones and any failed entry point
        raise ConfigError(f"bad value for config key 'algorithm.name': {exc}") from None
    try:
        estimator = bind_run_estimator(cfg)
    except ValueError as exc:
        raise ConfigError(f"bad value for config key 'algorithm.options': {exc}") from None
    except TypeError as exc:  # the estimator's declaration and its function disagree
        raise ConfigError(f"bad value for config key 'algorithm.name': {exc}") from None
    try:
        estimator.trial()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad value for config key 'algorithm.name': {cfg.algorithm.name!r} fails on a "
                          f"small synthetic batch, before any work: {exc}") from None
    if cfg.backend == "openrlhf":
        # inputs the OpenRLHF backend's rollouts (vLLM sampling) do not carry
        lacking = [k for k in estimator.inputs if k in OPENRLHF_LACKS]
        require(not lacking, "backend",
                f"estimator {cfg.algorithm.name!r} needs the input(s) {', '.join(lacking)} "
                f"({'; '.join(INPUTS[k].description for k in lacking)}), which backend=openrlhf does not "
                "record (its vLLM sampler reports no entropies); use backend=local")
    resolve_state_key(cfg)


def resolve_state_key(cfg: RunConfig) -> str:
    """Replace ``env.state_key=auto`` by the estimator's reference rule (docs/design-notes.md
    "State keys": GiGPO groups by the raw observation, G2PO by its reference key; the registry's
    ``state_key`` of each estimator); an explicit ``reference`` or ``raw`` is kept.

    Returns:
        the rule now in ``cfg.env.state_key``.
    """
    if cfg.env.state_key == "auto":
        cfg.env.state_key = estimator_spec(cfg.algorithm.name).state_key
    return cfg.env.state_key
