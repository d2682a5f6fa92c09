"""Sweep specs: a YAML file that expands into validated runs.

A spec (``sweeps/specs/*.yaml``) is a base config, a grid and/or a list of variants, seeds,
and the resources of each run::

    name: smoke                      # default: the file name
    description: ...
    output_dir: results/sweeps/smoke # default results/sweeps/<name>; relative to the CWD
    vars:                            # values the user provides (CLI: --var NAME=VALUE)
      model_1_5b: ${oc.env:G2PO_MODEL_1_5B}     # OmegaConf interpolation, e.g. an env variable
    base:
      preset: alfworld_1.5b          # a preset name (g2po config --presets; optional)
      config: {backend: openrlhf}    # nested config keys (optional)
      overrides: [train.iterations=50]   # dotted key=value strings (optional)
    grid:                            # cartesian product of the axes, in this order
      algorithm.step_weight: [0.0, 0.2, 0.4]    # a config key -> its values
      method:                        # a named axis -> labelled variants
        grpo: {set: {algorithm.name: grpo}}
        g2po: {set: {algorithm.name: g2po}, resources: {gpus: 2}}
    runs:                            # an explicit list of variants (product with the grid)
      - {label: ep, set: {algorithm.options.components: ep}}
    seeds: [0, 1, 2]                 # or a count: 3 -> [0, 1, 2]
    resources: {gpus: 1, cpus: 8, mem_gb: 64, time: 1440, nodes: 1,
                partition: null, account: null, qos: null, constraint: null, extra: {}}
    max_parallel: 8                  # cap on concurrently running tasks per job array
    max_timeouts: 10                 # how many times a run may be requeued after a timeout
    setup: []                        # shell lines run in the job script first (e.g. module load)

A *variant* is a mapping with optional ``preset`` (replaces the base preset), ``set`` (config
keys, dotted or nested, or a list of ``key=value`` strings) and ``resources`` (merged over the
spec's). Values may use ``${vars.NAME}``, ``${name}`` and any OmegaConf resolver; only the
values a selected run uses are resolved, so a missing model path of the 7B rows does not stop
a launch restricted to the 1.5B rows (``--where``).

:func:`expand` turns a spec into :class:`PlannedRun` objects and validates every resolved
config with :func:`g2po_bench.runconfig.load_config` (plus the resource rules) before anything is
submitted: a broken spec fails with all its errors, naming the run and the key. The run id is
:func:`g2po_bench.core.config.resolve_run_id` of the resolved config (``<env>-<algorithm>-s<seed>-<hash>``),
so two grid points that resolve to the same config are one run; ``model.device=auto`` is hashed as
the device the job gets (``cuda`` when ``resources.gpus`` > 0, else ``cpu``: a local job without
GPUs sees none), not as what the launching machine has.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from g2po_bench.core.config import ConfigError, config_to_dict, resolve_run_id
from g2po_bench.core.rundir import RunDir
from g2po_bench.runconfig import load_config

__all__ = [
    "SpecError",
    "Resources",
    "PlannedRun",
    "SweepSpec",
    "SPEC_DIR",
    "find_spec",
    "load_spec",
    "expand",
    "PLACEHOLDER",
]

SPEC_DIR = Path(__file__).parent / "specs"

_SPEC_KEYS = {"name", "description", "output_dir", "vars", "base", "grid", "runs", "seeds",
              "resources", "max_parallel", "max_timeouts", "setup", "kind", "credit"}
#: what a sweep runs: training runs, or the shards of a credit study (``g2po credit --shard``)
SPEC_KINDS = ("train", "credit")
_CREDIT_KEYS = {"groups", "shards", "args"}
#: ``g2po credit`` arguments the launcher sets for every shard (a spec setting them is an error)
_CREDIT_RESERVED = ("--groups", "--shard", "--out", "--name", "--pool", "--target-half-width", "--max-groups")
_BASE_KEYS = {"preset", "config", "overrides"}
_VARIANT_KEYS = {"preset", "set", "resources", "label"}
# keys the launcher sets for every run (a spec setting them is an error)
_RESERVED_KEYS = {"output_dir", "run_id", "resume", "seed"}


class SpecError(ValueError):
    """A sweep spec is wrong; raised before anything is submitted."""


@dataclass(frozen=True)
class Resources:
    """What one run asks the scheduler for (one Submitit task; ``nodes`` > 1 = multi-node).

    ``time`` is in minutes; ``gpus`` are per node; ``extra`` holds further sbatch options
    (Submitit's ``slurm_additional_parameters``, e.g. ``{exclusive: true}``).
    """

    gpus: int = 0
    cpus: int = 1
    mem_gb: float = 4.0
    time: int = 60
    nodes: int = 1
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, d: dict[str, Any], where: str) -> Resources:
        unknown = sorted(set(d) - set(cls.__dataclass_fields__))
        if unknown:
            raise SpecError(f"{where}: unknown resource key(s) {', '.join(unknown)}; "
                            f"known: {', '.join(cls.__dataclass_fields__)}")
        try:
            r = cls(
                gpus=int(d.get("gpus", 0)), cpus=int(d.get("cpus", 1)),
                mem_gb=float(d.get("mem_gb", 4.0)), time=int(d.get("time", 60)),
                nodes=int(d.get("nodes", 1)),
                partition=_opt_str(d.get("partition")), account=_opt_str(d.get("account")),
                qos=_opt_str(d.get("qos")), constraint=_opt_str(d.get("constraint")),
                extra=dict(d.get("extra") or {}),
            )
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{where}: bad resource value: {exc}") from None
        for key, lo in (("gpus", 0), ("cpus", 1), ("time", 1), ("nodes", 1)):
            if getattr(r, key) < lo:
                raise SpecError(f"{where}: resources.{key} must be >= {lo}")
        if r.mem_gb <= 0:
            raise SpecError(f"{where}: resources.mem_gb must be > 0")
        return r

    def key(self) -> str:
        """A stable, readable name of the resource shape (one job array per shape)."""
        parts = [f"g{self.gpus}", f"c{self.cpus}", f"m{self.mem_gb:g}", f"t{self.time}"]
        if self.nodes != 1:
            parts.append(f"n{self.nodes}")
        for k in ("partition", "account", "qos", "constraint"):
            v = getattr(self, k)
            if v:
                parts.append(f"{k[0]}-{re.sub(r'[^A-Za-z0-9_.-]', '_', v)}")
        if self.extra:  # a stable digest (folder names must not change between launches)
            parts.append("x" + hashlib.sha256(json.dumps(self.extra, sort_keys=True).encode()).hexdigest()[:6])
        return "_".join(parts)

    def describe(self) -> str:
        gpu = f"{self.gpus} GPU" + ("s" if self.gpus != 1 else "")
        s = f"{self.nodes}x{gpu}" if self.nodes > 1 else gpu
        s += f", {self.cpus} CPU, {self.mem_gb:g} GB, {_minutes(self.time)}"
        extras = [f"{k}={getattr(self, k)}" for k in ("partition", "account", "qos", "constraint")
                  if getattr(self, k)]
        if self.extra:
            extras.append(" ".join(f"--{k}={v}" for k, v in sorted(self.extra.items())))
        return s + (f" [{', '.join(extras)}]" if extras else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _opt_str(v: Any) -> str | None:
    return None if v is None or v == "" else str(v)


def _minutes(m: int) -> str:
    return f"{m // 60}h{m % 60:02d}" if m >= 60 else f"{m}min"


@dataclass
class PlannedRun:
    """One run of a sweep: its identity, how to build its config, and its resources."""

    run_id: str
    labels: dict[str, str]  # axis -> label (and "seed")
    seed: int
    preset: str | None
    overrides: list[str]  # dotted key=value, reproduce the config with ``g2po train``
    resources: Resources
    config_yaml: str  # the resolved, validated config (run_id/output_dir/resume unset)
    aliases: list[dict[str, str]] = field(default_factory=list)  # other grid points, same config
    # a dry run's placeholders (expand(..., placeholders=True)): the spec variables this run needs
    # that are not set, as "$ENV" or "vars.NAME"; its run id ends in "?" (the hash needs their values)
    needs: list[str] = field(default_factory=list)
    # a credit shard (spec kind "credit"): the ``g2po credit`` arguments of the shard (``--out`` apart)
    argv: list[str] | None = None

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.labels.items() if k != "seed")

    def command(self) -> str:
        """The equivalent single-run command line."""
        if self.argv is not None:
            return "g2po credit " + " ".join(_shell_quote(a) for a in self.argv)
        pre = f"--preset {self.preset} " if self.preset else ""
        return f"g2po train {pre}" + " ".join(_shell_quote(o) for o in self.overrides)


def _shell_quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


@dataclass
class SweepSpec:
    """A loaded spec (values still unresolved: they are resolved per run in :func:`expand`)."""

    path: Path
    name: str
    description: str
    output_dir: Path
    raw: DictConfig
    seeds: list[int]
    max_parallel: int
    max_timeouts: int
    setup: list[str]
    kind: str = "train"

    @property
    def runs_dir(self) -> Path:
        return self.output_dir / "runs"


def find_spec(spec: str | Path) -> Path:
    """A spec path, or the name of a file in ``sweeps/specs`` (``smoke`` -> ``sweeps/specs/smoke.yaml``)."""
    p = Path(spec).expanduser()
    if p.is_file():
        return p
    for cand in (SPEC_DIR / f"{spec}.yaml", SPEC_DIR / str(spec)):
        if cand.is_file():
            return cand
    known = ", ".join(sorted(q.stem for q in SPEC_DIR.glob("*.yaml")))
    raise SpecError(f"no sweep spec {str(spec)!r} (a YAML file, or one of: {known})")


def load_spec(spec: str | Path, variables: dict[str, str] | None = None,
              output_dir: str | Path | None = None) -> SweepSpec:
    """Load a spec file (or a name in ``sweeps/specs``); ``variables`` set ``vars.NAME``.

    Raises:
        SpecError: unreadable file, unknown top-level keys, bad seeds, unknown ``--var`` names.
    """
    path = find_spec(spec)
    try:
        raw = OmegaConf.load(path)
    except (OmegaConfBaseException, yaml.YAMLError, OSError) as exc:
        raise SpecError(f"cannot read sweep spec {str(path)!r}: {exc}") from None
    if not isinstance(raw, DictConfig):
        raise SpecError(f"sweep spec {str(path)!r} must be a YAML mapping")
    unknown = sorted(set(raw.keys()) - _SPEC_KEYS)
    if unknown:
        raise SpecError(f"{path.name}: unknown key(s) {', '.join(map(str, unknown))}; "
                        f"known: {', '.join(sorted(_SPEC_KEYS))}")
    if "name" not in raw or raw.get("name") in (None, ""):
        raw.name = path.stem
    if "vars" not in raw or raw.get("vars") is None:
        raw.vars = {}
    for item in (variables or {}).items():
        name, value = item
        if name not in raw.vars:
            known = ", ".join(map(str, raw.vars.keys())) or "none"
            raise SpecError(f"--var {name}: the spec declares no such variable (vars: {known})")
        raw.vars[name] = value
    name = _get(raw, "name", "name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
        raise SpecError(f"{path.name}: name {name!r} must be a plain word (letters, digits, _.+-)")
    out = output_dir if output_dir is not None else (
        _get(raw, "output_dir", "output_dir") if raw.get("output_dir") is not None
        else f"results/sweeps/{name}")
    seeds = _get(raw, "seeds", "seeds") if "seeds" in raw else [0]
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        seeds = list(range(seeds))
    if not isinstance(seeds, list) or not seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise SpecError(f"{path.name}: seeds must be a non-empty list of integers or a count")
    if len(set(seeds)) != len(seeds):
        raise SpecError(f"{path.name}: seeds {seeds} repeat a value")
    max_parallel = _get(raw, "max_parallel", "max_parallel") if "max_parallel" in raw else 8
    max_timeouts = _get(raw, "max_timeouts", "max_timeouts") if "max_timeouts" in raw else 10
    for key, v in (("max_parallel", max_parallel), ("max_timeouts", max_timeouts)):
        if not isinstance(v, int) or isinstance(v, bool) or v < (1 if key == "max_parallel" else 0):
            raise SpecError(f"{path.name}: {key} must be an integer >= {1 if key == 'max_parallel' else 0}")
    setup = _get(raw, "setup", "setup") if raw.get("setup") is not None else []
    if not isinstance(setup, list) or not all(isinstance(s, str) for s in setup):
        raise SpecError(f"{path.name}: setup must be a list of shell lines")
    kind = str(raw.get("kind") or "train")
    if kind not in SPEC_KINDS:
        raise SpecError(f"{path.name}: kind {kind!r} is not one of {', '.join(SPEC_KINDS)}")
    if (kind == "credit") != ("credit" in raw):
        raise SpecError(f"{path.name}: a spec of kind credit has a credit: block, and only such a spec")
    if kind == "credit" and any(k in raw for k in ("base", "grid", "runs")):
        raise SpecError(f"{path.name}: a credit spec takes its study from credit: (groups, shards, args), "
                        "not from base/grid/runs")
    return SweepSpec(
        path=path.resolve(), name=name, description=str(raw.get("description") or ""),
        output_dir=Path(str(out)).expanduser().resolve(), raw=raw, seeds=seeds,
        max_parallel=max_parallel, max_timeouts=max_timeouts, setup=setup, kind=kind,
    )


# ---------------------------------------------------------------------------- resolution
#: how an unset spec variable is written in a dry run's plan (``expand(..., placeholders=True)``)
PLACEHOLDER = "<unset:{}>"
_PLACEHOLDER_RE = re.compile(r"<unset:([^>]+)>")


def _unset_vars(raw: DictConfig) -> dict[str, str]:
    """Spec variable -> what sets it (``$ENV`` of its ``${oc.env:ENV}``, else ``vars.NAME``), for
    each variable that cannot be resolved."""
    out = {}
    for k in raw.vars.keys():
        try:
            raw.vars[k]
            continue
        except OmegaConfBaseException:
            pass
        node = raw.vars._get_node(k)
        text = str(node._value()) if node is not None else ""
        envs = re.findall(r"\$\{oc\.env:\s*([A-Za-z_][A-Za-z0-9_]*)", text)
        out[str(k)] = f"${envs[0]}" if envs else f"vars.{k}"
    return out


def _env_hints(raw: DictConfig) -> str:
    """``NAME ($ENV), ...`` for each spec variable that cannot be resolved, with how to set them."""
    hints = [f"{k} ({who})" if who.startswith("$") else k for k, who in _unset_vars(raw).items()]
    return ", ".join(hints) + " (set the environment variables or pass --var NAME=VALUE)" if hints else ""


def _flatten(d: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested / dotted mapping -> [(dotted key, leaf value)] in order (dict leaves flattened)."""
    out: list[tuple[str, Any]] = []
    if isinstance(d, dict):
        if not d and prefix:
            return [(prefix, {})]
        for k, v in d.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            out.extend(_flatten(v, key))
    else:
        out.append((prefix, d))
    return out


def _fmt_value(v: Any) -> str:
    """A value as the right-hand side of a ``key=value`` override (parsed back as YAML)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        try:
            same = yaml.safe_load(v) == v
        except yaml.YAMLError:
            same = False
        if same and v and not re.search(r"[\s,\[\]{}:#'\"=$]", v):
            return v
        return json.dumps(v)
    return json.dumps(v)


def _set_to_pairs(value: Any, where: str) -> list[tuple[str, Any]]:
    if value is None:
        return []
    if isinstance(value, list):
        pairs = []
        for item in value:
            if not isinstance(item, str) or "=" not in item:
                raise SpecError(f"{where}: {item!r} is not a key=value string")
            k, v = item.split("=", 1)
            pairs.append((k.strip(), yaml.safe_load(v) if v.strip() else ""))
        return pairs
    if isinstance(value, dict):
        return _flatten(value)
    raise SpecError(f"{where}: expected a mapping of config keys or a list of key=value strings")


@dataclass
class _Variant:
    """One value of an axis; its preset/set/resources are resolved on first use (lazily, so
    that an unset variable only matters for the runs that use it)."""

    axis: str
    label: str
    _node: Any = None  # the variant's DictConfig (None for a value of a config-key axis)
    _where: str = ""
    _pairs: list[tuple[str, Any]] | None = None
    _preset: str | None = None
    _resources: dict[str, Any] | None = None

    def resolve(self) -> _Variant:
        if self._pairs is None:
            node, where = self._node, self._where
            self._preset = _get(node, "preset", f"{where}.preset") if "preset" in node else None
            self._pairs = _set_to_pairs(_get(node, "set", f"{where}.set") if "set" in node else None,
                                        f"{where}.set")
            res = (_get(node, "resources", f"{where}.resources") if "resources" in node else None) or {}
            if not isinstance(res, dict):
                raise SpecError(f"{where}.resources: expected a mapping")
            self._resources = res
        return self

    @property
    def preset(self) -> str | None:
        return self.resolve()._preset

    @property
    def pairs(self) -> list[tuple[str, Any]]:
        return self.resolve()._pairs or []

    @property
    def resources(self) -> dict[str, Any]:
        return self.resolve()._resources or {}


def _get(container: Any, key: Any, where: str) -> Any:
    """``container[key]`` resolved to plain Python (interpolations and resolvers applied)."""
    try:
        value = container[key]
        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True, throw_on_missing=True)
        return value
    except OmegaConfBaseException as exc:
        msg = str(exc).splitlines()[0]
        hint = _env_hints(_root(container))
        more = f". Unset spec variable(s): {hint}" if hint else ""
        raise SpecError(f"{where}: cannot resolve a value ({msg}){more}") from None


def _root(node: Any) -> Any:
    while node._get_parent() is not None:
        node = node._get_parent()
    return node


def _variants_of_axis(grid: DictConfig, axis: str) -> list[_Variant]:
    node = grid._get_node(axis)
    if isinstance(node, ListConfig):
        values = _get(grid, axis, f"grid.{axis}")
        if not values:
            raise SpecError(f"grid.{axis}: an empty list of values")
        return [_Variant(axis, _fmt_value(v), _pairs=[(axis, v)], _resources={}) for v in values]
    if isinstance(node, DictConfig):
        out = [_variant(node, label, axis, str(label), f"grid.{axis}.{label}") for label in node.keys()]
        if not out:
            raise SpecError(f"grid.{axis}: no variants")
        return out
    raise SpecError(f"grid.{axis}: expected a list of values (axis = a config key) or a mapping "
                    "label -> {preset, set, resources}")


def _variant(parent: Any, key: Any, axis: str, label: str, where: str) -> _Variant:
    node = parent._get_node(key)
    if not isinstance(node, DictConfig):
        raise SpecError(f"{where}: a variant must be a mapping with preset/set/resources")
    unknown = sorted(set(map(str, node.keys())) - _VARIANT_KEYS)
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {', '.join(unknown)} (a variant has preset, set, "
                        "resources; config keys go under set:)")
    return _Variant(axis, label, _node=node, _where=where)


# ---------------------------------------------------------------------------- expansion
def _parse_where(where: list[str] | None) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for w in where or []:
        if "=" not in w:
            raise SpecError(f"--where {w!r}: expected AXIS=LABEL (e.g. method=g2po or seed=0)")
        k, v = w.split("=", 1)
        out.setdefault(k.strip(), set()).update(x.strip() for x in v.split(","))
    return out


def expand(spec: SweepSpec, where: list[str] | None = None, *, placeholders: bool = False) -> list[PlannedRun]:
    """Expand ``spec`` into its runs (grid x runs list x seeds), each validated.

    Args:
        where: ``AXIS=LABEL[,LABEL]`` filters (axis names of the grid, ``run`` for the runs
            list, ``seed``); only matching runs are expanded and resolved.
        placeholders: a dry run's plan: a spec variable that is not set (an environment variable
            such as ``$G2PO_MODEL_1_5B``) becomes the placeholder ``<unset:$G2PO_MODEL_1_5B>``
            instead of an error; a run using one is validated in everything but the existence of
            its model and data folders, lists the variables in :attr:`PlannedRun.needs`, and its
            run id ends in ``?`` (the hash depends on the values). Never for a launch.

    Raises:
        SpecError: listing every run that fails (bad key, bad value, unresolved variable, ...).
    """

    raw = spec.raw
    if spec.kind == "credit":
        return _expand_credit(spec, where)
    if placeholders:
        unset = _unset_vars(raw)
        if unset:
            raw = copy.deepcopy(raw)  # the spec keeps its variables; the copy plans with placeholders
            for k, who in unset.items():
                raw.vars[k] = PLACEHOLDER.format(who)
    base_preset, base_pairs, default_res = _base_of(raw)
    axes = _axes_of(raw)
    filters = _checked_filters(axes, where)

    planned: dict[str, PlannedRun] = {}
    errors: dict[str, list[str]] = {}  # message -> runs
    for combo in itertools.product(*axes) if axes else [()]:
        if any(v.axis in filters and v.label not in filters[v.axis] for v in combo):
            continue
        seeds = [s for s in spec.seeds if "seed" not in filters or str(s) in filters["seed"]]
        if not seeds:
            continue
        combo_labels = {v.axis: v.label for v in combo}
        try:  # one validation per grid point; the seeds only change ``seed``
            base = _plan_combo(base_preset, base_pairs, default_res, combo, load_config, config_to_dict)
        except (SpecError, ConfigError) as exc:
            desc = " ".join(f"{k}={v}" for k, v in combo_labels.items())
            errors.setdefault(str(exc), []).extend(f"{desc} seed={s}" for s in seeds)
            continue
        preset, overrides, resources, cfg0, d0 = base
        needs = sorted({m for o in overrides for m in _PLACEHOLDER_RE.findall(o)})
        for seed in seeds:
            labels = {**combo_labels, "seed": str(seed)}
            cfg = dataclasses.replace(cfg0, seed=seed)
            # model.device=auto means what the job gets: a GPU when the run asks for one
            key = resolve_run_id(cfg, device="cuda" if resources.gpus else "cpu")
            run_id = f"{cfg.env.name}-{cfg.algorithm.name}-s{seed}-?" if needs else key
            run = PlannedRun(run_id=run_id, labels=labels, seed=seed, preset=preset,
                             overrides=[*overrides, f"seed={seed}"], resources=resources,
                             config_yaml=yaml.safe_dump({**d0, "seed": seed}, sort_keys=False), needs=needs)
            if key in planned:
                planned[key].aliases.append(labels)
            else:
                planned[key] = run
    if errors:
        raise _validation_error(spec, errors)
    if not planned:
        raise SpecError(f"{spec.path.name}: no runs (check --where filters)")
    return list(planned.values())


def _base_of(raw: DictConfig) -> tuple[str | None, list[tuple[str, Any]], dict]:
    """The spec's ``base`` (its preset and its config/overrides as pairs) and default ``resources``."""
    base = raw.get("base")
    base_preset: str | None = None
    base_pairs: list[tuple[str, Any]] = []
    if base is not None:
        if not isinstance(base, DictConfig):
            raise SpecError("base: expected a mapping with preset, config, overrides")
        unknown = sorted(set(map(str, base.keys())) - _BASE_KEYS)
        if unknown:
            raise SpecError(f"base: unknown key(s) {', '.join(unknown)} (known: preset, config, overrides)")
        base_preset = _get(base, "preset", "base.preset") if base.get("preset") is not None else None
        if base.get("config") is not None:
            base_pairs += _set_to_pairs(_get(base, "config", "base.config"), "base.config")
        if base.get("overrides") is not None:
            base_pairs += _set_to_pairs(_get(base, "overrides", "base.overrides"), "base.overrides")
    default_res = _get(raw, "resources", "resources") if raw.get("resources") is not None else {}
    if not isinstance(default_res, dict):
        raise SpecError("resources: expected a mapping")
    return base_preset, base_pairs, default_res


def _axes_of(raw: DictConfig) -> list[list[_Variant]]:
    """The variants of each grid axis, then the ``runs`` list as the axis ``run``."""
    axes: list[list[_Variant]] = []
    grid = raw.get("grid")
    if grid is not None:
        if not isinstance(grid, DictConfig):
            raise SpecError("grid: expected a mapping axis -> values")
        for axis in grid.keys():
            axes.append(_variants_of_axis(grid, str(axis)))
    runs_node = raw.get("runs")
    if runs_node is not None:
        if not isinstance(runs_node, ListConfig) or len(runs_node) == 0:
            raise SpecError("runs: expected a non-empty list of variants")
        listed = []
        for i in range(len(runs_node)):
            node = runs_node._get_node(i)
            label = (str(_get(node, "label", f"runs[{i}].label"))
                     if isinstance(node, DictConfig) and node.get("label") is not None else str(i))
            listed.append(_variant(runs_node, i, "run", label, f"runs[{i}]"))
        axes.append(listed)
    return axes


def _checked_filters(axes: list[list[_Variant]], where: list[str] | None) -> dict[str, set[str]]:
    """``--where`` filters by axis, each naming an axis and labels the spec has (else SpecError)."""
    filters = _parse_where(where)
    known_axes = {a[0].axis for a in axes} | {"seed"}
    for k in filters:
        if k not in known_axes:
            raise SpecError(f"--where {k}=...: no such axis (axes: {', '.join(sorted(known_axes))})")
    for axis_variants in axes:
        ax = axis_variants[0].axis
        if ax in filters:
            labels = {v.label for v in axis_variants}
            bad = sorted(filters[ax] - labels)
            if bad:
                raise SpecError(f"--where {ax}={','.join(bad)}: no such label (labels: {', '.join(sorted(labels))})")
    return filters


def _validation_error(spec: SweepSpec, errors: dict[str, list[str]]) -> SpecError:
    """One SpecError listing the first 10 distinct messages, each with the runs it concerns."""
    n = sum(len(v) for v in errors.values())
    lines = []
    for msg, who in list(errors.items())[:10]:
        runs = who[0] + (f" and {len(who) - 1} more run(s)" if len(who) > 1 else "")
        lines.append(f"[{runs}] {msg}")
    more = f"\n  ... and {len(errors) - 10} more distinct error(s)" if len(errors) > 10 else ""
    return SpecError(f"{spec.path.name}: {n} run(s) do not validate; nothing was submitted:\n  "
                     + "\n  ".join(lines) + more)


def _plan_combo(base_preset, base_pairs, default_res, combo, load_config, config_to_dict):
    """Preset, overrides (without the seed), resources and the validated config of a grid point."""
    preset = base_preset
    preset_from: str | None = None
    pairs = list(base_pairs)
    res = dict(default_res)
    for v in combo:
        if v.preset is not None:
            if preset_from is not None and v.preset != preset:
                raise SpecError(f"axes {preset_from} and {v.axis} both choose a preset "
                                f"({preset} vs {v.preset})")
            preset, preset_from = v.preset, v.axis
        pairs += v.pairs
        res.update(v.resources)
    for k, _ in pairs:
        if k in _RESERVED_KEYS:
            raise SpecError(f"config key {k!r} is set by the launcher (seeds: the spec's seeds)")
    overrides = [f"{k}={_fmt_value(v)}" for k, v in pairs]
    if not any(k == "progress" for k, _ in pairs):
        overrides.append("progress=false")
    resources = Resources.from_mapping(res, "resources")
    placeholder = any(_PLACEHOLDER_RE.search(o) for o in overrides)  # a dry run's unset folder
    cfg = load_config(None, overrides, preset=preset, check_paths=not placeholder)  # validates (raises ConfigError)
    _check_resources(cfg, resources)
    return preset, overrides, resources, cfg, config_to_dict(cfg)


def _check_resources(cfg, res: Resources) -> None:
    if cfg.backend == "local" and (res.nodes > 1 or res.gpus > 1):
        raise SpecError(f"resources {res.describe()}: backend=local trains on one device; "
                        "multi-GPU / multi-node runs need backend=openrlhf")
    if cfg.backend == "local" and res.gpus == 0 and cfg.model.device == "cuda":
        raise SpecError("model.device=cuda but resources.gpus is 0")


def _check_credit_run(name: str, args: list[str]) -> None:
    """The ``--run`` folder of a credit spec's ``args`` (relative to the directory the launch runs
    in) must be a run folder (``config.yaml``) with an intact checkpoint here: otherwise every shard
    would fail at once in its job. Checked at expansion, so a launch and its dry run stop before any
    work.

    Raises:
        SpecError: the folder does not exist, is a file, holds no ``config.yaml`` or no intact
            checkpoint.
    """
    for i, a in enumerate(args):
        if a == "--run" and i + 1 < len(args):
            folder = args[i + 1]
        elif a.startswith("--run="):
            folder = a.split("=", 1)[1]
        else:
            continue
        if _PLACEHOLDER_RE.search(folder):
            continue
        run = Path(folder)
        if not run.exists():
            what = "the folder does not exist"
        elif not run.is_dir():
            what = "it is a file, not a run folder"
        elif not (run / "config.yaml").is_file():
            what = "the folder is no run folder (no config.yaml)"
        elif RunDir(run).find_checkpoint().path is None:
            what = "the run has no intact checkpoint yet (g2po credit scores checkpoints/latest)"
        else:
            continue
        where = "" if run.is_absolute() else f" (relative paths start at {os.getcwd()})"
        raise SpecError(f"{name}: credit.args --run {folder}: {what}{where}; train the policy first (g2po train) "
                        "and name its run folder (G2PO_CREDIT_RUN=FOLDER or --var run=FOLDER for the committed "
                        "credit specs)")


def _expand_credit(spec: SweepSpec, where: list[str] | None) -> list[PlannedRun]:
    """The shards of a credit study (spec kind ``credit``): one planned run per shard, whose
    command is ``g2po credit --groups G <args> --shard I/N`` (the job adds ``--out`` its run folder).

    The spec's ``credit:`` block: ``groups`` (the study's G), ``shards`` (N), ``args`` (further
    ``g2po credit`` arguments and ``key=value`` overrides, as strings). The run ids are
    ``credit-<hash of the study>-<I>-of-<N>``; ``--where shard=I`` selects shards. The study's own
    checks (its config, the shards' blocks) run in each job: a bad argument fails every shard with
    its one-line message in the shard's ``status.json``; the ``--run`` folder is checked here.

    Raises:
        SpecError: a missing or bad ``groups``/``shards``/``args``, a reserved argument, a ``--run``
            folder that is not a run folder here.
    """
    name = spec.path.name
    c = _get(spec.raw, "credit", "credit")
    if not isinstance(c, dict):
        raise SpecError(f"{name}: credit: expected a mapping with groups, shards and args")
    unknown = sorted(set(c) - _CREDIT_KEYS)
    if unknown:
        raise SpecError(f"{name}: credit: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_CREDIT_KEYS))})")
    groups, shards, args = c.get("groups"), c.get("shards", 1), c.get("args") or []
    for key, v in (("groups", groups), ("shards", shards)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise SpecError(f"{name}: credit.{key} must be an integer >= 1, got {v!r}")
    if shards > groups:
        raise SpecError(f"{name}: credit.shards {shards} is more than the groups {groups}")
    if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool)
                                             for a in args):
        raise SpecError(f"{name}: credit.args must be a list of strings (g2po credit arguments and key=value overrides)")
    args = [str(a) for a in args]
    reserved = sorted({a.split("=", 1)[0] for a in args} & set(_CREDIT_RESERVED))
    if reserved:
        raise SpecError(f"{name}: credit.args may not set {', '.join(reserved)}: the launcher sets them per shard")
    _check_credit_run(name, args)
    res = _get(spec.raw, "resources", "resources") if spec.raw.get("resources") is not None else {}
    if not isinstance(res, dict):
        raise SpecError("resources: expected a mapping")
    resources = Resources.from_mapping(res, "resources")
    filters = _parse_where(where)
    if set(filters) - {"shard"}:
        raise SpecError(f"--where {', '.join(sorted(set(filters) - {'shard'}))}=...: a credit sweep's one axis is shard")
    key = hashlib.sha256(json.dumps({"groups": groups, "shards": shards, "args": args}).encode()).hexdigest()[:10]
    out = []
    for i in range(1, shards + 1):
        if "shard" in filters and str(i) not in filters["shard"]:
            continue
        argv = ["--groups", str(groups), *args, "--shard", f"{i}/{shards}"]
        out.append(PlannedRun(run_id=f"credit-{key}-{i:02d}-of-{shards:02d}", labels={"shard": str(i)}, seed=0,
                              preset=None, overrides=list(argv), resources=resources,
                              config_yaml=yaml.safe_dump({"kind": "credit", "argv": argv}, sort_keys=False),
                              argv=argv))
    if not out:
        raise SpecError(f"{name}: no shards (check --where shard=...)")
    return out
