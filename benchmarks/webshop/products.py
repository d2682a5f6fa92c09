"""WebShop products: the record type and the loaders for the cleaned and the raw files.

Two on-disk formats hold the same products (facts about the original WebShop, Yao et al. 2022):

- **Cleaned documents** (``documents.jsonl``, the search engine's input): one JSON object a
  line, ``{"id": ASIN, "contents": <search text>, "product": {...}}`` where ``product`` is
  already processed by the original loader (``Title``, ``Description``, ``BulletPoints``,
  ``Price`` (display tag), ``pricing`` (floats), ``options`` (lowercased), ``Attributes``,
  ``Rating``, ``Reviews``, ``category``, ``query``, ``product_category``, ``MainImage``,
  and ``instructions`` (human goals) where the product has some). This is what
  ``../shared/data/webshop/resources_1k/documents.jsonl`` holds.
- **Raw scraped files** that users download: ``items_shuffle_1000.json`` /
  ``items_shuffle.json`` (a JSON list of scraped products with ``name``,
  ``full_description``, ``small_description``, ``pricing`` as a string such as
  ``"$12.99 - $15.99"``, ``customization_options``, ``images`` ...), processed here the way
  the original loader does (see :func:`product_from_raw`).

Beside either file, the attribute file ``items_ins_v2_1000.json`` / ``items_ins_v2.json``
maps ASIN -> ``{"attributes": [...], "instruction": str, "instruction_attributes": [...]}``
(the synthetic goals), and ``items_human_ins.json`` maps ASIN -> a list of human
instructions (``instruction``, ``instruction_attributes``, ``instruction_options``).

Product order matters: goal order, and therefore the goal splits, follow it. Both loaders
keep file order and drop repeated ASINs (first one wins), as the original does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from g2po_bench.benchmarks.loading import warn_skipped
from g2po_bench.core.errors import DataError

__all__ = [
    "Product",
    "ProductDataError",
    "load_documents",
    "load_raw_products",
    "load_attribute_file",
    "load_human_instructions",
    "apply_attributes",
    "product_from_document",
    "product_from_raw",
    "search_text",
    "option_text",
    "parse_pricing",
]


class ProductDataError(DataError, ValueError):
    """A product or attribute file is missing, unreadable or not in a known format."""


@dataclass
class Product:
    """One product, in the processed form the environment and the reward use.

    Attributes:
        asin: Amazon id, upper case (e.g. ``"B08R3XSC65"``).
        title: the product title (``Title``; the original's ``name`` is the same text).
        description: ``Description`` (the scraped full description), may be ``""``.
        bullet_points: ``BulletPoints`` (the "Features" sub-page), possibly empty.
        price_tag: the displayed ``Price``: ``"$11.59"`` or ``"$16.82 to $35.0"``
            (Python float formatting, as the original).
        pricing: 1 or 2 floats in US dollars (a range has 2); ``[100.0]`` when unknown.
        options: option name (lowercase) -> values (lowercase, ``/`` replaced by ``" | "``),
            in file order.
        attributes: the product attributes used by the reward (``["DUMMY_ATTR"]`` when the
            attribute file has none).
        category: coarse category (``"beauty"``, ``"fashion"`` ...).
        query: the scraping query (lowercase), used by the type reward.
        product_category: the Amazon path, elements separated by ``" › "``.
        rating: ``Rating`` as displayed (``"N.A."`` in the public data).
        reviews: dicts with ``title``, ``score``, ``body``.
        main_image: URL of the first image (not shown in text modes).
        instruction: the synthetic instruction text of this product (attribute file), or None.
        instruction_attributes: the goal attributes of that instruction, or None.
        human_instructions: the human-written instructions (dicts) for this product.
    """

    asin: str
    title: str
    description: str = ""
    bullet_points: list[str] = field(default_factory=list)
    price_tag: str = "$100.0"
    pricing: list[float] = field(default_factory=lambda: [100.0])
    options: dict[str, list[str]] = field(default_factory=dict)
    attributes: list[str] = field(default_factory=lambda: ["DUMMY_ATTR"])
    category: str = ""
    query: str = ""
    product_category: str = ""
    rating: str = "N.A."
    reviews: list[dict[str, Any]] = field(default_factory=list)
    main_image: str = ""
    instruction: str | None = None
    instruction_attributes: list[str] | None = None
    human_instructions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The original's ``name`` field (identical to ``Title``)."""
        return self.title


# --------------------------------------------------------------------------- text helpers
def option_text(options: Mapping[str, list[str]]) -> str:
    """``"color: black, white, and size: s, m"``: the options part of the search text."""
    return ", and ".join(f"{name}: {', '.join(values)}" for name, values in options.items())


def search_text(product: Product) -> str:
    """The indexed text of a product: Title, Description, first bullet point and options,
    joined by spaces and lowercased (the original's ``contents`` field; byte-identical to
    the shared ``documents.jsonl``)."""
    first_bullet = product.bullet_points[0] if product.bullet_points else ""
    return " ".join([product.title, product.description, first_bullet, option_text(product.options)]).lower()


_NOT_PRICE_CHARS = re.compile(r"[^\d.]")


def parse_pricing(pricing: Any) -> tuple[list[float], str]:
    """Raw ``pricing`` string -> (prices, display tag).

    ``"$12.99"`` -> ``([12.99], "$12.99")``; ``"$2.99 - $6.99"`` -> ``([2.99, 6.99],
    "$2.99 to $6.99")`` (only the first two prices are kept); missing or empty ->
    ``([100.0], "$100.0")``. A part that holds no number is skipped (the original crashes).
    """
    if pricing is None or not pricing:
        return [100.0], "$100.0"
    if isinstance(pricing, (list, tuple)):  # already parsed (cleaned data)
        prices = [float(p) for p in pricing][:2] or [100.0]
    else:
        prices = []
        for part in str(pricing).split("$")[1:]:
            digits = _NOT_PRICE_CHARS.sub("", part)
            try:
                prices.append(float(Decimal(digits)))
            except InvalidOperation:
                continue
        if not prices:
            return [100.0], "$100.0"
    if len(prices) == 1:
        return prices, f"${prices[0]}"
    return prices[:2], f"${prices[0]} to ${prices[1]}"


def _normalise_option_value(value: str) -> str:
    return value.strip().replace("/", " | ").lower()


# --------------------------------------------------------------------------- records
def product_from_document(doc: Mapping[str, Any]) -> Product:
    """A product from one cleaned ``documents.jsonl`` record (``doc["product"]``).

    Raises:
        ProductDataError: the record lacks ``product`` or its ``asin``/``Title``.
    """
    p = doc.get("product") if isinstance(doc, Mapping) else None
    if not isinstance(p, Mapping) or "asin" not in p:
        raise ProductDataError("document record without a 'product' object holding an 'asin'")
    title = p.get("Title", p.get("name"))
    if title is None:
        raise ProductDataError(f"product {p['asin']} has no Title")
    pricing, tag = parse_pricing(p.get("pricing"))
    return Product(
        asin=str(p["asin"]),
        title=str(title),
        description=str(p.get("Description", p.get("full_description", "")) or ""),
        bullet_points=[str(b) for b in (p.get("BulletPoints") or [])],
        price_tag=str(p.get("Price") or tag),
        pricing=pricing,
        options={str(k): [str(v) for v in vals] for k, vals in (p.get("options") or {}).items()},
        attributes=[str(a) for a in (p.get("Attributes") or ["DUMMY_ATTR"])],
        category=str(p.get("category", "")),
        query=str(p.get("query", "")).lower().strip(),
        product_category=str(p.get("product_category", "")),
        rating=str(p.get("Rating", "N.A.")),
        reviews=list(p.get("Reviews") or []),
        main_image=str(p.get("MainImage", "")),
        human_instructions=list(p.get("instructions") or []),
    )


def product_from_raw(p: Mapping[str, Any]) -> Product | None:
    """A product from one raw scraped record (``items_shuffle*.json``), processed like the
    original loader: Title = ``name``, Description = ``full_description``, BulletPoints =
    ``small_description`` (a string becomes a one-item list), prices parsed from the
    ``pricing`` string, option names lowercased, option values stripped, ``/`` replaced by
    ``" | "`` and lowercased, ``query`` lowercased and stripped, Rating ``"N.A."`` and no
    reviews (the review file is not distributed).

    Returns:
        None for a record the original skips (ASIN ``"nan"`` or longer than 10 characters).
    """
    asin = str(p.get("asin", "nan"))
    if asin == "nan" or len(asin) > 10:
        return None
    small = p.get("small_description")
    if small is None:
        bullets: list[str] = []
    elif isinstance(small, list):
        bullets = [str(b) for b in small]
    else:
        bullets = [str(small)]
    pricing, tag = parse_pricing(p.get("pricing"))
    options: dict[str, list[str]] = {}
    for name, contents in (p.get("customization_options") or {}).items():
        if contents is None:
            continue
        options[str(name).lower()] = [_normalise_option_value(str(c.get("value", ""))) for c in contents]
    images = p.get("images") or [""]
    return Product(
        asin=asin,
        title=str(p.get("name", "")),
        description=str(p.get("full_description", "") or ""),
        bullet_points=bullets,
        price_tag=tag,
        pricing=pricing,
        options=options,
        category=str(p.get("category", "")),
        query=str(p.get("query", "")).lower().strip(),
        product_category=str(p.get("product_category", "")),
        main_image=str(images[0] if images else ""),
    )


# --------------------------------------------------------------------------- files
def _dedup(records: Iterable[tuple[str, Product | None]], where: str) -> list[Product]:
    """Products in order without repeated ASINs; every record dropped (no usable ASIN, or an
    ASIN seen before) is named in one DataLoadWarning."""
    seen: set[str] = set()
    out = []
    skipped: list[tuple[str, str]] = []
    for name, p in records:
        if p is None:
            skipped.append((name, "ASIN missing, 'nan' or longer than 10 characters (the original loader skips it)"))
            continue
        if p.asin in seen:
            skipped.append((name, f"ASIN {p.asin} repeats an earlier product's"))
            continue
        seen.add(p.asin)
        out.append(p)
    warn_skipped("WebShop products", where, skipped)
    return out


def _load_json(path: Path, what: str, container: type, expected: str) -> Any:
    """The JSON document of ``path``, which must be a ``container`` (list or dict).

    Raises:
        ProductDataError: missing file (named as ``what``), invalid JSON, or another container
            (the message says it expected ``expected``).
    """
    if not path.is_file():
        raise ProductDataError(f"{what} {str(path)!r} does not exist")
    try:
        with path.open(encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as exc:
        raise ProductDataError(f"{path}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, container):
        raise ProductDataError(f"{path}: expected {expected}")
    return data


def _iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ProductDataError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None


def load_documents(path: str | Path) -> tuple[list[Product], list[str]]:
    """Load a cleaned ``documents.jsonl``.

    Returns:
        (products in file order without repeated ASINs, their ``contents`` search texts); a
        document dropped for a repeated ASIN is named in a
        :class:`g2po_bench.benchmarks.loading.DataLoadWarning`.

    Raises:
        ProductDataError: missing file or malformed line.
    """
    path = Path(path)
    if not path.is_file():
        raise ProductDataError(f"product documents {str(path)!r} do not exist")
    docs = list(_iter_jsonl(path))
    parsed = [(f"document {i + 1}", product_from_document(doc)) for i, doc in enumerate(docs)]
    products = _dedup(parsed, str(path))
    kept = {id(p) for p in products}
    texts = []
    for (_, product), doc in zip(parsed, docs):
        if id(product) in kept:
            contents = doc.get("contents")
            texts.append(str(contents) if contents is not None else search_text(product))
    return products, texts


def load_raw_products(path: str | Path, num_products: int | None = None) -> list[Product]:
    """Load a raw ``items_shuffle*.json`` (a JSON list), first ``num_products`` records only
    when given (the original's ``num_products``; the file is pre-shuffled). Records dropped
    (no usable ASIN, a repeated ASIN) are named in a :class:`g2po_bench.benchmarks.loading.DataLoadWarning`.

    Raises:
        ProductDataError: missing file, invalid JSON, or not a list.
    """
    path = Path(path)
    records = _load_json(path, "raw product file", list, "a JSON list of products")
    if num_products is not None:
        records = records[:num_products]
    return _dedup(((f"record {i + 1}", product_from_raw(r)) for i, r in enumerate(records)), str(path))


def load_attribute_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """Load ``items_ins_v2*.json`` (ASIN -> attributes and synthetic instruction).

    Raises:
        ProductDataError: missing file, invalid JSON or not a mapping.
    """
    return _load_json(Path(path), "attribute file", dict, "a JSON object keyed by ASIN")


def load_human_instructions(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Load ``items_human_ins.json`` (ASIN -> list of human instructions).

    Raises:
        ProductDataError: missing file, invalid JSON or not a mapping.
    """
    return load_attribute_file(path)  # same container shape: a JSON object keyed by ASIN


def apply_attributes(
    products: list[Product],
    attributes: Mapping[str, Mapping[str, Any]] | None,
    human: Mapping[str, list[dict[str, Any]]] | None = None,
) -> None:
    """Fill ``attributes``, ``instruction``, ``instruction_attributes`` (and the human
    instructions when ``human`` is given) from the attribute files, in place.

    A product missing from the attribute file keeps the attributes it has (cleaned data) or
    ``["DUMMY_ATTR"]`` (raw data) and gets no synthetic instruction.
    """
    for p in products:
        entry = attributes.get(p.asin) if attributes else None
        if entry:
            if "attributes" in entry:
                p.attributes = list(entry["attributes"])
            p.instruction = entry.get("instruction")
            ia = entry.get("instruction_attributes")
            p.instruction_attributes = list(ia) if ia is not None else None
        if human is not None and p.asin in human:
            p.human_instructions = list(human[p.asin])
