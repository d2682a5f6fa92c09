"""The README and the documentation site stay true to the repository (no network, no build).

- README.md is short (at most 200 lines);
- the install and test commands it quotes are the ones ``.ci/run`` runs (both files parsed);
- every relative link in README.md and in ``docs/*.md`` points to an existing file;
- the generated configuration reference (``scripts/docs_pages.py``, the site's mkdocs hook) lists
  every key of :class:`RunConfig` with its default, and an estimator page exists for every
  estimator module of the suite;
- README.md, ``docs/`` and ``results/`` narrate no work by day or round.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from g2po_bench.algorithms.registry import available_estimators, discover_estimators, estimator_spec
from g2po_bench.core.config import RunConfig

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
CI = REPO / ".ci" / "run"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
# pip options that change output or checks, not what is installed
QUIET = {"-q", "--quiet", "--disable-pip-version-check"}


def _docs_pages():
    spec = importlib.util.spec_from_file_location("docs_pages", REPO / "scripts" / "docs_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shell_lines(text: str, lang: str = "bash") -> list[str]:
    """The command lines of the fenced ``lang`` blocks of a Markdown text (comments dropped)."""
    lines = []
    for block_lang, body in FENCE.findall(text):
        if block_lang == lang:
            lines += [ln.split(" #")[0].strip() for ln in body.splitlines() if ln.strip()]
    return lines


def _commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line: ``a && b || exit 1`` -> [a, b] (``exit`` dropped)."""
    out, current = [], []
    for tok in shlex.split(line, comments=True):
        if tok in ("&&", "||", ";", "&"):
            if current:
                out.append(current)
            current = []
        else:
            current.append(tok)
    if current:
        out.append(current)
    return [c for c in out if c[0] != "exit"]


def _pip_install(cmd: list[str]) -> list[str] | None:
    """The arguments of ``python3 -m pip install ...`` without output options, else None."""
    if cmd[:4] != ["python3", "-m", "pip", "install"]:
        return None
    return [a for a in cmd[4:] if a not in QUIET]


def _ci_commands() -> list[list[str]]:
    cmds = []
    for line in CI.read_text().splitlines():
        if line.strip().startswith(("#", "echo")) or not line.strip():
            continue
        try:
            cmds += _commands(line)
        except ValueError:  # a line of a multi-line construct shlex cannot split alone
            continue
    return cmds


def test_readme_is_short():
    n = len(README.read_text().splitlines())
    assert n <= 200, f"README.md has {n} lines; move detail into docs/ (at most 200)"


def test_readme_install_command_is_the_one_ci_runs():
    readme = [c for line in _shell_lines(README.read_text()) for c in _commands(line)]
    readme_installs = [a for a in (_pip_install(c) for c in readme) if a and "torch==2.13.0" in a]
    ci_installs = [a for a in (_pip_install(c) for c in _ci_commands()) if a and "torch==2.13.0" in a]
    assert len(ci_installs) == 1, f".ci/run should install the suite once with torch: {ci_installs}"
    assert readme_installs, "README.md quotes no `python3 -m pip install torch==2.13.0 -e ...` command"
    for args in readme_installs:
        assert args == ci_installs[0], (
            f"README installs {shlex.join(args)!r} but .ci/run installs {shlex.join(ci_installs[0])!r}")
    assert ["g2po", "train"] in readme, "README.md should quote the main job, `g2po train`"


def test_readme_test_command_is_the_one_ci_runs():
    readme = [c for line in _shell_lines(README.read_text()) for c in _commands(line)]
    pytest_cmd = ["python3", "-m", "pytest", "-q"]
    assert pytest_cmd in readme, "README.md should quote the test command `python3 -m pytest -q`"
    # .ci/run starts it as `setsid -w nohup python3 -m pytest -q > "$log" 2>&1 &`: the command is
    # what follows the launcher up to the first redirection
    runs = []
    for cmd in _ci_commands():
        if "pytest" in cmd and "python3" in cmd:
            tail = cmd[cmd.index("python3"):]
            cut = next((i for i, t in enumerate(tail) if t.startswith((">", "2>"))), len(tail))
            runs.append(tail[:cut])
    assert runs, f".ci/run no longer runs `{shlex.join(pytest_cmd)}`: update README.md and this test together"
    assert all(r == pytest_cmd for r in runs), f".ci/run runs {runs}, README.md quotes {pytest_cmd}"


def test_ci_builds_the_site_strictly_before_the_tests():
    text = CI.read_text()
    build = text.find("mkdocs build --strict")
    tests = text.find("python3 -m pytest -q >")
    assert build != -1 and tests != -1 and build < tests, ".ci/run should run `mkdocs build --strict` before the tests"


@pytest.mark.parametrize("page", [README, *sorted((REPO / "docs").glob("*.md")),
                                  *sorted((REPO / "results").glob("*/README.md"))],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_point_to_existing_files(page):
    generated = set(_docs_pages().generated_pages()) if page.parent == REPO / "docs" else set()
    missing = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#")[0]
        resolved = (page.parent / path).resolve()
        rel = resolved.relative_to((REPO / "docs").resolve()).as_posix() if resolved.is_relative_to(
            (REPO / "docs").resolve()) else None
        if not resolved.exists() and rel not in generated:
            missing.append(target)
    assert not missing, f"{page.relative_to(REPO)} links to files that do not exist: {missing}"


def test_config_reference_lists_every_key_with_its_default():
    pages = _docs_pages()
    text = pages.config_reference()
    keys = pages.config_keys()

    def leaves(obj, prefix=""):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                yield from leaves(value, f"{prefix}{f.name}.")
            else:
                yield prefix + f.name, value

    expected = dict(leaves(RunConfig()))
    assert keys == list(expected), "config_keys() does not walk RunConfig's fields"
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([\w.]+)` \| `[^`]*` \| (.*?) \|", text, re.M)}
    assert set(rows) == set(expected), f"missing: {sorted(set(expected) - set(rows))}"
    assert rows["train.iterations"] == "`54`" and rows["env.name"] == '`"alfworld"`'
    assert rows["run_id"] == "`null`" and rows["resume"] == "`false`"
    assert "`train.lr` | `float` | `0.0003`" in text
    # a field's comment is its description
    assert re.search(r"^\| `train.kl_coef` \|.*the reference \(and the GPU presets\) use 0.01", text, re.M)


def test_an_estimator_page_for_every_estimator_module():
    discover_estimators()
    pages = _docs_pages().estimator_pages()
    for name in available_estimators():
        module = estimator_spec(name).module
        if module.startswith("g2po_bench.algorithms.estimators."):
            page = f"estimators/{module.rsplit('.', 1)[1]}.md"
            assert page in pages and f"algorithm.name={name}" in pages[page]
    assert "```text" in pages["estimators/g2po.md"], "the docstring's equations should be a code block"
    prose = FENCE.sub("", "".join(pages.values()) + _docs_pages().config_reference())
    assert not re.search(r":(func|mod|class):|``", prose), "reStructuredText left in the generated pages"


def test_config_reference_renders_placeholders_and_union_types():
    """Issue 51: the configuration reference printed `<env>-<algorithm>-s<seed>-<config hash>`, `<run>` and
    `<K>` as raw tags (the browser swallowed them) and `str \\| None` with a literal backslash."""
    markdown = pytest.importorskip("markdown")
    html = markdown.markdown(_docs_pages().config_reference(), extensions=["tables"])
    assert "null: &lt;env&gt;-&lt;algorithm&gt;-s&lt;seed&gt;-&lt;config hash&gt;" in html
    assert "write &lt;run&gt;/steps/iter_&lt;K&gt;.parquet" in html
    assert "<td><code>str | None</code></td>" in html and "\\|" not in html
    assert not re.search(r"<(run|K|env|key|warm_start_cache)>", html)


def test_the_site_lists_every_estimator_module_without_an_edit_of_mkdocs_yml():
    """The nav's Estimators section is filled by the hook (scripts/docs_pages.py on_config) with one entry
    per module of algorithms/estimators/: mkdocs.yml names none of their pages."""
    yml = (REPO / "mkdocs.yml").read_text()
    assert "hooks:" in yml and "scripts/docs_pages.py" in yml
    assert re.findall(r"estimators/\w+\.md", yml) == ["estimators/index.md"]
    pages = _docs_pages()
    nav = [{"Home": "index.md"}, {"Estimators": ["estimators/index.md"]}]
    pages.on_config({"nav": nav})
    listed = [next(iter(e.values())) for e in nav[1]["Estimators"][1:]]
    assert listed == sorted(p for p in pages.estimator_pages() if p != "estimators/index.md")
    assert {"G2PO": "estimators/g2po.md"} in nav[1]["Estimators"] and nav[0] == {"Home": "index.md"}


DIARY = re.compile(r"issue [0-9]+|round [0-9]|yesterday|today|this session|we tried", re.I)


@pytest.mark.parametrize("root", ["README.md", "docs", "results"])
def test_no_diary(root):
    paths = [REPO / root] if root.endswith(".md") else sorted((REPO / root).rglob("*.md"))
    hits = [f"{p.relative_to(REPO)}:{i}: {line.strip()}"
            for p in paths if "runs" not in p.relative_to(REPO).parts
            for i, line in enumerate(p.read_text().splitlines(), 1) if DIARY.search(line)]
    assert not hits, "narration of the work (say the figure, its command, commit and machine):\n" + "\n".join(hits)
