"""Names: how a run's config maps to a table row (method, variant, model size) and a metric.

Everything here is a pure function of the resolved ``config.yaml`` (a nested dict) or of
constants, so the tables do not depend on folder names.

Method (``method``), from ``algorithm.name`` (+ ``algorithm.mode`` for GiGPO):

=================  ===================================================================
``ppo``            "PPO (critic)"
``rloo``           "RLOO"
``grpo``           "GRPO"
``gigpo``          "GiGPO w/ std" (mode ``mean_std_norm``) / "GiGPO w/o std" (``mean_norm``)
``g2po``           "G2PO"
baseline runs      ``react`` -> "ReAct", ``reflexion`` -> "Reflexion",
                   ``direct``/``prompting``/``zero_shot`` -> "Qwen2.5 (prompting)"
anything else      the name as written
=================  ===================================================================

A run is a *baseline* run when the config has ``kind: baseline`` or a top-level ``baseline``
key (a name, or a mapping with ``name``); its name is read from ``baseline.name``,
``baseline`` (a string), ``name`` or ``algorithm.name``, in that order.

Variant (``variant``): what makes a run differ from the method's main-table setting, as a
sorted, comma-separated ``key=value`` list ("" for a main-table run): every entry of
``algorithm.options``; ``w=<step_weight>`` for GiGPO/G2PO when ``step_weight != 1``; and
``norm=<mode>`` for GRPO/G2PO when ``algorithm.mode`` differs from the environment's
reference mode (ALFWorld ``mean_std_norm``, WebShop ``mean_norm``; the normalization
ablation). PPO and RLOO ignore the mode; GiGPO carries it in its name. A WebShop run trained
without the WebShop preset keeps the dataclass default ``mean_std_norm`` and so shows up as
``G2PO [norm=mean_std_norm]``, not in the main row.
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

from g2po_bench.benchmarks.alfworld.games import TASK_TYPES as ALFWORLD_TASK_TYPES

__all__ = [
    "ALFWORLD_TASK_TYPES",
    "TASK_TYPE_METRIC",
    "METHOD_ORDER",
    "METHOD_NAMES",
    "BASELINE_NAMES",
    "REFERENCE_MODE",
    "get_path",
    "is_baseline",
    "method_name",
    "variant_of",
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

METHOD_NAMES = {
    "ppo": "PPO (critic)",
    "rloo": "RLOO",
    "grpo": "GRPO",
    "g2po": "G2PO",
}
GIGPO_NAMES = {"mean_std_norm": "GiGPO w/ std", "mean_norm": "GiGPO w/o std"}
BASELINE_NAMES = {
    "react": "ReAct",
    "reflexion": "Reflexion",
    "direct": "Qwen2.5 (prompting)",
    "prompting": "Qwen2.5 (prompting)",
    "zero_shot": "Qwen2.5 (prompting)",
}
#: Estimators whose result depends on ``algorithm.mode`` besides GiGPO (named by it).
MODE_SENSITIVE = ("grpo", "g2po")
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


def method_name(cfg: Mapping[str, Any]) -> str:
    """The table row name of a run (see the module docstring)."""
    if is_baseline(cfg):
        raw = _baseline_name(cfg)
        return BASELINE_NAMES.get(raw.lower(), raw)
    name = str(get_path(cfg, "algorithm.name", "") or "")
    key = name.lower()
    if key == "gigpo":
        mode = get_path(cfg, "algorithm.mode", "mean_std_norm")
        return GIGPO_NAMES.get(mode, f"GiGPO ({mode})")
    return METHOD_NAMES.get(key, name or "unknown")


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


def variant_of(cfg: Mapping[str, Any]) -> str:
    """The variant string of a run ("" for a main-table run; see the module docstring)."""
    if is_baseline(cfg):
        return ""
    parts: list[str] = []
    options = get_path(cfg, "algorithm.options") or {}
    if isinstance(options, Mapping):
        parts.extend(f"{k}={_fmt_value(v)}" for k, v in options.items())
    algo = str(get_path(cfg, "algorithm.name", "") or "").lower()
    w = get_path(cfg, "algorithm.step_weight")
    if algo in ("gigpo", "g2po") and isinstance(w, (int, float)) and not math.isclose(float(w), 1.0):
        parts.append(f"w={float(w):g}")
    mode = get_path(cfg, "algorithm.mode")
    env = get_path(cfg, "env.name")
    if algo in MODE_SENSITIVE and mode and env in REFERENCE_MODE and mode != REFERENCE_MODE[env]:
        parts.append(f"norm={mode}")
    return ", ".join(sorted(parts))


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
