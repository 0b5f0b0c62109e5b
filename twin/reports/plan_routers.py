"""The router as an axis of ``twin plan`` (``--routers a,b`` or ``auto``; ``--router X`` is
the one-value axis).

A candidate carries the router that spreads its replicas' requests
(``twin.engine.router.ROUTERS``, found by name); candidates that differ only in their
router are searched, pruned and decided like those differing in any other axis that adds
no GPU (the engine mode, the cache setting). The analytic lower bound on replicas
(:func:`twin.reports.plan_bound.analyse`) is router-independent: it counts the prompt tokens an
*unbounded* prefix cache would miss, which no routing can beat (a router only decides
how much of that reuse the replicas' finite caches realise), so every router of a
candidate shares its bound, its checks and its cost, and only its simulated runs differ.
The router enters a candidate's sweep spec as the engine setting ``router`` (as it
always did, once for the whole plan), so a plan of one router has the sweep keys it had.

``auto`` searches round-robin, and with it every registered router that places requests
where their prefixes may be cached (``Router.reuse``: session affinity and prefix-aware
today) when the workload reuses prefixes: an unbounded cache would hit at least
:data:`MIN_REUSE_SHARE` of its prompt tokens. Without reuse such a router has nothing to
place by (prefix-aware falls back to the fewest outstanding tokens, session affinity to a
hash), so ``auto`` leaves it out; name it to search it anyway.

With a single replica (and a disaggregated copy with one prefill worker) every router
sends every request to the same place: the runs of such a count are identical across
routers (tested), and the tie goes to the router first in the registry (round-robin
first: it reads nothing of the replicas).
"""

from __future__ import annotations

from collections.abc import Sequence

from twin.engine.router import DEFAULT_ROUTER, ROUTERS
from twin.errors import TwinError

AUTO = "auto"
DEFAULT_ROUTERS: tuple[str, ...] = (DEFAULT_ROUTER,)
# ``auto`` adds the prefix-placing routers when an unbounded prefix cache would hit at
# least this share of the workload's prompt tokens (a judgement call: below 1% a router
# that places by prefix can save at most 1% of the prefill work, inside the spread of a
# P95 between two seeds).
MIN_REUSE_SHARE = 0.01


def parse_routers(values: Sequence[str], flag: str = "--routers") -> tuple[str, ...] | None:
    """``values`` as router names, once each, in order; None for ``auto`` (given alone).
    One ``TwinError`` line naming ``flag`` otherwise."""
    texts = [str(v).strip().lower() for v in values]
    if texts == [AUTO]:
        return None
    if not texts or any(not t for t in texts):
        raise TwinError(f"{flag}: give at least one router, e.g. round-robin,prefix-aware, or auto")
    for value, text in zip(values, texts, strict=True):
        if text == AUTO:
            raise TwinError(f"{flag}: auto stands alone (got {', '.join(map(str, values))})")
        if text not in ROUTERS:
            raise TwinError(
                f"{flag} {value!r}: unknown router; choose from {', '.join(ROUTERS)}, or auto"
            )
    return tuple(dict.fromkeys(texts))


def auto_routers(token_hit_rate: float) -> tuple[str, ...]:
    """The routers ``auto`` searches for a workload an unbounded prefix cache hits
    ``token_hit_rate`` of (see the module)."""
    reuse = token_hit_rate >= MIN_REUSE_SHARE
    return (DEFAULT_ROUTER, *(n for n, cls in ROUTERS.items() if reuse and cls.reuse))


def resolve_routers(
    routers: Sequence[str] | str | None, router: str | None
) -> tuple[str, ...] | None:
    """The plan's routers from ``routers`` (``--routers``) or ``router`` (``--router``,
    one value), at most one of them given (neither: round-robin); None for ``auto``
    (:func:`auto_routers` of the workload)."""
    if router is not None and routers is not None:
        raise TwinError("--router and --routers both set the routers: give one of them")
    if router is not None:
        if str(router).strip().lower() == AUTO:
            raise TwinError("--router auto: --router takes one router; use --routers auto")
        return parse_routers([router], "--router")
    if routers is None:
        return DEFAULT_ROUTERS
    return parse_routers([routers] if isinstance(routers, str) else list(routers))


def with_router(
    settings: Sequence[tuple[str, object]], router: str
) -> tuple[tuple[str, object], ...]:
    """``settings`` with its ``router`` entry set to ``router``, in place (so a plan of one
    router keeps the sweep keys it had)."""
    return tuple((name, router if name == "router" else value) for name, value in settings)


def router_order(name: str) -> int:
    """The tie-break among routers: the registry's order (round-robin first)."""
    return list(ROUTERS).index(name) if name in ROUTERS else len(ROUTERS)


def router_flags(router: str) -> list[str]:
    """``twin simulate``'s flag for ``router`` (none for its default)."""
    return [] if router == DEFAULT_ROUTER else ["--router", router]


__all__ = [
    "AUTO",
    "DEFAULT_ROUTER",
    "DEFAULT_ROUTERS",
    "MIN_REUSE_SHARE",
    "auto_routers",
    "parse_routers",
    "resolve_routers",
    "router_flags",
    "router_order",
    "with_router",
]
