"""Where does a policy fail on the ALFWorld held-out panel? Failure categories, measured.

Plays the run config's held-out panel once per game with a model folder (a warm start
``<warm_start_cache>/<key>/policy`` or a run's ``checkpoints/latest/policy``) at a temperature, and
counts each failed episode by its *first refused action* (one the game did not admit):

- ``take-wrong``: ``take X from Y`` where ``Y`` does not hold ``X`` (or not that ``X``);
- ``goto-here``: ``go to Y`` while the agent already stands at ``Y``;
- ``goto-nonexistent``: ``go to Y`` for a receptacle this room does not have;
- ``open-bad``, ``move-bad``, ``other:<verb>``: other refused commands (``move`` puts an object);
- ``no-refusal``: every action was admitted, but the episode ran out of steps.

The episodes are played with the run's own settings (``env.max_steps``, ``env.stop_after_refusals``,
prompt, history, response length) and the evaluation's sampling seed, like ``g2po eval``.
``--out FILE`` writes every episode's transcript (state, response, action, admitted) as JSON.

Usage::

    python scripts/alfworld_failures.py MODEL_FOLDER [--temperature 0.4] [--out t.json] [key=value ...]

Raises:
    SystemExit: the model folder does not exist or the environment is not ALFWorld.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARRIVE = re.compile(r"You arrive at (.*?)\.")


def first_refusal(steps: list[dict]) -> str:
    """The category of an episode's first refused action (see the module docstring).

    Args:
        steps: the episode's steps in order, each ``{"state": observation text before the action,
            "action": str, "admitted": bool}``.
    """
    here = None
    for s in steps:
        m = ARRIVE.search(s["state"])
        if m:
            here = m.group(1)
        if s["admitted"]:
            continue
        a = s["action"]
        if a.startswith("go to "):
            return "goto-here" if a[len("go to "):] == here else "goto-nonexistent"
        verb = a.split()[0] if a.split() else "empty"
        return {"take": "take-wrong", "open": "open-bad", "move": "move-bad"}.get(verb, f"other:{verb}")
    return "no-refusal"


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="model folder (config.json, tokenizer, weights)")
    ap.add_argument("--temperature", type=float, default=0.4)
    ap.add_argument("--out", help="write the transcripts to this JSON file")
    ap.add_argument("overrides", nargs="*", metavar="key=value", help="run config overrides (the CPU default otherwise)")
    args = ap.parse_args(argv)
    if not Path(args.model, "config.json").is_file():
        sys.exit(f"{args.model}: not a model folder (no config.json); pass e.g. RUN/checkpoints/latest/policy")

    from g2po_bench.analysis.panel import play_panel
    from g2po_bench.runconfig import load_config

    cfg = load_config(overrides=args.overrides)
    if cfg.env.name != "alfworld":
        sys.exit(f"env.name={cfg.env.name}: the failure categories are ALFWorld's")
    played = play_panel(args.model, cfg, args.temperature)
    rb = played.rollouts
    episodes = []
    for t in rb.trajectories:
        steps = [{"state": rb.state_texts[i], "response": rb.responses[i], "action": rb.actions[i],
                  "admitted": rb.actions[i] in admissible(rb.state_texts[i])} for i in played.steps(t["traj_id"])]
        episodes.append({"task": t["task_id"], "type": t["task_type"], "success": bool(t["success"]), "steps": steps})
    counts = collections.Counter("success" if e["success"] else first_refusal(e["steps"]) for e in episodes)
    n = len(episodes)
    print(f"{args.model} at temperature {args.temperature:g}: {n} episodes")
    for k, v in counts.most_common():
        print(f"  {k:18s} {v:4d}  ({100 * v / n:.1f} %)")
    if args.out:
        Path(args.out).write_text(json.dumps(episodes, indent=1))
    return 0


def admissible(state: str) -> list[str]:
    """The admissible actions an ALFWorld state text lists (``Admissible actions: 'a', 'b', ...``).

    Raises:
        ValueError: the text lists none (a state key without them: use ``env.state_key=reference``).
    """
    if "Admissible actions:" not in state:
        raise ValueError("the state text lists no admissible actions; run with env.state_key=reference")
    return re.findall(r"'([^']*)'", state.split("Admissible actions:")[-1])


if __name__ == "__main__":
    sys.exit(main())
