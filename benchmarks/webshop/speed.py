"""WebShop speed and search-fidelity figures: ``python -m g2po_bench.benchmarks.webshop.speed``.

Prints: catalogue load time; index build time (cold, no disk cache) and load time (from
the disk cache); search latency over goal instructions (mean, median, 95th percentile);
environment steps per second (the scripted expert played through the environment, in
``text`` and ``text_rich`` modes); top-1 (and top-10 set) agreement of the bm25s search
with the brute-force Lucene BM25 of :class:`~g2po_bench.benchmarks.webshop.search.BruteForceBM25` on
100 goal instructions; the expert's success on one goal per goal product.

Options: ``--data-dir DIR`` (default: ``$G2PO_SHARED_DATA/webshop`` or
``../shared/data/webshop`` when present, else the synthetic catalogue), ``--synthetic``
(the synthetic default catalogue), ``--queries N``
(default 100), ``--episodes N`` (expert episodes for steps/s, default 300).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from g2po_bench.benchmarks.webshop.catalog import Catalog, resolve_source
from g2po_bench.benchmarks.webshop.env import WebShopEnv
from g2po_bench.benchmarks.webshop.expert import play_expert
from g2po_bench.benchmarks.webshop.search import BruteForceBM25, SearchEngine
from g2po_bench.benchmarks.webshop.tasks import source_for, task_for_goal
from g2po_bench.core.arguments import ArgumentParser
from g2po_bench.core.config import EnvConfig

__all__ = ["main", "default_data_dir"]


def default_data_dir() -> str | None:
    """``$G2PO_SHARED_DATA/webshop`` or ``<repo>/../shared/data/webshop`` if it exists, else None."""
    root = os.environ.get("G2PO_SHARED_DATA")
    candidates = [Path(root) / "webshop"] if root else []
    candidates.append(Path(__file__).resolve().parents[3] / "shared" / "data" / "webshop")
    for c in candidates:
        if c.is_dir():
            return str(c)
    return None


def _queries(cat: Catalog, n: int) -> list[str]:
    seen, out = set(), []
    for g in cat.goals:
        if g.instruction_text not in seen:
            seen.add(g.instruction_text)
            out.append(g.instruction_text)
        if len(out) == n:
            break
    for p in cat.products:  # catalogues without goals: product titles
        if len(out) >= n:
            break
        out.append(p.title)
    return out


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run the benchmark; ``argv`` None means no options (the ``g2po bench webshop`` call, which
    passes ``prog`` for its usage line)."""
    ap = ArgumentParser(prog=prog or "python -m g2po_bench.benchmarks.webshop.speed",
                        description="WebShop speed and search-fidelity figures: catalogue load, index "
                        "build and load, search latency, environment steps per second, agreement of "
                        "the bm25s search with brute-force BM25, the scripted expert's success.")
    ap.add_argument("--data-dir", default=None, metavar="DIR",
                    help="WebShop data folder (default: $G2PO_SHARED_DATA/webshop or ../shared/data/webshop "
                    "when present, else the synthetic catalogue)")
    ap.add_argument("--synthetic", action="store_true", help="use the synthetic default catalogue")
    ap.add_argument("--queries", type=int, default=100, help="goal instructions for the search figures (default 100)")
    ap.add_argument("--episodes", type=int, default=300, help="expert episodes for steps per second (default 300)")
    args = ap.parse_args([] if argv is None else argv)
    data_dir = None if args.synthetic else (args.data_dir or default_data_dir())
    with tempfile.TemporaryDirectory() as tmp:
        if data_dir is None:

            source = source_for(EnvConfig(name="webshop", cache_dir=tmp))
        else:
            source = resolve_source(data_dir)
        print(f"data: {source.products}")
        t0 = time.perf_counter()
        cat = Catalog(source, cache_root=tmp)
        print(f"catalogue: {len(cat.products)} products, {len(cat.goals)} goals, "
              f"loaded in {time.perf_counter() - t0:.3f} s")

        ids = [p.asin for p in cat.products]
        import bm25s  # noqa: F401 - import time is not index build time
        cold = SearchEngine(ids, cat.texts, cache_dir=Path(tmp) / "index")
        warm = SearchEngine(ids, cat.texts, cache_dir=Path(tmp) / "index")
        assert warm.loaded_from_disk
        print(f"index build (cold): {cold.build_seconds:.3f} s; load from disk cache: {warm.build_seconds:.3f} s")

        queries = _queries(cat, args.queries)
        lat = []
        results = []
        for q in queries:
            t = time.perf_counter()
            results.append(cold.search(q))
            lat.append((time.perf_counter() - t) * 1000)
        lat_sorted = sorted(lat)
        p95 = lat_sorted[min(len(lat_sorted) - 1, int(0.95 * len(lat_sorted)))]
        print(f"search latency over {len(queries)} queries: mean {statistics.mean(lat):.3f} ms, "
              f"median {statistics.median(lat):.3f} ms, p95 {p95:.3f} ms")

        brute = BruteForceBM25(cat.texts)
        top1 = top10 = 0
        for q, hits in zip(queries, results):
            ref = brute.search(q)
            top1 += bool(hits[:1] == ref[:1])
            top10 += bool(set(hits[:10]) == set(ref[:10]))
        n = max(len(queries), 1)
        print(f"agreement with brute-force BM25 on {len(queries)} goal instructions: "
              f"top-1 {top1}/{len(queries)} ({100 * top1 / n:.1f} %), top-10 set {top10}/{len(queries)} "
              f"({100 * top10 / n:.1f} %)")

        cat._search = cold  # reuse the engine built above
        first = {}
        for g in cat.goals:
            first.setdefault(g.asin, g)
        tasks = [task_for_goal(g, source) for g in first.values()]
        plans = [play_expert(WebShopEnv(catalog=cat), t).actions for t in tasks[: args.episodes]]
        for mode in ("text", "text_rich"):
            env = WebShopEnv(catalog=cat, observation_mode=mode)
            steps, t = 0, time.perf_counter()
            for task, plan in zip(tasks, plans):
                env.reset(task)
                for action in plan:
                    env.step(action)
                steps += len(plan) + 1  # + the reset
            dt = time.perf_counter() - t
            print(f"env ({mode}): {steps / dt:.0f} steps/s, resets included ({len(plans)} expert "
                  f"episodes replayed, {steps} steps, one search each)")
        env = WebShopEnv(catalog=cat)
        won = sum(play_expert(env, task).won for task in tasks)
        print(f"expert: reward 1.0 on {won}/{len(tasks)} goals (one per goal product)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
