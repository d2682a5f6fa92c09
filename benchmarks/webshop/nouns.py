"""Noun extraction for the type term of the WebShop reward.

The original tags both product titles with spaCy (``en_core_web_lg``) and keeps the
lowercased text of tokens tagged NOUN or PROPN; the title score is the share of the goal
title's nouns found among the purchased title's nouns (:mod:`benchmarks.webshop.reward`).

Which extractor is used (:func:`noun_extractor_name`, recorded by the environment in
``Observation.info["noun_extractor"]`` and the ``noun_extractor`` attribute):

- ``"spacy:<model>"`` when a spaCy English model package is installed, preferring
  ``en_core_web_lg`` (the original's), then ``en_core_web_md``, then ``en_core_web_sm``;
- ``"heuristic-v1"`` otherwise: the deterministic heuristic below.

The environment variable ``G2PO_WEBSHOP_NOUNS`` overrides the choice: ``heuristic``, or a
model package name (``en_core_web_sm``); ``auto`` (default) is the rule above.

Heuristic (``heuristic-v1``): lowercase the title, split on every non-letter character
(``"Sofa-Tables"`` -> ``sofa``, ``tables``; digits are never nouns), keep tokens of two or
more letters that are not English function words, common adjectives or colours (the word
lists below). It over-counts nouns compared with a tagger (some
verbs and rare adjectives pass), which only matters when a *different* product is bought:
the same product always scores 1 (or 0.2 when its title has no nouns), whatever the extractor.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import threading

__all__ = ["noun_extractor_name", "title_nouns", "heuristic_nouns", "use_noun_extractor", "HEURISTIC_NAME"]

HEURISTIC_NAME = "heuristic-v1"
SPACY_MODELS = ("en_core_web_lg", "en_core_web_md", "en_core_web_sm")

_FUNCTION_WORDS = frozenset("""
a about above across after against all along also although am among an and another any anyone
anything are around as at be because been before being below beside besides between beyond both
but by can cannot could did do does doing done down during each either else enough etc even ever
every few for from further had has have having he her here hers herself him himself his how however
if in inside into is it its itself just less like many may me might mine more most much must my
myself near neither no nor not of off on once one only onto or other others our ours ourselves out
outside over own per plus same several shall she should since so some such than that the their
theirs them themselves then there these they this those though through throughout till to too
toward towards under unless until up upon us very via was we were what whatever when where whether
which while who whom whose why will with within without would yet you your yours yourself
""".split())

_ADJECTIVES = frozenset("""
adjustable all-in-one antique anti assorted automatic available baby beautiful best big bright
casual classic clean clear comfortable compact compatible complete cool cozy cute daily decorative
deep delicate digital double dry durable easy elegant electric essential everyday extra fashion
fashionable fast fine flexible fresh full fun funny gentle genuine giant good gorgeous great handmade
hard healthy heavy high hot inch inches instant large latest leak-proof light lightweight little
long lovely low luxury magnetic main male female mini modern multi multifunctional natural new nice
non novelty old organic original outdoor indoor perfect personal plain portable powerful practical
premium pretty professional pure quick real regular retro reusable round safe sexy short simple
single slim small smart soft solid special sports stainless standard strong stylish super sweet
thick thin tiny top total ultra unique universal upgraded useful vintage warm waterproof wide
wireless unisex
black white red blue green yellow pink purple orange brown grey gray silver gold beige navy ivory
khaki teal turquoise
""".split())

_LETTERS = re.compile(r"[a-z]+")
_lock = threading.Lock()
_nlp = None
_name: str | None = None
_override: str | None = None


def use_noun_extractor(choice: str | None) -> str:
    """Choose the extractor for this process (``"heuristic"``, ``"auto"``, a spaCy model
    package name, or None to follow ``G2PO_WEBSHOP_NOUNS`` again); clears the caches.

    Returns:
        the resulting :func:`noun_extractor_name`.
    """
    global _override, _name, _nlp
    with _lock:
        _override, _name, _nlp = choice, None, None
    title_nouns.cache_clear()
    return noun_extractor_name()


def _installed_spacy_model() -> str | None:
    choice = _override or os.environ.get("G2PO_WEBSHOP_NOUNS", "auto").strip() or "auto"
    if choice == "heuristic":
        return None
    candidates = SPACY_MODELS if choice == "auto" else (choice,)
    if importlib.util.find_spec("spacy") is None:
        return None
    for model in candidates:
        if importlib.util.find_spec(model) is not None:
            return model
    return None


def noun_extractor_name() -> str:
    """``"spacy:<model>"`` or ``"heuristic-v1"`` (module docstring); cheap: no model load."""
    global _name
    if _name is None:
        model = _installed_spacy_model()
        _name = f"spacy:{model}" if model else HEURISTIC_NAME
    return _name


def heuristic_nouns(title: str) -> list[str]:
    """The heuristic noun list of a title (module docstring), in order, with repeats."""
    return [
        t for t in _LETTERS.findall(title.lower())
        if len(t) >= 2 and t not in _FUNCTION_WORDS and t not in _ADJECTIVES
    ]


def _spacy_nouns(title: str) -> list[str]:
    global _nlp
    with _lock:
        if _nlp is None:
            import spacy

            _nlp = spacy.load(noun_extractor_name().split(":", 1)[1])
        doc = _nlp(title)
    return [t.text.lower() for t in doc if t.pos_ in ("NOUN", "PROPN")]


@functools.lru_cache(maxsize=65536)
def title_nouns(title: str) -> tuple[str, ...]:
    """Nouns of a product title, lowercased, with the configured extractor (cached)."""
    if noun_extractor_name() == HEURISTIC_NAME:
        return tuple(heuristic_nouns(title))
    return tuple(_spacy_nouns(title))
