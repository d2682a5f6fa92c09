"""A WebShop catalogue: where the data is, and the products, prices, goals and search engine
built from it once per process.

Data sources (:func:`resolve_source`), ``env.data_dir`` being:

- ``None``: the synthetic catalogue (:mod:`g2po_bench.benchmarks.webshop.synthetic`), generated on
  first use under ``<env.cache_dir>/webshop_generated`` (by default
  ``results/cache/webshop_generated``).
- a folder; the first of these layouts that exists is used:
  1. ``resources_1k/documents.jsonl`` (the shared cleaned 1k products),
  2. ``documents.jsonl``,
  3. ``items_shuffle_1000.json`` (raw, small setting; what verl-agent/G2PO use),
  4. ``items_shuffle.json`` (raw, full setting),
  5. ``resources/documents.jsonl``, 6. ``resources_100/documents.jsonl``;
  the attribute file is searched in the folder of the product file and the folders above it
  (up to ``data_dir``, and at least the product folder's parent): ``items_ins_v2_1000.json`` then ``items_ins_v2.json`` for 1k/100
  products, the reverse for the full setting; ``items_human_ins.json`` likewise (optional).
- a file: a ``documents.jsonl``/``*.jsonl`` or an ``items_shuffle*.json``, attribute files
  searched the same way from its folder.

Nothing is downloaded here; a missing file raises :class:`ProductDataError` naming
``g2po data download webshop``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from g2po_bench.benchmarks.loading import require_at_least
from g2po_bench.benchmarks.webshop.goals import (
    ORIGINAL_SPLITS,
    SPLIT_ALIASES,
    Goal,
    build_goals,
    split_range,
)
from g2po_bench.benchmarks.webshop.products import (
    Product,
    ProductDataError,
    apply_attributes,
    load_attribute_file,
    load_documents,
    load_human_instructions,
    load_raw_products,
    search_text,
)
from g2po_bench.benchmarks.webshop.search import SearchEngine, get_search_engine
from g2po_bench.benchmarks.webshop.synthetic import ensure_generated

__all__ = ["DataSource", "Catalog", "resolve_source", "get_catalog", "default_cache_root"]

_LAYOUTS = (
    "resources_1k/documents.jsonl",
    "documents.jsonl",
    "items_shuffle_1000.json",
    "items_shuffle.json",
    "resources/documents.jsonl",
    "resources_100/documents.jsonl",
)
_HINT = ("download the WebShop data with `g2po data download webshop` (or see "
         "benchmarks/webshop/download.py for the files) and set env.data_dir to its folder")


@dataclass(frozen=True)
class DataSource:
    """Resolved data files of a catalogue (all paths absolute).

    Attributes:
        products: the product file (``.jsonl`` cleaned documents or raw ``.json``).
        attributes: the ``items_ins_v2*.json`` file, or None (then there are no synthetic goals).
        human: the ``items_human_ins.json`` file, or None.
        generated: whether this is the synthetic catalogue (its ``meta.json`` gives the splits).
    """

    products: str
    attributes: str | None = None
    human: str | None = None
    generated: bool = False

    @property
    def key(self) -> str:
        """Identity of the source inside one machine (the in-process cache key)."""
        return f"{self.products}|{self.attributes}|{self.human}"

    def to_dict(self) -> dict[str, Any]:
        return {"products": self.products, "attributes": self.attributes, "human": self.human,
                "generated": self.generated}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DataSource:
        return cls(d["products"], d.get("attributes"), d.get("human"), bool(d.get("generated", False)))


def default_cache_root(cache_dir: str | Path | None = None) -> Path:
    """The cache root: ``env.cache_dir`` (``results/cache`` by default), relative paths being
    relative to the working directory."""
    return Path("results/cache") if cache_dir is None else Path(cache_dir)


def _find_upwards(start: Path, stop: Path, names: tuple[str, ...]) -> Path | None:
    folder = start
    while True:
        for n in names:
            if (folder / n).is_file():
                return (folder / n).resolve()
        if folder == stop or folder.parent == folder or stop not in folder.parents:
            return None
        folder = folder.parent


def resolve_source(
    data_dir: str | Path | None,
    *,
    cache_root: str | Path | None = None,
    seed: int = 0,
    n_eval: int = 120,
    n_train: int = 1200,
) -> DataSource:
    """Resolve ``env.data_dir`` to the data files (module docstring); for ``None`` the
    synthetic catalogue is generated if missing (cheap, deterministic, atomic writes).

    Raises:
        ProductDataError: no known product file, with what was looked for.
    """
    if data_dir is None:

        folder = ensure_generated(default_cache_root(cache_root) / "webshop_generated", seed=seed,
                                  n_eval=n_eval, n_train=n_train).resolve()
        return DataSource(str(folder / "documents.jsonl"), str(folder / "items_ins_v2.json"), None, True)
    root = Path(data_dir).expanduser().resolve()
    if root.is_file():
        product_file = root
        root = root.parent
    elif root.is_dir():
        product_file = next((root / n for n in _LAYOUTS if (root / n).is_file()), None)
        if product_file is None:
            raise ProductDataError(
                f"no WebShop product file in {str(root)!r} (looked for {', '.join(_LAYOUTS)}); {_HINT}")
        product_file = product_file.resolve()
    else:
        raise ProductDataError(f"WebShop data_dir {str(root)!r} does not exist; {_HINT}")
    full = product_file.name == "items_shuffle.json" or product_file.parent.name == "resources"
    if root == product_file.parent:  # look at least one folder above the product file
        root = root.parent
    names = ("items_ins_v2.json", "items_ins_v2_1000.json") if full else ("items_ins_v2_1000.json", "items_ins_v2.json")
    attributes = _find_upwards(product_file.parent, root, names)
    human = _find_upwards(product_file.parent, root, ("items_human_ins.json",))
    generated = (product_file.parent / "meta.json").is_file() and product_file.name == "documents.jsonl"
    return DataSource(str(product_file), str(attributes) if attributes else None,
                      str(human) if human else None, generated)


class Catalog:
    """Products, purchase prices, goals and the search engine of one data source.

    Build it with :func:`get_catalog` (one per source and process). Products and goals load
    at construction; the search index on first use of :attr:`search`.

    Attributes:
        source: the data files.
        products: catalogue order (the search engine's document order).
        by_asin: ASIN -> product.
        texts: the search texts, same order.
        prices: ASIN -> purchase price in dollars.
        goals: the shuffled synthetic goals (``goal.index`` = position).
        split_bounds: split name -> [start, stop) over the goals.
    """

    def __init__(self, source: DataSource, *, cache_root: str | Path | None = None) -> None:
        self.source = source
        self.cache_root = Path(cache_root) if cache_root is not None else default_cache_root()
        path = Path(source.products)
        if path.suffix == ".jsonl":
            self.products, self.texts = load_documents(path)
        else:
            self.products = load_raw_products(path)
            self.texts = [search_text(p) for p in self.products]
        attrs = load_attribute_file(source.attributes) if source.attributes else None
        human = load_human_instructions(source.human) if source.human else None
        apply_attributes(self.products, attrs, human)
        self.by_asin: dict[str, Product] = {p.asin: p for p in self.products}
        self.index_of: dict[str, int] = {p.asin: i for i, p in enumerate(self.products)}
        self.goals, self.prices = build_goals(self.products, human=False)
        self._human_goals: list[Goal] | None = None
        self.split_bounds: dict[str, tuple[int, int | None]] = dict(ORIGINAL_SPLITS)
        if source.generated:
            meta = json.loads((path.parent / "meta.json").read_text())
            self.split_bounds = {k: (int(v[0]), None if v[1] is None else int(v[1]))
                                 for k, v in meta["splits"].items()}
        self._search: SearchEngine | None = None
        self._lock = threading.Lock()

    @property
    def human_goals(self) -> list[Goal]:
        """The shuffled human goals (empty when no human instructions are available)."""
        if self._human_goals is None:
            self._human_goals, _ = build_goals(self.products, human=True)
        return self._human_goals

    @property
    def search(self) -> SearchEngine:
        """The BM25 engine (built or loaded from ``<cache_root>/webshop_index`` on first use)."""
        with self._lock:
            if self._search is None:
                self._search = get_search_engine([p.asin for p in self.products], self.texts,
                                                 cache_dir=self.cache_root / "webshop_index")
            return self._search

    def goals_for(self, split: str) -> list[Goal]:
        """The goals of a split (``human_`` prefix: human goals), in index order.

        Raises:
            ValueError: unknown split name.
            g2po_bench.benchmarks.loading.SplitTooSmallError: the split is cut short or emptied because the
                catalogue has fewer goals than the split's bounds (e.g. ``eval`` = goals
                500..1500 on a 100-product catalogue), never a silently smaller split.
        """
        goals = self.human_goals if split.startswith("human_") else self.goals
        start, stop = split_range(split, len(goals), self.split_bounds)
        name = split.removeprefix("human_")
        lo, hi = self.split_bounds.get(SPLIT_ALIASES.get(name, name), (start, None))
        expected = (hi - lo) if hi is not None else 1  # an open-ended split needs at least one goal
        kind = "human" if split.startswith("human_") else "synthetic"
        require_at_least(stop - start, expected,
                         f"WebShop split {split!r} (goals {lo}..{'end' if hi is None else hi}) of "
                         f"{self.source.products} with {len(goals)} {kind} goals",
                         "use a larger catalogue (e.g. resources_1k/documents.jsonl with items_ins_v2_1000.json), "
                         "another split, or split=all")
        return goals[start:stop]


_CATALOGS: dict[str, Catalog] = {}
_CAT_LOCK = threading.Lock()


def get_catalog(source: DataSource, *, cache_root: str | Path | None = None) -> Catalog:
    """The process-wide catalogue of ``source`` (loaded once per process).

    Raises:
        ProductDataError: a data file is missing or malformed (message names the fix).
    """
    with _CAT_LOCK:
        cat = _CATALOGS.get(source.key)
        if cat is None:
            try:
                cat = Catalog(source, cache_root=cache_root)
            except ProductDataError as exc:
                raise ProductDataError(f"{exc}; {_HINT}") from None
            _CATALOGS[source.key] = cat
        return cat
