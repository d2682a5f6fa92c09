"""``g2po sweep``: launch, inspect and cancel sweeps.

::

    g2po sweep list                                          the specs in sweeps/specs
    g2po sweep launch SPEC [--cluster slurm|local|debug] [--dry-run] [--wait] [--max-parallel N]
    g2po sweep status SPEC [--json]
    g2po sweep cancel SPEC

Common options: ``--var NAME=VALUE`` (a spec variable, e.g. a model folder), ``--where
AXIS=LABEL[,LABEL]`` (a subset: ``--where method=g2po --where seed=0``), ``--output-dir DIR``
(instead of the spec's). SPEC is a YAML file or a name in ``sweeps/specs`` (``smoke``).
The plan and the status tables go to stdout, messages to stderr.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys

from g2po_bench.core.config import ConfigError
from g2po_bench.sweeps import launcher
from g2po_bench.sweeps.spec import SPEC_DIR, SpecError, load_spec

__all__ = ["add_sweep_arguments", "run_sweep_command", "main"]


def _plain(doc: str) -> str:
    """The module docstring as ``--help`` text: without reST markup (double backquotes, ``::``)."""
    lines = [ln for ln in doc.splitlines() if ln.strip() != "::"]
    return "\n".join(lines).replace("``", "").replace("\n\n\n", "\n\n")


def add_sweep_arguments(sub) -> argparse.ArgumentParser:
    """Add the ``sweep`` subcommand to the ``g2po`` subparsers ``sub``."""
    p = sub.add_parser("sweep", help="launch, inspect and cancel sweeps of runs (Submitit: slurm, local, debug)",
                       description=_plain(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter)
    ssub = p.add_subparsers(dest="sweep_command", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("spec", help="sweep spec: a YAML file or a name in sweeps/specs (e.g. smoke)")
        q.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                       help="set a spec variable (vars: block), e.g. --var model_1_5b=/models/Qwen2.5-1.5B-Instruct")
        q.add_argument("--where", action="append", default=[], metavar="AXIS=LABEL",
                       help="only runs with this label on this axis (repeatable; LABEL may be a,b; axis 'seed')")
        q.add_argument("--output-dir", default=None, help="sweep folder (default: the spec's output_dir)")

    q = ssub.add_parser("launch", help="expand, validate, print the plan and submit (skips finished/queued runs)")
    common(q)
    q.add_argument("--cluster", choices=["slurm", "local", "debug"], default=None,
                   help="Submitit executor (default: slurm when sbatch is on PATH, else local)")
    q.add_argument("--dry-run", action="store_true", help="print the plan; submit nothing")
    q.add_argument("--max-parallel", type=int, default=None, help="cap on concurrently running tasks per job array")
    q.add_argument("--wait", action="store_true", help="wait until every run is done or failed")
    q.add_argument("--timeout", type=float, default=None, help="with --wait: give up after this many seconds")

    q = ssub.add_parser("status", help="pending / running / done / failed for every run, with the reason")
    common(q)
    q.add_argument("--json", action="store_true", help="print JSON lines instead of a table")

    q = ssub.add_parser("cancel", help="cancel the sweep's queued and running jobs and wait until they stop")
    common(q)
    q.add_argument("--timeout", type=float, default=None,
                   help="seconds to wait for the jobs to stop (default 60); a job still running then is named "
                        "with its pids and the exit code is 1")

    ssub.add_parser("list", help="list the specs in sweeps/specs")
    return p


def _stdout_console():
    from rich.console import Console

    width = shutil.get_terminal_size((200, 40)).columns
    return Console(file=sys.stdout, width=max(width, 160) if not sys.stdout.isatty() else width,
                   highlight=False, soft_wrap=False)


def _vars(items: list[str]) -> dict[str, str]:

    out = {}
    for it in items:
        if "=" not in it:
            raise SpecError(f"--var {it!r}: expected NAME=VALUE")
        k, v = it.split("=", 1)
        out[k.strip()] = v
    return out


def print_plan(spec, decisions, cluster, console=None) -> None:
    """The launch plan: one row per run, the job arrays, where results go."""
    from rich.markup import escape as e
    from rich.table import Table

    console = console or _stdout_console()
    n_sub = sum(d.action == "submit" for d in decisions)
    console.print(f"[bold]sweep {spec.name}[/bold]  ({e(str(spec.path))})")
    if spec.description:
        console.print(f"  {spec.description.strip()}", markup=False)
    console.print(f"  results: {spec.runs_dir}/<run_id>/  (config.yaml, metrics.jsonl, eval.json, status.json, checkpoints/)")
    console.print(f"  state:   {spec.output_dir / 'sweep.json'}   logs: {spec.output_dir / 'submitit'}/<shape>/")
    table = Table(show_lines=False, pad_edge=False, box=None, header_style="bold")
    for col in ("#", "run id", "variant", "seed", "resources", "action"):
        table.add_column(col, no_wrap=col != "variant", overflow="fold")
    for i, d in enumerate(decisions, 1):
        r = d.run
        action = "[green]submit[/green]" if d.action == "submit" else "[dim]skip[/dim]"
        variant = r.label() + (f" (= {len(r.aliases)} other grid point(s))" if r.aliases else "")
        table.add_row(str(i), r.run_id, e(variant), str(r.seed), e(r.resources.describe()), f"{action}: {e(d.reason)}")
    console.print(table)
    shapes: dict[str, list] = {}
    for d in decisions:
        if d.action == "submit":
            shapes.setdefault(d.run.resources.key(), []).append(d.run)
    for key, runs in shapes.items():
        res = runs[0].resources
        if cluster == "local":
            slots = min(spec.max_parallel, len(runs))
            how = f"{slots} local job(s) running {len(runs)} run(s), at most {slots} at a time"
        elif cluster == "debug":
            how = f"{len(runs)} run(s) in this process, one after the other"
        else:
            how = (f"1 job array of {len(runs)} task(s), at most {min(spec.max_parallel, len(runs))} running "
                   "at a time")
        console.print(f"  shape {key}: {res.describe()} -> {how}", markup=False)
    console.print(f"{len(decisions)} run(s): {n_sub} to submit on '{cluster}', {len(decisions) - n_sub} skipped")
    console.file.flush()


def print_status(spec, rows, console=None) -> None:
    """Print the status table of a sweep (pending, running, done, failed with reasons)."""
    from rich.markup import escape as e
    from rich.table import Table

    console = console or _stdout_console()
    colors = {"done": "green", "running": "cyan", "pending": "yellow", "failed": "red"}
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("run id", "variant", "seed", "state", "iter", "success", "job", "detail"):
        table.add_column(col, overflow="fold", no_wrap=col not in ("detail", "variant"))
    for row in rows:
        c = colors.get(row.state, "white")
        succ = f"{row.success:.1%}" if row.success is not None else ""
        table.add_row(row.run.run_id, e(row.run.label()), str(row.run.seed), f"[{c}]{row.state}[/{c}]",
                      row.progress, succ, e(row.job), e(row.detail))
    console.print(f"[bold]sweep {spec.name}[/bold]  results in {spec.runs_dir}")
    console.print(table)
    counts = {k: sum(1 for r in rows if r.state == k) for k in ("pending", "running", "done", "failed")}
    console.print(", ".join(f"{v} {k}" for k, v in counts.items()) + f" (of {len(rows)})")
    console.file.flush()


def run_sweep_command(args, console, pictures=None) -> int:
    """Dispatch ``g2po sweep ...``; ``console`` is the stderr console of the CLI, ``pictures`` the
    tracker pictures' drawer the runs get (:class:`g2po_bench.core.tracking.RunPictures`, picklable;
    the CLI passes the analysis package's)."""

    if args.sweep_command == "list":
        out = _stdout_console()
        for p in sorted(SPEC_DIR.glob("*.yaml")):
            try:
                spec = load_spec(p)
                desc = spec.description.strip().splitlines()[0] if spec.description.strip() else ""
            except SpecError as exc:
                desc = f"(broken: {exc})"
            out.print(f"{p.stem:24s} {desc}")
        return 0
    try:
        spec = load_spec(args.spec, _vars(args.var), output_dir=args.output_dir)
        if getattr(args, "max_parallel", None):
            if args.max_parallel < 1:
                raise SpecError("--max-parallel must be >= 1")
            spec.max_parallel = args.max_parallel
        if args.sweep_command == "launch":
            cluster = args.cluster or ("slurm" if shutil.which("sbatch") else "local")
            if args.cluster is None:
                console.print(f"cluster: {cluster} (choose with --cluster slurm|local|debug)")
            res = launcher.launch(spec, cluster, where=args.where, dry_run=args.dry_run, console=console,
                                  on_plan=lambda s, d, c: print_plan(s, d, c), pictures=pictures)
            if args.dry_run:
                console.print("dry run: nothing submitted")
                problem = launcher.cluster_problem(cluster)
                if problem:
                    console.print(f"note: a launch would fail here: {problem}", markup=False, highlight=False)
                needs = sorted({v for d in res.decisions for v in d.run.needs})
                if needs:
                    n = sum(1 for d in res.decisions if d.run.needs)
                    console.print(f"{n} run(s) use unset spec variables ({', '.join(needs)}): planned with placeholders, "
                                  "their model and data folders not checked, their run ids ending in '?' (the hash needs "
                                  "the values); set the variables or pass --var NAME=VALUE before launching",
                                  markup=False, highlight=False)
                return 0
            for sub in res.submitted:
                console.print(f"submitted {sub['cluster']} job {sub['job_id']}: {len(sub['runs_in_job'])} run(s)")
            for folder in sorted({sub["folder"] for sub in res.submitted}):
                console.print(f"job logs: {folder}")
            if not res.submitted:
                console.print("nothing to submit: every run is done, queued or running")
            console.print(f"follow with: g2po sweep status {args.spec}")
            if cluster == "debug":
                bad = [r for r in res.results if r.get("state") == "failed"]
                return 1 if bad else 0
            if args.wait:
                rows = launcher.wait(spec, args.where, timeout=args.timeout, console=console)
                print_status(spec, rows)
                return 0 if all(r.state == "done" for r in rows) else 1
            return 0
        if args.sweep_command == "status":
            rows = launcher.sweep_status(spec, args.where, console=console)
            if args.json:
                for r in rows:
                    print(json.dumps({"run_id": r.run.run_id, "labels": r.run.labels, "state": r.state,
                                      "detail": r.detail, "job": r.job, "progress": r.progress,
                                      "success": r.success, "path": str(spec.runs_dir / r.run.run_id)}))
            else:
                print_status(spec, rows)
            return 0
        if args.sweep_command == "cancel":
            timeout = launcher.CANCEL_TIMEOUT_S if args.timeout is None else args.timeout
            done = launcher.cancel(spec, args.where, console=console, timeout=timeout)
            if not done:
                console.print("no queued or running job to cancel")
            for c in done:
                job = f"{c['cluster']} job {c['job_id']} ({len(c['runs'])} run(s))"
                if not c["ok"]:
                    line = f"could not cancel {job}: {c['message']}"
                elif c["stopped"]:
                    line = f"cancelled: {job}; it stopped" + (f" after {c['seconds']:g} s" if c["seconds"] else
                                                               f" ({c['message']})" if c["message"] else "")
                else:
                    line = (f"cancel sent, but {job} is still running after {timeout:g} s: {c['still_running']}. "
                            "It stops at its next check point (the iteration in flight is not recorded): run "
                            "cancel again to wait longer"
                            + (", or kill -KILL the pids to stop it at once (a relaunch resumes from the last "
                               "checkpoint)" if c["cluster"] == "local" else ""))
                console.print(line, markup=False)
            return 0 if all(c["ok"] and c["stopped"] for c in done) else 1
    except (SpecError, ConfigError) as exc:
        from rich.markup import escape

        console.print(f"[red]sweep spec error:[/red] {escape(str(exc))}")
        return 2
    except launcher.ClusterUnavailable as exc:
        from rich.markup import escape

        console.print(f"[red]sweep {args.sweep_command} failed:[/red] {escape(str(exc))}; nothing was submitted")
        return 2
    except Exception as exc:  # submission refused by the scheduler (sbatch error), lock timeout, ...
        import submitit
        from rich.markup import escape

        known = (submitit.core.utils.FailedSubmissionError, submitit.core.utils.UncompletedJobError,
                 TimeoutError, OSError)
        if not isinstance(exc, known):
            raise
        console.print(f"[red]sweep {args.sweep_command} failed:[/red] {escape(str(exc))}")
        console.print("runs submitted before the failure are recorded in the sweep state; fix and relaunch")
        return 1
    return 1


def main(argv: list[str] | None = None) -> int:
    """``python -m g2po_bench.sweeps.cli ...`` (same as ``g2po sweep ...``)."""
    from rich.console import Console

    parser = argparse.ArgumentParser(prog="g2po")
    sub = parser.add_subparsers(dest="command", required=True)
    add_sweep_arguments(sub)
    args = parser.parse_args(["sweep", *(argv if argv is not None else sys.argv[1:])])
    return run_sweep_command(args, Console(stderr=True))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
