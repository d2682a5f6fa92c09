"""The WebShop pages as the text environment shows them.

The original renders HTML templates and converts them to text with BeautifulSoup. What
that produces is reproduced here without HTML: a page is the ordered list of its visible
text nodes, each tagged with what holds it (plain text, a button, an option label, a
product link), plus what can be clicked. Facts about the conversion:

- BeautifulSoup collapses a whitespace-only string to ``"\\n"`` when it contains a newline,
  else to ``" "``; empty strings give no node. ``text`` mode drops the ``"\\n"`` nodes and
  joins the others, each stripped, with ``" [SEP] "`` (so a lone-space node gives an empty
  part).
- ``text_rich`` mode writes every node followed by a newline: ``[button] X [button_]``
  for button text; for option labels ``  [clicked button] X [clicked button_]`` when
  ``'"X"'`` occurs in the page URL (the item page URL ends with the chosen options as
  ``json.dumps``), and then ``You have clicked X.`` plus a newline is put *in front of* the
  whole observation so far, else ``  [button] X [button_]``; for product links
  ``\\n[clicked button] X [clicked button_]`` when the ASIN was opened earlier in the episode,
  else ``\\n[button] X [button_]``; other text as is (not stripped).
- Clickables (the original's ``get_available_actions``): the text of every button, then of
  every product link, lowercased, then every option value as is; a later duplicate replaces
  the earlier entry but keeps its position. ``has_search_bar`` only on the start page.

Page contents (templates of the original, as shipped with verl-agent):

- start: ``WebShop``, ``Instruction: ``, the instruction, button ``Search``.
- results: ``Instruction:``, instruction, button ``Back to Search``,
  ``Page {p} (Total results: {n})``, button ``< Prev`` (page > 1), button ``Next >``
  (always, even past the last result), then per product: link ASIN, title, price tag.
- item: instruction nodes, ``Back to Search``, ``< Prev``, per option name: the name and
  one label per value; the title, ``Price: {tag}``, ``Rating: {rating}``, buttons
  ``Description``, ``Features``, ``Reviews``, ``Buy Now``.
- description / features / reviews: instruction nodes, ``Back to Search``, ``< Prev``, then
  the description; or one ``" " + bullet`` node per bullet point; or per review
  ``'"{title}"'``, the score, the body.
- done: the thank-you page (:func:`done_page`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from g2po_bench.benchmarks.webshop.products import Product

__all__ = [
    "Node",
    "Page",
    "start_page",
    "results_page",
    "item_page",
    "sub_page",
    "done_page",
    "to_text",
    "to_text_rich",
    "SUB_PAGES",
]

#: the sub-page buttons of the item page (lowercased click names -> page kind)
SUB_PAGES = {"description": "description", "features": "features", "reviews": "reviews"}
_ASCII_SPACE = " \t\n\r\f"


@dataclass(frozen=True)
class Node:
    """One visible text node: ``kind`` is ``text``, ``button``, ``label`` or ``link``."""

    kind: str
    text: str


@dataclass
class Page:
    """A rendered page.

    Attributes:
        kind: ``start``, ``results``, ``item``, ``description``, ``features``, ``reviews``
            or ``done``.
        nodes: visible text nodes in document order.
        clickables: click name -> (what it is: ``button``, ``link`` or ``option``, the
            option name for options else ``""``), in the original's order.
        has_search_bar: only the start page has one.
    """

    kind: str
    nodes: list[Node]
    clickables: dict[str, tuple[str, str]] = field(default_factory=dict)
    has_search_bar: bool = False


def _collapse(text: str) -> str | None:
    """BeautifulSoup's treatment of a text node: None (no node), ``"\\n"``, ``" "`` or as is."""
    if text == "":
        return None
    if text.strip(_ASCII_SPACE) == "":
        return "\n" if "\n" in text else " "
    return text


def _clickables(buttons: Iterable[str], links: Iterable[str], options: Iterable[tuple[str, str]]):
    out: dict[str, tuple[str, str]] = {}
    for b in buttons:
        out[b.lower()] = ("button", "")
    for a in links:
        out[a.lower()] = ("link", "")
    for name, value in options:
        out[value] = ("option", name)
    return out


def _instruction_nodes(instruction: str) -> list[Node]:
    return [Node("text", "Instruction:"), Node("text", instruction)]


def start_page(instruction: str) -> Page:
    """The search page shown after reset and after ``click[back to search]``."""
    nodes = [Node("text", "WebShop"), Node("text", "Instruction: "), Node("text", instruction),
             Node("button", "Search")]
    return Page("start", nodes, _clickables(["Search"], [], []), has_search_bar=True)


def results_page(instruction: str, page: int, total: int, products: Sequence[Product]) -> Page:
    """Results page ``page`` (1-based) of a search with ``total`` hits showing ``products``."""
    nodes = _instruction_nodes(instruction) + [Node("button", "Back to Search"),
                                               Node("text", f"Page {page} (Total results: {total})")]
    buttons = ["Back to Search"]
    if page > 1:
        nodes.append(Node("button", "< Prev"))
        buttons.append("< Prev")
    nodes.append(Node("button", "Next >"))
    buttons.append("Next >")
    for p in products:
        nodes += [Node("link", p.asin), Node("text", p.title), Node("text", p.price_tag)]
    return Page("results", nodes, _clickables(buttons, [p.asin for p in products], []))


def item_page(instruction: str, product: Product) -> Page:
    """The item page of ``product`` (options shown as labels)."""
    nodes = _instruction_nodes(instruction) + [Node("button", "Back to Search"), Node("button", "< Prev")]
    option_items = []
    for name, values in product.options.items():
        nodes.append(Node("text", name))
        for v in values:
            nodes.append(Node("label", v))
            option_items.append((name, v))
    nodes += [Node("text", product.title), Node("text", f"Price: {product.price_tag}"),
              Node("text", f"Rating: {product.rating}")]
    buttons = ["Back to Search", "< Prev", "Description", "Features", "Reviews", "Buy Now"]
    nodes += [Node("button", b) for b in buttons[2:]]
    return Page("item", nodes, _clickables(buttons, [], option_items))


def sub_page(instruction: str, product: Product, kind: str) -> Page:
    """The ``description``, ``features`` or ``reviews`` sub-page of ``product``.

    Raises:
        ValueError: unknown ``kind``.
    """
    nodes = _instruction_nodes(instruction) + [Node("button", "Back to Search"), Node("button", "< Prev")]
    if kind == "description":
        nodes.append(Node("text", product.description))
    elif kind == "features":
        nodes += [Node("text", f" {b}") for b in product.bullet_points]
    elif kind == "reviews":
        for r in product.reviews:
            nodes += [Node("text", f'"{r.get("title", "")}"'), Node("text", str(r.get("score", ""))),
                      Node("text", str(r.get("body", "")))]
    else:
        raise ValueError(f"unknown sub-page {kind!r}")
    return Page(kind, nodes, _clickables(["Back to Search", "< Prev"], [], []))


def _tojson(obj: object) -> str:
    """Flask's ``tojson`` filter (sorted keys, ASCII, HTML-sensitive characters escaped)."""
    text = json.dumps(obj, sort_keys=True, ensure_ascii=True)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("'", "\\u0027"))


def done_page(asin: str, options: Mapping[str, str], reward: float) -> Page:
    """The page after ``click[buy now]``. The original renders its thank-you template with
    only the ASIN, options and reward, so the other fields print ``None`` or nothing."""
    t = ["Thank you for shopping with us!", "Your code: ", "None", " (Paste it in your MTurk interface.)",
         "Purchased", "asin", asin, "options", _tojson(dict(options)), "attrs", "None",
         "category", "None", "query", "None", "product category", "None",
         "Target", "asin", "options", "attrs", "price upper", "instuction text", "category",
         "product category", "query", "Goal ", "None", "Reward",
         "Your score (min 0.0, max 1.0)", str(reward), "Reward Details ", "None"]
    return Page("done", [Node("text", x) for x in t], {})


def to_text(page: Page) -> str:
    """The ``text`` observation: stripped node texts joined by ``" [SEP] "``."""
    parts = []
    for node in page.nodes:
        s = _collapse(node.text)
        if s is None or s == "\n":
            continue
        parts.append(s.strip())
    return " [SEP] ".join(parts)


def to_text_rich(page: Page, *, url: str = "", clicked_asins: Iterable[str] = ()) -> str:
    """The ``text_rich`` observation (module docstring).

    Args:
        page: the page.
        url: the page URL the original would be at (option labels whose quoted value
            occurs in it are shown as clicked).
        clicked_asins: ASINs (upper case) opened earlier in the episode.
    """
    clicked = set(clicked_asins)
    obs = ""
    for node in page.nodes:
        t = _collapse(node.text)
        if t is None or t == "\n":
            continue
        if node.kind == "button":
            piece = f"[button] {t} [button_]"
        elif node.kind == "label":
            if f'"{t}"' in url:
                piece = f"  [clicked button] {t} [clicked button_]"
                obs = f"You have clicked {t}.\n" + obs
            else:
                piece = f"  [button] {t} [button_]"
        elif node.kind == "link":
            mark = "clicked button" if t in clicked else "button"
            piece = f"\n[{mark}] {t} [{mark}_]"
        else:
            piece = t
        obs += piece + "\n"
    return obs
