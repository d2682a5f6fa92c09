"""The ``g2po`` command line.

::

    g2po train [--config FILE] [--preset NAME] [key=value ...]   train (CPU default without arguments)
    g2po eval  --run RUN_DIR [--name NAME] [key=value ...]      a run's checkpoint on its own config.yaml
    g2po eval  [--config FILE] model.path=FOLDER [key=value ...]  evaluate a model folder
    g2po eval  baseline=react|reflexion|direct [key=value ...]   a prompting baseline's run (baselines/)
    g2po data download BENCHMARK [--dest DIR]                  fetch official data (needs internet)
    g2po data generate BENCHMARK [key=value ...]               generate the embedded default's tasks offline
    g2po algorithms [--module PKG.MOD]                           list estimators and their options
    g2po bench {advantages,BENCHMARK,credit} [...]               speed benchmarks (estimators, environments, credit)
    g2po credit [--run RUN | model.path=FOLDER] [key=value ...]   estimators' step advantages vs. Monte-Carlo A*
    g2po config [--preset NAME] [key=value ...]                  print the resolved config
    g2po config baseline=react [key=value ...]                   ... of a baseline run (config.yaml)
    g2po report RESULTS_DIR [...] --out DIR                      tables and figures vs. the paper
    g2po graph RUN [--iteration K] [--group G] [--compare gigpo]   draw a task group's state graph
    g2po sweep {launch,status,cancel,list} SPEC [...]            sweeps with Submitit (sweeps/cli.py)

A bad config key or value, a missing run or data folder, or a bad argument fails before any
work starts (and before any model is loaded) with one line naming it and exit code 2;
``g2po CMD --help`` lists each subcommand's main forms with an example.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path

import yaml
from rich.console import Console
from rich.markup import escape

from g2po_bench.algorithms.registry import (
    available_estimators,
    describe_estimators,
    import_estimator_module,
)
from g2po_bench.algorithms.speed import main as bench_main
from g2po_bench.analysis.cli import add_report_arguments, run_report
from g2po_bench.analysis.credit.cli import (
    add_credit_arguments,
    run_bench_command,
    run_credit_command,
)
from g2po_bench.analysis.graph_cli import add_graph_arguments, run_graph
from g2po_bench.analysis.pictures import AnalysisPictures
from g2po_bench.baselines.config import baseline_run_dict, is_baseline_request, load_baseline_config
from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.benchmarks.registry import (
    all_benchmarks,
    benchmark_load_errors,
    benchmark_names,
    get_benchmark,
    preset_files,
)
from g2po_bench.core.arguments import ArgumentParser, positive_int
from g2po_bench.core.config import ConfigError, config_to_yaml
from g2po_bench.core.errors import (
    SUITE_ERRORS,
    CheckpointError,
    DataDownloadError,
    EnvironmentSetupError,
    MissingDependencyError,
    RunFolderError,
)
from g2po_bench.core.tracking import TrackingError
from g2po_bench.runconfig import load_config
from g2po_bench.runtime.policies import PolicyError
from g2po_bench.sweeps.cli import add_sweep_arguments, run_sweep_command
from g2po_bench.train import check_run_for_eval, load_train_config, run_eval, run_train

__all__ = ["main", "build_parser"]


_RAW = argparse.RawDescriptionHelpFormatter

#: per subcommand: (description, examples); ``g2po CMD --help`` prints both (item: every
#: subcommand's help lists its main forms with one example each).
HELP: dict[str, tuple[str, str]] = {
    "train": (
        "Train a policy with one of the registered estimators. The config is the dataclass defaults, then "
        "--preset, then --config, then key=value overrides; it is saved as RUN/config.yaml.",
        "  g2po train                                    # CPU default: tiny model on generated ALFWorld games\n"
        "  g2po train algorithm.name=gigpo seed=1        # another estimator and seed (g2po algorithms lists them)\n"
        "  g2po train --preset alfworld_1.5b model.path=/models/Qwen2.5-1.5B-Instruct env.data_dir=~/.cache/g2po/alfworld\n"
        "  g2po train --config my.yaml train.iterations=20                              # a YAML file + overrides\n"
        "  g2po train backend=openrlhf --preset webshop_7b model.path=/models/Qwen2.5-7B-Instruct env.data_dir=DIR  # OpenRLHF\n"
        "  g2po train run_id=RUN_ID resume=true          # continue a killed run from its checkpoint\n"
        "  g2po train run_id=RUN_ID resume=true train.iterations=80   # ... and extend it (on its recorded config.yaml)",
    ),
    "eval": (
        "Evaluate a training run's latest checkpoint with the run's own config.yaml (key=value overrides go on "
        "top and are recorded), a model folder, or a prompting baseline (ReAct, Reflexion, direct). A run's "
        "evaluation is written to RUN/evals/<UTC time or --name>/, a model folder's to "
        "<output_dir>/evals/<env>-<model>-<UTC time or --name>/.",
        "  g2po eval --run results/runs/RUN_ID                         # a run's checkpoint, on the run's config\n"
        "  g2po eval --run results/runs/RUN_ID eval.num_tasks=0 --name full-panel   # overrides + folder name\n"
        "  g2po eval model.path=/models/Qwen2.5-1.5B-Instruct env.data_dir=../shared/data/alfworld  # a model\n"
        "  g2po eval baseline=react model=smollm2 env=alfworld env.data_dir=../shared/data/alfworld   # ReAct\n"
        "  g2po eval baseline=reflexion baseline.max_trials=3 model=/models/Qwen2.5-7B-Instruct "
        "baseline.policy=vllm env=webshop  # Reflexion\n"
        "  g2po eval baseline=direct model=smollm2 env=webshop         # the direct prompting baseline",
    ),
    "config": (
        "Print the resolved config as YAML (what a run saves as config.yaml), without running anything.",
        "  g2po config                                   # the CPU default\n"
        "  g2po config --preset webshop_1.5b model.path=/models/Qwen2.5-1.5B-Instruct env.data_dir=~/.cache/g2po/webshop\n"
        "  g2po config baseline=react model=smollm2 env=webshop   # a baseline run's config\n"
        "  g2po config --presets                         # the presets of every benchmark",
    ),
    "data": (
        "Fetch a benchmark's official data (needs internet) or generate its embedded default's tasks offline.",
        "  g2po data download alfworld                   # into ~/.cache/g2po/alfworld, then env.data_dir=...\n"
        "  g2po data download webshop --dest /data/webshop\n"
        "  g2po data generate alfworld env.generated_train_games=200   # the embedded default's games",
    ),
    "algorithms": (
        "List the registered advantage estimators and their options (algorithm.name / algorithm.options): the "
        "built-in ones, those of installed packages (entry points 'g2po.estimators') and those of --module.",
        "  g2po algorithms\n"
        "  g2po algorithms --module my_package.my_estimator   # an estimator module that is not installed",
    ),
    "report": (
        "Tables and figures from run folders (searched recursively), beside the published numbers. Only "
        "training and baseline runs count as seeds; evaluation-only folders are listed apart.",
        "  g2po report results/runs --out results/report             # all runs\n"
        "  g2po report results/sweeps/main_table --which best --no-figures   # a sweep, best evaluations\n"
        "  g2po report results/sweeps/cpu_ablation/runs results/proxy/sweep/runs --methods G2PO GRPO --out DIR"
        "   # an ablation beside the committed runs",
    ),
    "graph": (
        "Draw one task group's state graph (PNG and interactive HTML) from a run's recorded step tables "
        "(record_graphs=true): nodes = states, edges = actions, colours = values and advantages.",
        "  g2po graph results/runs/RUN                          # last iteration, the most mixed group\n"
        "  g2po graph results/runs/RUN --iteration 4 --group 2 --out g.png\n"
        "  g2po graph results/runs/RUN --compare gigpo          # the same group's credit under GiGPO",
    ),
    "bench": (
        "Speed benchmarks that print their figures (g2po bench alfworld --help, g2po bench webshop --help).",
        "  g2po bench advantages --sizes reference 100000   # estimator rows/s vs. the per-row oracle\n"
        "  g2po bench alfworld --games 8                    # ALFWorld harness steps per second\n"
        "  g2po bench webshop --synthetic                   # WebShop environment, index and search speed\n"
        "  g2po bench credit                                # g2po credit's study, seconds per phase",
    ),
    "credit": (
        "Credit-assignment accuracy: sample G task groups of N rollouts as training does, estimate every step's "
        "true advantage A* = V(h_{t+1}) - V(h_t) from K continuations of the same policy per replayed prefix, and "
        "score every registered estimator and ablation variant on the same steps: the within-group correlation "
        "with A*, sign agreement on decisive steps, credit mass, and the gradient alignment (the cosine of the "
        "trainer's policy gradient under its advantages with the one under A*); 95 % CIs over groups, Holm over "
        "the paired differences, the reliability index of A*. Writes credit.json, report.md and figures "
        "(analysis/credit).",
        "  g2po credit                                   # CPU default: its warm start, 16 groups x 8, K = 16\n"
        "  g2po credit --run results/runs/RUN --groups 32   # a trained run's checkpoint on its own config\n"
        "  g2po credit model.path=FOLDER env.max_steps=30 env.generated_max_receptacles=4   # a model, longer horizon\n"
        "  g2po credit env.name=toy --policy toy-scripted --exact   # exact ground truth on the toy corridor\n"
        "  g2po credit --groups 208 --shard 3/13 --out DIR/s03   # one shard of a study (whole blocks of groups)\n"
        "  g2po credit --pool DIR --out DIR/pooled          # the shards under DIR pooled into one study\n"
        "  g2po bench credit --groups 4 --continuations 8   # the same study, then where the time goes",
    ),
    "sweep": (
        "",
        "  g2po sweep list                               # the specs in sweeps/specs\n"
        "  g2po sweep launch smoke --cluster local --wait   # run a sweep (slurm when sbatch is on PATH)\n"
        "  g2po sweep launch main_table --dry-run        # print the plan only\n"
        "  g2po sweep status main_table                  # pending / running / done / failed per run\n"
        "  g2po sweep cancel main_table                  # cancel its queued and running jobs",
    ),
}


def _subparser(sub, name: str, help: str) -> argparse.ArgumentParser:
    desc, examples = HELP[name]
    return sub.add_parser(name, help=help, description=textwrap.fill(desc, 100), epilog="examples:\n" + examples,
                          formatter_class=_RAW)


def _add_config_args(p: argparse.ArgumentParser, example: str = "algorithm.name=gigpo") -> None:
    p.add_argument("--config", help="YAML config file (any subset of the keys)")
    p.add_argument("--preset", help="a benchmark's preset (e.g. alfworld_1.5b; `g2po config --presets` lists them)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help=f"dotted overrides, e.g. {example}")


def _bench_size(text: str) -> str:
    """``--sizes`` items: ``reference`` or a positive row count (``100000``, ``1e6``)."""
    if text == "reference":
        return text
    try:
        n = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not 'reference' or a row count such as 100000") from None
    if not n >= 1 or n != int(n):
        raise argparse.ArgumentTypeError(f"{text!r}: a row count must be a whole number >= 1, e.g. 100000")
    return text


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``g2po`` command (subcommands listed in the module docstring;
    each subcommand's ``--help`` lists its main forms with an example, :data:`HELP`)."""
    parser = ArgumentParser(prog="g2po", description="Long-horizon agentic RL benchmarks and baselines",
                            epilog=__doc__.split("::", 1)[1].split("A bad config", 1)[0].rstrip(),
                            formatter_class=_RAW)
    sub = parser.add_subparsers(dest="command", required=True)

    p = _subparser(sub, "train", "train a policy (CPU default: tiny model on generated ALFWorld games)")
    _add_config_args(p)

    p = _subparser(sub, "eval", "evaluate a run's latest checkpoint or a model folder, or run a prompting "
                                "baseline (baseline=react|reflexion|direct)")
    _add_config_args(p, "eval.num_tasks=0")
    p.add_argument("--run", help="training run folder: its checkpoints/latest/policy is evaluated with its "
                                 "config.yaml (key=value overrides on top); not with --config/--preset")
    p.add_argument("--name", help="name of the evaluation folder (default: the UTC time, YYYYmmdd-HHMMSS)")

    p = _subparser(sub, "config", "print the resolved config as YAML")
    _add_config_args(p)
    p.add_argument("--presets", action="store_true", help="list the presets of every registered benchmark and exit")

    p = _subparser(sub, "data", "fetch or generate benchmark data")
    dsub = p.add_subparsers(dest="data_command", required=True)
    d = dsub.add_parser("download", help="download official data into a cache folder (needs internet)")
    d.add_argument("benchmark", choices=[b.name for b in all_benchmarks() if b.downloads],
                   help="which benchmark's data")
    d.add_argument("--dest", default=None, help="target folder (default: ~/.cache/g2po/<benchmark>)")
    g = dsub.add_parser("generate", help="generate the embedded default's tasks offline (ALFWorld games)")
    g.add_argument("benchmark", choices=[b.name for b in all_benchmarks() if b.generates],
                   help="the benchmark to generate tasks for")
    _add_config_args(g, "env.generated_train_games=400")

    p = _subparser(sub, "algorithms", "list registered advantage estimators and their options")
    p.add_argument("--module", action="append", default=[],
                   help="import this module first (algorithm.module of a run config); repeatable")


    p = _subparser(sub, "report", "tables and figures from run folders, beside the published numbers")
    add_report_arguments(p)


    p = _subparser(sub, "graph", "draw one task group's state graph (PNG + HTML) from a recorded run")
    add_graph_arguments(p)

    p = _subparser(sub, "bench", "speed benchmarks (print figures)")
    bsub = p.add_subparsers(dest="bench_command", required=True)
    b = bsub.add_parser("advantages", help="advantage estimators: rows/s and ms per batch vs. the per-row oracle")
    b.add_argument("--sizes", nargs="*", default=None, type=_bench_size,
                   help="'reference' and/or row counts (default: reference batch, 1e5, 1e6)")
    b.add_argument("--repeats", type=positive_int, default=5)
    b.add_argument("--estimators", nargs="+", default=None, help="only these estimators (default: all registered)")
    b.add_argument("--module", action="append", default=[],
                   help="import this estimator module first (algorithm.module); repeatable")
    b.add_argument("--no-oracle", action="store_true", help="time the estimators alone")
    for bench in all_benchmarks():
        if type(bench).speed_benchmark is not Benchmark.speed_benchmark:
            bsub.add_parser(bench.name, help=f"{bench.name}: environment speed (arguments: g2po bench {bench.name} --help)")
    add_credit_arguments(bsub.add_parser("credit", help="a g2po credit study, then its seconds per phase "
                                                        "(rollouts, replays, continuations, scoring)"))

    p = _subparser(sub, "credit", "estimators' step advantages against Monte-Carlo ground truth (credit accuracy)")
    add_credit_arguments(p)


    add_sweep_arguments(sub)
    sweep = sub.choices["sweep"]
    sweep.epilog = "examples:\n" + HELP["sweep"][1]
    sweep.formatter_class = _RAW
    return parser


def _load(args):
    return load_config(args.config, args.overrides, preset=args.preset)


def _tracker_pictures():
    """The tracker pictures' drawer the CLI hands to training runs (the trainers and the sweeps
    sit below the analysis package, so the drawing code comes in from here); it draws only when
    a tracker that shows pictures is selected (``logging.backends``)."""
    return AnalysisPictures()


def _error_kind(exc: BaseException) -> str:
    """The one-line label of a user error (:data:`USER_ERRORS`)."""
    if isinstance(exc, ConfigError):
        return "config error"
    if isinstance(exc, EnvironmentSetupError):
        return "environment error"
    if isinstance(exc, TrackingError):
        return "tracking error"
    if isinstance(exc, MissingDependencyError):
        return "setup error"
    if isinstance(exc, CheckpointError):
        return "checkpoint error"
    if isinstance(exc, RunFolderError):
        return "run folder error"
    return "data error"


#: exception types that mean bad input or a missing piece the user can fix (a config key or value,
#: a missing or malformed data folder, an environment's missing interpreter): printed as one line
#: with exit code 2, never as a traceback
USER_ERRORS: tuple[type[BaseException], ...] = (ConfigError, TrackingError, *SUITE_ERRORS)


def _short_warnings() -> None:
    """The suite's own warnings (skipped data, cut prompts) print as one ``warning: ...`` line
    instead of Python's file:line form; other warnings keep the default format."""
    import warnings

    default = warnings.formatwarning
    if getattr(default, "g2po_short", False):
        return

    def fmt(message, category, filename, lineno, line=None):
        if category.__module__.split(".")[0] == "g2po_bench":
            return f"warning: {message}\n"
        return default(message, category, filename, lineno, line)

    fmt.g2po_short = True  # type: ignore[attr-defined]
    warnings.formatwarning = fmt


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``g2po``; returns the exit code.

    Bad input (a config key or value, a missing run or data folder, a bad argument) prints one
    line and returns 2 before any model is loaded; argparse's own errors also exit with 2.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    # soft_wrap: a message stays on one line (also in a log file), whatever the terminal width
    console = Console(stderr=True, soft_wrap=True)
    _short_warnings()
    try:
        return _main(argv, console)
    except USER_ERRORS as exc:
        console.print(f"[red]{_error_kind(exc)}:[/red] {escape(str(exc))}", highlight=False)
        return 2
    except KeyboardInterrupt:
        console.print("interrupted; the run folder keeps what was written (resume with resume=true)")
        return 130


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, with ``key=value`` overrides allowed anywhere among a
    command's options (``g2po credit env.name=toy --groups 4 env.max_steps=7``): argparse takes
    one block of positionals only, so the later ``key=value`` words come back unrecognized and are
    appended to ``overrides`` in the order given. Anything else unrecognized is argparse's usual
    error (exit code 2)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        takes_overrides = hasattr(args, "overrides")
        unknown = [x for x in extra if not (takes_overrides and _OVERRIDE.match(x))]
        if unknown:  # name only the words that are wrong, and the subcommand whose help lists its options
            command = getattr(parser, "subcommands", None)
            sub = command.choices.get(getattr(args, "command", None)) if command is not None else None
            (sub or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
        args.overrides = [*(args.overrides or []), *extra]
    return args


#: a ``key=value`` override word (dotted key)
_OVERRIDE = re.compile(r"^[A-Za-z_][\w.\-]*=")


def _main(argv: list[str], console) -> int:
    if len(argv) >= 2 and argv[0] == "bench" and argv[1] in benchmark_names():
        # the environment benchmarks own their arguments (g2po bench webshop --help)
        code = get_benchmark(argv[1]).speed_benchmark(argv[2:])
        if code is not None:
            return int(code)
    parser = build_parser()
    args = _parse(parser, argv)

    if args.command == "train":
        # resume=true continues the run folder's recorded config.yaml, the arguments on top
        cfg = load_train_config(args.config, args.overrides, preset=args.preset)
        run = run_train(cfg, console=console, pictures=_tracker_pictures())
        console.print(f"run folder: {run.root}")
        return 0
    if args.command == "eval":
        if is_baseline_request(args.overrides, args.config):  # baseline.name=react ... (baselines/)
            if args.run is not None or args.name is not None:
                raise ConfigError("--run and --name evaluate a training run; a baseline takes key=value "
                                  "settings only (g2po eval --help)")
            # lazy: the baseline runner loads torch and transformers (about 5 s); `g2po --help`,
            # `g2po config` and config errors must not wait for them
            from g2po_bench.baselines.run import run_baseline_cli

            try:
                out = run_baseline_cli(args.config, args.overrides, preset=args.preset, console=console)
            except PolicyError as exc:  # bad key, unreachable server, ...: one clear line
                console.print(f"[red]policy error:[/red] {exc}")
                return 1
            console.print(f"baseline run written to {out}")
            return 0
        if args.run is not None:
            if args.config is not None or args.preset is not None:
                raise ConfigError("--run evaluates with the run's own config.yaml; drop --config/--preset and "
                                  "give changes as key=value overrides")
            config_path, _ = check_run_for_eval(args.run)  # before any model is loaded
            cfg = load_config(config_path, args.overrides)
        else:
            cfg = _load(args)
        out = run_eval(cfg, run_dir=args.run, console=console, overrides=args.overrides, name=args.name)
        console.print(f"evaluation written to {out}")
        return 0
    if args.command == "config" and args.presets:
        for name, path in sorted(preset_files().items()):
            print(f"{name:<20} {path}")
        for label, why in benchmark_load_errors().items():
            print(f"not loaded: {label} ({why})")
        return 0
    if args.command == "config":
        if is_baseline_request(args.overrides, args.config):  # the baseline run's config.yaml
            # printing a config converts no model (model=smollm2 names the folder a run converts it into)
            cfg, b = load_baseline_config(args.config, args.overrides, preset=args.preset, convert_model=False)
            print(yaml.safe_dump(baseline_run_dict(cfg, b), sort_keys=False), end="")
            if cfg.model.path is not None and b.policy != "openai" and not Path(cfg.model.path).is_dir():
                console.print(f"note: model.path {cfg.model.path} is not there yet; the run converts SmolLM2 into it "
                              "on first use", highlight=False)
            return 0

        print(config_to_yaml(_load(args)), end="")
        return 0
    if args.command == "data":
        return _data(args, console)
    if args.command == "sweep":
        return run_sweep_command(args, console, pictures=_tracker_pictures())
    if args.command == "report":
        return int(run_report(args))
    if args.command == "graph":
        return int(run_graph(args))
    if args.command == "credit":
        args.argv = argv
        return int(run_credit_command(args, console))
    if args.command == "algorithms":
        _import_estimator_modules(args.module)
        print(describe_estimators())
        return 0
    if args.command == "bench":
        if args.bench_command == "credit":
            args.argv = argv
            return int(run_bench_command(args, console))
        if args.bench_command == "advantages":
            _import_estimator_modules(args.module)
            unknown = sorted(set(args.estimators or ()) - set(available_estimators()))
            if unknown:
                raise ConfigError(f"--estimators: unknown {', '.join(unknown)}; registered: "
                                  f"{', '.join(available_estimators())}")
            bench_argv = ["--repeats", str(args.repeats)]
            if args.sizes:
                bench_argv += ["--sizes", *args.sizes]
            if args.estimators:
                bench_argv += ["--estimators", *args.estimators]
            if args.no_oracle:
                bench_argv.append("--no-oracle")
            return int(bench_main(bench_argv) or 0)
    return 1


def _import_estimator_modules(modules) -> None:
    """Import the estimator modules named by ``--module`` (they register their estimators).

    Raises:
        ConfigError: a module that cannot be imported, named after ``--module``.
    """
    for module in modules:
        try:
            import_estimator_module(module)
        except ValueError as exc:
            raise ConfigError(f"--module: {exc}") from None


def _data(args, console) -> int:
    bench = get_benchmark(args.benchmark)
    if args.data_command == "download":
        dest = Path(args.dest or Path("~/.cache/g2po").expanduser() / bench.name)
        if dest.exists() and not dest.is_dir():
            raise ConfigError(f"--dest {str(dest)!r} is a file, not a folder; pass a folder (it is created if missing)")
        try:
            path = bench.download(dest)
        except DataDownloadError as exc:
            console.print(f"[red]download failed:[/red] {exc}")
            return 1
        console.print(f"{bench.name} data in {bench.describe_data(path)}; use env.data_dir={path}")
        return 0
    if args.data_command == "generate":
        cfg = load_config(args.config, [*args.overrides, f"env.name={bench.name}"], preset=args.preset)
        path = bench.generate(cfg.env)
        console.print(f"generated {bench.name} tasks in {path}")
        return 0
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
