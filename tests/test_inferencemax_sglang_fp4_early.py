"""InferenceMAX's DeepSeek fp4 B200 SGLang job before its search space (17d5e204f,
2025-11-03) ran tp 4 and 8 at 4-128 clients over every length with the script's flags
(``inferencemax_sglang.inferencemax_sglang``); from that day tp 8 stops at 16 clients at
8k/1k, and a row there names no script."""

from __future__ import annotations

from dataclasses import replace

from silicon_rows import deepseek_row

from twin.validate import silicon as sil
from twin.validate.silicon.inferencemax_sglang import inferencemax_sglang


def _row(day: str) -> sil.SiliconRow:
    return deepseek_row(day, 128, precision="fp4", isl=8192)


def test_the_early_fp4_job_ran_its_script_at_128_clients_of_8k_prompts() -> None:
    flags = inferencemax_sglang(_row("2025-11-02"))
    assert flags["max_running_requests"] == "256"
    assert flags["chunked_prefill_size"] == "16384"
    assert flags["scheduler_recv_interval"] == "30"
    # from 17d5e204f the configuration's tp 8 8k/1k space ends at 16 clients
    assert inferencemax_sglang(_row("2025-11-10")) == {}
    assert inferencemax_sglang(replace(_row("2025-11-10"), concurrency=16))
