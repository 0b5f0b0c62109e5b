"""Stretching a workload to a duration: the engine's session count, and generated
files regenerated longer with the same first sessions (imported ones refused)."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from twin.atomic import sha256_of
from twin.errors import TwinError
from twin.workloads import Workload, WorkloadWriter
from twin.workloads.extend import extended_workload, sessions_started
from twin.workloads.generators import GENERATORS, get_generator
from twin.workloads.generators.base import poisson_times
from twin.workloads.importers import get_importer
from twin.workloads.schema import METADATA_KEY

DATA = Path(__file__).parent / "data"
# Small per-kind runs: sessions, session rate, context cap, knobs.
SMALL = {
    "chat": (6, 0.5, 4096, {}),
    "doc-qa": (8, 2.0, 32768, {"n_documents": "6", "doc_min_tokens": "200",
                               "doc_max_tokens": "400"}),
    "fixed": (10, 4.0, 32768, {"isl": "256", "osl": "16", "isl_dist": "uniform",
                               "isl_spread": "0.5", "prefix_len": "64",
                               "prefix_share": "0.5"}),
    "sharegpt": (4, 0.5, 4096, {}),
    "swebench": (3, 0.1, 8192, {"mean_steps": "6", "min_steps": "3", "max_steps": "8"}),
    "system-prompt": (10, 4.0, 32768, {"system_prompt_max_tokens": "1500"}),
}  # fmt: skip


def generate(path: Path, kind: str, sessions: int | None = None, duration_s=None) -> Path:
    n, rate, ctx, knobs = SMALL[kind]
    n = n if sessions is None and duration_s is None else sessions
    cls = get_generator(kind)
    gen = cls(cls.parse_params(knobs))
    return gen.write(path, n, rate, 5, ctx, duration_s)


def first_sessions(path: Path, n: int):
    table = pq.read_table(path)
    return table.filter(pc.less(table.column("session_id"), n))


# ----- sessions_started ----------------------------------------------------------


@pytest.mark.parametrize(("rate", "duration", "seed"), [(16.0, 600.0, 0), (0.3, 50.0, 7)])
def test_sessions_started_counts_the_engines_stream(rate, duration, seed):
    times = poisson_times(np.random.default_rng(seed), rate)
    expected = list(itertools.takewhile(lambda t: t < duration, times))
    n = sessions_started(rate, duration, seed)
    assert n == len(expected) >= 1
    assert abs(n - rate * duration) < 5 * np.sqrt(rate * duration)


def test_sessions_started_is_exact_at_the_window_edge():
    times = list(itertools.islice(poisson_times(np.random.default_rng(3), 2.0), 50))
    # A session starting exactly at the end is outside [0, duration).
    assert sessions_started(2.0, times[20], 3) == 20
    assert sessions_started(2.0, np.nextafter(times[20], np.inf), 3) == 21
    assert sessions_started(2.0, 1e-9, 3) == 1  # the first session starts at t = 0


@pytest.mark.parametrize(
    ("args", "message"),
    [((0.0, 10.0, 1), "--session-rate"), ((1.0, float("nan"), 1), "--duration")],
)
def test_sessions_started_refuses_bad_arguments(args, message):
    with pytest.raises(TwinError, match=message):
        sessions_started(*args)


# ----- extended_workload ---------------------------------------------------------


def test_a_file_with_enough_sessions_is_returned_as_is(tmp_path):
    path = generate(tmp_path / "chat.parquet", "chat")
    assert extended_workload(path, 6, tmp_path / "cache") == path
    assert extended_workload(path, 2, tmp_path / "cache") == path
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("kind", ["chat", "fixed"])
def test_the_longer_file_starts_with_the_original_sessions(tmp_path, kind):
    path = generate(tmp_path / f"{kind}.parquet", kind)
    n = SMALL[kind][0]
    longer = extended_workload(path, 3 * n, tmp_path / "cache", need="x")
    assert Workload.open(longer).num_sessions == 3 * n
    original, head = pq.read_table(path), first_sessions(longer, n)
    # Row for row: token ids, lengths, arrivals and think times.
    assert head.equals(original)
    assert head.column("input_tokens").to_pylist() == original.column("input_tokens").to_pylist()
    # ... and the same file a direct run of 3n sessions writes.
    direct = generate(tmp_path / "direct.parquet", kind, sessions=3 * n)
    assert pq.read_table(longer).equals(pq.read_table(direct))
    meta = Workload.open(longer).metadata
    assert meta["sessions"] == 3 * n and meta["generator"] == kind
    assert meta["extended_from"] == {"file": str(path), "sha256": sha256_of(path)}


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_every_kind_extends_with_the_same_first_sessions(tmp_path, kind):
    path = generate(tmp_path / "w.parquet", kind)
    n = SMALL[kind][0]
    longer = extended_workload(path, 2 * n + 1, tmp_path / "cache")
    assert first_sessions(longer, n).equals(pq.read_table(path))
    assert Workload.open(longer).num_sessions == 2 * n + 1


def test_the_longer_file_is_cached_by_source_and_count(tmp_path):
    path = generate(tmp_path / "fixed.parquet", "fixed")
    cache = tmp_path / "cache"
    longer = extended_workload(path, 25, cache)
    key = hashlib.sha256(f"{sha256_of(path)} 25".encode()).hexdigest()[:12]
    assert longer == cache / f"fixed-{key}.parquet"
    inode = longer.stat().st_ino
    assert extended_workload(path, 25, cache) == longer
    assert longer.stat().st_ino == inode  # reused, not written again
    assert extended_workload(path, 26, cache) != longer
    assert sorted(p.name for p in cache.glob("*.parquet")) == sorted(
        [longer.name, extended_workload(path, 26, cache).name]
    )
    assert not [p for p in cache.iterdir() if ".tmp-" in p.name]


def test_a_duration_file_extends_too(tmp_path):
    path = generate(tmp_path / "chat.parquet", "chat", duration_s=10.0)
    n = Workload.open(path).num_sessions
    assert Workload.open(path).metadata["duration_s"] == 10.0
    longer = extended_workload(path, n + 4, tmp_path / "cache")
    assert first_sessions(longer, n).equals(pq.read_table(path))


def test_an_imported_trace_is_refused_in_one_line(tmp_path):
    importer = get_importer("mooncake")()
    path = tmp_path / "W.parquet"
    src = DATA / "mooncake_small.jsonl"
    with WorkloadWriter(path, importer.metadata(src)) as w:
        w.write_all(importer.rows(src))
    have = Workload.open(path).num_sessions
    with pytest.raises(TwinError) as err:
        extended_workload(path, 9616, tmp_path / "cache", need="16 sessions/s for 600 s")
    assert str(err.value) == (
        f"{path} holds {have:,} sessions but 9,616 are needed (16 sessions/s for 600 s); it was "
        "imported, not generated, so it cannot be extended: give a longer trace or a shorter "
        "--duration"
    )
    assert not (tmp_path / "cache").exists()


def test_a_file_whose_sessions_no_longer_regenerate_is_refused(tmp_path):
    path = generate(tmp_path / "chat.parquet", "chat")
    table = pq.read_table(path)
    meta = Workload.open(path).metadata
    edited = table.replace_schema_metadata({METADATA_KEY: json.dumps({**meta, "seed": 6})})
    pq.write_table(edited, tmp_path / "edited.parquet")
    with pytest.raises(TwinError, match=r"regenerating it from its metadata gives other first"):
        extended_workload(tmp_path / "edited.parquet", 20, tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*.parquet"))
    assert not [p for p in (tmp_path / "cache").iterdir() if ".tmp-" in p.name]


def test_a_file_without_the_run_in_its_metadata_is_refused(tmp_path):
    path = generate(tmp_path / "chat.parquet", "chat")
    meta = Workload.open(path).metadata
    del meta["seed"]
    stripped = pq.read_table(path).replace_schema_metadata({METADATA_KEY: json.dumps(meta)})
    pq.write_table(stripped, tmp_path / "s.parquet")
    with pytest.raises(
        TwinError, match=r"holds 6 sessions but 20 are needed; its metadata lacks seed"
    ):
        extended_workload(tmp_path / "s.parquet", 20, tmp_path / "cache")


def test_a_file_whose_knobs_this_version_lacks_is_refused(tmp_path):
    path = generate(tmp_path / "chat.parquet", "chat")
    meta = Workload.open(path).metadata
    meta["params"]["typing_speed"] = 3
    table = pq.read_table(path).replace_schema_metadata({METADATA_KEY: json.dumps(meta)})
    pq.write_table(table, tmp_path / "old.parquet")
    with pytest.raises(TwinError, match=r"old.parquet: its generator run cannot be repeated"):
        extended_workload(tmp_path / "old.parquet", 20, tmp_path / "cache")
