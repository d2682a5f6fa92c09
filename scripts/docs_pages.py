"""Documentation pages generated from the code: the configuration reference and one page per estimator.

The configuration reference lists every key of :class:`g2po_bench.core.config.RunConfig` (dotted,
e.g. ``train.lr``) with its type, its default and its description: the section's class docstring,
and for a key the comment lines directly above its field plus the comment at the end of its line
in ``g2po_bench/core/config.py``. The estimator pages are the module docstrings of
``algorithms/estimators/*.py`` (equations and source) with what the registry knows of each
estimator registered there (options and defaults, inputs, state key).

Used two ways, both reading the installed suite (``pip install -e .``):

- as an mkdocs hook (``hooks:`` in ``mkdocs.yml``): the pages are added to the site at build time
  (:func:`on_files`), never written by hand or committed, and the nav's "Estimators" section lists
  one page per module (:func:`on_config`), so a new estimator module needs no edit of ``mkdocs.yml``;
- from the command line, to read or diff them without building the site::

      python scripts/docs_pages.py                 # list the generated pages
      python scripts/docs_pages.py reference/config.md    # print one page
      python scripts/docs_pages.py --out DIR       # write every page under DIR

Raises nothing of its own: an import error of the suite fails the build, as it should.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import io
import re
import sys
import textwrap
import tokenize
from pathlib import Path
from typing import Any

from g2po_bench.algorithms.registry import (
    available_estimators,
    discover_estimators,
    estimator_inputs,
    estimator_spec,
)
from g2po_bench.core import config as config_module
from g2po_bench.core.config import RunConfig

CONFIG_PAGE = "reference/config.md"
ESTIMATOR_DIR = "estimators"


# ---------------------------------------------------------------------------- configuration
def _field_comments(cls: type) -> dict[str, str]:
    """Field name -> its description from the source of dataclass ``cls``: the comment block right
    above the field (contiguous ``#`` lines) and the comment at the end of the field's line."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    trailing: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            row = tok.start[0]
            if lines[row - 1].strip().startswith("#"):
                continue  # a whole-line comment: collected below
            trailing[row] = tok.string.lstrip("#").strip()
    out: dict[str, str] = {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        row = node.lineno - 1  # 1-based line number of the line above the field
        while row >= 1 and lines[row - 1].strip().startswith("#"):
            above.insert(0, lines[row - 1].strip().lstrip("#").strip())
            row -= 1
        parts = [" ".join(above)] if above else []
        if node.lineno in trailing:
            parts.append(trailing[node.lineno])
        out[node.target.id] = "; ".join(p for p in parts if p)
    return out


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return "(required)"


def _format_default(value: Any) -> str:
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value!r}`"


_CODE_SPAN = re.compile(r"(`[^`]*`)")


def _markdown_text(text: str, *, in_table: bool = False) -> str:
    """``text`` safe for Markdown outside code spans: ``&``, ``<`` and ``>`` as entities (a
    placeholder such as ``<run>`` is not an HTML tag that the browser swallows) and, in a table
    cell, ``|`` as ``\\|``. Code spans are kept as they are: their text shows literally, and a ``|``
    inside one does not split a table cell (Python-Markdown's tables), where ``\\|`` would show
    its backslash."""
    parts = _CODE_SPAN.split(text)
    for i in range(0, len(parts), 2):  # the text between code spans
        plain = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        parts[i] = plain.replace("|", "\\|") if in_table else plain
    return "".join(parts)


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell (one line; see :func:`_markdown_text`)."""
    return _markdown_text(text.replace("\n", " "), in_table=True)


def config_keys(cls: type | None = None, prefix: str = "") -> list[str]:
    """Every leaf key of ``cls`` (default :class:`RunConfig`), dotted, in declaration order."""
    cls = RunConfig if cls is None else cls
    keys: list[str] = []
    for f in dataclasses.fields(cls):
        value = _default(f)
        if dataclasses.is_dataclass(value):
            keys.extend(config_keys(type(value), f"{prefix}{f.name}."))
        else:
            keys.append(prefix + f.name)
    return keys


def config_reference() -> str:
    """The configuration reference page (Markdown): one table per section of :class:`RunConfig`."""
    out = [
        "# Configuration reference",
        "",
        "Generated from the config dataclasses in `g2po_bench/core/config.py` when the site is built",
        "(`scripts/docs_pages.py`): every key with its type, its default (the CPU default of",
        "`g2po train` with no arguments) and the description written beside the field. Presets and",
        "files override the defaults, dotted `key=value` arguments override both; `g2po config",
        "[overrides]` prints the resolved result. See [Configuration](../configuration.md) for how a",
        "config is loaded and checked.",
        "",
    ]

    def section(cls: type, prefix: str, title: str) -> None:
        doc = _markdown_text(_inline(inspect.getdoc(cls) or ""))
        comments = _field_comments(cls)
        out.extend([f"## {title}", "", doc, "", "| key | type | default | description |",
                    "|---|---|---|---|"])
        nested: list[tuple[type, str]] = []
        for f in dataclasses.fields(cls):
            value = _default(f)
            if dataclasses.is_dataclass(value):
                nested.append((type(value), f"{prefix}{f.name}."))
                continue
            ftype = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
            out.append(f"| `{prefix}{f.name}` | {_cell(f'`{ftype}`')} | {_cell(_format_default(value))} "
                       f"| {_cell(comments.get(f.name, ''))} |")
        out.append("")
        for sub, sub_prefix in nested:
            section(sub, sub_prefix, f"`{sub_prefix.rstrip('.')}`: {sub.__name__}")

    section(RunConfig, "", "Top level: RunConfig")
    keep = ", ".join(f"`{k}`" for k in sorted(getattr(config_module, "NON_SEMANTIC_KEYS", ())))
    if keep:
        out.extend(["## Keys left out of the config hash", "",
                    "A run's default id is a hash of its resolved config without these keys "
                    f"(`NON_SEMANTIC_KEYS`): {keep}. `model.device=auto` enters the hash as the device it "
                    "means (`cpu`, or `cuda` where torch sees a GPU; a sweep's job: `cuda` when it asks for GPUs), "
                    "so `auto` and that device name the same run.", ""])
    return "\n".join(out)


# ---------------------------------------------------------------------------- estimators
_ROLE = re.compile(r":(?:func|mod|class|meth|attr|data|obj):`~?([^`]+)`")


def rst_to_markdown(doc: str) -> str:
    """A module docstring (reStructuredText as the suite writes it) as Markdown: ``x`` becomes
    `x`, roles like :func:`x` become `x`, and a paragraph ending in ``::`` introduces a code block
    (the indented lines after it)."""
    lines = doc.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            text = line.rstrip()[:-2].rstrip()
            if text:
                out.append(_inline(text + ("" if text.endswith(":") else ":")))
            i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            out.extend(["", "```text", textwrap.dedent("\n".join(block)).strip("\n"), "```", ""])
            continue
        out.append(_inline(line))
        i += 1
    return "\n".join(out)


def _inline(text: str) -> str:
    text = _ROLE.sub(lambda m: f"`{m.group(1)}`", text)
    return text.replace("``", "`")


def estimator_pages() -> dict[str, str]:
    """Page path -> Markdown: ``estimators/<module>.md`` per estimator module, and the index."""
    discover_estimators()
    by_module: dict[str, list[Any]] = {}
    for name in available_estimators():
        spec = estimator_spec(name)
        if not spec.module.startswith("g2po_bench.algorithms.estimators."):
            continue  # an estimator of another package: not part of this site
        by_module.setdefault(spec.module, []).append(spec)
    pages: dict[str, str] = {}
    index = ["# Advantage estimators", "",
             "One page per module of `algorithms/estimators/`, generated when the site is built from",
             "the module's docstring (equations and source) and its registration (options, inputs).",
             "`g2po algorithms` prints the same registry; [Extending](../extending.md) shows how to",
             "add one.", "", "| estimator | page | description |", "|---|---|---|"]
    for module_name in sorted(by_module):
        short = module_name.rsplit(".", 1)[1]
        module = importlib.import_module(module_name)
        doc = inspect.getdoc(module) or ""
        title, _, rest = doc.partition("\n")
        body = [f"# {title.strip()}", "", f"Module: `algorithms/estimators/{short}.py`", ""]
        for spec in by_module[module_name]:
            index.append(f"| `{spec.name}` | [{short}]({short}.md) | {_cell(spec.description)} |")
            inputs = ", ".join(f"`{x}`" for x in estimator_inputs(spec.name)) or "none"
            body.extend([f"## `algorithm.name={spec.name}`", "", _cell(spec.description), "",
                         f"- table label: {spec.display_label()}",
                         f"- state key (`env.state_key=auto`): `{spec.state_key}`",
                         f"- inputs beyond the `StepBatch`: {inputs}",
                         f"- per-row oracle in the tests: {'yes' if spec.oracle else 'no'}", ""])
            if spec.defaults:
                body.extend(["| option (`algorithm.options.*` or common key) | default |", "|---|---|"])
                body.extend(f"| `{k}` | {_cell(_format_default(v))} |"
                            for k, v in sorted(spec.defaults.items()))
                body.append("")
        body.extend(["## Definition (module docstring)", "", rst_to_markdown(rest.strip()), ""])
        pages[f"{ESTIMATOR_DIR}/{short}.md"] = "\n".join(body)
    pages[f"{ESTIMATOR_DIR}/index.md"] = "\n".join(index) + "\n"
    return pages


def _estimator_modules() -> list[str]:
    """The suite's estimator modules (``g2po_bench.algorithms.estimators.<name>``), sorted."""
    discover_estimators()
    return sorted({estimator_spec(n).module for n in available_estimators()
                   if estimator_spec(n).module.startswith("g2po_bench.algorithms.estimators.")})


def estimator_nav() -> list[Any]:
    """The site navigation's "Estimators" section: the index, then one entry per estimator module
    titled by its docstring's title up to the colon (``"G2PO: group-graph ..."`` -> ``G2PO``), so
    that a new module of ``algorithms/estimators/`` gets its page and its nav entry with no edit of
    ``mkdocs.yml``."""
    nav: list[Any] = [f"{ESTIMATOR_DIR}/index.md"]
    for module_name in _estimator_modules():
        short = module_name.rsplit(".", 1)[1]
        title = (inspect.getdoc(importlib.import_module(module_name)) or short).partition("\n")[0]
        nav.append({title.partition(":")[0].strip() or short: f"{ESTIMATOR_DIR}/{short}.md"})
    return nav


def generated_pages() -> dict[str, str]:
    """Every generated page: path under ``docs/`` -> Markdown."""
    pages = {CONFIG_PAGE: config_reference()}
    pages.update(estimator_pages())
    return pages


# ---------------------------------------------------------------------------- mkdocs hook
#: the title of the nav section whose pages are generated (``mkdocs.yml`` names it, with the index only)
ESTIMATOR_NAV_TITLE = "Estimators"


def on_config(config):  # noqa: ANN001 - mkdocs hook signature
    """mkdocs hook: fill the nav's "Estimators" section with :func:`estimator_nav`."""
    for entry in config["nav"] or []:
        if isinstance(entry, dict) and ESTIMATOR_NAV_TITLE in entry:
            entry[ESTIMATOR_NAV_TITLE] = estimator_nav()
    return config


def on_files(files, config):  # noqa: ANN001 - mkdocs hook signature
    """mkdocs hook: add the generated pages to the site's files."""
    from mkdocs.structure.files import File  # lazy: the command-line use needs no mkdocs

    for path, text in generated_pages().items():
        files.append(File.generated(config, path, content=text))
    return files


def main(argv: list[str] | None = None) -> int:
    """Print one generated page (e.g. ``reference/config.md``), write them all under ``--out``, or
    list their paths; returns the exit status (2: unknown page)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("page", nargs="?", help="print this page (e.g. reference/config.md)")
    ap.add_argument("--out", type=Path, help="write every generated page under this folder")
    args = ap.parse_args(argv)
    pages = generated_pages()
    if args.page:
        if args.page not in pages:
            print(f"no generated page {args.page!r}; pages: {', '.join(sorted(pages))}", file=sys.stderr)
            return 2
        print(pages[args.page])
    elif args.out:
        for path, text in pages.items():
            (args.out / path).parent.mkdir(parents=True, exist_ok=True)
            (args.out / path).write_text(text)
        print(f"wrote {len(pages)} pages under {args.out}")
    else:
        print("\n".join(sorted(pages)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
