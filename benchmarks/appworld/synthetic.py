"""Small AppWorld tasks built from the package's own app factories (no task data needed).

AppWorld's task data cannot be shipped (its licence forbids re-hosting it in plain text), but
the ``appworld`` package builds the apps' databases with its own factories. A *task spec*
(a JSON-able dict) describes one small task in the SimpleNote app; the world server's
``build`` request (:mod:`g2po_bench.benchmarks.appworld.server`) turns specs into a regular AppWorld
data folder (``data/tasks/<id>/{specs.json, dbs/, ground_truth/}``,
``data/datasets/<split>.txt``, ``data/api_docs``), which the real ``AppWorld`` class then
loads, executes and evaluates exactly as it does the official tasks. Tests define their own
specs; :func:`smoke_specs` is the embedded default of the ``appworld_cpu`` smoke preset.

Spec keys: ``task_id`` (``<scenario>_<n>``, exactly one underscore, as AppWorld requires),
``split``, ``instruction``, ``seed`` (factory seed), ``difficulty`` (1-3), ``datetime``,
``notes`` (``[{"title", "content", "tags", "pinned"}]``: the supervisor's SimpleNote
notes), ``answer`` (the ground-truth answer, JSON; None for tasks without one),
``private_data``, ``requirements`` (the evaluation's requirement strings, in order),
``evaluation`` (source of ``def evaluate(test, public_data, private_data, main_user,
models, ground_truth_answer)``, AppWorld's evaluation signature) and ``solution`` (expert
code cells that solve the task; the expert walkthrough of :func:`expert_cells`).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

from g2po_bench.benchmarks.appworld.runtime import WorldServer

__all__ = [
    "LOGIN_CELL",
    "note_count_spec",
    "note_title_spec",
    "create_note_spec",
    "smoke_specs",
    "build_tasks",
    "ensure_built",
]

#: the login cell every SimpleNote task starts with (password from the supervisor app)
LOGIN_CELL = (
    "passwords = apis.supervisor.show_account_passwords()\n"
    "password = [p for p in passwords if p['account_name'] == 'simple_note'][0]['password']\n"
    "email = apis.supervisor.show_profile()['email']\n"
    "token = apis.simple_note.login(username=email, password=password)['access_token']\n"
    "print(token[:8])"
)

_ANSWER_EVAL = '''
import json


def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    task = models.end.supervisor.Task.all()[0]
    with test("the task is marked complete with status success"):
        test.case(task.status, "==", "success")
    with test("the answer is correct"):
        test.answer(json.loads(task.answer), ground_truth_answer)
'''

_CREATE_EVAL = '''
def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    task = models.end.supervisor.Task.all()[0]
    with test("the task is marked complete with status success"):
        test.case(task.status, "==", "success")
    with test("exactly one note has the requested title, with the requested content"):
        notes = models.end.simple_note.Note.find_all(title=private_data["title"])
        test.case(len(notes), "==", 1)
        test.case(notes[0].content.strip(), "==", private_data["content"])
    with test("no other note was added or removed"):
        test.case(len(models.end.simple_note.Note.all()), "==", len(models.start.simple_note.Note.all()) + 1)
'''

_WORDS = ("groceries", "meeting", "travel", "books", "recipes", "ideas", "budget", "garden", "gym", "movies",
          "birthday", "project", "music", "repairs", "school", "taxes")


def _notes(rng: random.Random, n: int, tags: tuple[str, ...] = ("home", "work")) -> list[dict[str, Any]]:
    titles = rng.sample(_WORDS, n)
    return [{"title": t.capitalize(), "content": f"{t} list: " + ", ".join(rng.sample(_WORDS, 3)),
             "tags": [rng.choice(tags)]} for t in titles]


def note_count_spec(task_id: str, split: str, seed: int, num_notes: int) -> dict[str, Any]:
    """"How many notes do I have in SimpleNote?" (answer: ``num_notes``; difficulty 1)."""
    rng = random.Random(seed)
    notes = _notes(rng, num_notes)
    return {
        "task_id": task_id, "split": split, "seed": seed, "difficulty": 1,
        "instruction": "How many notes do I have in my SimpleNote account?",
        "notes": notes, "answer": num_notes, "private_data": {},
        "requirements": ["the task is marked complete with status success", "the answer is correct"],
        "evaluation": _ANSWER_EVAL,
        "solution": [
            LOGIN_CELL,
            "notes = apis.simple_note.search_notes(access_token=token, page_limit=20)\nprint(len(notes))",
            "apis.supervisor.complete_task(answer=len(notes))",
        ],
    }


def note_title_spec(task_id: str, split: str, seed: int, num_notes: int) -> dict[str, Any]:
    """"What is the title of my note tagged 'urgent'?" (one note carries the tag; difficulty 1)."""
    rng = random.Random(seed)
    notes = _notes(rng, num_notes)
    target = rng.randrange(num_notes)
    notes[target]["tags"] = ["urgent"]
    return {
        "task_id": task_id, "split": split, "seed": seed, "difficulty": 1,
        "instruction": "What is the title of the note I tagged 'urgent' in SimpleNote?",
        "notes": notes, "answer": notes[target]["title"], "private_data": {},
        "requirements": ["the task is marked complete with status success", "the answer is correct"],
        "evaluation": _ANSWER_EVAL,
        "solution": [
            LOGIN_CELL,
            "notes = apis.simple_note.search_notes(access_token=token, tags=['urgent'], page_limit=20)\n"
            "print(notes)",
            "apis.supervisor.complete_task(answer=notes[0]['title'])",
        ],
    }


def create_note_spec(task_id: str, split: str, seed: int, num_notes: int) -> dict[str, Any]:
    """"Create a note titled T with content C" (state change, no answer; difficulty 2)."""
    rng = random.Random(seed)
    notes = _notes(rng, num_notes)
    taken = {n["title"] for n in notes}
    title = next(w.capitalize() + " plan" for w in rng.sample(_WORDS, len(_WORDS)) if w.capitalize() + " plan" not in taken)
    content = f"remember the {rng.choice(_WORDS)} on {rng.choice(('monday', 'friday', 'sunday'))}"
    return {
        "task_id": task_id, "split": split, "seed": seed, "difficulty": 2,
        "instruction": f'Create a note in SimpleNote titled "{title}" with the content "{content}".',
        "notes": notes, "answer": None, "private_data": {"title": title, "content": content},
        "requirements": [
            "the task is marked complete with status success",
            "exactly one note has the requested title, with the requested content",
            "no other note was added or removed",
        ],
        "evaluation": _CREATE_EVAL,
        "solution": [
            LOGIN_CELL,
            f"apis.simple_note.create_note(access_token=token, title={title!r}, content={content!r})",
            "apis.supervisor.complete_task()",
        ],
    }


def smoke_specs() -> list[dict[str, Any]]:
    """The embedded default of the CPU smoke run: 3 scenarios x 3 variants; variants 1-2 form
    ``train`` (6 tasks), variant 3 ``test_normal`` (3 tasks)."""
    makers = (("notecount", note_count_spec), ("notetitle", note_title_spec), ("notecreate", create_note_spec))
    specs = []
    for s, (scenario, make) in enumerate(makers):
        for n in (1, 2, 3):
            specs.append(make(f"{scenario}_{n}", "train" if n < 3 else "test_normal", 100 * s + n, 2 + n))
    return specs


def _stamp(specs: list[dict[str, Any]]) -> str:
    blob = json.dumps(specs, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def build_tasks(root: str | os.PathLike[str], specs: list[dict[str, Any]], python: str,
                timeout: float = 600.0) -> Path:
    """Write ``specs`` as AppWorld tasks under ``root/data`` (with the API docs) using the
    world server's ``build`` request; returns ``root``.

    Raises:
        ValueError: a spec without the required keys or with a bad task id.
        g2po_bench.benchmarks.appworld.runtime.WorldServerError: the package rejected a spec.
    """

    need = ("task_id", "split", "instruction", "requirements", "evaluation")
    for spec in specs:
        missing = [k for k in need if k not in spec]
        if missing:
            raise ValueError(f"task spec {spec.get('task_id', '?')!r} lacks {', '.join(missing)}")
        if spec["task_id"].count("_") != 1:
            raise ValueError(f"task id {spec['task_id']!r} must have exactly one underscore "
                             "(<scenario>_<number>), as AppWorld's task ids do")
    root = Path(root).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    server = WorldServer(python, root)
    try:
        server.request("build", timeout, specs=specs)
    finally:
        server.close()
    (root / "g2po_specs.json").write_text(json.dumps({"stamp": _stamp(specs), "specs": specs}, indent=1))
    return root


def ensure_built(root: str | os.PathLike[str], specs: list[dict[str, Any]], python: str) -> Path:
    """:func:`build_tasks` unless ``root`` already holds exactly these specs (a cache).

    A file lock serialises concurrent callers, so parallel runs share one build."""
    import fcntl

    root = Path(root).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        meta = root / "g2po_specs.json"
        if meta.exists():
            try:
                if json.loads(meta.read_text()).get("stamp") == _stamp(specs):
                    return root
            except (OSError, ValueError):
                pass
        return build_tasks(root, specs, python)


def load_specs(root: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """task id -> spec of a root built by :func:`build_tasks` ({} for other roots, e.g. the
    official data)."""
    meta = Path(root).expanduser() / "g2po_specs.json"
    if not meta.exists():
        return {}
    return {s["task_id"]: s for s in json.loads(meta.read_text())["specs"]}
