"""The ALFWorld text engine: textworld's PDDL environment with ALFWorld's wrappers.

This module is the only place that builds the real engine. It reproduces the wrapper stack of
``alfworld.agents.environment.alfred_tw_env.AlfredTWEnv.init_env`` (alfworld 0.4.2) for one
game at a time::

    AlfredInfos(AlfredDemangler(textworld.envs.PddlEnv(EnvInfos(won, admissible_commands,
                                                        extras=["gamefile"])), shuffle=False))

``AlfredTWEnv`` registers its games with ``textworld.gym.register_games`` and lets the gym
environment cycle through them; a rollout engine needs to reset to a *chosen* game instead, so
we hold the same wrappers around one ``PddlEnv`` and call ``load(game_file)`` when the game
changes (``shuffle=False`` = the evaluation setting: objects are numbered in sorted-id order).

Speed (CPU time on a 2-core machine; ``python -m g2po_bench.benchmarks.alfworld.speed``): the unmodified
engine spends ~0.9 s per ``reset`` of an official kitchen in fast-downward's PDDL-to-SAS
translation (run twice per reset) and ~60 ms per random ``step``, mostly re-parsing grammar
snippets and conditions with TatSu and deep-copying derivation contexts. With
:func:`install_caches` (same observations, see its docstring) a reset of a loaded official game
takes ~0.08 s and a step ~7.5 ms CPU (official scenes) or ~2.5 ms (generated small scenes);
loading a new official game still costs ~1 s once.

Library copies: textworld gives every ``PddlEnv`` its own copy of fast-downward's shared library
(the library keeps the loaded task in globals). A copy cannot be unloaded: it carries
``STB_GNU_UNIQUE`` symbols, which keep glibc from unmapping it, and forcing ``dlclose`` crashed the
process at exit here. Without more, every engine built and closed in a process left one more copy
mapped (12 engines played and closed in one process: 12 copies, RSS 83 -> 120 MB). With
:func:`install_caches`, :meth:`AlfworldEnv.close <g2po_bench.benchmarks.alfworld.env.AlfworldEnv.close>`
hands its copy back (:func:`release_downward_lib`) and the next engine of the process takes it
instead of loading a new one, so a process maps at most as many copies as it ever had engines open
at the same time (a worker: its slots); every reset loads its task into the library again
(``load_sas``), so a reused copy plays as a new one. Worker recycling (``env.worker_max_episodes``)
still bounds what else a worker accumulates.

Memory: what a process keeps per distinct game is bounded. Two things grew with every game played
(``python -m g2po_bench.benchmarks.worker_memory``; one environment: 67 -> 427 MiB RSS over 128
official games; a worker of the CPU default, 64 slots playing 16 generated games per round as in a
training iteration: 168 -> 210 MiB from the 2nd to the 20th round): the per-game memos below kept
the translations of 64 games (~2 MB per official scene, ~0.5 MB per generated one) and now keep 16
(:data:`SAS_CACHE_SIZE`); and textworld interns every ``Proposition`` it builds in ``mementos``'
process-wide cache, which is never emptied, while a game's facts name its own objects, so each
game added its facts for good (~60 KB per generated game): loading a new game now drops them
(:func:`release_interned_facts`). The same measurements now level off: 174 MiB after 128 official
games, 161 -> 166 MiB from the 2nd to the 20th round.

Pitfalls handled here:
- ``fast_downward.pddl2sas`` overwrites ``sys.argv`` (it fakes a command line for its option
  parser); the cached wrapper restores it, so pytest/CLI arguments survive.
- Importing ``alfworld`` creates ``~/.cache/alfworld`` unless ``ALFWORLD_DATA`` is set first:
  :func:`ensure_alfworld_data_env` points it at a temporary folder when unset.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import pickle
import re
import sys
import tempfile
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import Any

__all__ = [
    "INTRO_BANNER",
    "TASK_PREFIX",
    "TASK_PLACEHOLDER",
    "ensure_alfworld_data_env",
    "install_caches",
    "uninstall_caches",
    "release_downward_lib",
    "release_interned_facts",
    "mapped_downward_libs",
    "forget_games",
    "load_parsed_game",
    "remember_task_grammar",
    "save_parsed_game",
    "make_pddl_env",
    "split_intro",
    "wheel_logic_paths",
]

#: first line of every ALFWorld intro (``#intro#`` rule of the grammar).
INTRO_BANNER = "-= Welcome to TextWorld, ALFRED! =-"
#: the marker in front of the task sentence in the intro.
TASK_PREFIX = "Your task is to: "
#: what the shipped grammar says in place of the task sentence; a game's grammar replaces it with
#: the task (``alfworld.agents.utils.misc.add_task_to_grammar``).
TASK_PLACEHOLDER = "UNKNOWN GOAL"

#: entries kept in the PDDL->SAS and grammar memos: a game takes two translations and one
#: grammar, so 32 entries keep the translations of the last 16 games (a training iteration's
#: task groups in every preset; a group's slots load its game one after the other) and the
#: grammars of the last 32. A full official scene costs ~2 MB of memory, a generated one ~0.5 MB;
#: a game evicted and played again is read back from its ``game.parsed.pkl`` (~10 ms) or, without
#: one, translated again (~1 s for an official scene). Override with env ``G2PO_ALFWORLD_SAS_CACHE``.
SAS_CACHE_SIZE = int(os.environ.get("G2PO_ALFWORLD_SAS_CACHE", "32"))
#: entries kept in the grammar-snippet and condition memos (small strings and trees; bounded
#: so that a worker playing thousands of distinct games does not grow without end).
#: Override with env ``G2PO_ALFWORLD_PARSE_CACHE``.
PARSE_CACHE_SIZE = int(os.environ.get("G2PO_ALFWORLD_PARSE_CACHE", "8192"))

_ORIGINALS: dict[str, Any] = {}
#: fast-downward library copies of closed engines, taken by the next engine of this process
#: (module docstring "Library copies"; only while :func:`install_caches` is installed)
_FREE_LIBS: list[Any] = []

#: the memos of :func:`install_caches` that a game's parsed form can be written from
#: (:func:`save_parsed_game`) and read back into in another process (:func:`load_parsed_game`):
#: (digest(domain), digest(problem), optimize) -> ``fast_downward.pddl2sas``'s ``(task, sas)``,
#: and (digest(grammar), rule name) -> textworld's parse of the game's grammar.
_SAS_MEMO: OrderedDict[tuple[bytes, bytes, bool], Any] = OrderedDict()
_GRAMMAR_MEMO: OrderedDict[tuple[bytes, Any], Any] = OrderedDict()
#: parsed-game files already read into the memos: path -> ((mtime_ns, size), sas keys, grammar keys);
#: a slot loading a game another slot of this process loaded skips reading and unpickling the file
#: (the most recent :data:`SAS_CACHE_SIZE` files: an older one's entries have left the memos)
_PARSED_READ: OrderedDict[str, tuple[tuple[int, int], tuple[Any, ...], tuple[Any, ...]]] = OrderedDict()
#: digest(template) -> (actions, grammar, task rhs) of the grammar template
#: :func:`remember_task_grammar` last used, or None when that template has another shape.
_TEMPLATE_PARSES: dict[bytes, Any] = {}
#: the grammar rule textworld's ``GameLogic`` parses a game's grammar with.
_GRAMMAR_RULE = "pddlStart"
#: format tag of a parsed-game file (bumped if the stored layout changes; another tag is ignored).
PARSED_GAME_FORMAT = "g2po-alfworld-parsed/1"


def ensure_alfworld_data_env() -> str:
    """Set ``ALFWORLD_DATA`` (if unset) to ``<tmp>/g2po-alfworld`` before alfworld is imported.

    Returns:
        The value of ``ALFWORLD_DATA``. alfworld creates that folder at import; nothing is
        downloaded or written there by this project.
    """
    if not os.environ.get("ALFWORLD_DATA"):
        os.environ["ALFWORLD_DATA"] = str(Path(tempfile.gettempdir()) / "g2po-alfworld")
    return os.environ["ALFWORLD_DATA"]


def wheel_logic_paths() -> tuple[Path, Path]:
    """Paths of the PDDL domain and the TextWorld grammar shipped in the alfworld wheel
    (``alfworld/data/alfred.pddl`` and ``alfworld/data/alfred.twl2``)."""
    ensure_alfworld_data_env()
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    return Path(ALFRED_PDDL_PATH), Path(ALFRED_TWL2_PATH)


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def install_caches() -> None:
    """Speed up the engine without changing its behaviour (idempotent, process-wide).

    Memoized pure functions (keyed by their full text input):

    - ``fast_downward.pddl2sas(domain, problem, verbose, optimize)`` -> ``(task, sas)``: LRU of
      :data:`SAS_CACHE_SIZE` entries keyed by digests of domain and problem and ``optimize``;
      ``sys.argv`` is restored after each real call. The cached ``task`` is only read by
      ``textworld.envs.pddl.logic.PddlState``. The generator writes each game's two
      translations and grammar parse next to it (:func:`save_parsed_game`) and
      :class:`~g2po_bench.benchmarks.alfworld.env.AlfworldEnv` reads them back before a load
      (:func:`load_parsed_game`), so a generated game is translated and parsed once, not once
      per worker process and per eviction from these memos.
    - ``textworld.envs.pddl.logic._parse_and_convert(text, rule_name)``: the TatSu parse of a
      game's ``.twl2`` grammar into ``(actions, grammar)`` (same LRU size); ``GameLogic`` only
      reads these (it copies the rules into its own grammar), so reloading a recently played
      game skips the ~0.2 s parse.
    - ``textworld.envs.pddl.textgen._parse_and_convert(text, rule_name)``: the TatSu parse of a
      grammar snippet; a copy of the cached tree's symbols (:func:`copy_symbols`) is returned on
      every call because the deriver sets the symbols' contexts. LRU of :data:`PARSE_CACHE_SIZE`
      entries.
    - ``textworld.logic._parse_and_convert(text, "conjunctiveQuery")`` (used by
      ``Rule.parse_conjunctive_query`` for every grammar condition, e.g.
      ``receptacleatlocation(r:receptacle, lend:location)``, at every step): a new list of the
      cached propositions is returned (textworld's logic atoms are immutable ``__slots__``
      objects). Other rule names are not cached. LRU of :data:`PARSE_CACHE_SIZE` entries.

    Replaced helper: ``textworld.envs.pddl.textgen.copy_context`` deep-copies the ``variables``
    (name -> ``EntityInfo``) and ``mapping`` (``Placeholder`` -> ``Variable``) dicts for every
    symbol it derives; the replacement copies the two dicts but shares their values, which the
    deriver only reads (``EntityInfo`` is written once at load by the demangler; placeholders and
    variables are immutable). This is about half of a step's time. ``textgen.Symbol.copy``
    likewise copies the symbol with :func:`copy_symbols` instead of a deep copy.

    Replaced library file: textworld builds every environment with ``fast_downward.load_lib()``,
    which copies ``libdownward.so`` (34 MB in fast-downward-textworld 20.6.1, 32 MB of it debug
    information) to a new temporary file and loads the copy (a separate copy per environment: the
    library keeps its state in globals). The copy took ~17 ms per environment here, 64
    environments per worker at every worker start, and wrote 2 GB to disk per start. The caches
    point ``fast_downward.interface.DOWNWARD_LIB_PATH`` at a copy without the debug sections
    (:func:`light_downward_lib`; the same code and data, 1.3 MB), made once per user and machine.

    Reused library copies: ``fast_downward.load_lib`` first takes a copy a closed engine handed
    back (:func:`release_downward_lib`, module docstring "Library copies").

    ``tests/test_alfworld_env.py::test_caches_do_not_change_the_game`` checks that observations,
    admissible actions and rewards are identical with and without these changes.
    """
    ensure_alfworld_data_env()
    if _ORIGINALS:
        return
    import fast_downward
    import fast_downward.interface as fd_interface
    import textworld.envs.pddl.logic as pddl_logic
    import textworld.envs.pddl.textgen as textgen
    import textworld.logic as tw_logic

    _ORIGINALS.update(
        load_lib=fast_downward.load_lib,
        lib_path=fd_interface.DOWNWARD_LIB_PATH,
        pddl2sas=fast_downward.pddl2sas,
        parse=textgen._parse_and_convert,
        logic_parse=pddl_logic._parse_and_convert,
        query_parse=tw_logic._parse_and_convert,
        copy_context=textgen.copy_context,
        symbol_copy=textgen.Symbol.copy,
    )
    fd_interface.DOWNWARD_LIB_PATH = light_downward_lib(fd_interface.DOWNWARD_LIB_PATH) or fd_interface.DOWNWARD_LIB_PATH
    fast_downward.pddl2sas = _memoized_pddl2sas(_ORIGINALS["pddl2sas"])
    fast_downward.load_lib = _reusing_load_lib(_ORIGINALS["load_lib"])
    textgen._parse_and_convert = _memoized_snippet_parse(_ORIGINALS["parse"])
    pddl_logic._parse_and_convert = _memoized_grammar_parse(_ORIGINALS["logic_parse"])
    tw_logic._parse_and_convert = _memoized_query_parse(_ORIGINALS["query_parse"])
    textgen.copy_context = _shallow_copy_context
    textgen.Symbol.copy = _symbol_copy


def _memoized_pddl2sas(orig_sas):
    """``fast_downward.pddl2sas`` memoized in :data:`_SAS_MEMO`, ``sys.argv`` restored after
    each real call (:func:`install_caches`)."""

    def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
        key = (_digest(domain), _digest(problem), bool(optimize))
        hit = _SAS_MEMO.get(key)
        if hit is not None:
            _SAS_MEMO.move_to_end(key)
            return hit
        argv = list(sys.argv)
        try:
            result = orig_sas(domain, problem, verbose=verbose, optimize=optimize)
        finally:
            sys.argv[:] = argv
        _remember(_SAS_MEMO, key, result)
        return result

    return pddl2sas


def _memoized_snippet_parse(orig_parse):
    """textgen's ``_parse_and_convert`` memoized in an LRU of :data:`PARSE_CACHE_SIZE` trees of its
    own; a deep copy of the cached tree is returned (:func:`install_caches`)."""
    parse_cache: OrderedDict[tuple[str, Any], Any] = OrderedDict()

    def parse_and_convert(text, rule_name=None, **kwargs):
        if kwargs.get("trace"):
            return orig_parse(text, rule_name=rule_name, **kwargs)
        key = (text, rule_name)
        tree = parse_cache.get(key)
        if tree is None:
            tree = orig_parse(text, rule_name=rule_name)
            parse_cache[key] = tree
            while len(parse_cache) > PARSE_CACHE_SIZE:
                parse_cache.popitem(last=False)
        else:
            parse_cache.move_to_end(key)
        return copy_symbols(tree)

    return parse_and_convert


def copy_symbols(tree: Any) -> Any:
    """A copy of a textgen parse tree (a list of ``Symbol`` objects, some holding a nested symbol
    in ``symbol`` or ``expression``) in which every symbol object and its ``context`` dict are new;
    strings and the contexts' values are shared. It equals ``copy.deepcopy`` for the deriver,
    which only rebinds a symbol's ``context`` (to a :func:`_shallow_copy_context` of another) and
    reads the rest; the deep copy, which also walks every context's values, was about a sixth of
    a worker's time in the credit instrument's continuations."""
    if isinstance(tree, list):
        return [copy_symbols(x) for x in tree]
    fields = getattr(tree, "__dict__", None)
    if fields is None or "context" not in fields:
        return tree
    new = copy.copy(tree)
    new.context = dict(tree.context)
    for name in ("symbol", "expression"):
        value = fields.get(name)
        if value is not None and not isinstance(value, str):
            setattr(new, name, copy_symbols(value))
    return new


def _symbol_copy(self, context):
    """textgen's ``Symbol.copy`` (a deep copy of the symbol given a copy of ``context``) with
    :func:`copy_symbols` in place of the deep copy (:func:`install_caches`)."""
    import textworld.envs.pddl.textgen as textgen  # lazy: textworld is the alfworld extra's

    new = copy_symbols(self)
    new.context = textgen.copy_context(context)
    return new


def _memoized_grammar_parse(orig_logic_parse):
    """pddl logic's ``_parse_and_convert`` (a game's grammar) memoized in :data:`_GRAMMAR_MEMO`
    (:func:`install_caches`)."""

    def logic_parse_and_convert(text, rule_name=None, **kwargs):
        if kwargs:
            return orig_logic_parse(text, rule_name=rule_name, **kwargs)
        key = (_digest(text), rule_name)
        hit = _GRAMMAR_MEMO.get(key)
        if hit is None:
            hit = orig_logic_parse(text, rule_name=rule_name)
            _remember(_GRAMMAR_MEMO, key, hit)
        else:
            _GRAMMAR_MEMO.move_to_end(key)
        return hit

    return logic_parse_and_convert


def _memoized_query_parse(orig_query_parse):
    """``textworld.logic._parse_and_convert`` memoized for ``rule_name="conjunctiveQuery"`` only,
    in an LRU of :data:`PARSE_CACHE_SIZE` lists of its own; a new list is returned (:func:`install_caches`)."""
    query_cache: OrderedDict[str, list[Any]] = OrderedDict()

    def query_parse_and_convert(*args, **kwargs):
        if kwargs.get("rule_name") != "conjunctiveQuery" or len(args) != 1 or len(kwargs) != 1:
            return orig_query_parse(*args, **kwargs)
        hit = query_cache.get(args[0])
        if hit is None:
            hit = orig_query_parse(*args, **kwargs)
            if not isinstance(hit, list):
                return hit
            query_cache[args[0]] = hit
            while len(query_cache) > PARSE_CACHE_SIZE:
                query_cache.popitem(last=False)
        else:
            query_cache.move_to_end(args[0])
        return list(hit)

    return query_parse_and_convert


def _shallow_copy_context(context):
    """textgen's ``copy_context`` with the ``variables`` and ``mapping`` dicts copied and their
    values shared (:func:`install_caches`)."""
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


def _reusing_load_lib(orig_load_lib):
    """``fast_downward.load_lib`` taking a library copy a closed engine handed back first
    (:data:`_FREE_LIBS`; :func:`install_caches`)."""

    def load_lib():
        return _FREE_LIBS.pop() if _FREE_LIBS else orig_load_lib()

    return load_lib


def light_downward_lib(lib_path: str | os.PathLike[str]) -> str | None:
    """A copy of the shared library ``lib_path`` without its debug sections (``objcopy
    --strip-debug``: the code and data are unchanged), made once and kept under
    ``~/.cache/g2po/downward/<digest of path, size and mtime>/`` (this user's own folder: a
    library another user could have written is never loaded).

    Returns:
        The copy's path, or None when it cannot be made (no ``objcopy``/``strip`` on the PATH,
        the tool failed, or the copy does not load with ``ctypes``); the caller then keeps
        ``lib_path``.
    """
    import ctypes
    import shutil
    import subprocess

    try:
        st = os.stat(lib_path)
    except OSError:
        return None
    tag = hashlib.blake2b(f"{os.path.abspath(lib_path)}|{st.st_size}|{st.st_mtime_ns}".encode(),
                          digest_size=8).hexdigest()
    target = Path(os.path.expanduser("~")) / ".cache" / "g2po" / "downward" / tag / Path(lib_path).name
    if target.is_file():
        return str(target)
    tool = shutil.which("objcopy") or shutil.which("strip")
    if tool is None:
        return None
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([tool, "--strip-debug", str(lib_path), str(tmp)] if tool.endswith("objcopy")
                       else [tool, "--strip-debug", "-o", str(tmp), str(lib_path)],
                       check=True, capture_output=True, timeout=60)
        ctypes.CDLL(str(tmp)).load_sas  # noqa: B018 - the copy loads and has the entry point
        os.replace(tmp, target)  # atomic: concurrent processes make the same file
    except (OSError, subprocess.SubprocessError, AttributeError):
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
            tmp.parent.rmdir()  # only when nothing else is in it
        return None
    return str(target)


def _remember(memo: OrderedDict, key: Any, value: Any) -> None:
    memo[key] = value
    memo.move_to_end(key)
    while len(memo) > SAS_CACHE_SIZE:
        memo.popitem(last=False)


def save_parsed_game(path: str | os.PathLike[str], game: dict[str, Any]) -> bool:
    """Write what loading ``game`` computed (its two PDDL->SAS translations, for the two
    ``optimize`` settings textworld's ``PddlState`` asks for, and the parse of its grammar) to
    ``path``, so that a later load of the game in any process skips fast-downward's translation
    and TatSu's grammar parse: on a generated scene ~80 ms of the ~135 ms CPU a load-and-replay
    takes (``tests/test_alfworld_parsed.py`` checks the replay is the same).

    Args:
        path: the file to write (atomically: a temporary file, then a rename); by convention
            :data:`g2po_bench.benchmarks.alfworld.games.PARSED_FILE` next to the game file.
        game: the game file's JSON object (``pddl_domain``, ``pddl_problem``, ``grammar``), just
            loaded in this process (the memos are keyed by digests of these texts).

    Returns:
        ``True`` when everything was in the memos and was written; ``False`` (nothing written)
        when the caches are not installed or the game was not loaded in this process.
    """
    if not _ORIGINALS:
        return False
    dd, pd = _digest(game["pddl_domain"]), _digest(game["pddl_problem"])
    grammar_key = (_digest(game["grammar"]), _GRAMMAR_RULE)
    sas = {(dd, pd, opt): _SAS_MEMO.get((dd, pd, opt)) for opt in (False, True)}
    grammar = _GRAMMAR_MEMO.get(grammar_key)
    if grammar is None or any(v is None for v in sas.values()):
        return False
    blob = pickle.dumps({"format": PARSED_GAME_FORMAT, "sas": sas, "grammar": {grammar_key: grammar}},
                        protocol=pickle.HIGHEST_PROTOCOL)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(zlib.compress(blob, 1))
    os.replace(tmp, path)
    return True


def remember_task_grammar(template: str, task: str) -> bool:
    """Put the parse of ``template.replace(TASK_PLACEHOLDER, task)`` (a game's grammar) into the
    grammar memo, made from the memoized parse of ``template`` instead of a new TatSu parse of
    the whole grammar (~22 ms per game on the generator's 2-core VM, ~12 % of generating one).

    The two grammars differ only in the ``task`` rule's sentence, so the game's parse is the
    template's parse with that one rule parsed anew from its JSON, the way
    ``ContextSensitiveGrammar.parse`` parses every rule; the other rules and the actions are the
    template's objects (textworld only reads them: ``GameLogic`` copies them into its own
    grammar). Nothing is remembered when the template does not have the shape this relies on (the
    placeholder exactly once, inside a ``task`` rule of the form ``{"rhs": "...UNKNOWN GOAL..."}``)
    or when ``task`` holds characters with a meaning in textworld's grammar strings (``#``, ``[``,
    ``]``, ``{``, ``}``, ``"``, ``\\``): the load then parses the game's grammar itself.
    ``tests/test_alfworld_parsed.py`` checks that the result equals the full parse.

    Args:
        template: the shipped ``alfred.twl2`` text (with :data:`TASK_PLACEHOLDER`).
        task: the task sentence, e.g. ``"put a mug in cabinet"``.

    Returns:
        ``True`` when the memo holds the game grammar's parse afterwards; ``False`` when it was
        not made (see above) or the caches are not installed.
    """
    if not _ORIGINALS or any(c in task for c in '#[]{}"\\') or template.count(TASK_PLACEHOLDER) != 1:
        return False
    text = template.replace(TASK_PLACEHOLDER, task)
    key = (_digest(text), _GRAMMAR_RULE)
    if key in _GRAMMAR_MEMO:
        _GRAMMAR_MEMO.move_to_end(key)
        return True
    from textworld.envs.pddl.textgen import ContextSensitiveGrammar

    def task_rule(rhs: str) -> tuple[str, list[Any]]:
        return next(iter(ContextSensitiveGrammar.parse(json.dumps({"task": [{"rhs": rhs}]}))._rules.items()))

    tkey = _digest(template)
    if tkey not in _TEMPLATE_PARSES:  # parse and check the template once: (actions, grammar, rhs) or None
        _TEMPLATE_PARSES.clear()
        rhs = _task_rhs(template)
        parsed = _ORIGINALS["logic_parse"](template, rule_name=_GRAMMAR_RULE) if rhs is not None else None
        shaped = parsed is not None and repr(parsed[1]._rules.get("task")) == repr(task_rule(rhs)[1])
        _TEMPLATE_PARSES[tkey] = (*parsed, rhs) if shaped else None
    if _TEMPLATE_PARSES[tkey] is None:
        return False
    actions, grammar, template_rhs = _TEMPLATE_PARSES[tkey]
    name_task, rules_task = task_rule(template_rhs.replace(TASK_PLACEHOLDER, task))
    game_grammar = ContextSensitiveGrammar()
    for name, rules in grammar._rules.items():  # the same order; the task rule's own name object
        if name == name_task:
            game_grammar._rules[name_task] = rules_task
        else:
            game_grammar._rules[name] = list(rules)
    _remember(_GRAMMAR_MEMO, key, (actions, game_grammar))
    return True


def _task_rhs(template: str) -> str | None:
    """The ``rhs`` string holding the placeholder in ``template`` (the ``task`` rule's), or None
    when the placeholder is not inside ``"rhs": "..."`` (no quotes or escapes) on one line."""
    line = next((ln for ln in template.splitlines() if TASK_PLACEHOLDER in ln), "")
    m = re.fullmatch(r'\s*"rhs"\s*:\s*"([^"\\]*)"\s*', line)
    return m.group(1) if m else None


def load_parsed_game(path: str | os.PathLike[str]) -> bool:
    """Put what :func:`save_parsed_game` wrote into the memos, so that the next ``load`` of that
    game takes it instead of translating and parsing again.

    The entries keep the digests of the texts they were made from, so they can only ever answer
    for exactly those texts: a file left over from an older version of the game is harmless (its
    entries are never asked for). A missing, unreadable, truncated or foreign file is ignored and
    the game is parsed as usual. The file is a pickle: only files this project's generator wrote
    into a games folder are read, never downloaded data. A file this process has read before
    (same modification time and size) whose entries are all still in the memos is not read again
    (the 8 rollouts of a group load the same game into 8 slots; unpickling took ~10 ms each).

    Returns:
        ``True`` when the entries were added (or were already there); ``False`` when the file is missing or ignored, or
        the caches are not installed.
    """
    if not _ORIGINALS:
        return False
    try:
        st = os.stat(path)
    except OSError:
        return False
    version = (st.st_mtime_ns, st.st_size)
    seen = _PARSED_READ.get(str(path))
    if seen is not None and seen[0] == version and all(k in _SAS_MEMO for k in seen[1]) \
            and all(k in _GRAMMAR_MEMO for k in seen[2]):
        for k in seen[1]:
            _SAS_MEMO.move_to_end(k)
        for k in seen[2]:
            _GRAMMAR_MEMO.move_to_end(k)
        return True  # read before and still in the memos (the same file: same mtime and size)
    try:
        data = pickle.loads(zlib.decompress(Path(path).read_bytes()))
    except (OSError, zlib.error, pickle.UnpicklingError, EOFError, AttributeError, ImportError,
            ValueError, TypeError):
        return False
    if not isinstance(data, dict) or data.get("format") != PARSED_GAME_FORMAT:
        return False
    sas, grammar = data.get("sas"), data.get("grammar")
    if not isinstance(sas, dict) or not isinstance(grammar, dict) or len(sas) != 2 or len(grammar) != 1:
        return False
    for key, value in sas.items():
        _remember(_SAS_MEMO, key, value)
    for key, value in grammar.items():
        _remember(_GRAMMAR_MEMO, key, value)
    _PARSED_READ[str(path)] = (version, tuple(sas), tuple(grammar))
    _PARSED_READ.move_to_end(str(path))
    while len(_PARSED_READ) > SAS_CACHE_SIZE:
        _PARSED_READ.popitem(last=False)
    return True


def release_interned_facts() -> int:
    """Drop the propositions textworld has interned in this process (module docstring "Memory").

    textworld's ``Proposition`` class is built by a ``mementos`` metaclass: every proposition
    made with the same name and arguments is the one object kept in ``mementos``' module-wide
    cache, which is never emptied, so each game played leaves its facts there. Dropping them
    frees those no running episode holds; a proposition asked for later is built again, equal
    to the dropped one (textworld compares, hashes and sorts propositions by name and
    arguments, never by identity), so observations do not change
    (``tests/test_alfworld_memory.py`` plays a game after many others and checks its transcript
    against a fresh process). Other interned objects (``Signature``, a few dozen) stay.

    Returns:
        How many propositions were dropped (0 when textworld is not imported).
    """
    logic = sys.modules.get("textworld.logic")
    memento = sys.modules.get("mementos.core")
    if logic is None or memento is None:
        return 0
    cache = memento._memento_cache
    proposition = logic.Proposition
    dropped = [k for k in cache if type(k) is tuple and k and isinstance(k[0], type) and issubclass(k[0], proposition)]
    for k in dropped:
        del cache[k]
    return len(dropped)


def forget_games() -> None:
    """Empty the per-game memos (translations and grammar parses; the small snippet and
    condition memos stay): the engine then loads any game as one it has never played."""
    _SAS_MEMO.clear()
    _GRAMMAR_MEMO.clear()
    _PARSED_READ.clear()


def uninstall_caches() -> None:
    """Undo :func:`install_caches` (for tests comparing the plain and the faster engine)."""
    if not _ORIGINALS:
        return
    import fast_downward
    import fast_downward.interface as fd_interface
    import textworld.envs.pddl.logic as pddl_logic
    import textworld.envs.pddl.textgen as textgen
    import textworld.logic as tw_logic

    forget_games()
    _FREE_LIBS.clear()
    fast_downward.load_lib = _ORIGINALS.pop("load_lib")
    fd_interface.DOWNWARD_LIB_PATH = _ORIGINALS.pop("lib_path")
    fast_downward.pddl2sas = _ORIGINALS.pop("pddl2sas")
    textgen._parse_and_convert = _ORIGINALS.pop("parse")
    pddl_logic._parse_and_convert = _ORIGINALS.pop("logic_parse")
    tw_logic._parse_and_convert = _ORIGINALS.pop("query_parse")
    textgen.copy_context = _ORIGINALS.pop("copy_context")
    textgen.Symbol.copy = _ORIGINALS.pop("symbol_copy")


def release_downward_lib(env: Any) -> bool:
    """Take the fast-downward library copy of an engine that is being closed (``make_pddl_env``'s
    wrapped environment) and keep it for the next engine this process builds (module docstring
    "Library copies"). The engine cannot use it afterwards (its ``downward_lib`` is None).

    Args:
        env: the wrapped or bare textworld ``PddlEnv``; anything else is left alone.

    Returns:
        True when a copy was kept for reuse; False when ``env`` holds none or
        :func:`install_caches` is not installed (the copy then stays mapped, unused).
    """
    pddl = getattr(env, "unwrapped", env)
    lib = getattr(pddl, "downward_lib", None)
    if lib is None:
        return False
    pddl.downward_lib = None
    if getattr(pddl, "_pddl_state", None) is not None:
        pddl._pddl_state = None
    if not _ORIGINALS:
        return False
    _FREE_LIBS.append(lib)
    return True


def mapped_downward_libs() -> int:
    """Distinct fast-downward library files mapped into this process (``/proc/self/maps``, by
    inode; 0 where ``/proc`` is not available): what :func:`release_downward_lib` bounds."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            # address, perms, offset, device, inode, path [(deleted)]
            return len({(f[3], f[4]) for f in (line.split() for line in fh) if len(f) >= 6 and "downward" in f[5]})
    except OSError:
        return 0


def preload_worker_modules() -> None:
    """Import textworld and alfworld and install :func:`install_caches` in this process.

    :class:`g2po_bench.runtime.workers.EnvPool` calls it before it forks its environment workers: a
    forked worker then starts with the modules loaded instead of importing them itself, which
    took about 1.3 of the 1.8 s of a fresh worker's first reset, and a worker recycled every
    ``env.worker_max_episodes`` episodes paid it again each time.

    Raises:
        ImportError: alfworld/textworld are not installed.
    """
    ensure_alfworld_data_env()
    import textworld  # noqa: F401
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler  # noqa: F401
    from textworld.envs import PddlEnv  # noqa: F401

    install_caches()


def make_pddl_env(*, planner: bool = False, caches: bool = True):
    """Build the wrapped textworld PDDL environment (no game loaded yet).

    Args:
        planner: also request ``policy_commands`` (textworld re-plans with fast-downward from
            the current state; ALFWorld's ``AlfredExpert(expert_type="planner")`` reads the
            same field). Used by the generator to check solvability and get walkthroughs.
        caches: install :func:`install_caches` first.

    Returns:
        ``AlfredInfos(AlfredDemangler(PddlEnv(...), shuffle=False))``; call ``load(path)`` then
        ``reset()``; ``step(cmd)`` returns ``(state, score, done)``.

    Raises:
        ImportError: alfworld/textworld (or fast-downward) are not installed; the message names
            the pinned versions.
    """
    ensure_alfworld_data_env()
    try:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        from textworld.envs import PddlEnv
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "the ALFWorld engine needs `alfworld==0.4.2` and `textworld==1.7.0` "
            f"(pip install alfworld==0.4.2): {exc}"
        ) from exc
    if caches:
        install_caches()
    infos = textworld.EnvInfos(
        won=True, admissible_commands=True, policy_commands=planner, extras=["gamefile"]
    )
    return AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))


def split_intro(feedback: str) -> tuple[str, str]:
    """Split ALFWorld's reset text into (observation, task).

    ``"-= Welcome to TextWorld, ALFRED! =-\\n\\nYou are in the middle of a room. ...\\n\\n
    Your task is to: put a clean egg in microwave."`` ->
    ``("You are in the middle of a room. ...", "put a clean egg in microwave.")``.
    The task is taken like verl-agent's ``extract_task``: everything after
    ``"Your task is to: "``, stripped.

    Raises:
        ValueError: the text holds no ``"Your task is to: "``.
    """
    idx = feedback.find(TASK_PREFIX)
    if idx < 0:
        raise ValueError(f"no {TASK_PREFIX!r} in the ALFWorld intro: {feedback[:200]!r}")
    task = feedback[idx + len(TASK_PREFIX) :].strip()
    obs = feedback[:idx]
    if obs.lstrip().startswith(INTRO_BANNER):
        obs = obs.lstrip()[len(INTRO_BANNER) :]
    return obs.strip(), task
