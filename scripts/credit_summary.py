"""Several credit studies side by side: each estimator's correlation with the Monte-Carlo A*.

Reads every ``credit.json`` (written by ``g2po credit``) under the given folders and prints one
Markdown table: a row per estimator (the main rows of the studies, then the oracle and the
Monte-Carlo ceiling), a column per study; each cell is the mean within-group Spearman correlation
with A* and its 95 % bootstrap CI over task groups, then the paired difference to GRPO on the same
groups with its CI (:func:`g2po_bench.analysis.credit.report.studies_table`). Below it, one line
per study: policy, step limit, rows, success rate and where it was made. No computation beyond
reading the records, so the figures are exactly those of each study's ``report.md``.

Usage::

    python scripts/credit_summary.py results/credit
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Print the table (module docstring); returns 0, or 2 when no study is found."""
    from g2po_bench.analysis.credit.record import find_records, read_record
    from g2po_bench.analysis.credit.report import studies_table

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", type=Path, nargs="+", help="folders searched for credit.json (recursively)")
    p.add_argument("--baseline", default="grpo", help="the row paired differences are taken against (default grpo)")
    args = p.parse_args(argv)
    records = []
    for root in args.folders:
        for path in find_records(root):
            records.append((os.path.relpath(path.parent, root), read_record(path)))
    if not records:
        print(f"no credit.json under {', '.join(map(str, args.folders))}; write one with g2po credit")
        return 2
    print(studies_table(records, baseline=args.baseline))
    for name, rec in records:
        s, summ, code, m = rec["settings"], rec["summary"], rec.get("code") or {}, rec.get("machine") or {}
        print(f"- `{name}`: policy {rec['policy'].get('kind')} `{rec['policy'].get('path', '')}`, step limit "
              f"{rec['config']['env']['max_steps']}, {s['groups']} groups x {s['group_size']}, K = {s['continuations']}; "
              f"{summ['rows']} step rows, success {100 * summ['success_rate']:.1f} %, {summ['decisive_rows']} decisive; "
              f"commit {(code.get('commit') or 'not recorded')[:10]}, {m.get('cpu')} {m.get('cpu_capability')} "
              f"{m.get('cpus')} CPUs, {rec.get('created')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
