"""The published numbers of the G2PO and GiGPO papers, as machine-readable tables.

Source: transcriptions of the papers' tables (G2PO, arXiv 2606.22995, Tables 1 and 2; GiGPO,
arXiv 2505.10978, Table 1; the other published figures; the CRBC paper, arXiv 2609.35082: its
comparison of GRPO, GiGPO, GraphGPO, HGPO and CRBC and its CRBC ablations), one row per cell, each
naming its table, row and column. The CSV files live in ``results/reference/`` and are shipped as
the data package ``g2po_bench.published`` (``setup.py``); :func:`load_reference` reads them all into
one long table.

Files:

- ``table1_alfworld_webshop.csv``: Table 1 (ALFWorld per task type and All, WebShop score and
  success) for the closed-source prompting models, Qwen2.5-1.5B/7B-Instruct prompting rows and
  the RL rows (copied by the G2PO paper from GiGPO's Table 1, 150 iterations), and G2PO
  (100 iterations).
- ``table2_appworld.csv``: the G2PO paper's Table 2 (AppWorld, Qwen2.5-14B-Instruct).
- ``other_published.csv``: the w sweep, the group-size statistics, compute per step and an
  independent single-seed rerun (not a paper number; ``paper == "independent rerun"``).
- ``crbc_2026.csv``: the CRBC paper's comparison (table "CRBC comparison": ALFWorld All and
  WebShop score/success, 1.5B) and its ablations of CRBC (table "CRBC ablations": closure depth
  K, beta, (w_G, w_S); method named like the suite's variant label, e.g.
  "CRBC [closure_depth=0]"), shown by ``g2po report`` beside our runs.

Columns (one row per published cell, "long" format):

==============  ===========================================================================
paper           "G2PO" | "GiGPO" | "CRBC" | "independent rerun"
table           "Table 1" | "Table 2" | "CRBC comparison" | "CRBC ablations" | a free label for
                the other figures ("w sweep", ...)
model           the model as printed, e.g. "Qwen2.5-1.5B-Instruct", "GPT-4o"
model_size      "1.5B" | "7B" | "14B" | "closed-source" | "" (not stated)
method          the project's method name: "PPO (critic)", "RLOO", "GRPO", "GiGPO w/ std",
                "GiGPO w/o std", "GiGPO" (variant not stated), "G2PO", "ReAct", "Reflexion",
                "Qwen2.5 (prompting)", "GPT-4o", "Gemini-2.5-Pro", "GraphGPO", "HGPO", "CRBC",
                or a variant label "CRBC [beta=1]" (ablations)
env             "alfworld" | "webshop" | "appworld" | "" (not stated)
metric          success_pick, success_look, success_clean, success_heat, success_cool,
                success_pick2, success_all (ALFWorld, %), webshop_score (mean reward x 100),
                webshop_success (%), appworld_success, appworld_score (%), and for the other
                figures best_step_weight, singleton_frac_pct, node_size_mean, time_*_s, ...
mean            float; NaN when ``status == "unknown"``
std             float; NaN unless ``std_status == "reported"``
status          "reported" (read from a transcription) | "derived" (approximate value
                reconstructed by the transcriptions, printed with "≈") | "unknown" (no value)
std_status      "reported" | "not_reported" (the paper prints a single number) | "unknown"
                (the paper has one, the transcriptions lost it)
seeds           Int64; number of seeds behind the mean where known (<NA> otherwise)
iterations      Int64; training iterations (0 for prompting; <NA> when not stated)
source          "paper (arXiv id), table, row 'label' (model), column 'label'"
notes           free text ("" when none)
==============  ===========================================================================

Example::

    from g2po_bench.analysis.reference import load_reference
    ref = load_reference()
    t1 = ref[ref["table"] == "Table 1"]
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["load_reference", "REFERENCE_COLUMNS", "STATUSES", "STD_STATUSES", "reference_files"]

REFERENCE_COLUMNS = (
    "paper",
    "table",
    "model",
    "model_size",
    "method",
    "env",
    "metric",
    "mean",
    "std",
    "status",
    "std_status",
    "seeds",
    "iterations",
    "source",
    "notes",
)
STATUSES = ("reported", "derived", "unknown")
STD_STATUSES = ("reported", "not_reported", "unknown")
_FLOAT_COLUMNS = ("mean", "std")
_COUNT_COLUMNS = ("seeds", "iterations")
_STRING_COLUMNS = tuple(c for c in REFERENCE_COLUMNS if c not in _FLOAT_COLUMNS + _COUNT_COLUMNS)


TABLES_PACKAGE = "g2po_bench.published"
"""The data package of the published tables: the folder ``results/reference`` (setup.py)."""


def _tables():
    """The folder of the published tables: the installed data package, or in an editable install
    (whose setuptools finder does not map a data-only package inside a regular one) the checkout's
    ``results/reference``."""
    try:
        return resources.files(TABLES_PACKAGE)
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[1] / "results" / "reference"


def reference_files() -> list[str]:
    """Names of the shipped reference CSV files, sorted."""
    root = _tables()
    return sorted(p.name for p in root.iterdir() if p.name.endswith(".csv"))


def load_reference(tables: str | list[str] | None = None) -> pd.DataFrame:
    """All published numbers as one long DataFrame (columns: see the module docstring).

    Args:
        tables: keep only these values of the ``table`` column (e.g. ``"Table 1"``);
            None keeps everything.

    Returns:
        DataFrame with :data:`REFERENCE_COLUMNS` (string columns use "" for empty; ``mean``
        and ``std`` are float with NaN for missing; ``seeds``/``iterations`` are Int64).

    Raises:
        ValueError: a CSV file lacks a column, has an unknown status, an "unknown" cell with
            a value, a "reported"/"derived" cell without one, or two rows for the same cell
            (paper, table, model_size, method, env, metric).
    """
    import pandas as pd

    root = _tables()
    frames = []
    for name in reference_files():
        with root.joinpath(name).open("r", encoding="utf-8") as fh:
            df = pd.read_csv(fh, dtype=str, keep_default_na=False)
        missing = [c for c in REFERENCE_COLUMNS if c not in df.columns]
        if missing:
            raise ValueError(f"reference file {name}: missing columns {missing}")
        df = df[list(REFERENCE_COLUMNS)]
        frames.append(df)
    ref = pd.concat(frames, ignore_index=True)
    for col in _STRING_COLUMNS:
        ref[col] = ref[col].astype(object).fillna("").map(lambda s: str(s).strip())
    for col in _FLOAT_COLUMNS:
        ref[col] = pd.to_numeric(ref[col].replace("", None), errors="raise").astype(float)
    for col in _COUNT_COLUMNS:
        ref[col] = pd.to_numeric(ref[col].replace("", None), errors="raise").astype("Int64")
    _validate(ref)
    if tables is not None:
        wanted = [tables] if isinstance(tables, str) else list(tables)
        ref = ref[ref["table"].isin(wanted)].reset_index(drop=True)
    return ref


def _validate(ref: pd.DataFrame) -> None:
    bad = ref[~ref["status"].isin(STATUSES)]
    if len(bad):
        raise ValueError(f"unknown status values {sorted(set(bad['status']))}; expected {STATUSES}")
    bad = ref[~ref["std_status"].isin(STD_STATUSES)]
    if len(bad):
        raise ValueError(
            f"unknown std_status values {sorted(set(bad['std_status']))}; expected {STD_STATUSES}"
        )
    unknown_with_value = ref[(ref["status"] == "unknown") & ref["mean"].notna()]
    if len(unknown_with_value):
        raise ValueError(f"'unknown' cells with a value: {unknown_with_value['source'].tolist()}")
    known_without_value = ref[(ref["status"] != "unknown") & ref["mean"].isna()]
    if len(known_without_value):
        raise ValueError(f"cells without a value not marked 'unknown': {known_without_value['source'].tolist()}")
    std_mismatch = ref[(ref["std_status"] == "reported") != ref["std"].notna()]
    if len(std_mismatch):
        raise ValueError(f"std present iff std_status == 'reported' fails for: {std_mismatch['source'].tolist()}")
    key = ["paper", "table", "model_size", "method", "env", "metric"]
    dup = ref[ref.duplicated(key, keep=False)]
    if len(dup):
        raise ValueError(f"duplicate reference cells: {dup[key].drop_duplicates().values.tolist()}")
