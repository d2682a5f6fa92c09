"""WebShop (Yao et al., NeurIPS 2022): a faithful text-mode reimplementation on real or
synthetic products, with the benchmark interface of :mod:`g2po_bench.benchmarks.registry`.

Modules (one concept each): :mod:`~g2po_bench.benchmarks.webshop.products` (product records and
loaders), :mod:`~g2po_bench.benchmarks.webshop.goals` (goals, prices, shuffle, splits),
:mod:`~g2po_bench.benchmarks.webshop.catalog` (data sources, per-process catalogue),
:mod:`~g2po_bench.benchmarks.webshop.search` (bm25s search, caches), :mod:`~g2po_bench.benchmarks.webshop.pages`
(page text), :mod:`~g2po_bench.benchmarks.webshop.reward` and :mod:`~g2po_bench.benchmarks.webshop.nouns` (the
purchase reward), :mod:`~g2po_bench.benchmarks.webshop.env` (the environment),
:mod:`~g2po_bench.benchmarks.webshop.prompt` (prompt, expert responses), :mod:`~g2po_bench.benchmarks.webshop.expert`
(scripted expert), :mod:`~g2po_bench.benchmarks.webshop.synthetic` (embedded default catalogue),
:mod:`~g2po_bench.benchmarks.webshop.download` (user data download), :mod:`~g2po_bench.benchmarks.webshop.speed`.

Splits (``env.train_split`` / ``env.eval_split``; :mod:`~g2po_bench.benchmarks.webshop.goals`):
``test`` = shuffled goals 0-499, ``eval`` = 500-1499, ``train`` = 1500+, ``trainval`` =
500+ (what verl-agent/G2PO train on), ``all``; ``valid_seen``/``valid_unseen`` are aliases
of ``test`` and ``valid_train`` of ``eval``; prefix ``human_`` for human goals. In the
shared 1k setting the 415 products with an instruction give 6,910 synthetic goals (one per
option combination), so every split is filled: test 500, eval 1,000, train 5,410. The
synthetic default uses its own table (test = first ``env.generated_eval_games`` goals,
eval = the next as many, train = the next ``env.generated_train_games``).
"""

from __future__ import annotations

from g2po_bench.benchmarks.base import Benchmark
from g2po_bench.benchmarks.webshop.catalog import (
    Catalog,
    DataSource,
    default_cache_root,
    get_catalog,
)
from g2po_bench.benchmarks.webshop.download import download_webshop
from g2po_bench.benchmarks.webshop.env import TRAIN_REWARDS, WebShopEnv
from g2po_bench.benchmarks.webshop.expert import EXPERT_MODES, expert_actions, expert_detour
from g2po_bench.benchmarks.webshop.goals import Goal
from g2po_bench.benchmarks.webshop.nouns import NounExtractorError, check_noun_extractor
from g2po_bench.benchmarks.webshop.prompt import (
    PROMPT_STYLES,
    build_prompt,
    expert_response,
    format_observation,
)
from g2po_bench.benchmarks.webshop.speed import main as speed_benchmark_main
from g2po_bench.benchmarks.webshop.tasks import (
    PROJECTION,
    TASK_TYPES,
    load_tasks,
    make_env,
    source_for,
    task_for_goal,
)
from g2po_bench.core.config import ConfigError, require
from g2po_bench.core.protocol import Observation, check_state_key_rule

__all__ = [
    "TASK_TYPES",
    "PROJECTION",
    "EPISODE_SCORE_DEFAULT",
    "load_tasks",
    "make_env",
    "build_prompt",
    "expert_actions",
    "expert_response",
    "WebShopEnv",
    "Goal",
    "Catalog",
    "DataSource",
    "source_for",
    "task_for_goal",
    "WebShopBenchmark",
    "PageKey",
    "BENCHMARK",
]

class PageKey:
    """WebShop's key rule over observations (stateless; :meth:`WebShopBenchmark.make_state_key_rule`):
    ``"reference"`` = the page text after the instruction (:func:`format_observation`), ``"raw"``
    = the observation text, as :class:`WebShopEnv` keys with that rule.

    Raises:
        ValueError: another rule name.
    """

    def __init__(self, rule: str) -> None:
        self.rule = check_state_key_rule(rule)

    def reset(self, obs) -> str:
        return format_observation(obs.text, obs.instruction) if self.rule == "reference" else obs.text

    update = reset


class WebShopBenchmark(Benchmark):
    """WebShop as the suite's benchmark: the functions of this package, its settings
    (``env.webshop_*``), the official product download and the speed benchmark."""

    name = "webshop"
    task_types = TASK_TYPES
    projection = PROJECTION
    prompt_styles = PROMPT_STYLES  # reference (the default, real models) and compact (the tiny CPU model)
    reference_max_steps = 15  # the papers' step limit (the GPU presets' env.max_steps)
    agent_intro = (
        'You are an expert autonomous agent operating in the WebShop e-commerce environment. You '
        'buy the product that matches an instruction by searching and clicking: search[<query>] on '
        'the search page, and click[<button>] for a button shown on the page (a product id, an '
        'option value, description, features, next >, < prev, back to search, buy now).'
    )
    downloads = True
    #: an episode that never buys (step limit, refusals, a crash) scores 0, as the reference
    #: (verl-agent's WebShop environment manager) scores every episode: the published "Score"
    #: column is the mean over all episodes of reward x 100
    episode_score_default = 0.0

    # the package's functions are the protocol's required parts
    load_tasks = staticmethod(load_tasks)
    make_env = staticmethod(make_env)
    build_prompt = staticmethod(build_prompt)
    expert_actions = staticmethod(expert_actions)
    expert_detour = staticmethod(expert_detour)
    expert_response = staticmethod(expert_response)

    def step_reward(self, observation: Observation, success_reward: float) -> float:
        """``success_reward`` x the purchase's ``info["train_reward"]`` (``env.webshop_train_reward``:
        1 for a purchase that scores 1, else 0, the reference; or the purchase reward in [0, 1]
        with ``score``); 0 on every other step. An observation without ``train_reward`` (a
        purchase of an environment of older code) gets the reference's reward."""
        if not observation.done:
            return 0.0
        return success_reward * float(observation.info.get("train_reward", float(observation.won)))

    def validate_config(self, cfg) -> None:
        """The base checks, the observation mode, the reward and its noun extractor (a missing
        spaCy model fails here, never falls back), the warm start's expert, the training reward."""
        super().validate_config(cfg)
        env = cfg.env
        require(env.webshop_observation_mode in ("text", "text_rich"), "env.webshop_observation_mode",
                "choose text or text_rich")
        require(env.webshop_reward in ("original", "lenient"), "env.webshop_reward", "choose original or lenient")
        require(env.webshop_train_reward in TRAIN_REWARDS, "env.webshop_train_reward",
                f"choose {' or '.join(TRAIN_REWARDS)}")
        require(env.webshop_expert in EXPERT_MODES, "env.webshop_expert", f"choose {' or '.join(EXPERT_MODES)}")
        try:
            check_noun_extractor(env.webshop_nouns)
        except NounExtractorError as exc:
            raise ConfigError(f"bad value for config key 'env.webshop_nouns': {exc}") from None

    def download(self, dest):
        return download_webshop(dest)

    def tokenizer_words(self, cfg):
        """What a policy copies into its clicks: the catalogue's product ids, as results pages show
        them (``B07XTK3P89``) and in lower case (``click[b07xtk3p89]``, as the projection records an
        action), then its option values (``x-large``, ``28" x 28"``: an instruction names them and
        an item page lists them), each in catalogue order."""
        catalog = get_catalog(source_for(cfg), cache_root=str(default_cache_root(cfg.cache_dir)))
        ids = [a for p in catalog.products for a in (p.asin, p.asin.lower())]
        return ids + list(dict.fromkeys(v for p in catalog.products for vs in p.options.values() for v in vs))

    def make_state_key_rule(self, rule):
        """WebShop keys the page text after the instruction (``"reference"``) or the whole
        observation (``"raw"``): :class:`PageKey`."""
        return PageKey(rule)

    def speed_benchmark(self, argv):
        return int(speed_benchmark_main(list(argv), prog="g2po bench webshop") or 0)

    def format_observation(self, text, instruction):
        return format_observation(text, instruction)

    def plan_sentence(self, task, actions, instruction):
        return ("I need a product that matches every requirement of the instruction: its type, its attributes, "
                "the options and the price limit.")

    def failure_hint(self, actions, score):
        if actions and actions[-1] == "click[buy now]":
            return f"you bought a product that did not match the instruction (score {score:.0f}/100)."
        return None


BENCHMARK = WebShopBenchmark()
