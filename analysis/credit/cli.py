"""``g2po credit`` and ``g2po bench credit``: arguments, policy and config loading, outputs.

::

    g2po credit                                   # CPU default: its cached warm start (built if missing)
    g2po credit --run results/runs/RUN            # a run's latest checkpoint, on the run's config.yaml
    g2po credit model.path=FOLDER [key=value ...] # a model folder
    g2po credit env.name=toy --policy toy-scripted --exact   # exact ground truth on the toy corridor
    g2po bench credit [same arguments]            # the same study, then where the time went
    g2po credit --groups 208 --shard 2/13 --out DIR/shard-02   # one shard: its range of whole blocks
    g2po credit --pool DIR --out DIR/pooled       # the shards' records under DIR, pooled into one study
    g2po credit --target-half-width 0.05 --max-groups 400     # add blocks of groups until the main
                                                  # paired differences' 95 % CIs are that narrow

The policy is the run's checkpoint (``--run``; PPO runs bring their critic, so the PPO rows are
scored), the folder ``model.path``, the scripted toy policy (``--policy toy-scripted``), or by
default the warm start of the config (the CPU default's, shared with ``g2po train`` through
``train.warm_start_cache``; built when missing). The config is the dataclass defaults <
``--preset`` < ``--config`` < ``key=value`` overrides, as ``g2po train`` takes them (with ``--run``:
the run's ``config.yaml`` < overrides). The study is written to ``--out`` (default:
``RUN/credit/<name>`` with ``--run``, else ``<output_dir>/credit/<env>-<policy>-<name>``, the name
being ``--name`` or the UTC time): ``credit.json``, ``gradients.npz`` (a model policy's gradient
alignment), ``report.md``, ``figures/`` and ``credit_config.yaml``.

Groups are played in blocks of ``--batch-groups`` (default ``train.groups_per_batch``, a training
batch). ``--shard I/N`` plays the I-th of N contiguous ranges of whole blocks (1-based), so the N
shards of one command line cover its ``--groups`` exactly once; ``--pool`` puts their records
together (:func:`g2po_bench.analysis.credit.pool.pool_records`), group for group what the study
run at once gives. The shards of a study run through the suite's Submitit launcher from a sweep
spec of ``kind: credit`` (``g2po sweep launch``, docs/credit.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from g2po_bench.algorithms.backends.common import rl_tasks, training_tasks
from g2po_bench.algorithms.backends.progress import RunProgress
from g2po_bench.analysis.credit.pool import PoolError, pool_records
from g2po_bench.analysis.credit.record import (
    CREDIT_FILE,
    find_records,
    read_gradients,
    read_record,
    study_record,
    write_record,
)
from g2po_bench.analysis.credit.replay import ReplayMismatch
from g2po_bench.analysis.credit.report import ceiling_line, write_study_report
from g2po_bench.analysis.credit.resolution import groups_for_half_width
from g2po_bench.analysis.credit.study import CreditSettings, choose_tasks, run_study
from g2po_bench.benchmarks.registry import get_benchmark
from g2po_bench.benchmarks.toy.scripted_policy import ScriptedCorridorPolicy
from g2po_bench.core.arguments import int_at_least, non_negative_int, positive_int
from g2po_bench.core.config import ConfigError, config_to_yaml, output_folder_problem
from g2po_bench.core.rundir import RunDir, code_version
from g2po_bench.runconfig import load_config
from g2po_bench.runtime.workers import EnvPool
from g2po_bench.train import check_run_for_eval

__all__ = ["add_credit_arguments", "run_credit_command", "run_bench_command", "parse_shard", "POLICIES"]

POLICIES = ("model", "toy-scripted")


def add_credit_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The arguments of ``g2po credit`` (and ``g2po bench credit``)."""
    p.add_argument("--run", help="training run folder: its checkpoints/latest/policy (and critic), on its config.yaml")
    p.add_argument("--config", help="YAML config file (any subset of the keys)")
    p.add_argument("--preset", help="named preset (g2po config --presets lists them; e.g. alfworld_cpu)")
    p.add_argument("--policy", choices=POLICIES, default="model",
                   help="model (default: --run, model.path or the warm start) or toy-scripted (env.name=toy)")
    p.add_argument("--groups", type=positive_int, default=16, help="task groups G (default 16)")
    p.add_argument("--group-size", type=int_at_least(2), default=8,
                   help="rollouts per group N (>= 2; default 8, as training)")
    p.add_argument("--continuations", type=non_negative_int, default=16,
                   help="continuations K per prefix (even, default 16; 0 only with --exact)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of tasks, rollouts and continuations (default 0)")
    p.add_argument("--decisive", type=float, default=0.2, help="|A*| of a decisive step (default 0.2)")
    p.add_argument("--coupling", choices=("common", "independent"), default="common",
                   help="random numbers of continuation k shared by the prefixes of a task (common, default) or not")
    p.add_argument("--split", default=None,
                   help="task split to draw groups from (default: the tasks RL trains on, train.rl_tasks)")
    p.add_argument("--no-merge", action="store_true",
                   help="run every continuation to its end (by default one that reaches the history of an earlier "
                        "one with the same random numbers takes its outcome, and one whose first action leads there "
                        "is not played: the same result, less work)")
    p.add_argument("--exact", action="store_true", help="exact values by dynamic programming (toy, toy-scripted)")
    p.add_argument("--wave", type=positive_int, default=1024,
                   help="continuation episodes per engine call (default 1024; about half are joined from their "
                        "first action without being played)")
    p.add_argument("--batch-tokens", type=non_negative_int, default=0,
                   help="policy batch budget in tokens (rows x (prompt + response)); 0 = 128 rows' worth")
    p.add_argument("--n-boot", type=positive_int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--batch-groups", type=positive_int, default=None,
                   help="groups of one training batch: the blocks estimators see at once and the batch of the gradient "
                        "alignment (default train.groups_per_batch)")
    p.add_argument("--no-gradient", action="store_true", help="skip the gradient alignment (update direction)")
    p.add_argument("--sketch-dim", type=non_negative_int, default=16384,
                   help="CountSketch buckets of the per-step loss gradients (default 16384; 0 = exact gradients)")
    p.add_argument("--shard", default=None, metavar="I/N",
                   help="play the I-th (1-based) of N contiguous ranges of whole blocks of the --groups")
    p.add_argument("--pool", nargs="+", default=None, metavar="DIR",
                   help="pool the shard records (credit.json) found under DIR... (or credit.json files) into one study "
                        "(no new study)")
    p.add_argument("--target-half-width", type=float, default=None, metavar="W",
                   help="after --groups, add blocks of groups until every paired difference of the main rows (Spearman "
                        "and gradient alignment with A*) has a 95 %% CI of half-width <= W, or --max-groups")
    p.add_argument("--max-groups", type=positive_int, default=400,
                   help="with --target-half-width: the most groups (default 400)")
    p.add_argument("--out", default=None, help="output folder (default: RUN/credit/<name> with --run, else <output_dir>/credit/<env>-<policy>-<name>)")
    p.add_argument("--name", default=None, help="name of the output folder (default: the UTC time)")
    p.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides, e.g. env.max_steps=30")
    return p


def _config(args):
    if args.run is not None:
        if args.config is not None or args.preset is not None:
            raise ConfigError("--run studies the run's policy on its own config.yaml; drop --config/--preset and give "
                              "changes as key=value overrides")
        config_path, _ = check_run_for_eval(args.run)
        return load_config(config_path, args.overrides)
    return load_config(args.config, args.overrides, preset=args.preset)


def _check(args, cfg) -> None:
    if args.policy == "toy-scripted" and cfg.env.name != "toy":
        raise ConfigError("--policy toy-scripted plays the toy corridor only; add env.name=toy")
    if args.exact and (cfg.env.name != "toy" or args.policy != "toy-scripted"):
        raise ConfigError("--exact needs the toy corridor and a policy with explicit probabilities: "
                          "env.name=toy --policy toy-scripted")
    if args.policy == "toy-scripted" and (args.run is not None or cfg.model.path is not None):
        raise ConfigError("--policy toy-scripted has no model; drop --run / model.path")
    if args.continuations == 0 and not args.exact:
        raise ConfigError("--continuations 0 leaves no ground truth; it is allowed with --exact only")
    if args.continuations % 2:
        raise ConfigError(f"--continuations must be even (two halves), got {args.continuations}")
    if not 0 <= args.decisive <= 1:
        raise ConfigError(f"--decisive must be in [0, 1] (|A*| <= 1: it is a difference of success "
                          f"probabilities), got {args.decisive}")
    _check_out(args.out)
    if args.name is not None and (not args.name or "/" in args.name or args.name.startswith(".")):
        raise ConfigError(f"--name {args.name!r}: give a plain folder name, e.g. --name warm-start")
    if args.target_half_width is not None:
        if not args.target_half_width > 0:
            raise ConfigError(f"--target-half-width must be > 0, got {args.target_half_width}")
        if args.shard is not None:
            raise ConfigError("--target-half-width grows one study; it does not combine with --shard")
        if args.max_groups < args.groups:
            raise ConfigError(f"--max-groups {args.max_groups} is below --groups {args.groups}")


def _check_out(out: str | None) -> None:
    """``--out`` must be (or become) a folder.

    Raises:
        ConfigError: it, or a folder above it, is a file."""
    problem = output_folder_problem(out) if out is not None else None
    if problem:
        raise ConfigError(f"--out {out}: {problem}; name a folder")


def parse_shard(text: str | None) -> tuple[int, int]:
    """``"I/N"`` (1-based) -> (I - 1, N); None -> (0, 1).

    Raises:
        ConfigError: not of the form I/N with 1 <= I <= N.
    """
    if text is None:
        return 0, 1
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ConfigError(f"--shard {text!r}: give I/N, e.g. --shard 2/8 (the second of eight shards)") from None
    if n < 1:
        raise ConfigError(f"--shard {text!r}: the count N must be >= 1, e.g. --shard 2/8 (the second of eight shards)")
    if not 1 <= i <= n:
        raise ConfigError(f"--shard {text!r}: the shard number must be 1..{n}, e.g. --shard 2/8 (the second of "
                          "eight shards)")
    return i - 1, n


def _out_dir(args, cfg, policy_label: str) -> Path:
    name = args.name or time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    if args.shard is not None and args.name is None:
        i, n = parse_shard(args.shard)
        name += f"-shard-{i + 1}-of-{n}"
    if args.out is not None:
        out = Path(args.out)
    elif args.run is not None:
        out = Path(args.run) / "credit" / name
    else:
        out = Path(cfg.output_dir) / "credit" / f"{cfg.env.name}-{policy_label}-{name}"
    if (out / CREDIT_FILE).exists():
        raise ConfigError(f"{out / CREDIT_FILE} already exists; pass another --out or --name, or delete it")
    return out


def _load_local(cfg, model_dir: Path, batch_tokens: int):
    # lazy: torch and transformers (about 5 s to import), not on the path of help and config errors
    from g2po_bench.algorithms.backends.local.model import load_model_and_tokenizer
    from g2po_bench.algorithms.backends.local.precision import compute_dtype
    from g2po_bench.algorithms.backends.local.transformers_policy import LocalPolicy

    model, tok = load_model_and_tokenizer(model_dir, dtype="float32", device=cfg.model.device)
    return LocalPolicy(model, tok, max_prompt_tokens=cfg.train.max_prompt_tokens, max_batch_tokens=batch_tokens,
                       compute_dtype=compute_dtype(cfg.model.dtype), share_prefill=True)


def _critic(run: Path, policy, cfg):
    """values_fn of a run trained with a critic (its checkpoint's optim.pt has one), else None."""
    import torch

    state_path = run / "checkpoints" / "latest" / "optim.pt"
    if not state_path.is_file():
        return None
    state = torch.load(state_path, weights_only=False, map_location="cpu")
    if "critic" not in state:
        return None
    # lazy: torch (about 5 s to import) only for a run that has a critic
    from g2po_bench.algorithms.backends.local.precision import compute_dtype
    from g2po_bench.algorithms.backends.local.value import ValueModel

    critic = ValueModel.from_policy(policy.model, lr=cfg.train.value_lr, compute_dtype=compute_dtype(cfg.model.dtype))
    critic.load_state_dict(state["critic"])
    critic.eval()
    pad = policy.tokenizer.pad_token_id
    return lambda rb: critic.predict(rb.prompt_ids, pad, batch_size=cfg.train.micro_batch_size)


def _settings(args, cfg) -> CreditSettings:
    shard, shards = parse_shard(args.shard)
    settings = CreditSettings(groups=args.groups, group_size=args.group_size, continuations=args.continuations,
                              seed=args.seed, decisive=args.decisive, coupling=args.coupling, wave=args.wave,
                              merge=not args.no_merge, exact=args.exact, n_boot=args.n_boot,
                              batch_groups=args.batch_groups or cfg.train.groups_per_batch,
                              gradient=not args.no_gradient, sketch_dim=args.sketch_dim, shard=shard, shards=shards)
    try:
        return settings.check()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _policy_label(args, cfg) -> tuple[str, dict[str, Any]]:
    if args.policy == "toy-scripted":
        return "toy-scripted", {"kind": "scripted", "path": "g2po_bench.benchmarks.toy.scripted_policy"}
    if args.run is not None:
        run = RunDir(Path(args.run))
        status = run.read_status() or {}
        return "run", {"kind": "run", "path": str(Path(args.run).resolve()), "run_state": status.get("state"),
                       "total_iterations": status.get("total_iterations"),
                       "checkpoint_iteration": run.find_checkpoint().iteration}
    if cfg.model.path is not None:
        return Path(cfg.model.path).name, {"kind": "model", "path": str(Path(cfg.model.path).resolve())}
    return "warm-start", {"kind": "warm_start"}


def _load_policy(args, cfg, bench, train_tasks, out: Path, policy_rec: dict[str, Any], progress):
    """(policy, critic values function or None); completes ``policy_rec`` for a warm start."""
    batch_tokens = args.batch_tokens or 128 * (cfg.train.max_prompt_tokens + cfg.train.max_response_tokens)
    if args.policy == "toy-scripted":
        return ScriptedCorridorPolicy(), None
    if args.run is not None:
        policy = _load_local(cfg, Path(args.run) / "checkpoints" / "latest" / "policy", batch_tokens)
        return policy, _critic(Path(args.run), policy, cfg)
    if cfg.model.path is not None:
        return _load_local(cfg, Path(cfg.model.path), batch_tokens), None
    # lazy: the warm start builds with torch (about 5 s to import)
    from g2po_bench.algorithms.backends.local.warm_start import (
        ensure_warm_start,
        warm_start_key,
    )

    cached = cfg.train.warm_start_cache and (Path(cfg.train.warm_start_cache) / warm_start_key(cfg)
                                             / "warm_start.json").exists()
    if cached:  # reused as is: no expert replay, no environment needed
        ws = ensure_warm_start(cfg, None, bench, train_tasks, run_root=out, progress=progress)
    else:
        with EnvPool(bench, cfg.env, cfg.env.num_workers) as pool:  # expert replays recycle workers
            ws = ensure_warm_start(cfg, pool, bench, train_tasks, run_root=out, progress=progress)
    policy_rec.update({"path": str(ws.model_dir), "warm_start_key": ws.key, "reused": ws.reused})
    return _load_local(cfg, ws.model_dir, batch_tokens), None


def _half_width(record: dict[str, Any]) -> float:
    """The widest 95 % CI half-width of the main rows' paired differences against A* (Spearman and
    gradient alignment alike)."""
    sc = record["scores"]["a_star"]
    main = {v["name"] for v in record["variants"] if not v.get("axis")}
    widths = [(d["spearman"]["ci"][1] - d["spearman"]["ci"][0]) / 2 for d in sc["differences"]
              if d["a"] in main and d["b"] in main and d["spearman"]["ci"][0] is not None]
    widths += [(d["ci"][1] - d["ci"][0]) / 2 for d in (sc.get("gradient") or {}).get("differences", [])
               if d["a"] in main and d["b"] in main and d["ci"][0] is not None]
    return max((w for w in widths if w == w), default=float("nan"))


def _groups_for(record: dict[str, Any], width: float) -> float:
    """The groups that would bring every main paired difference's 95 % CI to half-width ``width``."""
    sc = record["scores"]["a_star"]
    main = {v["name"] for v in record["variants"] if not v.get("axis")}
    need = [groups_for_half_width(d["spearman"].get("sd"), width, defined_fraction=d["spearman"].get("defined_fraction", 1))
            for d in sc["differences"] if d["a"] in main and d["b"] in main]
    need += [groups_for_half_width(d.get("sd"), width) for d in (sc.get("gradient") or {}).get("differences", [])
             if d["a"] in main and d["b"] in main]
    return max((n for n in need if n == n), default=0.0)


def _grow(args, cfg, policy, bench, tasks, settings: CreditSettings, progress, values_fn, policy_rec, command,
          code) -> tuple[dict[str, Any], Any]:
    """``--target-half-width``: parts of whole blocks until the main differences are that narrow."""
    b = settings.batch_groups
    parts: list[tuple[str, dict[str, Any], Any]] = []
    first, stop = 0, min(args.groups, len(tasks))
    while True:
        with EnvPool(bench, cfg.env, cfg.env.num_workers, max_episodes=0) as pool:
            study = run_study(cfg, policy, pool, bench, tasks, settings, progress=progress, values_fn=values_fn,
                              groups=(first, stop))
        parts.append((f"groups {first}..{stop - 1}", study_record(study, cfg, policy=policy_rec, command=command,
                                                                 code=code), study.gradients))
        for _, rec, _ in parts:
            rec["settings"]["groups"] = stop
        record, gradients = pool_records(parts, code=code, command=command)
        width = _half_width(record)
        progress.log(f"{stop} groups: the widest 95 % CI of a main paired difference has half-width {width:.3f} "
                     f"(target {args.target_half_width})")
        reached = width == width and width <= args.target_half_width  # nan: no CI yet, not reached
        if reached or stop >= min(args.max_groups, len(tasks)):
            if not reached:
                progress.log(f"target half-width {args.target_half_width} not reached: stopped at {stop} groups "
                             f"(--max-groups {args.max_groups}, {len(tasks)} tasks); the widest half-width is "
                             f"{width:.3f}")
            record["grown"] = {"target_half_width": args.target_half_width, "reached": bool(reached),
                               "widest_half_width": None if width != width else float(width), "groups": stop}
            return record, gradients
        want = _groups_for(record, args.target_half_width)
        grown = max(stop + b, int(want * 1.1) if want == want else stop + b)
        first, stop = stop, min(args.max_groups, len(tasks), -(-grown // b) * b)


def _write(out: Path, record: dict[str, Any], gradients, cfg, figures: bool) -> None:
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    text = config_to_yaml(cfg) if cfg is not None else yaml.safe_dump(record["config"], sort_keys=False)
    (out / "credit_config.yaml").write_text(text, encoding="utf-8")
    write_record(out, record, gradients)
    write_study_report(out, record, figures=figures)
    record["timing"]["report"] = time.perf_counter() - t0
    write_record(out, record, gradients)


def run_study_command(args, console) -> tuple[Path, dict[str, Any]]:
    """Load config, tasks and policy, run the study (or pool shards), write its folder; returns
    (folder, record).

    Raises:
        ConfigError: bad arguments or config (before any model is loaded).
        ReplayMismatch: the environment did not replay a prefix identically.
    """
    if args.pool:
        return run_pool_command(args)
    code = code_version()  # the checkout the study runs on, before it has time to move on
    cfg = _config(args)
    _check(args, cfg)
    settings = _settings(args, cfg)
    bench = get_benchmark(cfg.env.name)
    progress = RunProgress(console, enabled=cfg.progress)
    if args.policy != "toy-scripted":
        # lazy: torch and the trainer's thread rule (about 5 s to import), for model policies only
        import torch

        from g2po_bench.algorithms.backends.local.trainer import torch_threads

        torch.set_num_threads(torch_threads(cfg))
    with progress.phase("loading tasks", key="tasks"):
        train_tasks = training_tasks(cfg, bench)
        pool_tasks = rl_tasks(cfg, train_tasks) if args.split is None else bench.load_tasks(cfg.env, args.split)
        n_tasks = settings.groups if args.target_half_width is None else max(settings.groups, min(args.max_groups,
                                                                                                   len(pool_tasks)))
        try:
            tasks = choose_tasks(pool_tasks, n_tasks, settings.seed)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    label, policy_rec = _policy_label(args, cfg)
    out = _out_dir(args, cfg, label)
    policy, values_fn = _load_policy(args, cfg, bench, train_tasks, out, policy_rec, progress)
    progress.log(f"policy: {policy_rec['kind']} {policy_rec.get('path', '')}")
    if policy_rec["kind"] == "run" and policy_rec.get("run_state") != "done":
        progress.log(f"warning: the run is {policy_rec.get('run_state') or 'without a status'}, not done: the study "
                     f"scores its checkpoint of iteration {policy_rec.get('checkpoint_iteration')} of "
                     f"{policy_rec.get('total_iterations')} (the record says so)")
    command = ["g2po", *getattr(args, "argv", ["credit"])]
    if args.target_half_width is not None:
        record, gradients = _grow(args, cfg, policy, bench, tasks, settings, progress, values_fn, policy_rec,
                                  command, code)
    else:
        # a study touches G games only: the workers need no recycling
        with EnvPool(bench, cfg.env, cfg.env.num_workers, max_episodes=0) as pool:
            study = run_study(cfg, policy, pool, bench, tasks, settings, progress=progress, values_fn=values_fn)
        record, gradients = study_record(study, cfg, policy=policy_rec, command=command, code=code), study.gradients
    _write(out, record, gradients, cfg, not args.no_figures)
    return out, record


def run_pool_command(args) -> tuple[Path, dict[str, Any]]:
    """``g2po credit --pool DIR...``: the shard records under the folders, pooled into ``--out``.

    Raises:
        ConfigError: no record found, records that are not parts of one study (named), no ``--out``
            with several folders, or an existing pooled record.
    """
    _refuse_study_options(args)
    _check_out(args.out)
    missing = [d for d in args.pool if not Path(d).exists()]
    if missing:
        raise ConfigError(f"--pool: {', '.join(missing)} does not exist; pass the shards' output folders")
    paths = [p for d in args.pool for p in find_records(d)]
    parts = []
    for path in paths:
        try:
            rec = read_record(path)
        except (OSError, ValueError) as exc:
            raise ConfigError(str(exc)) from None
        if rec.get("parts"):
            continue  # an earlier pool of these shards
        try:
            parts.append((str(path.parent), rec, read_gradients(path.parent, rec)))
        except (OSError, ValueError) as exc:
            raise ConfigError(str(exc)) from None
    if not parts:
        raise ConfigError(f"--pool: no shard record (credit.json) under {', '.join(args.pool)}; pass the shards' "
                          "output folders (each holds a credit.json written by g2po credit --shard I/N)")
    if args.out is None and len(args.pool) != 1:
        raise ConfigError("--pool of several folders needs --out (where the pooled study goes)")
    out = Path(args.out) if args.out is not None else Path(args.pool[0]) / "pooled"
    if (out / CREDIT_FILE).exists():
        raise ConfigError(f"{out / CREDIT_FILE} already exists; pass another --out, or delete it")
    try:
        record, gradients = pool_records(parts, code=code_version(), command=["g2po", *getattr(args, "argv", [])],
                                         created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    except PoolError as exc:
        raise ConfigError(f"--pool: {exc}") from None
    _write(out, record, gradients, None, not args.no_figures)
    return out, record


#: the options ``--pool`` uses; a pooled study keeps its shards' settings
POOL_OPTIONS = ("pool", "out", "no_figures")


def _refuse_study_options(args: argparse.Namespace) -> None:
    """``--pool`` with a study's options or overrides (which it would silently ignore): one
    error naming them.

    Raises:
        ConfigError: an option other than ``--out``/``--no-figures`` differs from its default, or
            ``key=value`` overrides were given.
    """
    parser = add_credit_arguments(argparse.ArgumentParser())
    defaults = vars(parser.parse_args([]))
    # every option's name is its destination's (add_credit_arguments sets no dest of its own)
    study_options = {f"--{k.replace('_', '-')}" for k in defaults if k not in (*POOL_OPTIONS, "overrides")}
    # the words given (the command line when known: an option at its default value is refused too)
    words = [w.split("=", 1)[0] for w in (getattr(args, "argv", None) or [])]
    given = list(dict.fromkeys(w for w in words if w in study_options))
    given += [f"--{k.replace('_', '-')}" for k, v in defaults.items()
              if k not in POOL_OPTIONS and k != "overrides" and getattr(args, k, v) != v
              and f"--{k.replace('_', '-')}" not in given]
    given += list(getattr(args, "overrides", None) or [])
    if given:
        raise ConfigError(f"--pool takes --out and --no-figures only (a pooled study keeps its shards' settings); "
                          f"drop {', '.join(given)}")


def _print_summary(record: dict[str, Any], out: Path, console) -> None:
    sc = record["scores"]["a_star"]
    grad = (sc.get("gradient") or {}).get("rows", {})
    names = [v["name"] for v in record["variants"]] + ["oracle"]
    width = max(len(n) for n in names)

    def fig(mean, ci) -> str:
        text = "n/a" if mean is None else f"{mean:+.2f}"
        return text + ("" if not ci or ci[0] is None else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]")

    head = f"{'row'.ljust(width)}  Spearman with A* [95 % CI]   groups defined/undefined"
    lines = [head + ("   gradient alignment [95 % CI]" if grad else "")]
    for n in names:
        sp = sc["rows"][n]["spearman"]
        line = f"{n.ljust(width)}  {fig(sp['mean'], sp['ci']):<27}  {sp['groups']}/{sp['undefined']}"
        if n in grad:
            line += f"{'':<18}{fig(grad[n]['cosine'], grad[n]['ci'])}"
        lines.append(line)
    if sc.get("shared"):
        lines.append(f"shared groups: {sc['shared']['groups']} of {sc['groups']} ({sc['shared']['rule']})")
    lines.append(f"ground truth: {ceiling_line(record)}")
    if record.get("agreement"):
        a = record["agreement"]
        lines.append(f"exact vs Monte Carlo: within the 95 % CI on {100 * a['within_ci']:.1f} % of {a['rows']} rows")
    written = ", ".join(sorted(f.name + ("/" if f.is_dir() else "") for f in Path(out).iterdir()))
    lines.append(f"credit study written to {out} ({written})")
    for line in lines:
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def run_credit_command(args, console) -> int:
    """``g2po credit``: run, write, print the table; returns the exit code (1 when the
    environment did not replay a prefix identically, with that one line)."""
    try:
        out, record = run_study_command(args, console)
    except ReplayMismatch as exc:
        console.print(f"[red]replay error:[/red] {exc}", highlight=False, soft_wrap=True)
        return 1
    _print_summary(record, out, console)
    return 0


def run_bench_command(args, console) -> int:
    """``g2po bench credit``: the study of the same arguments, then its seconds per phase."""
    t0 = time.perf_counter()
    try:
        out, record = run_study_command(args, console)
    except ReplayMismatch as exc:
        console.print(f"[red]replay error:[/red] {exc}", highlight=False, soft_wrap=True)
        return 1
    wall = time.perf_counter() - t0
    t = record["timing"]
    s = record["summary"]
    print(f"credit study: {s['rows']} rows, {s['prefixes']} prefixes, {s['continuation_episodes']} continuation "
          f"episodes; wall {wall:.1f} s (policy loading and warm start included)")
    order = [("rollouts", "rollouts (G x N sampled episodes)"), ("continuations", "continuations, of which:"),
             ("generation", "  policy generation"), ("replays", "  prefix replays"), ("resets", "  resets"),
             ("env_steps", "  environment steps after generation"), ("ground_truth", "ground truth"),
             ("exact", "exact values"), ("scoring", "scoring (every variant, 3 targets, bootstrap)"),
             ("gradients", "loss gradients (every row, every variant's group vectors)"),
             ("report", "credit.json, report and figures")]
    inner = ("generation", "replays", "resets", "env_steps")
    for key, label in order:
        if key in t and t[key] is not None:
            share = "       " if key in inner else f"{100 * t[key] / wall:5.1f} %"
            print(f"  {label:<48} {t[key]:8.1f} s  {share}")
    rest = wall - sum(v for k, v in t.items() if k not in inner and isinstance(v, (int, float)))
    print(f"  {'imports, config, tasks, policy loading / warm start':<48} {rest:8.1f} s  {100 * rest / wall:5.1f} %")
    groups = len(record.get("tasks") or []) or 1
    study_s = sum(t.get(k) or 0.0 for k in ("rollouts", "continuations", "ground_truth", "exact", "scoring", "gradients"))
    print(f"  per task group: {study_s / groups:.1f} s (rollouts to gradients), of which continuations "
          f"{(t.get('continuations') or 0.0) / groups:.1f} s")
    sys.stdout.flush()
    return 0
