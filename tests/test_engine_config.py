"""The nested engine configuration (issue 33): groups by concern, one builder, and the
summary's flat ``config`` section unchanged."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from twin.engine import RunArgs, build_run, typed_settings
from twin.engine.config import (
    GROUP_OF,
    GROUPS,
    PAPER_KEYS,
    SUMMARY_ORDER,
    EngineConfig,
    SchedulerConfig,
)
from twin.engine.config_build import build_config
from twin.engine.settings import NamedSettings
from twin.errors import TwinError


def test_each_field_lives_in_one_group_and_the_summary_names_each_once() -> None:
    names = [f.name for cls in GROUPS.values() for f in dataclasses.fields(cls)]
    assert len(names) == len(set(names)) == len(SUMMARY_ORDER) == len(set(SUMMARY_ORDER))
    assert set(names) == set(SUMMARY_ORDER) == set(GROUP_OF)
    assert [f.name for f in dataclasses.fields(EngineConfig)] == list(GROUPS)


def test_the_summary_config_is_flat_in_the_old_order() -> None:
    assert list(EngineConfig().to_dict()) == list(PAPER_KEYS)
    config = build_config(
        tp=2,
        engine="vllm",
        cache_gb="auto",
        gpu_memory_bytes=80e9,
        prefill_workers=1,
        decode_workers=1,
        frontend_s=0.001,
    )
    # The keys main's flat configuration wrote for these names, in its order (read from
    # main before the nesting): the paper's, then the set ones in SUMMARY_ORDER's order;
    # since session 43 also vLLM's front-end batch (modes_vllm.VLLM_FRONTEND_BATCH, given by
    # vllm_gpu_defaults) in its SUMMARY_ORDER place after frontend_s.
    after = ["shared_pool", "engine", "frontend_s", "frontend_batch"]
    after += ["prefill_workers", "decode_workers", "kv_link"]
    assert list(config.to_dict()) == [*PAPER_KEYS, *after]


def test_the_builder_files_each_name_in_its_group() -> None:
    config = build_config(tp=2, policy="vanilla", max_running=4, session_rate=1.5, kv_link="ib")
    assert config.cluster.tp == 2 and config.cache.policy == "vanilla"
    assert config.scheduling == SchedulerConfig(max_running=4)
    assert config.arrivals.session_rate == 1.5 and config.get("session_rate") == 1.5
    with pytest.raises(TypeError, match="no field tpp"):
        build_config(tpp=2)


def test_a_refusal_still_names_the_flag() -> None:
    with pytest.raises(TwinError, match=r"--max-running: must not exceed --max-batched-tokens"):
        build_config(max_running=64, max_batched_tokens=32)


def test_build_run_refuses_a_misspelt_keyword_in_one_line(tmp_path: Any) -> None:
    """A name RunArgs lacks that reaches build_run untyped (a stored sweep's settings, a
    dict spread from the CLI) is one line naming it, before the workload is opened."""
    loose: dict[str, Any] = {"tp": 1, "duraton_s": 60.0}
    with pytest.raises(TwinError, match=r"^'duraton_s': not a setting of a run \(RunArgs\)$"):
        build_run(tmp_path / "absent.parquet", **loose)


def test_typed_settings_refuses_a_name_its_kind_lacks() -> None:
    pairs = [("tp", 2), ("duration_s", 60.0)]
    assert typed_settings(RunArgs, pairs) == {"tp": 2, "duration_s": 60.0}
    with pytest.raises(TwinError, match=r"'duration_s': not a setting of a run \(NamedSettings\)"):
        typed_settings(NamedSettings, pairs)
