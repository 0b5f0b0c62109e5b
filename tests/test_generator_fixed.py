"""The ``fixed`` kind: benchmark-style single requests of set input and output lengths,
their length distributions, the shared prefix, the context cap and its CLI flags."""

from __future__ import annotations

import math

import numpy as np
import pytest

from twin.cli.main import run
from twin.errors import TwinError
from twin.workload_stats import summarize
from twin.workloads import Workload
from twin.workloads.generators import get_generator
from twin.workloads.generators.fixed import FixedParams
from twin.workloads.schema import TOKEN_ID_MAX


def fixed_rows(n: int = 200, ctx: int = 32768, seed: int = 3, **knobs):
    cls = get_generator("fixed")
    gen = cls(cls.parse_params({k: str(v) for k, v in knobs.items()}))
    return list(gen.rows(n, 2.0, seed, ctx))


def test_defaults_are_vllm_random_dataset_lengths_one_turn_each():
    p = FixedParams()
    assert (p.isl, p.osl, p.prefix_len) == (1024, 128, 0)
    rows = fixed_rows(50)
    assert [r.session_id for r in rows] == list(range(50))
    for r in rows:
        assert r.turn == 0 and not r.extends_history and r.arrival_s is not None
        assert len(r.input_tokens) == 1024 and r.output_len == len(r.output_tokens) == 128
    # Random prompts: no two requests share even their first tokens.
    assert len({tuple(r.input_tokens[:4].tolist()) for r in rows}) == 50


def test_uniform_lengths_fill_the_range_ratio_interval():
    rows = fixed_rows(
        2000, isl=1000, isl_dist="uniform", isl_spread=0.2, osl=10, osl_dist="uniform",
        osl_spread=0.5,
    )  # fmt: skip
    isl = np.array([len(r.input_tokens) for r in rows])
    osl = np.array([r.output_len for r in rows])
    assert isl.min() == 800 and isl.max() == 1200  # floor(1000 * 0.8), ceil(1000 * 1.2)
    assert osl.min() == 5 and osl.max() == 15
    assert abs(isl.mean() - 1000) < 10 and abs(osl.mean() - 10) < 0.3
    assert len(set(isl.tolist())) > 300  # every length in between is drawn, not a few


def test_lognormal_lengths_keep_the_mean():
    rows = fixed_rows(3000, isl=500, isl_dist="lognormal", isl_spread=0.5, osl=64)
    isl = np.array([len(r.input_tokens) for r in rows])
    # Lognormal sigma 0.5: standard deviation 500 * sqrt(e^0.25 - 1) ~ 266 tokens.
    assert abs(isl.mean() - 500) < 4 * 266 / math.sqrt(len(isl))
    assert np.median(isl) < isl.mean()  # right-skewed
    assert all(r.output_len == 64 for r in rows)


def test_the_prefix_is_shared_by_its_fraction_and_counted_in_isl(tmp_path):
    rows = fixed_rows(1000, isl=300, osl=4, prefix_len=200, prefix_share=0.3)
    starts = [r.input_tokens[:200].tobytes() for r in rows]
    common, count = max(((s, starts.count(s)) for s in set(starts)), key=lambda x: x[1])
    assert abs(count / len(rows) - 0.3) < 0.05
    assert all(len(r.input_tokens) == 300 for r in rows)  # prefix + 100 random tokens
    prefix = np.frombuffer(common, np.int32)
    # The prefix is the same in every seed-3 workload, whatever the session count.
    assert fixed_rows(5, isl=300, osl=4, prefix_len=200)[0].input_tokens[:200].tolist() == (
        prefix.tolist()
    )
    # Through the writer and reader: the infinite cache hits the prefix on every
    # prefixed request after the first, and nothing else (a vocabulary of 2^31 ids
    # leaves no chance of random tokens matching).
    params = FixedParams(
        isl=300, osl=4, prefix_len=200, prefix_share=0.3, vocab_size=TOKEN_ID_MAX + 1
    )
    gen = get_generator("fixed")(params)
    path = tmp_path / "f.parquet"
    gen.write(path, 1000, 2.0, 3, 32768)
    cache = summarize(Workload.open(path))["infinite_cache"]
    assert cache["hit_tokens"] == 200 * (count - 1)


def test_every_request_can_carry_the_prefix_whole():
    rows = fixed_rows(100, isl=64, osl=8, prefix_len=64)
    assert len({r.input_tokens.tobytes() for r in rows}) == 1  # the prompt is the prefix


def test_lengths_are_clipped_to_the_context_prompt_first():
    rows = fixed_rows(300, ctx=1100, isl=1000, isl_dist="uniform", isl_spread=0.5, osl=200)
    for r in rows:
        assert len(r.input_tokens) + r.output_len <= 1100
        assert len(r.input_tokens) <= 1099 and r.output_len >= 1
    assert max(len(r.input_tokens) for r in rows) == 1099
    assert any(r.output_len < 200 for r in rows) and any(r.output_len == 200 for r in rows)


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"isl_dist": "normal"}, r"--set isl_dist=normal: expected one of fixed, uniform"),
        ({"isl_spread": "0.1"}, r"isl_spread=0.1: applies only with isl_dist uniform"),
        ({"osl_dist": "lognormal"}, r"osl_dist=lognormal: needs osl_spread > 0"),
        ({"isl_dist": "uniform", "isl_spread": "1"}, r"isl_spread=1.0: a uniform spread must"),
        ({"prefix_len": "1025"}, r"prefix_len=1025: the prefix is part of the prompt.*isl=1024"),
        (
            {"isl": "1000", "isl_dist": "uniform", "isl_spread": "0.5", "prefix_len": "501"},
            r"prefix_len=501: .*floor\(isl \* \(1 - isl_spread\)\) = 500",
        ),
        ({"prefix_share": "0.5"}, r"prefix_share=0.5: applies only with prefix_len > 0"),
        ({"prefix_share": "1.5", "prefix_len": "4"}, r"prefix_share=1.5: must be <= 1"),
        ({"osl": "0"}, r"osl=0: must be >= 1"),
    ],
)
def test_bad_knobs_are_refused_naming_the_knob(knobs, message):
    with pytest.raises(TwinError, match=message):
        get_generator("fixed").parse_params(knobs)


def test_a_context_too_small_for_the_prefix_is_refused():
    gen = get_generator("fixed")(FixedParams(prefix_len=1000))
    with pytest.raises(TwinError, match="--max-context 1000 is too small: prefix_len 1000"):
        gen.rows(10, 1.0, 1, 1000)


def test_cli_flags_make_the_file_set_makes(tmp_path, capsys):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    flags = ["--isl", "96", "--osl", "7", "--isl-dist", "uniform", "--isl-spread", "0.25"]
    flags += ["--prefix-len", "32", "--prefix-share", "0.5"]
    assert run(["workload", "generate", "fixed", "-n", "40", *flags, "-o", str(a)]) == 0
    knobs = ["isl=96", "osl=7", "isl_dist=uniform", "isl_spread=0.25", "prefix_len=32"]
    knobs.append("prefix_share=0.5")
    sets = [w for k in knobs for w in ("--set", k)]
    assert run(["workload", "generate", "fixed", "-n", "40", *sets, "-o", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes()
    assert "wrote 40 requests in 40 sessions" in capsys.readouterr().out
    meta = Workload.open(a).metadata
    assert meta["generator"] == "fixed" and meta["params"]["isl_spread"] == 0.25
