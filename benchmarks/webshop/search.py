"""Product search: BM25 over the product documents with ``bm25s``, cached on disk and in process.

The original WebShop searches a Lucene index (pyserini) of the documents' ``contents``
(Title + Description + first bullet point + options, lowercased; see
:func:`g2po_bench.benchmarks.webshop.products.search_text`) and shows the top 50 hits, 10 a page.
Here: ``bm25s`` with the Lucene scoring variant, k1 = 0.9, b = 0.4 (pyserini's defaults)
and Lucene's 33 English stop words. A comparison with a real Lucene index (pyserini) on 112
test queries, outside the suite, gave the same top result for 94.6 % of them and 99.6 %
agreement on the top 10.

Scoring (Lucene BM25, per query term t, summed; a term repeated in the query counts again,
as Anserini's bag-of-words query boosts it by its count)::

    idf(t)   = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score    = idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl))

where N = number of documents, df = documents containing t, tf = occurrences of t in the
document, dl = its length in tokens (stop words removed), avgdl = mean dl. Only documents
that contain at least one query term are hits (Lucene returns no zero-score documents);
hits are ranked by score, ties by document order (Lucene's doc id order).

Tokenisation (same on both sides, :func:`tokenize`): lowercase, tokens of two or more word
characters (``\\b\\w\\w+\\b``, bm25s' default pattern), stop words removed, no stemming.
Known differences from Lucene: no Porter stemming and no possessive filter (Lucene's
English analyzer has both), single-character tokens dropped, doc lengths exact
(Lucene stores them quantised).

The index is built once per document set: in process (:func:`get_search_engine`) and on
disk under ``<cache_dir>/<sha256 of the settings and documents>/`` (bm25s' own save format).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = [
    "SEARCH_RETURN_N",
    "PRODUCT_WINDOW",
    "K1",
    "B",
    "STOPWORDS",
    "tokenize",
    "documents_hash",
    "SearchEngine",
    "BruteForceBM25",
    "get_search_engine",
]

#: hits returned by a search (the original's SEARCH_RETURN_N)
SEARCH_RETURN_N = 50
#: results per page (the original's PRODUCT_WINDOW)
PRODUCT_WINDOW = 10
#: Lucene BM25 parameters used by pyserini
K1 = 0.9
B = 0.4
#: Lucene's English stop words (EnglishAnalyzer.ENGLISH_STOP_WORDS_SET)
STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)
_TOKEN_RE = re.compile(r"(?u)\b\w\w+\b")
#: bump when tokenisation or scoring changes (part of the disk cache key)
INDEX_VERSION = "ws-bm25s-1"

log = logging.getLogger(__name__)


def tokenize(text: str) -> list[str]:
    """Lowercase, split into ``\\w\\w+`` tokens, drop stop words (module docstring)."""
    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in STOPWORDS]


def documents_hash(ids: Sequence[str], texts: Sequence[str], k1: float = K1, b: float = B) -> str:
    """SHA-256 (hex) of the index settings and the (id, text) documents: the disk cache key."""
    h = hashlib.sha256(f"{INDEX_VERSION}|k1={k1}|b={b}|n={len(ids)}\n".encode())
    for i, t in zip(ids, texts):
        h.update(i.encode())
        h.update(b"\t")
        h.update(t.encode())
        h.update(b"\n")
    return h.hexdigest()


class SearchEngine:
    """BM25 search over a fixed list of documents.

    Args:
        ids: document ids (ASINs), in catalogue order.
        texts: the documents' search texts, same order.
        cache_dir: folder for the on-disk index cache (None = no disk cache).
        k1, b: BM25 parameters.
        key: the precomputed :func:`documents_hash` (computed when None).

    Attributes:
        build_seconds: time spent building or loading the index.
        loaded_from_disk: whether the index came from the disk cache.
        key: the documents hash.
    """

    def __init__(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        *,
        cache_dir: str | Path | None = None,
        k1: float = K1,
        b: float = B,
        key: str | None = None,
    ) -> None:
        import bm25s  # heavy-ish import, only when an index is needed

        if len(ids) != len(texts):
            raise ValueError(f"{len(ids)} ids but {len(texts)} texts")
        if not ids:
            raise ValueError("cannot index an empty product list")
        self.ids = list(ids)
        self.k1, self.b = k1, b
        self.key = key or documents_hash(self.ids, texts, k1, b)
        self.loaded_from_disk = False
        t0 = time.perf_counter()
        folder = Path(cache_dir) / self.key if cache_dir is not None else None
        self._bm25 = None
        if folder is not None and (folder / "ids.json").is_file():
            try:
                with (folder / "ids.json").open() as f:
                    if json.load(f) == self.ids:
                        self._bm25 = bm25s.BM25.load(str(folder))
                        self.loaded_from_disk = True
            except Exception as exc:  # a corrupt cache entry is rebuilt, not fatal
                log.warning("ignoring unreadable WebShop index cache %s: %s", folder, exc)
                self._bm25 = None
        if self._bm25 is None:
            self._bm25 = bm25s.BM25(method="lucene", k1=k1, b=b)
            self._bm25.index([tokenize(t) for t in texts], show_progress=False)
            if folder is not None:
                self._save(folder)
        self._vocab = self._bm25.vocab_dict
        self.build_seconds = time.perf_counter() - t0

    def _save(self, folder: Path) -> None:
        """Write the index atomically (a temp folder renamed into place)."""
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
            self._bm25.save(str(tmp))
            with (tmp / "ids.json").open("w") as f:
                json.dump(self.ids, f)
            try:
                os.replace(tmp, folder)
            except OSError:  # another process won the race: keep theirs
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError as exc:
            log.warning("could not write WebShop index cache %s: %s", folder, exc)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for ``query`` (float32, zeros when no term matches)."""
        token_ids = [self._vocab[t] for t in tokenize(query) if t in self._vocab]
        if not token_ids:
            return np.zeros(len(self.ids), dtype=np.float32)
        return np.asarray(self._bm25.get_scores(token_ids), dtype=np.float32)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Indices of the top ``k`` documents (score > 0), best first, ties by index."""
        s = self.scores(query)
        hits = np.flatnonzero(s > 0)
        if hits.size == 0:
            return []
        if hits.size > k:
            kth = np.partition(s[hits], hits.size - k)[hits.size - k]
            hits = hits[s[hits] >= kth]
        order = np.lexsort((hits, -s[hits]))  # primary: score desc, secondary: index asc
        return [int(i) for i in hits[order][:k]]


class BruteForceBM25:
    """A straightforward pure-Python Lucene BM25 (module docstring formula), used to check
    :class:`SearchEngine`: every document is scored term by term. O(documents x query terms)."""

    def __init__(self, texts: Sequence[str], *, k1: float = K1, b: float = B) -> None:
        self.k1, self.b = k1, b
        self.docs = [Counter(tokenize(t)) for t in texts]
        self.lengths = [sum(c.values()) for c in self.docs]
        self.avgdl = sum(self.lengths) / max(len(self.docs), 1)
        self.df: Counter[str] = Counter()
        for c in self.docs:
            self.df.update(c.keys())
        self._norms = [k1 * (1.0 - b + b * dl / self.avgdl) for dl in self.lengths]

    def idf(self, term: str) -> float:
        n, df = len(self.docs), self.df[term]
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def score(self, query: str, doc: int) -> float:
        return self._score([(t, self.idf(t)) for t in tokenize(query)], doc)

    def _score(self, terms: list[tuple[str, float]], doc: int) -> float:
        tf_doc, norm = self.docs[doc], self._norms[doc]
        total = 0.0
        for term, idf in terms:
            tf = tf_doc.get(term, 0)
            if tf:
                total += idf * tf / (tf + norm)
        return total

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        terms = [(t, self.idf(t)) for t in tokenize(query)]
        scored = [(self._score(terms, d), d) for d in range(len(self.docs))]
        scored = [(s, d) for s, d in scored if s > 0]
        scored.sort(key=lambda x: (-x[0], x[1]))
        return [d for _, d in scored[:k]]


_ENGINES: dict[str, SearchEngine] = {}
_LOCK = threading.Lock()


def get_search_engine(
    ids: Sequence[str], texts: Sequence[str], *, cache_dir: str | Path | None = None
) -> SearchEngine:
    """The process-wide engine for these documents (built or loaded once per process)."""
    key = documents_hash(ids, texts)
    with _LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = SearchEngine(ids, texts, cache_dir=cache_dir, key=key)
            _ENGINES[key] = engine
        return engine
