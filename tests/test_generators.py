"""The synthetic generators: determinism, Poisson arrivals, row order, streaming,
context caps, and each kind's defining shape (checked through the real reader)."""

from __future__ import annotations

import dataclasses
import json
import tracemalloc
from collections import Counter, defaultdict

import numpy as np
import pytest

from twin.errors import TwinError
from twin.workloads import Workload
from twin.workloads.generators import GENERATORS, get_generator
from twin.workloads.generators.chat import ChatParams
from twin.workloads.generators.swebench import PLACEHOLDER_TOKENS, collapsed_count

KINDS = sorted(GENERATORS)


def rows_of(kind: str, n: int = 30, rate: float = 1.0, seed: int = 7, ctx: int = 32768, **knobs):
    cls = get_generator(kind)
    gen = cls(cls.parse_params({k: str(v) for k, v in knobs.items()}))
    return list(gen.rows(n, rate, seed, ctx))


def as_tuples(rows) -> list[tuple]:
    return [
        (r.session_id, r.turn, r.arrival_s, r.think_s, r.input_tokens.tolist(), r.extends_history,
         r.output_tokens.tolist(), r.output_len)
        for r in rows
    ]  # fmt: skip


def write_and_read(tmp_path, kind: str, n: int, rate: float, seed: int, ctx: int, **knobs):
    """Write through WorkloadWriter as the CLI does, then expand with the reader."""
    cls = get_generator(kind)
    gen = cls(cls.parse_params({k: str(v) for k, v in knobs.items()}))
    path = tmp_path / f"{kind}.parquet"
    gen.write(path, n, rate, seed, ctx)
    wl = Workload.open(path)
    return wl, list(wl.requests())


# ----- registry and knobs -----------------------------------------------------


def test_registry_names_the_kinds_and_rejects_unknown():
    assert set(GENERATORS) == {"chat", "doc-qa", "fixed", "sharegpt", "swebench", "system-prompt"}
    valid = "valid generators: chat, doc-qa, fixed, sharegpt, swebench, system-prompt"
    with pytest.raises(TwinError, match=valid):
        get_generator("lmsys")


@pytest.mark.parametrize("kind", KINDS)
def test_every_knob_has_help_and_source(kind):
    for f in dataclasses.fields(get_generator(kind).Params):
        assert f.metadata["help"] and f.metadata["source"], f.name


def test_parse_params_converts_types_and_keeps_other_defaults():
    p = get_generator("chat").parse_params({"mean_turns": "12.5", "vocab_size": "50000"})
    assert p.mean_turns == 12.5 and isinstance(p.mean_turns, float)
    assert p.vocab_size == 50000 and isinstance(p.vocab_size, int)
    assert p.min_turns == ChatParams().min_turns


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"turns": "3"}, r"--set turns: unknown parameter for generator 'chat'.*mean_turns"),
        ({"min_turns": "two"}, r"--set min_turns=two: expected an integer"),
        ({"min_turns": "2.5"}, r"--set min_turns=2.5: expected an integer"),
        ({"mean_turns": "nan"}, r"--set mean_turns=nan: expected a finite number"),
        ({"min_turns": "0"}, r"--set min_turns=0: must be >= 1"),
        ({"typing_wpm": "0"}, r"--set typing_wpm=0.0: must be > 0"),
        ({"mean_turns": "3"}, r"--set mean_turns=3.0: needs min_turns <= mean_turns <= max_turns"),
    ],
)
def test_parse_params_rejects_bad_knobs_naming_the_key(overrides, message):
    with pytest.raises(TwinError, match=message):
        get_generator("chat").parse_params(overrides)


@pytest.mark.parametrize(
    ("kind", "overrides", "message"),
    [
        ("swebench", {"max_steps": "4"}, r"max_steps=4: needs min_steps <= mean_steps"),
        ("swebench", {"observation_max_tokens": "16"}, r"observation_max_tokens=16: needs"),
        ("system-prompt", {"system_prompt_max_tokens": "10"}, r"system_prompt_max_tokens=10"),
    ],
)
def test_ordered_knobs_are_checked_in_every_kind(kind, overrides, message):
    with pytest.raises(TwinError, match=message):
        get_generator(kind).parse_params(overrides)


def test_run_arguments_are_checked_before_any_row():
    gen = get_generator("chat")()
    with pytest.raises(TwinError, match="--session-rate"):
        gen.rows(10, 0.0, 1)  # raises at the call, not at the first next()
    with pytest.raises(TwinError, match="--max-context"):
        gen.rows(10, 1.0, 1, max_context=1)
    with pytest.raises(TwinError, match="system_prompt_tokens"):
        get_generator("swebench")().rows(10, 1.0, 1, max_context=1000)


def test_metadata_records_generator_knobs_and_run():
    cls = get_generator("swebench")
    meta = cls(cls.parse_params({"keep_observations": "3"})).metadata(100, 0.5, 9, 8192)
    assert meta["generator"] == "swebench" and meta["params"]["keep_observations"] == 3
    run = (meta["sessions"], meta["session_rate"], meta["seed"], meta["max_context"])
    assert run == (100, 0.5, 9, 8192)
    json.dumps(meta)  # goes into the parquet metadata as JSON


# ----- a duration instead of a session count -----------------------------------


@pytest.mark.parametrize("kind", ["chat", "system-prompt"])
def test_a_duration_holds_the_sessions_starting_before_it_as_a_count_would(kind):
    cls = get_generator(kind)
    timed = list(cls().rows(None, 0.5, 3, 32768, duration_s=60.0))
    n = len({r.session_id for r in timed})
    assert max(r.arrival_s for r in timed if r.turn == 0) < 60.0
    # The next session (a count-based run of n + 1) starts at or after the end.
    later = [r.arrival_s for r in cls().rows(n + 1, 0.5, 3) if r.session_id == n]
    assert later[0] >= 60.0
    assert as_tuples(timed) == as_tuples(cls().rows(n, 0.5, 3))


def test_metadata_records_the_duration_and_the_sessions_it_holds():
    gen = get_generator("system-prompt")()
    meta = gen.metadata(None, 4.0, 1, 32768, duration_s=30.0)
    n = sum(1 for _ in gen.rows(None, 4.0, 1, 32768, duration_s=30.0))
    assert meta["duration_s"] == 30.0 and meta["sessions"] == n
    assert "duration_s" not in gen.metadata(n, 4.0, 1, 32768)


@pytest.mark.parametrize(
    ("n", "duration", "message"),
    [
        (5, 10.0, "--sessions and --duration are mutually exclusive"),
        (None, 0.0, "--duration must be a positive number of seconds"),
        (None, float("inf"), "--duration must be a positive"),
        (None, None, "--sessions must be a positive integer, got None"),
    ],
)
def test_a_run_is_sessions_or_a_duration(n, duration, message):
    gen = get_generator("chat")()
    with pytest.raises(TwinError, match=message):
        gen.rows(n, 1.0, 1, duration_s=duration)
    with pytest.raises(TwinError, match=message):
        gen.metadata(n, 1.0, 1, 32768, duration_s=duration)


# ----- determinism, arrivals, order -------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_same_rows_other_seed_other_rows(kind):
    a, b = as_tuples(rows_of(kind, seed=3)), as_tuples(rows_of(kind, seed=3))
    assert a == b
    assert as_tuples(rows_of(kind, seed=4)) != a


def test_session_content_does_not_depend_on_interleaving():
    """The same session has the same tokens whether sessions overlap a lot or not at all."""

    def by_session(rate):
        out = defaultdict(list)
        for r in rows_of("chat", n=20, rate=rate):
            out[r.session_id].append((r.input_tokens.tolist(), r.output_tokens.tolist()))
        return out

    assert by_session(1e-4) == by_session(100.0)


def test_session_arrivals_are_poisson_at_the_rate():
    rate, n = 5.0, 4000
    arrivals = np.array([r.arrival_s for r in rows_of("system-prompt", n=n, rate=rate)])
    gaps = np.diff(arrivals)
    assert arrivals[0] == 0.0 and (gaps >= 0).all()
    # Mean gap within 4 standard errors of 1/rate; exponential gaps have CV 1.
    assert abs(gaps.mean() - 1 / rate) < 4 * (1 / rate) / np.sqrt(n)
    assert 0.9 < gaps.std() / gaps.mean() < 1.1


@pytest.mark.parametrize("kind", KINDS)
def test_rows_are_in_nominal_arrival_order_with_turns_in_order(kind):
    rows = rows_of(kind, n=60, rate=0.5)
    nominal, last_turn, keys = {}, {}, []
    for r in rows:
        if r.turn == 0:
            assert r.arrival_s is not None and r.think_s is None and not r.extends_history
            t = r.arrival_s
        else:
            assert r.arrival_s is None and r.think_s is not None and r.think_s >= 0
            assert last_turn[r.session_id] == r.turn - 1
            t = nominal[r.session_id] + r.think_s
        nominal[r.session_id], last_turn[r.session_id] = t, r.turn
        keys.append((t, r.session_id))
        assert r.output_len == len(r.output_tokens) >= 1
        assert r.input_tokens.dtype == np.int32 and r.output_tokens.dtype == np.int32
    assert keys == sorted(keys)
    assert len(last_turn) == 60


@pytest.mark.parametrize("kind", KINDS)
def test_token_ids_stay_in_the_vocabulary(kind):
    for r in rows_of(kind, n=10, vocab_size=1000):
        for ids in (r.input_tokens, r.output_tokens):
            assert ids.min() >= 0 and ids.max() < 1000


# ----- streaming ------------------------------------------------------------------


def test_generation_streams_with_few_sessions_held():
    gen = get_generator("chat")()
    n = 0
    for _ in gen.rows(3000, 0.2, 1):
        n += 1
    # Sessions last ~11 turns x ~35 s typing; Little's law gives ~80 active at once.
    assert n > 3000 * 8
    assert gen.peak_active_sessions < 300


def test_twenty_thousand_sessions_stream_in_little_memory():
    gen = get_generator("sharegpt")()
    tracemalloc.start()
    try:
        tokens = sum(len(r.input_tokens) + r.output_len for r in gen.rows(20_000, 2.0, 5))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    held = tokens * 4  # bytes of int32 ids had every session been materialised
    assert held > 80e6
    assert peak < 10e6, f"peak {peak / 1e6:.1f} MB"


# ----- through the writer and reader --------------------------------------------


@pytest.mark.parametrize(
    ("kind", "ctx", "knobs"),
    [
        ("chat", 1200, {}),
        ("sharegpt", 12000, {}),
        ("swebench", 6000, {}),
        ("system-prompt", 3600, {"system_prompt_max_tokens": 3000, "fewshot_mean_tokens": 200}),
    ],
)
def test_round_trip_respects_max_context(tmp_path, kind, ctx, knobs):
    wl, reqs = write_and_read(tmp_path, kind, n=40, rate=0.5, seed=11, ctx=ctx, **knobs)
    assert wl.metadata["generator"] == kind and wl.metadata["max_context"] == ctx
    assert len(reqs) == wl.num_rows and wl.num_sessions == 40
    lengths = [len(q.prompt) + q.output_len for q in reqs]
    assert max(lengths) <= ctx
    assert max(lengths) > ctx * 0.6  # the cap is actually exercised
    assert all((q.output >= 0).all() for q in reqs)  # ids written, never drawn at read time


def test_chat_means_match_the_documented_defaults():
    p = ChatParams()
    rows = rows_of("chat", n=400, rate=1.0, seed=2)
    turns = Counter(r.session_id for r in rows)
    assert min(turns.values()) >= p.min_turns
    assert abs(np.mean(list(turns.values())) - p.mean_turns) < 0.4
    out = np.mean([r.output_len for r in rows])
    assert abs(out - p.output_mean_tokens) < 0.1 * p.output_mean_tokens
    new = np.mean([len(r.input_tokens) for r in rows])
    assert abs(new - p.prompt_mean_tokens) < 0.15 * p.prompt_mean_tokens
    assert all(r.extends_history for r in rows if r.turn > 0)


def test_sharegpt_keeps_ten_turn_conversations_as_marconi_and_vllm_on_request():
    # Marconi's trace builder: 10+ turns, no cap below the 32K context.
    rows = rows_of("sharegpt", n=400, rate=1.0, seed=2)
    turns = np.array(list(Counter(r.session_id for r in rows).values()))
    assert turns.min() >= 10 and abs(turns.mean() - 12.51) < 0.4
    # vLLM's benchmark: every conversation, sequences under 2,048 tokens.
    rows = rows_of("sharegpt", 400, 1.0, 2, min_turns=1, mean_turns=3.51, max_session_tokens=2048)
    turns = np.array(list(Counter(r.session_id for r in rows).values()))
    assert 1.5 < turns.mean() < 3.51  # 3.51 before the 2,048-token cap ends sessions


# ----- swebench --------------------------------------------------------------------


def test_swebench_shares_one_system_prompt_and_collapses_old_observations(tmp_path):
    p = get_generator("swebench").Params()
    _, reqs = write_and_read(tmp_path, "swebench", n=12, rate=0.05, seed=4, ctx=32768)
    firsts = [q for q in reqs if q.turn == 0]
    system = firsts[0].prompt[: p.system_prompt_tokens]
    assert all(np.array_equal(q.prompt[: p.system_prompt_tokens], system) for q in firsts)
    # Tasks differ: the shared prefix is exactly the system prompt.
    s = p.system_prompt_tokens
    assert len({q.prompt[s : s + 8].tobytes() for q in firsts}) == 12

    prev_full: dict[int, np.ndarray] = {}
    collapsing = 0
    for q in reqs:
        k = p.keep_observations
        expect_collapse = collapsed_count(q.turn, k, 1) > collapsed_count(q.turn - 1, k, 1)
        assert q.extends_history == (q.turn > 0 and not expect_collapse), (q.session_id, q.turn)
        if q.turn > 0 and not q.extends_history:
            collapsing += 1
            before = prev_full[q.session_id]
            n = min(len(before), len(q.prompt))
            differs = before[:n] != q.prompt[:n]
            common = int(np.argmax(differs)) if differs.any() else n
            # Shares system + task + early steps, but not the whole previous sequence.
            assert p.system_prompt_tokens < common < len(before)
            assert q.turn >= k + 1
        prev_full[q.session_id] = np.concatenate((q.prompt, q.output))
    assert collapsing > 0


def test_swebench_collapsed_prompt_is_shorter_than_the_uncollapsed_one():
    # Same seed, so the same episodes; keep_observations=50 never collapses.
    collapsed = {(r.session_id, r.turn): r for r in rows_of("swebench", n=6, seed=8)}
    full, prompt_len = {}, {}
    for r in rows_of("swebench", n=6, seed=8, keep_observations=50):
        base = prompt_len.get(r.session_id, 0) if r.extends_history else 0
        prompt_len[r.session_id] = base + len(r.input_tokens)
        full[(r.session_id, r.turn)] = prompt_len[r.session_id]
        prompt_len[r.session_id] += r.output_len
        assert r.turn == 0 or r.extends_history
    checked = 0
    for key, r in collapsed.items():
        if r.turn > 0 and not r.extends_history and key in full:
            n_collapsed = collapsed_count(r.turn, 5, 1)
            assert len(r.input_tokens) < full[key]
            assert full[key] - len(r.input_tokens) >= n_collapsed * (32 - PLACEHOLDER_TOKENS)
            checked += 1
    assert checked > 5


def test_swebench_polling_collapses_only_every_few_steps():
    rows = rows_of("swebench", n=8, seed=5, collapse_every=5, min_steps=20, mean_steps=30)
    rewrites = sorted({r.turn for r in rows if r.turn > 0 and not r.extends_history})
    assert rewrites and all((t + 1) % 5 == 0 for t in rewrites)


# ----- system-prompt ---------------------------------------------------------------


def test_system_prompt_requests_share_a_few_prefixes_with_zipf_popularity():
    p = get_generator("system-prompt").Params()
    rows = rows_of("system-prompt", n=2000, rate=10.0, seed=6)
    assert all(r.turn == 0 for r in rows)
    prefixes = Counter(r.input_tokens[: p.system_prompt_min_tokens].tobytes() for r in rows)
    assert len(prefixes) == p.n_system_prompts
    counts = sorted(prefixes.values(), reverse=True)
    weights = np.arange(1, p.n_system_prompts + 1) ** -p.zipf_s
    expected = 2000 * weights / weights.sum()
    assert np.all(np.abs(np.array(counts) - expected) < 5 * np.sqrt(expected))
    # Under each system prompt, requests diverge right after it into n_fewshot blocks.
    groups = defaultdict(list)
    for r in rows:
        groups[r.input_tokens[: p.system_prompt_min_tokens].tobytes()].append(r.input_tokens)
    for prompts in groups.values():
        n = min(len(x) for x in prompts)
        same = np.all([x[:n] == prompts[0][:n] for x in prompts], axis=0)
        system_len = int(np.argmin(same))  # longest common prefix = the system prompt
        assert p.system_prompt_min_tokens <= system_len <= p.system_prompt_max_tokens
        variants = {x[system_len : system_len + 16].tobytes() for x in prompts}
        assert len(variants) == p.n_fewshot


def test_swebench_system_prompt_may_be_empty():
    rows = rows_of("swebench", n=6, rate=1.0, seed=3, system_prompt_tokens=0)
    firsts = [r for r in rows if r.turn == 0]
    assert len(firsts) == 6 and all(len(r.input_tokens) > 0 for r in firsts)
    # Nothing shared: turn-0 prompts start with their own task.
    assert len({int(r.input_tokens[0]) for r in firsts}) == 6
