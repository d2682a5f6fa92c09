"""Names: how a run's config maps to a table row (method, variant, model size) and a metric.

Everything here is a pure function of the resolved ``config.yaml`` (a nested dict) or of
constants, so the tables do not depend on folder names.

Method (``method``): the estimator's registered ``label``
(:func:`g2po_bench.algorithms.registry.register_estimator`), computed from the run's
``algorithm`` section: "PPO (critic)", "RLOO", "GRPO", "GiGPO w/ std" (mode ``mean_std_norm``) /
"GiGPO w/o std" (``mean_norm``), "G2PO", "CRBC", "HGPO", "GraphGPO", "EMPG", and whatever a new
estimator registers. An estimator that is not registered here (e.g. from a package that is not
installed) keeps its name as written. Baseline runs: ``react`` -> "ReAct", ``reflexion`` ->
"Reflexion", ``direct``/``prompting``/``zero_shot`` -> "Qwen2.5 (prompting)".

A run is a *baseline* run when the config has ``kind: baseline`` or a top-level ``baseline``
key (a name, or a mapping with ``name``); its name is read from ``baseline.name``,
``baseline`` (a string), ``name`` or ``algorithm.name``, in that order.

Variant (``variant``): what makes a run differ from the method's main-table setting, as a
sorted, comma-separated ``key=value`` list ("" for a main-table run), read from the registry
so that a new estimator's variants never collide: every entry of ``algorithm.options``; and
each common option of the estimator's ``variant_options`` whose value differs from its
reference value, written ``w=<step_weight>``, ``norm=<mode>`` or ``<option>=<value>``. The
reference of ``mode`` is the environment's reference mode (ALFWorld ``mean_std_norm``, WebShop
``mean_norm``; the normalization ablation; no ``norm`` part on other environments); the
reference of the others is the estimator's default. By default an estimator's variant options
are the common options its function takes (GRPO: ``mode``, ``invalid_penalty``; G2PO: all
five; PPO and RLOO ignore the mode; GiGPO carries the mode in its name). A WebShop run trained
without the WebShop preset keeps the dataclass default ``mean_std_norm`` and so shows up as
``G2PO [norm=mean_std_norm]``, not in the main row. An unregistered estimator gets every
common option that differs from :data:`g2po_bench.algorithms.registry.COMMON_OPTIONS`.
That is one run alone (:func:`variant_of`). A report names the runs of a set together
(:func:`variants_in_set`, what :func:`g2po_bench.analysis.load.load_runs` uses): a common option
whose value differs between runs of one method, environment and model size is part of the variant
of every such run whose value differs from the reference, also where :func:`variant_of` leaves it
out (the mode on the toy corridor or AppWorld, where the reference is the estimator's default; an
option outside ``variant_options``), so runs whose ``algorithm`` sections differ never share a row.
``method_label`` is ``method`` plus `` [variant]`` when the variant is not empty.

Model size (``model_size``): an explicit ``tags.model_size`` (or top-level ``model_size``) in
the config wins; else ``model.path`` None -> "tiny" (the CPU model); else the size token of
the path's basename (``Qwen2.5-1.5B-Instruct`` -> "1.5B", ``qwen2.5-7b-instruct`` -> "7B");
else the basename itself. :func:`g2po_bench.analysis.load.load_runs` also takes ``column_overrides``
(``{run_id: {"model_size": "7B"}}``) for runs whose config cannot say it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from g2po_bench.algorithms.registry import COMMON_OPTIONS, estimator_spec, import_estimator_module
from g2po_bench.benchmarks.alfworld.games import TASK_TYPES as ALFWORLD_TASK_TYPES

__all__ = [
    "ALFWORLD_TASK_TYPES",
    "TASK_TYPE_METRIC",
    "METHOD_ORDER",
    "BASELINE_NAMES",
    "VARIANT_KEYS",
    "REFERENCE_MODE",
    "get_path",
    "is_baseline",
    "method_name",
    "estimator_problem",
    "variant_of",
    "variants_in_set",
    "model_size_of",
    "method_label",
    "env_metric_names",
    "model_size_sort_key",
    "method_sort_key",
]

#: ALFWorld task types, in the paper's column order, and their Table 1 metric names.
TASK_TYPE_METRIC = {
    "pick_and_place_simple": "success_pick",
    "look_at_obj_in_light": "success_look",
    "pick_clean_then_place_in_recep": "success_clean",
    "pick_heat_then_place_in_recep": "success_heat",
    "pick_cool_then_place_in_recep": "success_cool",
    "pick_two_obj_and_place": "success_pick2",
}

BASELINE_NAMES = {
    "react": "ReAct",
    "reflexion": "Reflexion",
    "direct": "Qwen2.5 (prompting)",
    "prompting": "Qwen2.5 (prompting)",
    "zero_shot": "Qwen2.5 (prompting)",
}
#: How a common option is written in a variant ("w=0.8", "norm=mean_norm").
VARIANT_KEYS = {"step_weight": "w", "mode": "norm"}
#: The advantage-normalization mode of the reference scripts per environment.
REFERENCE_MODE = {"alfworld": "mean_std_norm", "webshop": "mean_norm"}

#: Row order of the tables (the paper's order); other methods follow alphabetically.
METHOD_ORDER = (
    "GPT-4o",
    "Gemini-2.5-Pro",
    "Qwen2.5 (prompting)",
    "ReAct",
    "Reflexion",
    "PPO (critic)",
    "RLOO",
    "GRPO",
    "GiGPO w/ std",
    "GiGPO w/o std",
    "GiGPO",
    "G2PO",
    "GraphGPO",
    "HGPO",
    "CRBC",
    "EMPG",
)

_SIZE_RE = re.compile(r"(?:^|[-_ .])(\d+(?:\.\d+)?)[bB](?=$|[-_ .])")


def get_path(cfg: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    """``cfg["a"]["b"]`` for ``"a.b"``; ``default`` when any level is missing or not a mapping."""
    cur: Any = cfg
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return default
        cur = cur[part]
    return cur


def is_baseline(cfg: Mapping[str, Any]) -> bool:
    """True for a prompting-baseline run (``kind: baseline`` or a top-level ``baseline`` key)."""
    return cfg.get("kind") == "baseline" or cfg.get("baseline") not in (None, "", {})


def _baseline_name(cfg: Mapping[str, Any]) -> str:
    b = cfg.get("baseline")
    for cand in (get_path(cfg, "baseline.name"), b if isinstance(b, str) else None, cfg.get("name"), get_path(cfg, "algorithm.name")):
        if isinstance(cand, str) and cand:
            return cand
    return "baseline"


def _estimator_spec(name: str, module: Any = None):
    """The registry entry of ``name``, or None when it is not registered here. ``module``: the
    run's ``algorithm.module``, imported first when ``name`` is not registered (an estimator
    outside the installed packages, on PYTHONPATH); a module that fails to import gives None."""
    try:
        return estimator_spec(name)
    except ValueError:
        pass
    if isinstance(module, str) and module:
        try:
            import_estimator_module(module)
            return estimator_spec(name)
        except ValueError:
            return None
    return None


def _run_estimator_spec(cfg: Mapping[str, Any]):
    """The registry entry of a run's estimator (see :func:`_estimator_spec`), or None."""
    name = str(get_path(cfg, "algorithm.name", "") or "")
    module = get_path(cfg, "algorithm.module")
    return _estimator_spec(name, module) or _estimator_spec(name.lower())


def _algorithm_options(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The run's common options (those present) and explicit ``algorithm.options``."""
    algo = get_path(cfg, "algorithm") or {}
    out = {k: algo[k] for k in COMMON_OPTIONS if isinstance(algo, Mapping) and k in algo}
    options = get_path(cfg, "algorithm.options") or {}
    if isinstance(options, Mapping):
        out.update(options)
    return out


def estimator_problem(cfg: Mapping[str, Any]) -> str | None:
    """Why a training run's estimator has no registry entry in this process, or None when it has
    one (or the run is a baseline). Without the entry the run's row keeps the estimator's name as
    written, not its registered label, and its variant compares every common option with the
    suite's defaults; the message names the estimator, its ``algorithm.module`` and the reason."""
    if is_baseline(cfg) or _run_estimator_spec(cfg) is not None:
        return None
    name = str(get_path(cfg, "algorithm.name", "") or "")
    module = get_path(cfg, "algorithm.module")
    where = f"row {name!r} instead of the estimator's own label"
    if isinstance(module, str) and module:
        try:
            import_estimator_module(module)
        except ValueError as exc:
            return (f"estimator {name!r}: its module {module!r} (algorithm.module) is not importable here ({exc}); "
                    f"{where}: put the module on PYTHONPATH (or install its package) and report again")
        return (f"estimator {name!r}: its module {module!r} (algorithm.module) imports but registers no estimator "
                f"of that name; {where}")
    return (f"estimator {name!r} is not registered here and the run names no algorithm.module; {where}: install "
            "the package that registers it (entry point g2po.estimators) and report again")


def method_name(cfg: Mapping[str, Any]) -> str:
    """The table row name of a run (see the module docstring)."""
    if is_baseline(cfg):
        raw = _baseline_name(cfg)
        return BASELINE_NAMES.get(raw.lower(), raw)
    name = str(get_path(cfg, "algorithm.name", "") or "")
    spec = _run_estimator_spec(cfg)
    if spec is None:
        return name or "unknown"
    return spec.display_label(_algorithm_options(cfg))


def _fmt_value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "+".join(_fmt_value(x) for x in v)
    if isinstance(v, Mapping):
        return "{" + ",".join(f"{k}:{_fmt_value(x)}" for k, x in sorted(v.items())) + "}"
    return str(v)


def _differs(value: Any, reference: Any) -> bool:
    if isinstance(value, bool) or isinstance(reference, bool):
        return value != reference
    if isinstance(value, (int, float)) and isinstance(reference, (int, float)):
        return not math.isclose(float(value), float(reference))
    return value != reference


def variant_of(cfg: Mapping[str, Any]) -> str:
    """The variant string of a run ("" for a main-table run; see the module docstring)."""
    if is_baseline(cfg):
        return ""
    parts: list[str] = []
    options = get_path(cfg, "algorithm.options") or {}
    if isinstance(options, Mapping):
        parts.extend(f"{k}={_fmt_value(v)}" for k, v in options.items())
    spec = _run_estimator_spec(cfg)
    common = spec.variant_options if spec is not None else tuple(COMMON_OPTIONS)
    defaults = spec.defaults if spec is not None else COMMON_OPTIONS
    env = get_path(cfg, "env.name")
    for opt in common:
        value = get_path(cfg, f"algorithm.{opt}")
        if value is None:
            continue
        if opt == "mode":
            if env not in REFERENCE_MODE:
                continue
            reference = REFERENCE_MODE[env]
        else:
            reference = defaults[opt]
        if _differs(value, reference):
            key = VARIANT_KEYS.get(opt, opt)
            parts.append(f"{key}={float(value):g}" if opt == "step_weight" else f"{key}={_fmt_value(value)}")
    return ", ".join(sorted(parts))


def _common_parts_shown(cfg: Mapping[str, Any], spec: Any) -> set[str]:
    """The common options :func:`variant_of` itself writes into a run's variant when they differ
    from their reference (the estimator's ``variant_options``; ``mode`` only on an environment
    with a reference mode)."""
    shown = set(spec.variant_options if spec is not None else COMMON_OPTIONS)
    if get_path(cfg, "env.name") not in REFERENCE_MODE:
        shown.discard("mode")
    return shown


def _common_reference(opt: str, cfg: Mapping[str, Any], spec: Any) -> Any:
    """The value of common option ``opt`` that writes no variant part: the environment's reference
    mode for ``mode`` where there is one, else the estimator's default."""
    env = get_path(cfg, "env.name")
    if opt == "mode" and env in REFERENCE_MODE:
        return REFERENCE_MODE[env]
    defaults = spec.defaults if spec is not None else COMMON_OPTIONS
    return defaults.get(opt, COMMON_OPTIONS[opt])


def _part(opt: str, value: Any) -> str:
    key = VARIANT_KEYS.get(opt, opt)
    if opt == "step_weight" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{key}={float(value):g}"
    return f"{key}={_fmt_value(value)}"


def variants_in_set(configs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The variant of every run of a set of runs considered together (a report's runs).

    Starts from :func:`variant_of` of each run. Then, among the training runs of one method
    (:func:`method_name`), environment and model size, every common option (``mode``, ``gamma``,
    ``step_weight``, ``invalid_penalty``, ``success_reward``) whose value differs between them
    becomes part of the variant of each run whose value differs from the option's reference
    (:func:`variant_of`'s references; on an environment without a reference mode, the
    estimator's default mode), also where :func:`variant_of` leaves the option out (``mode`` on
    the toy corridor or AppWorld, an option outside the estimator's ``variant_options``). Every
    explicit ``algorithm.options`` entry is already part of a variant. So two runs of one method
    whose ``algorithm`` sections differ never get the same variant, and a set whose runs share
    one setting keeps :func:`variant_of`'s names.

    Args:
        configs: a key per run (e.g. its run id) -> its resolved ``config.yaml`` (nested dict).

    Returns:
        The same keys -> variant strings ("" for a main-table or baseline run).
    """
    out = {key: variant_of(cfg) for key, cfg in configs.items()}
    groups: dict[tuple[str, str, str], list[str]] = {}
    for key, cfg in configs.items():
        if is_baseline(cfg):
            continue
        group = (method_name(cfg), str(get_path(cfg, "env.name")), model_size_of(cfg))
        groups.setdefault(group, []).append(key)
    for keys in groups.values():
        if len(keys) < 2:
            continue
        specs = {key: _run_estimator_spec(configs[key]) for key in keys}
        for opt in COMMON_OPTIONS:
            values = {key: get_path(configs[key], f"algorithm.{opt}") for key in keys}
            present = [v for v in values.values() if v is not None]
            if not any(_differs(a, present[0]) for a in present[1:]):
                continue
            for key in keys:
                cfg, spec, value = configs[key], specs[key], values[key]
                if value is None or opt in _common_parts_shown(cfg, spec):
                    continue
                if _differs(value, _common_reference(opt, cfg, spec)):
                    parts = [p for p in out[key].split(", ") if p]
                    out[key] = ", ".join(sorted([*parts, _part(opt, value)]))
    return out


def method_label(method: str, variant: str) -> str:
    """``"G2PO"`` or ``"G2PO [w=0.8]"``."""
    return f"{method} [{variant}]" if variant else method


def model_size_of(cfg: Mapping[str, Any]) -> str:
    """The model-size label of a run (see the module docstring)."""
    for key in ("tags.model_size", "model_size"):
        v = get_path(cfg, key)
        if v not in (None, ""):
            return str(v)
    path = get_path(cfg, "model.path")
    if path in (None, ""):
        return "tiny"
    base = PurePath(str(path).rstrip("/\\")).name or str(path)
    m = _SIZE_RE.search(base)
    if m:
        return f"{m.group(1)}B"
    return base


def env_metric_names(env: str) -> tuple[str, str]:
    """(success metric, score metric) of an environment in the reference tables."""
    if env == "alfworld":
        return "success_all", "alfworld_score"
    return f"{env}_success", f"{env}_score"


def model_size_sort_key(size: str) -> tuple[int, float, str]:
    """Order: closed-source, numeric sizes ascending ("1.5B" < "7B" < "14B"), then the rest."""
    if size == "closed-source":
        return (0, 0.0, size)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)B", size)
    if m:
        return (1, float(m.group(1)), size)
    return (2, 0.0, size)


def method_sort_key(label: str) -> tuple[int, str]:
    """Order by :data:`METHOD_ORDER` on the base name (before `` [``), then alphabetically."""
    base = label.split(" [", 1)[0]
    try:
        return (METHOD_ORDER.index(base), label)
    except ValueError:
        return (len(METHOD_ORDER), label)
