"""Where does a policy fail on the WebShop held-out panel? Failure phases, measured.

Plays the run config's held-out panel once per goal with a model folder (a warm start
``<warm_start_cache>/<key>/policy`` or a run's ``checkpoints/latest/policy``) at a temperature,
replays every episode's actions in a fresh environment, and names the first phase that failed:

- ``search``: no search was made, or the first results page of the last search holds no product
  whose purchase (with the goal's option values that product offers) would win: the query lost
  the task (the instruction expert's query, the instruction itself, finds one for about 9 in 10
  held-out goals);
- ``product-invalid``: the agent never opened a product: its clicks on the results page named
  ids the page does not show (refused by the environment) until the step limit;
- ``product``: it opened and bought (or last opened) a product with which no choice of options wins,
  although the page had one;
- ``options``: it bought a product that could win with other option clicks (a wrong value, one
  missing, or one left out);
- ``no-buy``: it opened a product that could win and never bought (ran out of steps);
- ``success``.

Alongside: how often the first query is an exact copy of the instruction (as the expert's is),
the share of results-page clicks the page refused, the share of option clicks that are a goal
value, and the mean steps. The episodes are played with the run's settings (step limit, prompt,
history, response length) and the evaluation's sampling seed, like ``g2po eval``.
``--out FILE`` writes every episode (actions, phase, score) as JSON.

Usage::

    python scripts/webshop_failures.py MODEL_FOLDER [--config RUN/config.yaml] [--temperature 0.4]
        [--out t.json] [key=value ...]      # default config: --preset webshop_cpu

Raises:
    SystemExit: the model folder does not exist or the environment is not WebShop.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PHASES = ("success", "search", "product-invalid", "product", "options", "no-buy")


def classify_episode(env, task, actions: list[str]) -> dict:
    """Replay ``actions`` of ``task`` in ``env`` (a :class:`~g2po_bench.benchmarks.webshop.env.WebShopEnv`)
    and name the first phase that failed (module docstring).

    Returns:
        ``{"phase", "query", "query_is_instruction", "results_clicks", "refused_results_clicks",
        "option_clicks", "goal_option_clicks", "score"}``; ``score`` is the purchase reward x 100
        (0 without a purchase).
    """
    from g2po_bench.benchmarks.webshop.expert import (  # lazy: script helpers
        _clean_query,
        best_on_page,
    )

    obs = env.reset(task)
    goal = env.goal
    cat = env.catalog
    out = {"query": None, "query_is_instruction": False, "results_clicks": 0, "refused_results_clicks": 0,
           "option_clicks": 0, "goal_option_clicks": 0, "score": 0.0}
    page_hits: list[int] | None = None
    opened: str | None = None
    for a in actions:
        page = obs.info.get("page")
        obs = env.step(a)
        valid = obs.info.get("valid", True)
        if a.startswith("search[") and valid:
            q = a[len("search["):-1]
            if out["query"] is None:
                out["query"] = q
                out["query_is_instruction"] = q.strip() == _clean_query(goal.instruction_text).lower()
            page_hits = cat.search.search(" ".join(q.split(" ")), 50)[:10]
        elif page == "results" and a.startswith("click[") and a not in ("click[next >]", "click[< prev]",
                                                                         "click[back to search]"):
            out["results_clicks"] += 1
            out["refused_results_clicks"] += int(not valid)
            if valid and obs.info.get("page") == "item":
                opened = env.asin
        elif page == "item" and valid and a.startswith("click[") and obs.info.get("page") == "item":
            out["option_clicks"] += 1
            out["goal_option_clicks"] += int(a[len("click["):-1] in goal.option_values)
        if obs.done:
            opened = env.asin
            out["score"] = 100.0 * obs.reward
            break
    winnable_page = page_hits is not None and best_on_page(env, goal, page_hits)[2] == 1.0
    winnable_product = opened is not None and best_on_page(env, goal, [cat.index_of[opened]])[2] == 1.0
    if obs.done and obs.won:
        phase = "success"
    elif page_hits is None or not winnable_page:
        phase = "search"
    elif opened is None:
        phase = "product-invalid"
    elif not winnable_product:
        phase = "product"
    elif obs.done:
        phase = "options"
    else:
        phase = "no-buy"
    out["phase"] = phase
    return out


def summarize(episodes: list[dict]) -> dict:
    """Counts per phase and the rates of the module docstring over ``episodes`` (classified)."""
    n = len(episodes)
    counts = collections.Counter(e["phase"] for e in episodes)
    rc = sum(e["results_clicks"] for e in episodes)
    oc = sum(e["option_clicks"] for e in episodes)
    return {
        "episodes": n,
        "phases": {p: counts.get(p, 0) for p in PHASES},
        "score": sum(e["score"] for e in episodes) / n if n else 0.0,
        "query_is_instruction": sum(e["query_is_instruction"] for e in episodes) / n if n else 0.0,
        "refused_results_clicks": sum(e["refused_results_clicks"] for e in episodes) / rc if rc else 0.0,
        "goal_option_clicks": sum(e["goal_option_clicks"] for e in episodes) / oc if oc else 0.0,
        "mean_steps": sum(e["steps"] for e in episodes) / n if n else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="model folder (config.json, tokenizer, weights)")
    ap.add_argument("--config", help="a run's config.yaml (default: --preset webshop_cpu)")
    ap.add_argument("--temperature", type=float, default=0.4)
    ap.add_argument("--out", help="write the episodes to this JSON file")
    ap.add_argument("overrides", nargs="*", metavar="key=value", help="run config overrides")
    args = ap.parse_intermixed_args(argv)
    if not Path(args.model, "config.json").is_file():
        sys.exit(f"{args.model}: not a model folder (no config.json); pass e.g. RUN/checkpoints/latest/policy")

    from g2po_bench.analysis.panel import play_panel
    from g2po_bench.runconfig import load_config

    cfg = load_config(args.config, args.overrides, preset=None if args.config else "webshop_cpu")
    if cfg.env.name != "webshop":
        sys.exit(f"env.name={cfg.env.name}: the failure phases are WebShop's")
    played = play_panel(args.model, cfg, args.temperature)
    rb, bench, panel = played.rollouts, played.bench, played.panel
    env = bench.make_env(cfg.env)
    by_id = {t.task_id: t for t in panel}
    episodes = []
    for t in rb.trajectories:
        actions = [rb.actions[i] for i in played.steps(t["traj_id"])]
        e = classify_episode(env, by_id[t["task_id"]], actions)
        e.update({"task": t["task_id"], "steps": len(actions), "actions": actions,
                  "responses": [rb.responses[i] for i in played.steps(t["traj_id"])]})
        episodes.append(e)
    s = summarize(episodes)
    n = s["episodes"]
    print(f"{args.model} at temperature {args.temperature:g}: {n} episodes, score {s['score']:.1f}, "
          f"mean steps {s['mean_steps']:.2f}")
    for k, v in s["phases"].items():
        print(f"  {k:16s} {v:4d}  ({100 * v / n:.1f} %)")
    print(f"  first query = the instruction: {100 * s['query_is_instruction']:.1f} %; results-page clicks "
          f"refused: {100 * s['refused_results_clicks']:.1f} %; option clicks naming a goal value: "
          f"{100 * s['goal_option_clicks']:.1f} %")
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": s, "episodes": episodes}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
