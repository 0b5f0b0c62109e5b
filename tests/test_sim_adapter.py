"""The engine speaks SimPy's public API through one adapter (issue 33).

``twin/engine/sim.py`` is the only module of ``twin`` that imports SimPy; no module
(the adapter included) reads or writes a private attribute of a SimPy object,
moves an event's callbacks or subclasses a SimPy class. The private names are
SimPy's own, collected from its classes and from live objects, so a name SimPy
adds is caught too. The scan is checked against the code it replaced, which it
must reject.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from collections import namedtuple
from collections.abc import Generator
from pathlib import Path

import simpy

from twin.engine import sim

ROOT = Path(__file__).resolve().parents[1] / "twin"
ADAPTER = ROOT / "engine" / "sim.py"


def _simpy_private_names() -> frozenset[str]:
    """Every ``_name`` (not dunder) that SimPy's classes define or its objects hold."""
    names: set[str] = set()
    modules = [simpy] + [
        importlib.import_module(m.name) for m in pkgutil.walk_packages(simpy.__path__, "simpy.")
    ]
    for module in modules:
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__.startswith("simpy"):
                names.update(vars(cls))
    env = simpy.Environment()

    def proc() -> Generator[simpy.Event, object, None]:
        yield env.timeout(1)

    process = env.process(proc())
    for obj in (env, env.timeout(1), env.event(), process, env.any_of([env.event()])):
        names.update(vars(obj))
    env.run()
    # A named tuple's and an ABC's own helpers are theirs, not SimPy's.
    borrowed = set(dir(namedtuple("T", "a"))) | {"_abc_impl"}
    return frozenset(n for n in names - borrowed if n.startswith("_") and not n.startswith("__"))


PRIVATE = _simpy_private_names()
# Names the adapter re-exports from SimPy: a class outside it deriving from one
# would be reaching into SimPy's event machinery.
SIMPY_TYPES = frozenset(n for n in sim.__all__ if isinstance(getattr(sim, n), type))


def violations(source: str, adapter: bool = False) -> list[str]:
    """What ``source`` does to SimPy that only the adapter may do, or no one may."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if not adapter:
            if isinstance(node, ast.Import) and any(
                a.name.split(".")[0] == "simpy" for a in node.names
            ):
                found.append(f"{line}: imports simpy")
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "simpy":
                found.append(f"{line}: imports from simpy")
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and re.fullmatch(r"simpy(\.\w+)*", node.value)
            ):
                found.append(f"{line}: names the simpy module")
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
                    if name in SIMPY_TYPES:
                        found.append(f"{line}: class {node.name} derives from SimPy's {name}")
        if isinstance(node, ast.Attribute):
            if node.attr in PRIVATE:
                found.append(f"{line}: touches SimPy's private {node.attr}")
            if node.attr == "callbacks":
                found.append(f"{line}: touches an event's callbacks")
        if isinstance(node, ast.Constant) and node.value in PRIVATE:
            found.append(f"{line}: names SimPy's private {node.value}")  # getattr(env, "_queue")
    return found


def test_only_the_adapter_touches_simpy_and_only_its_public_api() -> None:
    files = sorted(ROOT.rglob("*.py"))
    assert ADAPTER in files and len(files) > 100
    bad = [
        f"{path.relative_to(ROOT.parent)}:{v}"
        for path in files
        for v in violations(path.read_text(encoding="utf-8"), adapter=path == ADAPTER)
    ]
    assert not bad, "\n".join(bad)
    assert "import simpy" in ADAPTER.read_text() or "from simpy" in ADAPTER.read_text()


def test_the_scan_rejects_the_code_the_adapter_replaced() -> None:
    """The decode run's absolute timeout and the arrival's cut as they were (7332d92)."""
    assert {"_queue", "_eid", "_value", "_ok", "_delay", "_now", "_target"} <= PRIVATE
    old = """
import simpy
from simpy.events import NORMAL

class _TimeoutAt(simpy.Timeout):
    def __init__(self, env, at):
        self.env = env
        self.callbacks = []
        self._value = None
        self._delay = at - env.now
        self._ok = True
        heappush(env._queue, (at, NORMAL, next(env._eid), self))

def submit(self, timer, boundary):
    boundary.callbacks, timer.callbacks = timer.callbacks, []
    return getattr(self.env, "_now"), importlib.import_module("simpy.events")
"""
    found = violations(old)
    for what in (
        "imports simpy",
        "imports from simpy",
        "class _TimeoutAt derives from SimPy's Timeout",
        "private _queue",
        "private _eid",
        "private _value",
        "private _ok",
        "private _delay",
        "private _now",
        "names the simpy module",
        "callbacks",
    ):
        assert any(what in v for v in found), what
    assert not any("import" in v for v in violations(old, adapter=True))
    assert any("_queue" in v for v in violations(old, adapter=True))


def test_wait_until_lands_exactly_where_a_single_delay_cannot() -> None:
    """``at`` odd in its last bit, ``at - now`` in ``at``'s binade and ``now`` half a
    unit of ``at``'s last place off its grid: ``now + d`` rounds to a neighbour of ``at``
    for every ``d``; the wait still ends at ``at``."""
    now, at = 0.25 + 2.0**-53, 1.5 + 2.0**-52
    d, exact = sim.delay_to(now, at)
    assert not exact and now + d < at and now + (at - now) != at
    env = sim.Environment(initial_time=now)
    env.run(until=env.process(sim.wait_until(env, at)))
    assert env.now == at


def test_a_redirected_wait_resumes_at_the_new_event_alone() -> None:
    env = sim.Environment()
    woke: list[float] = []

    def loop() -> Generator[sim.Event, object, None]:
        try:
            yield env.timeout(10.0)
        except sim.Interrupt as cut:
            yield sim.redirected(cut)
        woke.append(env.now)
        yield env.timeout(100.0)  # the first timeout, firing at 10, resumes no one
        woke.append(env.now)

    process = env.process(loop())

    def arrival() -> Generator[sim.Event, object, None]:
        yield env.timeout(2.0)
        sim.redirect(process, env.timeout(1.5))

    env.process(arrival())
    env.run()
    assert woke == [3.5, 103.5]
