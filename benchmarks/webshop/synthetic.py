"""A small deterministic synthetic WebShop catalogue: the embedded default (``env.data_dir`` None).

It lets the whole pipeline (search, pages, reward, expert, training) run offline and fast
on a CPU with short observations. It is *not* WebShop's data: invented brands, titles and
attribute phrases over a few product types, in the same file formats as the real
1,000-product setting, so it goes through the same loaders:

- ``documents.jsonl``: cleaned product documents (``{"id", "contents", "product"}``);
- ``items_ins_v2.json``: ASIN -> ``attributes``, and for about 60 % of the products a
  synthetic ``instruction`` with its ``instruction_attributes`` (phrased like the real ones:
  "Find me ... with ...", "i am looking for ...");
- ``meta.json``: generator version, seed, sizes and the split table
  (test = first ``n_eval`` shuffled goals, eval = next ``n_eval``, train = next ``n_train``,
  trainval = everything after test, all).

Goals are then built exactly as for real data (option combinations, seeded price bounds,
the seed-233 shuffle). Everything depends only on (``seed``, ``n_products``, sizes).
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path
from typing import Any

from g2po_bench.benchmarks.webshop.products import Product, search_text

__all__ = ["GENERATOR_VERSION", "generate_catalogue", "write_catalogue", "ensure_generated"]

GENERATOR_VERSION = 1

# (category, product_category path, query, title noun, attribute pool, option specs, price range)
_TYPES: list[tuple[str, str, str, str, list[str], dict[str, list[str]], tuple[float, float]]] = [
    ("beauty", "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos", "shampoo",
     "Shampoo", ["sulfate free", "paraben free", "natural ingredients", "dry hair", "hair growth",
                 "tea tree"], {"size": ["8 fl oz", "16 fl oz", "32 fl oz"],
                               "scent": ["lavender", "coconut", "unscented"]}, (6, 40)),
    ("beauty", "Beauty & Personal Care › Skin Care › Lip Care › Balms & Moisturizers", "lip balm",
     "Lip Balm", ["long lasting", "cruelty free", "shea butter", "dry lips", "travel size"],
     {"flavor name": ["mint", "cherry", "vanilla"]}, (3, 15)),
    ("fashion", "Clothing, Shoes & Jewelry › Women › Shoes › Fashion Sneakers", "women's sneakers",
     "Sneakers", ["non slip", "rubber sole", "memory foam", "lace up", "arch support"],
     {"color": ["black", "white", "navy blue"], "size": ["6", "7", "8", "9"]}, (25, 90)),
    ("fashion", "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts", "men's t-shirts",
     "T-Shirt", ["cotton blend", "machine wash", "short sleeve", "classic fit", "moisture wicking"],
     {"color": ["grey", "red", "olive green"], "size": ["small", "medium", "large", "x-large"]}, (8, 30)),
    ("electronics", "Electronics › Headphones, Earbuds & Accessories › Earbud Headphones",
     "wireless earbuds", "Earbuds", ["noise cancelling", "long battery life", "water resistant",
                                     "fast charging", "hands free"], {"color": ["black", "white"]},
     (15, 120)),
    ("electronics", "Electronics › Computers & Accessories › Tablet Accessories › Cases", "tablet case",
     "Tablet Case", ["shock absorbing", "auto sleep", "easy install", "lightweight design"],
     {"color": ["pink", "blue", "black"]}, (9, 35)),
    ("grocery", "Grocery & Gourmet Food › Snack Foods › Bars › Protein Bars", "protein bars",
     "Protein Bars", ["gluten free", "low sugar", "high protein", "non gmo", "keto friendly"],
     {"flavor name": ["chocolate", "peanut butter", "vanilla almond"],
      "size": ["12 count", "24 count"]}, (12, 45)),
    ("grocery", "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Tea", "green tea",
     "Green Tea", ["caffeine free", "usda organic", "individually wrapped", "non gmo"],
     {"size": ["20 count", "100 count"]}, (4, 25)),
    ("garden", "Home & Kitchen › Furniture › Living Room Furniture › Tables › Coffee Tables",
     "coffee tables", "Coffee Table", ["solid wood", "easy assemble", "storage space",
                                       "mid century", "living room"],
     {"color": ["walnut", "white", "espresso"]}, (60, 400)),
    ("garden", "Home & Kitchen › Bath › Towels › Bath Towels", "bath towels", "Bath Towels",
     ["quick drying", "highly absorbent", "machine washable", "ultra soft"],
     {"color": ["grey", "aqua", "ivory"], "size": ["2 pack", "4 pack"]}, (15, 60)),
]
_BRANDS = ("Alvora Brenwick Caldera Dunmore Elmsgrove Fenwick Galloway Harrowgate Ivorne Juniper "
           "Kestrel Larkspur Merrow Norland Oakhurst Pellham Quillon Rosbury Stellan Thornbury").split()
_STYLES = ("Classic Everyday Premium Essential Signature Original Deluxe Simple").split()
_TEMPLATES = (
    "Find me {attrs} {query}",
    "i am looking for {query} that is {attrs}",
    "i need {attrs} {query}",
    "Find me {query} with {attrs}",
)


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def generate_catalogue(
    seed: int = 0, n_products: int = 160
) -> tuple[list[Product], dict[str, dict[str, Any]]]:
    """Generate the products and the attribute file contents.

    Returns:
        (products in catalogue order, ASIN -> attribute entry as in ``items_ins_v2.json``).
    """
    rng = random.Random(f"webshop-synthetic-{GENERATOR_VERSION}-{seed}")
    products: list[Product] = []
    attrs_file: dict[str, dict[str, Any]] = {}
    used: set[str] = set()
    for i in range(n_products):
        category, path, query, noun, pool, option_specs, (lo, hi) = _TYPES[i % len(_TYPES)]
        while True:
            asin = "B0" + "".join(rng.choice("0123456789ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(8))
            if asin not in used:
                used.add(asin)
                break
        attributes = rng.sample(pool, rng.randint(2, 3))
        brand, style = rng.choice(_BRANDS), rng.choice(_STYLES)
        title = f"{brand} {style} {noun} - {attributes[0].title()}"
        if rng.random() < 0.5:
            title += f", {attributes[1].title()}"
        options: dict[str, list[str]] = {}
        for name, values in option_specs.items():
            if rng.random() < 0.7:
                k = rng.randint(2, len(values))
                options[name] = sorted(rng.sample(values, k), key=values.index)
        price = round(rng.uniform(lo, hi), 2)
        pricing = [price] if rng.random() < 0.85 else [price, round(price * rng.uniform(1.1, 1.6), 2)]
        tag = f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"
        description = (f"The {brand} {noun.lower()} is {attributes[0]} and {attributes[-1]}. "
                       f"Made for everyday use.")
        bullets = [f"{a.capitalize()}: designed with care." for a in attributes]
        reviews = []
        if rng.random() < 0.3:
            reviews.append({"title": "Works as described", "score": rng.randint(3, 5),
                            "body": f"Good {noun.lower()}, {attributes[0]} as promised."})
        product = Product(
            asin=asin, title=title, description=description, bullet_points=bullets,
            price_tag=tag, pricing=pricing, options=options, attributes=list(attributes),
            category=category, query=query, product_category=path, rating="N.A.",
            reviews=reviews, main_image="",
        )
        entry: dict[str, Any] = {"attributes": list(attributes)}
        if rng.random() < 0.6:
            goal_attrs = rng.sample(attributes, rng.randint(1, min(2, len(attributes))))
            template = rng.choice(_TEMPLATES)
            entry["instruction"] = template.format(attrs=_join(goal_attrs), query=query)
            entry["instruction_attributes"] = goal_attrs
            product.instruction = entry["instruction"]
            product.instruction_attributes = goal_attrs
        attrs_file[asin] = entry
        products.append(product)
    return products, attrs_file


def _document(p: Product) -> dict[str, Any]:
    return {
        "id": p.asin,
        "contents": search_text(p),
        "product": {
            "asin": p.asin, "name": p.title, "Title": p.title, "full_description": p.description,
            "Description": p.description, "small_description": p.bullet_points,
            "BulletPoints": p.bullet_points, "pricing": p.pricing, "Price": p.price_tag,
            "options": p.options, "option_to_image": {v: None for vs in p.options.values() for v in vs},
            "Attributes": p.attributes, "category": p.category, "query": p.query,
            "product_category": p.product_category, "Rating": p.rating, "Reviews": p.reviews,
            "MainImage": p.main_image, "images": [p.main_image],
        },
    }


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_catalogue(
    folder: str | Path, *, seed: int = 0, n_products: int = 160, n_eval: int = 24, n_train: int = 48
) -> Path:
    """Generate and write the catalogue files into ``folder`` (atomically, file by file).

    Returns:
        the folder.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    products, attrs = generate_catalogue(seed, n_products)
    _atomic_write(folder / "documents.jsonl", "".join(json.dumps(_document(p)) + "\n" for p in products))
    _atomic_write(folder / "items_ins_v2.json", json.dumps(attrs, indent=0))
    meta = {
        "generator_version": GENERATOR_VERSION, "seed": seed, "n_products": n_products,
        "splits": {"test": [0, n_eval], "eval": [n_eval, 2 * n_eval],
                   "train": [2 * n_eval, 2 * n_eval + n_train], "trainval": [n_eval, None],
                   "all": [0, None]},
    }
    _atomic_write(folder / "meta.json", json.dumps(meta, indent=1))  # written last: marks completion
    return folder


def ensure_generated(
    root: str | Path, *, seed: int = 0, n_eval: int = 24, n_train: int = 48
) -> Path:
    """The folder of the synthetic catalogue for these settings under ``root``, generating it
    when missing. The product count grows with the requested splits (at least 160, about
    1.3 goals per product on average), so that every split is filled.

    Returns:
        ``<root>/v{version}-s{seed}-e{n_eval}-t{n_train}``.
    """
    n_products = max(160, int((2 * n_eval + n_train) / 1.3) + 40)
    folder = Path(root) / f"v{GENERATOR_VERSION}-s{seed}-e{n_eval}-t{n_train}"
    meta = folder / "meta.json"
    if meta.is_file():
        try:
            m = json.loads(meta.read_text())
            if m.get("generator_version") == GENERATOR_VERSION and m.get("n_products") == n_products:
                return folder
        except (OSError, json.JSONDecodeError):
            pass
    return write_catalogue(folder, seed=seed, n_products=n_products, n_eval=n_eval, n_train=n_train)
