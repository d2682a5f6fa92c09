"""The WebShop text environment (a faithful reimplementation of the original's text mode).

Actions (the original's ``parse_action``: the regular expression ``(.+)\\[(.+)\\]`` matched
at the start; the argument is lowercased):

- ``search[query]`` from **any** page (the original does not check for a search bar): runs
  the search and shows results page 1; the chosen product and options are cleared.
- ``click[x]`` where ``x`` is a clickable of the current page (:mod:`g2po_bench.benchmarks.webshop.pages`)
  other than ``search``: ``back to search`` (start page; clears keywords, product, options
  and the opened-ASIN set), ``next >`` / ``< prev`` on results (page +-1; ``next >`` is
  always offered, even past the last hit), ``< prev`` on a sub-page (back to the item page,
  options kept) or on an item page (back to the results page, product and options
  cleared), ``description`` / ``features`` / ``reviews`` (sub-pages), an ASIN in lowercase
  (item page), an option value (sets that option, item page again), ``buy now`` (done:
  reward, end of episode).
- Anything else is invalid: the state and the observation stay as they were, reward 0,
  the episode goes on (``info["valid"]`` is False, and ``info["refused"]`` True: the rollout
  engine's ``env.stop_after_refusals`` may end an episode stuck on refused actions; the
  reference, and the WebShop GPU presets, never end one for that).

Not reproduced: the debugging search prefixes ``<r>``, ``<a>``, ``<c>``, ``<q>`` (plain text
here), the ``Attributes`` sub-page (off by default in the original, ``show_attrs=False``).

Observation modes: ``text`` (``" [SEP] "``-joined strings) and ``text_rich`` (button
markers; clicking an option shows ``You have clicked X.``). In ``text`` mode clicking an
option does not change the observation (state aliasing, a known property of WebShop).

Observation fields: ``text`` = the observation string; ``instruction`` = the goal
instruction as shown on the page (stripped: verl-agent reads it from the observation);
``admissible_actions`` = verl-agent's available-action list:
``["search[<your query>]"]`` when the page has a search bar, then ``click[c]`` for every
clickable ``c`` (on the start page that includes ``click[search]``, which the env refuses,
as the original); ``state_key`` = the page text after the instruction as verl-agent's
``format_obs`` writes it (``state_key="reference"``; :func:`g2po_bench.benchmarks.webshop.prompt.format_observation`)
or the full observation (``state_key="raw"``); ``reward`` = the purchase reward in [0, 1]
on ``buy now`` else 0; ``won`` = done and reward == 1.0; ``info``: ``page``, ``valid``,
``refused`` (= not ``valid``), and on purchase ``score`` (reward x 100), ``task_score`` (reward),
``train_reward`` (the fraction of the success reward RL gets: 1 or 0 for a win or not, or the
reward itself with ``train_reward="score"``), ``asin``, ``options``, ``reward_info`` (terms) and
``noun_extractor``. The trainer's step reward (:meth:`WebShopBenchmark.step_reward
<g2po_bench.benchmarks.webshop.WebShopBenchmark.step_reward>`: 10 x ``train_reward`` on the
purchase) and the step limit (15) are the rollout engine's business.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from g2po_bench.benchmarks.webshop.catalog import Catalog, DataSource, get_catalog
from g2po_bench.benchmarks.webshop.goals import Goal
from g2po_bench.benchmarks.webshop.nouns import DEFAULT_NOUN_EXTRACTOR, noun_extractor_name
from g2po_bench.benchmarks.webshop.pages import (
    SUB_PAGES,
    Page,
    done_page,
    item_page,
    results_page,
    start_page,
    sub_page,
    to_text,
    to_text_rich,
)
from g2po_bench.benchmarks.webshop.prompt import format_observation
from g2po_bench.benchmarks.webshop.reward import REWARD_MODES, purchase_reward
from g2po_bench.benchmarks.webshop.search import PRODUCT_WINDOW, SEARCH_RETURN_N
from g2po_bench.core.protocol import (
    STATE_KEY_RULES,
    Environment,
    Observation,
    Task,
    check_state_key_rule,
)

__all__ = ["WebShopEnv", "parse_action", "OBSERVATION_MODES", "STATE_KEYS", "SEARCH_PLACEHOLDER", "TRAIN_REWARDS"]

OBSERVATION_MODES = ("text", "text_rich")
#: ``env.webshop_train_reward``: the reward RL trains on (reference: success; the original WebShop: score)
TRAIN_REWARDS = ("success", "score")
STATE_KEYS = STATE_KEY_RULES  # the rules WebShopEnv keys with
#: the search entry of the admissible-action list (verl-agent's wording)
SEARCH_PLACEHOLDER = "search[<your query>]"
_ACTION_RE = re.compile(r"(.+)\[(.+)\]")


def parse_action(action: str) -> tuple[str, str | None]:
    """``"click[Buy Now]"`` -> ``("click", "buy now")``; no brackets -> ``(action, None)``.

    The name is kept as written (``Click[...]`` is not a click); the argument is lowercased.
    """
    m = _ACTION_RE.match(action)
    if m is None:
        return action, None
    return m.group(1), m.group(2).lower()


class WebShopEnv(Environment):
    """One WebShop episode at a time over one catalogue (module docstring).

    Args:
        source: the data files (:class:`DataSource`), or None to take them from each task's
            payload (``payload["source"]``); the catalogue loads lazily on first reset.
        observation_mode: ``text`` or ``text_rich``.
        state_key: ``reference`` or ``raw``.
        reward_mode: ``original`` (the reference reward, default) or ``lenient``
            (:mod:`g2po_bench.benchmarks.webshop.reward`; ``env.webshop_reward``).
        nouns: the noun extractor of the reward's type term (``env.webshop_nouns``;
            :mod:`g2po_bench.benchmarks.webshop.nouns`), checked on construction.
        cache_root: folder for the search-index cache (``<cache_root>/webshop_index``).
        catalog: an already loaded catalogue (tests, benchmarks).
        source_factory: a picklable callable returning the :class:`DataSource`, called on
            first need when ``source`` is None and no task has given one.
        train_reward: what a purchase's ``info["train_reward"]`` holds, the fraction of
            ``algorithm.success_reward`` RL gets for it (``env.webshop_train_reward``):
            ``"success"`` (1.0 for a purchase that scores 1, else 0.0; the reference) or
            ``"score"`` (the purchase reward itself, in [0, 1]).

    Raises:
        ValueError: unknown observation mode, state key, reward mode or training reward.
        g2po_bench.benchmarks.webshop.nouns.NounExtractorError: the noun extractor is not installed.
    """

    name = "webshop"

    def __init__(
        self,
        source: DataSource | None = None,
        *,
        observation_mode: str = "text",
        state_key: str = "reference",
        cache_root: str | Path | None = None,
        catalog: Catalog | None = None,
        source_factory: Callable[[], DataSource] | None = None,
        reward_mode: str = "original",
        nouns: str = DEFAULT_NOUN_EXTRACTOR,
        train_reward: str = "success",
    ) -> None:
        if observation_mode not in OBSERVATION_MODES:
            raise ValueError(f"unknown WebShop observation mode {observation_mode!r}; choose text or text_rich")
        check_state_key_rule(state_key)
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"unknown WebShop reward mode {reward_mode!r}; choose original or lenient")
        if train_reward not in TRAIN_REWARDS:
            raise ValueError(f"unknown WebShop training reward {train_reward!r}; choose success or score")
        self.reward_mode = reward_mode
        self.train_reward = train_reward
        self.nouns = nouns
        self._noun_extractor = noun_extractor_name(nouns)  # fails now when not installed
        self.source = source if source is not None or catalog is None else catalog.source
        self.observation_mode = observation_mode
        self.state_key_rule = state_key
        self.cache_root = cache_root
        self._catalog = catalog
        self._source_factory = source_factory
        self.goal: Goal | None = None
        self.session = ""
        self.page: Page | None = None
        self.done = False
        self.keywords: list[str] | None = None
        self.page_num: int | None = None
        self.asin: str | None = None
        self.asins: set[str] = set()
        self.options: dict[str, str] = {}
        self._results: dict[str, list[int]] = {}
        self.url = ""

    # ------------------------------------------------------------------ catalogue
    @property
    def catalog(self) -> Catalog:
        """The catalogue (loaded on first use; process-wide cache)."""
        if self._catalog is None:
            if self.source is None and self._source_factory is not None:
                self.source = self._source_factory()
            if self.source is None:
                raise RuntimeError("WebShopEnv has no data source yet: reset it with a WebShop task first")
            self._catalog = get_catalog(self.source, cache_root=self.cache_root)
        return self._catalog

    @property
    def noun_extractor(self) -> str:
        """The noun extractor of the type reward (``spacy:<package>-<version>`` or ``heuristic-v1``)."""
        return self._noun_extractor

    # ------------------------------------------------------------------ protocol
    def reset(self, task: Task) -> Observation:
        """Start the episode of a WebShop task (``task.payload``: a goal dict plus
        ``source``, as made by :func:`g2po_bench.benchmarks.webshop.load_tasks`).

        Raises:
            ValueError: the payload is not a WebShop goal, or its product is not in the catalogue.
        """
        payload = task.payload
        if not isinstance(payload, dict) or "instruction_text" not in payload or "asin" not in payload:
            raise ValueError(f"task {task.task_id!r} has no WebShop goal payload")
        if payload.get("source"):
            src = DataSource.from_dict(payload["source"])
            if self.source is None or src.key != self.source.key:
                self.source, self._catalog = src, None
        goal = Goal.from_dict(payload)
        if goal.asin not in self.catalog.by_asin:
            raise ValueError(f"task {task.task_id!r}: product {goal.asin} is not in the catalogue "
                             f"{self.catalog.source.products}")
        self.goal = goal
        self.session = str(goal.index)
        self.done = False
        self.keywords, self.page_num, self.asin = None, None, None
        self.asins, self.options = set(), {}
        self._to_start()
        return self._observe(valid=True)

    def step(self, action: str) -> Observation:
        """Apply one action (module docstring).

        Raises:
            RuntimeError: no episode started, or the episode is over (reset first).
        """
        if self.goal is None or self.page is None:
            raise RuntimeError("reset the WebShop environment before stepping it")
        if self.done:
            raise RuntimeError("the WebShop episode is over (the product was bought); reset it")
        name, arg = parse_action(action)
        if name == "search" and arg:
            self._search(arg.split(" "), 1)
            return self._observe(valid=True)
        if name == "click" and arg is not None and arg != "search" and arg in self.page.clickables:
            return self._click(arg)
        return self._observe(valid=False)

    # ------------------------------------------------------------------ transitions
    def _to_start(self) -> None:
        assert self.goal is not None
        self.page = start_page(self.goal.instruction_text)
        self.url = f"/{self.session}"

    def _search(self, keywords: list[str], page_num: int) -> None:
        assert self.goal is not None
        query = " ".join(keywords)
        hits = self._results.get(query)
        if hits is None:
            hits = self.catalog.search.search(query, SEARCH_RETURN_N)
            if len(self._results) > 256:
                self._results.clear()
            self._results[query] = hits
        self.keywords, self.page_num = keywords, page_num
        self.asin, self.options = None, {}
        window = hits[(page_num - 1) * PRODUCT_WINDOW: page_num * PRODUCT_WINDOW]
        products = [self.catalog.products[i] for i in window]
        self.page = results_page(self.goal.instruction_text, page_num, len(hits), products)
        self.url = f"/search_results/{self.session}/{'+'.join(keywords)}/{page_num}"

    def _show_item(self) -> None:
        assert self.goal is not None and self.asin is not None and self.keywords is not None
        self.page = item_page(self.goal.instruction_text, self.catalog.by_asin[self.asin])
        self.url = (f"/item_page/{self.session}/{self.asin}/{'+'.join(self.keywords)}/"
                    f"{self.page_num}/{json.dumps(self.options)}")

    def _click(self, arg: str) -> Observation:
        assert self.page is not None and self.goal is not None
        kind, option_name = self.page.clickables[arg]
        current = self.page.kind
        if arg == "buy now":
            return self._buy()
        if arg == "back to search":
            self.keywords, self.page_num, self.asin = None, None, None
            self.asins, self.options = set(), {}
            self._to_start()
        elif arg == "next >" and current == "results":
            self._search(self.keywords or [], (self.page_num or 1) + 1)
        elif arg == "< prev" and current == "results":
            self._search(self.keywords or [], (self.page_num or 1) - 1)
        elif arg == "< prev" and current in SUB_PAGES:
            self._show_item()
        elif arg == "< prev" and current == "item":
            self._search(self.keywords or [], self.page_num or 1)
        elif arg in SUB_PAGES:
            assert self.asin is not None and self.keywords is not None
            self.page = sub_page(self.goal.instruction_text, self.catalog.by_asin[self.asin], SUB_PAGES[arg])
            self.url = (f"/item_sub_page/{self.session}/{self.asin}/{'+'.join(self.keywords)}/"
                        f"{self.page_num}/{arg.capitalize()}/{self.options}")
        else:
            if kind == "link":
                self.asin = arg.upper()
                self.asins.add(self.asin)
            elif kind == "option":
                self.options[option_name.lower()] = arg
            if self.asin is None or self.asin not in self.catalog.by_asin:
                return self._observe(valid=False)
            self._show_item()
        return self._observe(valid=True)

    def _buy(self) -> Observation:
        assert self.goal is not None and self.asin is not None
        product = self.catalog.by_asin[self.asin]
        price = self.catalog.prices[self.asin]
        reward, details = purchase_reward(product, self.goal, price, self.options,
                                          mode=self.reward_mode, nouns=self.nouns)
        self.done = True
        self.page = done_page(self.asin, self.options, reward)
        self.url = f"/done/{self.session}/{self.asin}/{self.options}"
        trained = reward if self.train_reward == "score" else float(reward == 1.0)
        extra = {"score": reward * 100.0, "task_score": reward, "train_reward": trained, "asin": self.asin,
                 "options": dict(self.options), "price": price, "reward_info": details,
                 "noun_extractor": details["noun_extractor"]}
        return self._observe(valid=True, reward=reward, done=True, extra=extra)

    # ------------------------------------------------------------------ observations
    def render(self) -> str:
        """The current observation string in the configured mode."""
        assert self.page is not None
        if self.observation_mode == "text":
            return to_text(self.page)
        return to_text_rich(self.page, url=self.url, clicked_asins=self.asins)

    def admissible_actions(self) -> list[str]:
        """verl-agent's available actions of the current page (module docstring)."""
        assert self.page is not None
        acts = [SEARCH_PLACEHOLDER] if self.page.has_search_bar else []
        return acts + [f"click[{c}]" for c in self.page.clickables]

    def _observe(self, *, valid: bool, reward: float = 0.0, done: bool = False,
                 extra: dict[str, Any] | None = None) -> Observation:
        assert self.goal is not None and self.page is not None
        text = self.render()
        instruction = self.goal.instruction_text.strip()  # as shown (a stripped text node)
        key = format_observation(text, instruction) if self.state_key_rule == "reference" else text
        info: dict[str, Any] = {"page": self.page.kind, "valid": valid, "refused": not valid}
        if extra:
            info.update(extra)
        return Observation(
            text=text, instruction=instruction, admissible_actions=self.admissible_actions(),
            state_key=key, reward=float(reward), done=done, won=bool(done and reward == 1.0), info=info,
        )
