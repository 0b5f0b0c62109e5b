"""Engine releases (issue 35): --engine NAME==VERSION, flags, renames and defaults."""

from __future__ import annotations

import pytest
from test_bad_input import assert_clean_error
from typer.testing import CliRunner

from twin.cache.pool import SplitPool
from twin.cli.root import app
from twin.engine import build_run
from twin.engine.config import EngineConfig
from twin.engine.modes import ENGINE_MODES, get_mode, measured_mode
from twin.engine.modes_sglang import sglang_gpu_defaults
from twin.engine.releases import Release, release_for_measured
from twin.errors import TwinError
from twin.policies import get_policy
from twin.policies.structures import make_cache
from twin.presets import get_model
from twin.reports.plan_inputs import parse_engines
from twin.reports.sweep import Point, SweepSpec, engine_variant
from twin.workloads.examples import example_path

HYBRID = get_model("marconi-hybrid-7b")
LLAMA = get_model("llama-3-8b")


def settings(engine: str, sets: dict[str, str] | None = None, model=HYBRID) -> dict:
    return get_mode(engine).settings(model, sets or {})


# ----- picking a release ------------------------------------------------------------


def test_the_bare_name_is_the_newest_release_and_a_prefix_picks_one():
    assert settings("vllm")["engine_release"] == "0.33.0"
    assert settings("vllm==0.33")["engine_release"] == "0.33.0"
    assert settings("vllm==0.19.0")["engine_release"] == "0.19.0"
    assert settings("sglang")["engine_release"] == "0.5.23"
    assert settings("sglang==0.5.10")["engine_release"] == "0.5.10.post1"
    assert settings("trtllm")["engine_release"] == "1.0.0"
    assert "engine_release" not in settings("paper")  # the paper's world has no release


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        ("sglang==0.4", "release not modelled; the twin models sglang 0.5.23, 0.5.10.post1"),
        ("vllm==0.20", "the twin models vllm 0.33.0, 0.19.0"),
        ("sglang==0.5", "more than one modelled release"),
        ("paper==1", "has no releases"),
        ("vllm==", "give a release after"),
    ],
)
def test_an_unknown_release_is_one_line_naming_the_known_ones(engine, message):
    with pytest.raises(TwinError, match=message) as err:
        get_mode(engine)
    assert "\n" not in str(err.value)


def test_the_run_records_its_release():
    run = build_run(example_path("chat"), engine="vllm==0.19", cache_gb="auto")
    assert run.config.mode.engine == "vllm" and run.config.mode.engine_release == "0.19.0"
    assert run.config.to_dict()["engine_release"] == "0.19.0"
    assert "engine_release" not in build_run(example_path("chat")).config.to_dict()


def test_measured_runs_use_the_release_standing_for_their_version():
    assert measured_mode("vllm", "0.12.0") == "vllm==0.19.0"
    assert measured_mode("vllm", "0.33.1") == "vllm==0.33.0"
    assert measured_mode("vllm", "nightly-5b8c30d62b754b57") == "vllm==0.19.0"
    assert measured_mode("sglang", "0.5.9") == "sglang==0.5.10.post1"
    assert measured_mode("sglang", "0.5.1-rc0.pre1") == "sglang==0.5.10.post1"
    assert measured_mode("trtllm", "1.0.0rc3") == "trtllm==1.0.0"


# ----- renamed and release-only flags ---------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "sets", "message"),
    [
        (
            "vllm",
            {"enable_mamba_fine_grained_prefix_cache": "false"},
            "vLLM 0.33.0 renamed it enable_mamba_shared_prefix_checkpoint",
        ),
        (
            "vllm==0.33",
            {"mamba_cache_mode": "all"},
            "removed it; use --set prefix_cache_retention_interval=none",
        ),
        (
            "vllm==0.19",
            {"prefix_cache_retention_interval": "0"},
            "not a flag of vLLM 0.19.0; it is one of --engine vllm==0.33.0",
        ),
        (
            "sglang",
            {"mamba_scheduler_strategy": "extra_buffer"},
            "SGLang 0.5.23 renamed it mamba_radix_cache_strategy",
        ),
        (
            "sglang==0.5.10.post1",
            {"mamba_radix_cache_strategy": "extra_buffer"},
            "not a flag of SGLang 0.5.10.post1; it is one of --engine sglang==0.5.23",
        ),
        (
            "sglang==0.5.10.post1",
            {"enable_int8_mamba_checkpoint": "true"},
            "--engine sglang==0.5.23",
        ),
        (
            "sglang",
            {"radix_eviction_policy": "fifo"},
            "not a choice of SGLang 0.5.23 .*--engine sglang==0.5.10.post1 has it",
        ),
    ],
)
def test_a_flag_of_another_release_is_refused_naming_what_to_give(engine, sets, message):
    with pytest.raises(TwinError, match=message) as err:
        settings(engine, sets)
    assert "\n" not in str(err.value)


def test_old_names_are_accepted_by_the_releases_that_had_them():
    old = settings("sglang==0.5.10.post1", {"mamba_scheduler_strategy": "extra_buffer"})
    assert old["state_slots"] == 3
    assert settings("vllm==0.19", {"mamba_cache_mode": "all"})["policy_options"] == {
        "block_size": 80
    }
    fifo = settings("sglang==0.5.10.post1", {"radix_eviction_policy": "fifo"}, model=LLAMA)
    assert fifo["policy_options"] == {"eviction": "fifo"}


def test_the_cli_refuses_a_renamed_flag_in_one_line(capsys, tmp_path):
    argv = ["simulate", "--engine", "sglang", "--set", "mamba_scheduler_strategy=extra_buffer"]
    argv += ["--out", str(tmp_path / "o")]
    assert_clean_error(capsys, argv, tmp_path, "renamed it mamba_radix_cache_strategy")


# ----- each release's defaults ------------------------------------------------------------


def test_vllm_defaults_by_release():
    # vllm/config/cache.py: gpu_memory_utilization 0.92 in 0.33.0, 0.9 in 0.19.0;
    # prefix_cache_retention_interval 0 in 0.33.0, absent (a state on every block) in 0.19.0.
    new, old = settings("vllm"), settings("vllm==0.19")
    assert new["memory_utilization"] == 0.92 and old["memory_utilization"] == 0.9
    assert new["policy_options"] == {"block_size": 80, "retention_interval": 0}
    assert old["policy_options"] == {"block_size": 80}
    assert settings("vllm", {"gpu_memory_utilization": "0.5"})["memory_utilization"] == 0.5
    run = build_run(example_path("chat"), engine="vllm", cache_gb="auto", memory_utilization=0.8)
    assert run.config.memory.memory_utilization == 0.8  # an explicit --gpu-mem-util wins


def test_sglang_auto_strategy_by_release():
    # 0.5.23 overrides.py: auto -> extra_buffer (overlap on, supported hybrid); 0.5.10.post1
    # server_args.py: auto -> no_buffer.
    assert settings("sglang")["state_slots"] == 3
    assert "state_slots" not in settings("sglang==0.5.10.post1")
    assert "state_slots" not in settings("sglang", model=LLAMA)  # no states to hold
    assert "state_slots" not in settings("sglang", {"mamba_radix_cache_strategy": "no_buffer"})


def test_sglang_chunked_prefill_default_by_release():
    gib24 = 24 * (1 << 30)

    def chunk(gpu_bytes: float, release: str) -> int:
        return sglang_gpu_defaults(gpu_bytes, 1, {"engine_release": release})["max_batched_tokens"]

    assert chunk(gib24, "0.5.23") == 4096
    assert chunk(gib24, "0.5.10.post1") == 2048
    assert chunk(16 * (1 << 30), "0.5.23") == 2048


# ----- the new flags' effects ---------------------------------------------------------------


def test_extra_buffer_lazy_holds_two_states_a_request():
    # allocation_sizing.py get_mamba_tracking_slots(lazy=True) == 1: live state + 1.
    lazy = settings("sglang==0.5.23", {"mamba_radix_cache_strategy": "extra_buffer_lazy"})
    eager = settings("sglang", {"mamba_radix_cache_strategy": "extra_buffer"})
    assert lazy["state_slots"] == 2 and eager["state_slots"] == 3
    run = build_run(
        example_path("chat"),
        engine="sglang==0.5.23",
        cache_gb="auto",
        sets={"mamba_radix_cache_strategy": "extra_buffer_lazy", "page_size": "16"},
    )
    assert run.config.memory.state_slots == 2  # and page_size > 1 is allowed, as with extra_buffer


def test_int8_checkpoints_halve_a_cached_state_but_not_a_running_slot():
    fields = settings("sglang", {"enable_int8_mamba_checkpoint": "true"})
    assert fields["policy_options"] == {"int8_checkpoint": True}
    plain = make_cache(get_policy("sglang"), HYBRID, 10**10)
    int8 = make_cache(get_policy("sglang", **fields["policy_options"]), HYBRID, 10**10)
    assert int8.ckpt_bytes == HYBRID.ssm_checkpoint_bytes // 2 == plain.ckpt_bytes // 2
    assert int8.slot_bytes == plain.slot_bytes == HYBRID.ssm_checkpoint_bytes
    # The same mamba pool holds twice the cached states.
    assert SplitPool(10**10, int8).state_size == SplitPool(10**10, plain).state_size
    assert int8.state_capacity // int8.ckpt_bytes >= 2 * (plain.state_capacity // plain.ckpt_bytes)
    with pytest.raises(TwinError, match="not int8-aware"):
        settings("sglang", {"enable_int8_mamba_checkpoint": "1", "enable_hierarchical_cache": "1"})


def test_int8_checkpoints_change_a_run_under_memory_pressure():
    def cached_states(sets):
        run = build_run(
            example_path("chat"),
            engine="sglang",
            cache_gb="auto",
            sets={"mem_fraction_static": "0.25", **sets},
        )
        return run.simulate().to_dict()

    plain = cached_states({})
    int8 = cached_states({"enable_int8_mamba_checkpoint": "true"})
    assert plain["config"]["policy_options"] == {}
    assert int8["config"]["policy_options"] == {"int8_checkpoint": True}
    a, b = plain["replicas"][0]["cache"], int8["replicas"][0]["cache"]
    assert b["peak_ssm_bytes"] < a["peak_ssm_bytes"]  # the same states, half the bytes
    # The running requests' slots keep their bytes.
    assert int8["replicas"][0]["pool"]["state_bytes"] == plain["replicas"][0]["pool"]["state_bytes"]


def test_flags_the_twin_cannot_model_are_refused_unless_they_change_nothing():
    assert settings("vllm", {"prefix_match_unit": "80"})["policy_options"]["block_size"] == 80
    with pytest.raises(TwinError, match=r"finer than the block .80 tokens.* not modelled yet"):
        settings("vllm", {"prefix_match_unit": "16"})
    with pytest.raises(TwinError, match="ReplaySSM decode kernel's cost is not modelled yet"):
        settings("vllm", {"use_replayssm": "true"})
    assert settings("vllm", {"use_replayssm": "false", "replayssm_buffer_len": "32"})
    assert settings("vllm", {"use_replayssm": "true"}, model=LLAMA)  # no Mamba2 layers
    assert settings("sglang", {"mamba_track_interval": "256"})
    with pytest.raises(TwinError, match=r"not modelled yet .only its default, 256"):
        settings("sglang", {"mamba_track_interval": "128"})
    with pytest.raises(TwinError, match=r"T-LRU .* not modelled yet"):
        settings("sglang", {"radix_eviction_policy": "tlru"}, model=LLAMA)
    # 0.5.23's UnifiedRadixCache orders hybrids by the policy; 0.5.10.post1's
    # MambaRadixCache does not (accepted, no effect).
    with pytest.raises(TwinError, match="UnifiedRadixCache"):
        settings("sglang", {"radix_eviction_policy": "lfu"})
    assert (
        settings("sglang==0.5.10.post1", {"radix_eviction_policy": "lfu"})["policy_options"] == {}
    )
    assert settings("sglang", {"radix_eviction_policy": "slru"}, model=LLAMA)["policy_options"] == {
        "eviction": "slru"
    }


# ----- --help ---------------------------------------------------------------------------------


def test_help_lists_the_current_release_flags_with_defaults_and_sources():
    lines = get_mode("sglang").flag_lines()
    assert lines[0].startswith("--engine sglang = SGLang 0.5.23 (rules read from sglang 0.5.23")
    assert "  --set mamba_radix_cache_strategy=auto: auto (extra_buffer on hybrids)" in "\n".join(
        lines
    )
    assert not any("mamba_scheduler_strategy=" in line for line in lines)
    assert any(line.startswith("  --engine sglang==0.5.10.post1") for line in lines)
    vllm = "\n".join(get_mode("vllm").flag_lines())
    assert "--set gpu_memory_utilization=0.92" in vllm
    assert "--set prefix_cache_retention_interval=0" in vllm
    assert "0.19.0" in "\n".join(get_mode("vllm==0.19").flag_lines()[:1])

    out = CliRunner().invoke(app, ["simulate", "--engine", "sglang", "--help"]).output
    assert "mamba_radix_cache_strategy=auto" in out and "sglang 0.5.23" in out


def test_sweeps_and_plans_take_a_release_on_their_engine_axes() -> None:
    assert parse_engines(["vllm==0.19", "vllm", "sglang==0.5.10"]) == [
        "vllm==0.19.0",
        "vllm",
        "sglang==0.5.10.post1",
    ]
    # One flag named, the one given (not "--engines: --engine ...").
    with pytest.raises(TwinError, match=r"^--engines vllm==9: release not modelled") as err:
        parse_engines(["vllm==9"])
    assert "--engine " not in str(err.value)
    with pytest.raises(TwinError, match=r"^--engines 'tgi': expected one of"):
        parse_engines(["tgi"])
    name = "sglang==0.5.10.post1[mem_fraction_static=0.3]"
    assert engine_variant(name) == ("sglang==0.5.10.post1", {"mem_fraction_static": "0.3"})
    with pytest.raises(TwinError, match=r"^--policies vllm==9: release not modelled") as err:
        engine_variant("vllm==9[]")
    assert "--engine " not in str(err.value)
    with pytest.raises(TwinError, match=r"^--policies 'vllm==': give a release"):
        engine_variant("vllm==[]")
    # The point runs that release: its config records it, and its key differs from the
    # newest release's (a point of another release is another point).
    spec = SweepSpec(workload="w.parquet", model="tiny-hybrid", gpu="h100")
    newest = "sglang[mem_fraction_static=0.3]"
    old, new = (Point(-1.0, p, None, 0, None) for p in (name, newest))
    assert spec.config(old).mode.engine_release == "0.5.10.post1"
    assert spec.config(new).mode.engine_release == "0.5.23"
    assert spec.key(old) != spec.key(new)


def test_a_measured_version_orders_as_the_kernel_tables_do() -> None:
    """One version order for the engine's rules and the kernel tables (PEP 440): a
    release candidate comes before its release, a post release after it, and trailing
    zeros do not count."""
    releases = tuple(Release(v, "", ()) for v in ("1.2.0", "1.1.0", "1.0.0"))
    assert release_for_measured(releases, "1.2.0rc6.post1").version == "1.1.0"
    assert release_for_measured(releases, "1.2").version == "1.2.0"
    assert release_for_measured(releases, "1.1.0.post2").version == "1.1.0"
    assert release_for_measured(releases, "0.9.0").version == "1.0.0"  # older: the oldest
    assert release_for_measured(releases, "nightly-dev").version == "1.0.0"


def test_a_modes_build_is_the_one_its_runs_lay_out() -> None:
    """``EngineMode.build`` (``twin cost --engine``'s) is the build ``twin simulate
    --engine NAME[==VERSION]`` lays its kernels out as, without a measured one."""
    model = get_model("llama-3.1-70b")
    for name in ENGINE_MODES:
        for release in [None, *get_mode(name).releases]:
            mode = get_mode(name if release is None else f"{name}=={release.version}")
            m = EngineConfig.of(**mode.settings(model, {})).mode
            assert mode.build == (m.engine_build or m.kernel_tables or m.engine_release)
