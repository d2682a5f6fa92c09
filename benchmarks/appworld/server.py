"""The AppWorld world server: one process that holds at most one AppWorld world at a time.

This file runs under the *AppWorld interpreter* (a separate Python environment where the
``appworld`` package is installed; see :mod:`g2po_bench.benchmarks.appworld.runtime`), never inside the
suite's own process: ``appworld`` pins pydantic < 2, which the suite's OpenRLHF/DeepSpeed
stack cannot share. It therefore imports only the standard library and ``appworld``, and
must not import anything from this repository.

Protocol (one JSON object per line): requests on stdin, replies on the file descriptor that
was stdout when the process started (the real stdout is redirected to stderr at start-up, so
prints from ``appworld`` or from user code can never corrupt a reply). Every reply is
``{"ok": true, ...}`` or ``{"ok": false, "error": "<type>: <message>", "traceback": ...}``.

Requests (``cmd``):

- ``ping``: ``{"version": appworld.__version__}``.
- ``reset`` (``task_id``, ``timeout_seconds``, ``max_interactions``, ``random_seed``): closes
  the previous world (and deletes its output databases), opens ``AppWorld(task_id)`` under a
  private experiment name; replies ``instruction``, ``supervisor`` (first/last name, email,
  phone number), ``datetime``.
- ``execute`` (``code``): ``world.execute(code)``; replies ``output`` (the cell's output,
  the environment's observation) and ``completed`` (``world.task_completed()``).
- ``completed``: ``world.task_completed()``.
- ``evaluate``: ``world.evaluate()``; replies ``success``, ``pass_count``, ``num_tests``.
- ``close``: closes the world and deletes its output databases.
- ``list`` (``split``, ``difficulties``): task ids of ``data/datasets/<split>.txt``
  (``appworld.load_task_ids``), optionally only the given difficulty levels, plus each
  task's difficulty.
- ``build`` (``specs``): writes small tasks built with the package's own app factories
  into this root's ``data/`` (:func:`_build_tasks`; used for tests and the CPU smoke run).
- ``download``: ``appworld``'s own data download into the root (needs internet).

Roots: the server is started with ``G2PO_APPWORLD_DATA_ROOT`` = the folder holding
``data/``. It makes a private root (a temporary folder with ``data`` linked to the real one)
and points ``APPWORLD_ROOT`` at it, so the world's on-disk outputs
(``experiments/outputs/<name>/tasks/<id>/dbs``) never land in the user's folder and are
removed with the process (a killed server cannot do that: the next server to start deletes
the ``g2po-appworld-<pid>-*`` roots of servers no longer running). ``build`` and ``download``
write to the real root instead.

Source: the reference environment wrapper (verl-agent / G2PO
``agent_system/environments/env_package/appworld/envs.py``: ``AppWorld(task_id,
experiment_name, timeout_seconds=50)``, ``execute``, ``task_completed``, ``evaluate``), and
the ``appworld`` package's own ``Task``/``ModelCollection``/factories for ``build``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import traceback
import uuid

_PROTO = None  # the reply stream (the original stdout)
_REAL_ROOT = ""
_PRIVATE_ROOT = ""


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:  # pragma: no cover
            pass


def _setup_io() -> None:
    global _PROTO
    _PROTO = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # anything printed to stdout now goes to stderr


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale_roots() -> None:
    """Delete the private roots of servers that died without cleaning up (SIGKILL): names are
    ``g2po-appworld-<pid>-<random>``, removed when ``<pid>`` is no longer running."""
    import glob

    for path in glob.glob(os.path.join(tempfile.gettempdir(), "g2po-appworld-*-*")):
        pid = os.path.basename(path).split("-")[2]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _setup_roots() -> None:
    global _REAL_ROOT, _PRIVATE_ROOT
    _REAL_ROOT = os.path.abspath(os.environ.get("G2PO_APPWORLD_DATA_ROOT") or os.getcwd())
    _sweep_stale_roots()
    _PRIVATE_ROOT = tempfile.mkdtemp(prefix=f"g2po-appworld-{os.getpid()}-")
    os.symlink(os.path.join(_REAL_ROOT, "data"), os.path.join(_PRIVATE_ROOT, "data"))
    os.environ["APPWORLD_ROOT"] = _PRIVATE_ROOT


def _use_root(root: str) -> None:
    from appworld.common.path_store import path_store

    os.environ["APPWORLD_ROOT"] = root
    path_store.update_root(root)


class _State:
    world = None
    experiment = ""


def _close_world() -> None:
    world, name = _State.world, _State.experiment
    _State.world = None
    _State.experiment = ""
    if world is not None:
        try:
            world.close()
        finally:
            from appworld import AppWorld

            AppWorld.close_all()
    if name:  # the world's on-disk databases and logs: discarded after every episode
        shutil.rmtree(os.path.join(_PRIVATE_ROOT, "experiments", "outputs", name), ignore_errors=True)


def _reset(req: dict) -> dict:
    from appworld import AppWorld

    _close_world()
    _State.experiment = f"g2po_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    world = AppWorld(
        task_id=req["task_id"],
        experiment_name=_State.experiment,
        timeout_seconds=req.get("timeout_seconds", 50),
        max_interactions=req.get("max_interactions", 1000),
        random_seed=req.get("random_seed", 100),
    )
    _State.world = world
    sup = dict(world.task.supervisor)
    return {
        "instruction": world.task.instruction,
        "supervisor": {k: sup.get(k, "") for k in ("first_name", "last_name", "email", "phone_number")},
        "datetime": world.task.datetime.isoformat(),
    }


def _need_world():
    if _State.world is None:
        raise RuntimeError("no open world: send reset first")
    return _State.world


def _execute(req: dict) -> dict:
    world = _need_world()
    output = world.execute(req["code"])
    return {"output": output, "completed": bool(world.task_completed())}


def _completed(req: dict) -> dict:
    return {"completed": bool(_need_world().task_completed())}


def _evaluate(req: dict) -> dict:
    tracker = _need_world().evaluate()
    return {"success": bool(tracker.success), "pass_count": int(tracker.pass_count),
            "num_tests": int(tracker.num_tests)}


def _list(req: dict) -> dict:
    from appworld.common.utils import read_json
    from appworld.task import load_task_ids

    split = req["split"]
    path = os.path.join(_REAL_ROOT, "data", "datasets", split + ".txt")
    if not os.path.exists(path):
        have = sorted(f[:-4] for f in os.listdir(os.path.dirname(path))) if os.path.isdir(os.path.dirname(path)) else []
        raise FileNotFoundError(f"no AppWorld split {split!r} at {path}; splits here: {have or 'none'}")
    ids = load_task_ids(split)
    difficulty = {}
    for tid in ids:
        meta = os.path.join(_REAL_ROOT, "data", "tasks", tid, "ground_truth", "metadata.json")
        difficulty[tid] = int(read_json(meta).get("difficulty", 0)) if os.path.exists(meta) else 0
    wanted = req.get("difficulties") or []
    if wanted:
        ids = [t for t in ids if difficulty[t] in wanted]
    return {"task_ids": ids, "difficulty": {t: difficulty[t] for t in ids}}


def _download(req: dict) -> dict:
    from appworld.download import download_data

    _use_root(_REAL_ROOT)
    download_data()  # prints and returns (no exception) when the download fails
    tasks = os.path.join(_REAL_ROOT, "data", "tasks")
    if not os.path.isdir(tasks):
        raise RuntimeError(f"appworld's download did not produce {tasks} (see the messages above)")
    return {"data": os.path.join(_REAL_ROOT, "data"), "num_tasks": len(os.listdir(tasks))}


# --------------------------------------------------------------------------- build
def _write_json(path: str, obj) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)


def _build_api_docs(data: str) -> None:
    """``data/api_docs/standard/<app>.json`` from the apps' own OpenAPI descriptions."""
    from appworld.api_docs import prepare_api_docs
    from appworld.apps import get_all_apps
    from appworld.common.constants import CANARY_STRING

    folder = os.path.join(data, "api_docs", "standard")
    os.makedirs(folder, exist_ok=True)
    for app in get_all_apps(skip_admin=True):
        docs = {d["api_name"]: dict(d, canary_string=CANARY_STRING) for d in prepare_api_docs(app)}
        _write_json(os.path.join(folder, app + ".json"), docs)


def _build_one(spec: dict, data: str) -> None:
    """One task: supervisor, app accounts and records from the factories, then
    ``Task.save`` (specs.json + dbs) and a minimal ground truth (evaluation code, answer,
    requirements)."""
    import importlib
    from datetime import datetime

    from appworld.apps import get_all_apps
    from appworld.apps.admin.models import MainUserMunch
    from appworld.collections.models import ModelCollection
    from appworld.common.constants import DB_VERSION
    from appworld.common.random import set_random_seed
    from appworld.task import Task

    task_id = spec["task_id"]
    apps = get_all_apps(skip_admin=True)
    set_random_seed(int(spec.get("seed", 0)), python=True, faker_=True, model_factory=True)
    models = ModelCollection.load(to_db_home_path=f":memory:g2po-build-{task_id}", load_apps=[*apps, "admin"],
                                  create_db=True)
    fac = {a: importlib.import_module(f"appworld.apps.{a}.factories") for a in ("admin", "supervisor", "simple_note")}
    person = dict(spec.get("supervisor") or {})
    main = fac["admin"].MainUserFactory.build(**person)
    main.save()
    sup = fac["supervisor"].SupervisorFactory.build(
        first_name=main.first_name, last_name=main.last_name, email=main.email,
        phone_number=main.phone_number, birthday=main.birthday, sex=main.sex)
    sup.save()
    note_user = fac["simple_note"].UserFactory.build(first_name=main.first_name, last_name=main.last_name,
                                                    email=main.email, verified=True)
    note_user.save()
    fac["supervisor"].AccountPasswordFactory.build(supervisor_id=sup.id, account_name="simple_note",
                                                   password=note_user.password).save()
    for note in spec.get("notes", []):
        fac["simple_note"].NoteFactory.build(user_id=note_user.id, title=note["title"], content=note["content"],
                                             tags=list(note.get("tags", [])), pinned=bool(note.get("pinned", False))).save()
    fac["supervisor"].TaskFactory.build(supervisor_id=sup.id, instruction=spec["instruction"], status=None,
                                        answer=json.dumps(None)).save()
    supervisor = MainUserMunch(first_name=main.first_name, last_name=main.last_name, email=main.email,
                               phone_number=main.phone_number, birthday=main.birthday,
                               account_passwords={}, addresses={}, payment_cards={})
    task = Task(id=task_id, instruction=spec["instruction"], supervisor=supervisor,
                datetime=datetime.fromisoformat(spec.get("datetime", "2023-05-18T12:00:00")),
                allowed_apps=apps, db_version=DB_VERSION, model_collection=models)
    task.save(delete_if_exists=True, save_ground_truth=False)
    task.close()
    gt = os.path.join(data, "tasks", task_id, "ground_truth")
    shutil.rmtree(gt, ignore_errors=True)
    os.makedirs(gt)
    requirements = list(spec["requirements"])
    _write_json(os.path.join(gt, "public_data.json"), spec.get("public_data", {}))
    _write_json(os.path.join(gt, "private_data.json"), spec.get("private_data", {}))
    with open(os.path.join(gt, "answer.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(spec.get("answer")))
    with open(os.path.join(gt, "evaluation.py"), "w", encoding="utf-8") as f:
        f.write(spec["evaluation"].strip() + "\n")
    _write_json(os.path.join(gt, "test_data.json"), [{"requirement": r, "label": "no_op_fail"} for r in requirements])
    n_lines = len([c for c in spec.get("solution", []) for _ in c.splitlines()])
    _write_json(os.path.join(gt, "metadata.json"), {
        "difficulty": int(spec.get("difficulty", 1)), "mode": "minimal", "num_apps": 1,
        "num_apis": 0, "num_api_calls": 0, "num_solution_code_lines": n_lines})


def _build_tasks(req: dict) -> dict:
    from appworld import AppWorld

    _use_root(_REAL_ROOT)
    data = os.path.join(_REAL_ROOT, "data")
    os.makedirs(os.path.join(data, "tasks"), exist_ok=True)
    os.makedirs(os.path.join(data, "datasets"), exist_ok=True)
    _build_api_docs(data)
    splits: dict[str, list[str]] = {}
    for spec in req["specs"]:
        _build_one(spec, data)
        AppWorld.close_all()
        splits.setdefault(spec["split"], []).append(spec["task_id"])
    for split, ids in splits.items():
        with open(os.path.join(data, "datasets", split + ".txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(ids) + "\n")
    _use_root(_PRIVATE_ROOT)
    return {"data": data, "splits": {k: len(v) for k, v in splits.items()}}


_HANDLERS = {
    "reset": _reset, "execute": _execute, "completed": _completed, "evaluate": _evaluate, "list": _list,
    "build": _build_tasks, "download": _download,
}


def _reply(obj: dict) -> None:
    _PROTO.write(json.dumps(obj) + "\n")
    _PROTO.flush()


def main() -> int:
    """Serve one world: read JSON-line requests on stdin, answer on the protocol stream; returns
    the exit status (0 when the client closes the connection)."""
    _die_with_parent()
    _setup_io()
    _setup_roots()
    try:
        import appworld

        version = appworld.__version__
        import appworld.apps.api_docs  # noqa: F401  (fails when `appworld install` was not run)
    except Exception as exc:  # noqa: BLE001 - reported to the client
        _reply({"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        return 1
    _reply({"ok": True, "ready": True, "version": version, "root": _PRIVATE_ROOT})
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            req = json.loads(line)
            cmd = req.get("cmd")
            if cmd == "exit":
                _reply({"ok": True})
                break
            try:
                if cmd == "ping":
                    out = {"version": version}
                elif cmd == "close":
                    _close_world()
                    out = {}
                else:
                    out = _HANDLERS[cmd](req)
                _reply({"ok": True, **out})
            except Exception as exc:  # noqa: BLE001 - reported to the client
                _reply({"ok": False, "error": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc(limit=8)})
    finally:
        try:
            _close_world()
        except Exception:  # noqa: BLE001
            pass
        shutil.rmtree(_PRIVATE_ROOT, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
