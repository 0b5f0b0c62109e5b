"""Which release's kernel table prices a step: the one rule, for the reader and the profile.

NVIDIA's tables (``aiconfigurator-core`` 0.12.0, ``systems/data/<system>/<op>/<framework>/
<version>/``) are collected per engine release, and not every release has every table.
aiconfigurator prices a ``(system, backend, version)`` with that version's own rows
(``sdk/perf_database.py`` ``get_database(system, backend, version)`` loads the version's
directory as the primary source) and fills what the version lacks from older
collections, never newer ones (``systems/query_versions.yaml``: "ops the next version
lacks are served by backward fill from current/older data (never forward)"; the same
file's nearest-earlier fallback, ``_warn_unparseable_sibling_version_once``).

The twin's rule, per kernel family (:func:`pick_version`):

- no release asked for (a plain ``twin simulate``): the newest table, as before;
- a release: the newest table collected at or before it (aiconfigurator's own rows and
  backward fill; the twin keeps one table per family, so the nearest earlier one);
- a release older than every collection: the oldest table (the nearest release; here
  aiconfigurator would have no data at all);
- a release that is not a version number (``nightly-dev``, an image tag): the newest,
  as with none (aiconfigurator cannot order it either and leaves it out).

Where the release is known to run a kernel some tables time and others do not
(``twin.costmodel.engine_kernels``), the same rule runs over the tables that time it
(:func:`pick_for_kernel`): a release older than every collection then reads the oldest
table of its own kernel, not the oldest table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

_SUFFIX = re.compile(r"^[.-]?(a|alpha|b|beta|rc|c|pre|preview|post|dev)[.-]?(\d*)")
# PEP 440 order of the suffixes that appear in the tables and the measured rows:
# dev < pre-releases (a < b < rc) < the release < post.
_RANK = {"dev": -4, "a": -3, "alpha": -3, "b": -2, "beta": -2, "rc": -1, "c": -1}
_RANK.update({"pre": -1, "preview": -1, "post": 1})


def version_key(version: str) -> tuple[tuple[int, ...], int, int] | None:
    """A sortable key of a release, PEP 440 order for the forms NVIDIA's data uses
    (``0.24.0``, ``1.3.0rc20``, ``0.5.10.post1``, ``0.5.1-rc0.pre1``); ``None`` when it does
    not start with a number (``nightly-dev``, ``glm5-hopper``, ``""``)."""
    match = re.match(r"v?(\d+(?:\.\d+)*)", version.strip())
    if match is None:
        return None
    release = tuple(int(p) for p in match.group(1).split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]  # 0.24.0 == 0.24
    suffix = _SUFFIX.match(version.strip()[match.end() :])
    if suffix is None:
        return release, 0, 0
    return release, _RANK[suffix.group(1)], int(suffix.group(2) or 0)


def release_at_least(release: str | None, since: str) -> bool:
    """Whether ``release`` is ``since`` or newer (``version_key`` order); False when
    ``release`` is not a version number (``nightly-dev``, ``""``, None)."""
    have, want = version_key(release or ""), version_key(since)
    return have is not None and want is not None and have >= want


def newest_first(versions: Iterable[str]) -> list[str]:
    """``versions`` newest first; ones that are not version numbers last, by name."""
    parsed = [(version_key(v), v) for v in versions]
    ordered = sorted((k, v) for k, v in parsed if k is not None)
    return [v for _, v in reversed(ordered)] + sorted(v for k, v in parsed if k is None)


def pick_version(versions: Iterable[str], release: str | None) -> str | None:
    """The table version that prices ``release`` among ``versions`` (the module's rule);
    None when there are none."""
    ordered = newest_first(versions)
    if not ordered:
        return None
    want = version_key(release) if release else None
    if want is None:
        return ordered[0]
    keyed = [(version_key(v), v) for v in ordered]
    older = [v for k, v in keyed if k is not None and k <= want]
    if older:
        return older[0]
    dated = [v for k, v in keyed if k is not None]
    return dated[-1] if dated else ordered[0]


def pick_for_kernel(
    timed: Mapping[str, str | None], release: str | None, runs: str | None
) -> str | None:
    """:func:`pick_version` among the tables of ``timed`` (table version -> the kernel it
    times, None where unknown) that time ``runs``, the kernel ``release`` runs; among all
    of them where ``runs`` is None or no table times it."""
    same = [v for v, kernel in timed.items() if runs is not None and kernel == runs]
    return pick_version(same or timed, release)


__all__ = ["newest_first", "pick_for_kernel", "pick_version", "version_key"]
