"""Engine releases: which flags, flag names, choices and defaults one release of an engine has.

``--engine vllm`` is the newest release the twin models; ``--engine vllm==0.19``
picks an earlier one. A :class:`Release` is data, not a copy of the mode: the
names of the flags it has, the names it lacks that it renamed or removed (old
name -> the replacement a user should give), the choices of its choice flags
and its defaults that change performance. The mode's flag functions read the
release they run under (``out[RELEASE]`` in :meth:`EngineMode.settings
<twin.engine.mode_base.EngineMode.settings>`), so one function serves every
release. The registries, one tuple per engine, newest first, are in
:mod:`twin.engine.modes_vllm`, :mod:`twin.engine.modes_sglang` and
:mod:`twin.engine.modes`; each entry cites the files of the release it follows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from twin.costmodel.table_release import version_key
from twin.errors import TwinError

# The key under which a mode's flags find the release they run under (EngineMode.settings).
RELEASE = "_release"


@dataclass(frozen=True)
class Release:
    """One release of an engine (module docstring)."""

    version: str
    source: str  # where its rules were read (files of that release)
    flags: tuple[str, ...]  # the --set names it has, in the order --help lists them
    # Names it does not have -> what to give instead (a renamed flag's new name, or a
    # sentence for a removed one).
    renamed: dict[str, str] = field(default_factory=dict)
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Its defaults as the flags' values (shown by --help, read by the flag functions).
    defaults: dict[str, str] = field(default_factory=dict)
    notes: str = ""  # what differs from the release before, for --help and the README

    def default(self, name: str, fallback: str) -> str:
        return self.defaults.get(name, fallback)

    def choice(self, name: str, fallback: tuple[str, ...]) -> tuple[str, ...]:
        return self.choices.get(name, fallback)


def split_engine(name: str, flag: str = "--engine") -> tuple[str, str | None]:
    """``"vllm==0.19"`` -> ``("vllm", "0.19")``; ``"vllm"`` -> ``("vllm", None)``. ``flag``
    names the option the name came from, in the error."""
    base, sep, version = name.partition("==")
    base = base.strip().lower()
    if not sep:
        return base, None
    version = version.strip()
    if not version:
        raise TwinError(f"{flag} {name!r}: give a release after '==' (or none for the newest)")
    return base, version


def pick_release(
    engine: str, releases: tuple[Release, ...], version: str | None, flag: str = "--engine"
) -> Release:
    """The release ``version`` names (exactly, or a prefix on a dot: ``0.33`` is
    ``0.33.0``); the newest when ``None``; one line naming the known releases otherwise."""
    if version is None:
        return releases[0]
    known = ", ".join(r.version for r in releases)
    exact = [r for r in releases if r.version == version]
    if exact:
        return exact[0]
    matches = [r for r in releases if r.version.startswith(version + ".")]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise TwinError(
            f"{flag} {engine}=={version}: names more than one modelled release "
            f"({', '.join(r.version for r in matches)}); give one"
        )
    raise TwinError(
        f"{flag} {engine}=={version}: release not modelled; the twin models {engine} {known}"
    )


def release_for_measured(releases: tuple[Release, ...], measured: str | None) -> Release:
    """The modelled release that stands for a measured run's engine version: the newest
    not newer than it, else the oldest (an unparsable or missing version: the oldest,
    the one the measured data was read with). Versions order as the kernel tables' do
    (:func:`twin.costmodel.table_release.version_key`, PEP 440)."""
    key = version_key(measured or "")
    if key is None:
        return releases[-1]
    older = [r for r in releases if (version_key(r.version) or ((), 0, 0)) <= key]
    return older[0] if older else releases[-1]


def release_of(out: dict[str, Any]) -> Release:
    """The release a flag function runs under (put there by ``EngineMode.settings``)."""
    return out[RELEASE]  # type: ignore[no-any-return]


__all__ = ["RELEASE", "Release", "pick_release", "release_for_measured", "split_engine"]
