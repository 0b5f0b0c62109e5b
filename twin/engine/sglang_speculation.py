"""SGLang's speculative decoding flags: ``--speculative-*`` (and SGLANG_SIMULATE_ACC_LEN,
``speculative_acceptance``) read into a :class:`~twin.engine.speculative.Speculation`, as
SGLang's own ``speculative_hook.py`` resolves them, and the host time of its spec v1 loop.
Part of the ``sglang`` mode (:mod:`twin.engine.modes_sglang`), whose flag table holds
:data:`SPECULATIVE_FLAGS`.
"""

from __future__ import annotations

from typing import Any

from twin.engine import speculative
from twin.engine.mode_base import Apply, Flag, _acceptance, _int
from twin.engine.releases import release_of
from twin.errors import TwinError
from twin.model import ModelSpec

# --speculative-algorithm builtins the twin models (srt/arg_groups/fields/spec.py, 0.5.23)
# -> its method; NEXTN (an alias of EAGLE with the model's own MTP layers,
# speculative_hook.py) is MTP; STANDALONE a draft model.
ALGORITHM_METHODS = {
    "EAGLE": "eagle",
    "EAGLE3": "eagle3",
    "NEXTN": "mtp",
    "STANDALONE": "draft_model",
    "NGRAM": "ngram",
}
# srt/arg_groups/fields/spec.py speculative_ngram_max_bfs_breadth; speculative_hook.py
# _handle_ngram: 12 draft tokens by default.
NGRAM_DRAFT_TOKENS = 12
# speculative_hook.py _handle_eagle_family / _handle_ngram: "Max running requests is reset
# to 48 for speculative decoding" unless --max-running-requests is given.
SPEC_MAX_RUNNING = 48


def _sglang_spec(name: str, kind: str) -> Apply:
    """One of SGLang's --speculative-* flags (or SGLANG_SIMULATE_ACC_LEN), kept until
    every flag is read (:func:`sglang_speculation`)."""

    def apply(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
        spec = out.setdefault("sglang_spec", {})
        if kind == "int":
            spec[name] = _int(name, value)
        elif kind == "float":
            try:
                spec[name] = float(value)
            except ValueError:
                raise TwinError(f"--set {name}={value}: expected a number") from None
        elif kind == "algorithm":
            if value.upper() not in ALGORITHM_METHODS:
                raise TwinError(
                    f"--set {name}={value}: not modelled (the twin models "
                    f"{', '.join(ALGORITHM_METHODS)})"
                )
            spec[name] = value.upper()
        else:
            spec[name] = value

    return apply


def _auto_spec_params(algorithm: str, model: ModelSpec) -> tuple[int, int, int]:
    """speculative_hook.py ``_auto_choose_speculative_params`` (0.5.23): (steps, topk,
    draft tokens) when --speculative-num-steps is not given. STANDALONE (3, 1, 4);
    LlamaForCausalLM (the twin's llama-* presets) (5, 4, 8); others (3, 1, 4)."""
    if algorithm != "STANDALONE" and model.name.startswith("llama"):
        return 5, 4, 8
    return 3, 1, 4


# The host time of one speculative iteration of SGLang's spec v1 loop (fixed seconds, and
# seconds per request it carries), which runs without the overlap scheduler
# (``server_args.py`` 0.5.9 and 0.5.10.post1: EAGLE without SGLANG_ENABLE_SPEC_V2 sets
# ``disable_overlap_schedule``), so the CPU's part of every iteration adds to the GPU's:
# ``speculative/eagle_worker.py`` ``forward_batch_generation`` prepares three forwards
# (``draft``, ``verify``, ``forward_draft_extend_after_decode``), each a ForwardBatch and
# a CUDA graph replay, waits on the verify (``accept_length_per_req_cpu``) and walks each
# request's accepted tokens (``eagle_info.py`` ``EagleVerifyInput.verify``, a Python loop a
# request), then ``process_batch_result_decode`` another. Where the overlap scheduler
# runs (every plain run) this time hides under the GPU's, which is why the B200 / B300
# engine times hold none; where a GPU's engine times give a host time (H100) that is
# priced instead (``twin.engine.speculative_pricing.speculative_pricer``). Fitted on the fit split
# only: the 1,500-row sample's 37 InferenceMAX -mtp fit rows
# (``benchmarks/results/sgl-mtp/mtp-rows.csv``: DeepSeek-R1 B200 fp8 12, Qwen3.5 B200 fp8
# 22, B300 fp8 3), the least TPOT MAPE of the estimate ``twin + (fixed + each x running) /
# tau`` over a grid of 0-6 ms and 0-300 us (a script not kept; best 1.0-1.25 ms, 85-105 us),
# confirmed scored: ``python benchmarks/silicon_rows.py benchmarks/results/sgl-mtp/mtp-rows.csv
# --split fit --jobs 2``: TTFT / TPOT MAPE 37.3 / 12.5 -> 13.7 / 10.3% (docs/decisions.md,
# "SGLang's MTP iteration"). Refitted at session 38's tree (helper dsb38), whose verify,
# MLA and MoE prices moved since: the same estimate over every SGLang -mtp fit row of
# ``benchmarks/results/silicon-all-s37/predictions.csv`` (88: DeepSeek-R1 B200 fp8 30,
# Qwen3.5 B200 fp8 51, B300 fp8 7), grid 0-2.5 ms x 90-190 us
# (``benchmarks/results/dsb38-s38/grid.py.txt``), flat optimum 0.5-0.75 ms and 120-130 us;
# confirmed scored (docs/decisions.md, "the SGLang spec-v1 loop host refitted").
SGLANG_SPEC_V1_LOOP_HOST = (0.625e-3, 120e-6)


def sglang_speculation(model: ModelSpec, out: dict[str, Any]) -> None:
    """SGLang's --speculative-* flags (and ``speculative_acceptance``) as a Speculation."""
    raw = out.pop("sglang_spec", {})
    acceptance = out.pop("spec_acceptance", None)
    algorithm = raw.get("speculative_algorithm")
    if algorithm is None:
        if raw or acceptance is not None:
            given = next(iter(raw), "speculative_acceptance")
            raise TwinError(f"--set {given}: give --set speculative_algorithm too")
        return
    method = ALGORITHM_METHODS[algorithm]
    steps = raw.get("speculative_num_steps")
    topk = raw.get("speculative_eagle_topk")
    tokens = raw.get("speculative_num_draft_tokens")
    if method == "ngram":
        # _handle_ngram: topk is the BFS breadth, the draft a trie of num_draft_tokens; the
        # longest chain accepted is num_draft_tokens - 1 deep. No GPU draft.
        tokens = tokens or NGRAM_DRAFT_TOKENS
        steps, topk = max(tokens - 1, 1), 1
    elif steps is None:
        if topk is not None or tokens is not None:
            raise TwinError(
                "--set speculative_eagle_topk / speculative_num_draft_tokens: give "
                "speculative_num_steps too (SGLang chooses all three otherwise)"
            )
        steps, topk, tokens = _auto_spec_params(algorithm, model)
    else:
        topk = topk or 1
        if topk == 1:
            tokens = steps + 1  # speculative_hook.py: adjusted to num_steps + 1 at topk 1
        elif tokens is None:
            raise TwinError(
                "--set speculative_eagle_topk: a tree (topk > 1) needs "
                "--set speculative_num_draft_tokens too"
            )
    length = raw.get("sglang_simulate_acc_len")
    release = release_of(out)
    # The draft extend's tokens a request (0: steps + 1) and, with the overlap scheduler off,
    # the host time of the draft and draft-extend forwards beside the verify's
    # (eagle_worker.py forward_batch_generation: draft(), verify(),
    # forward_draft_extend_after_decode(), each prepared on the CPU; the draft loop is one
    # CUDA graph, eagle_draft_cuda_graph_runner.py). NGRAM drafts on the CPU: none.
    gpu_draft = method != "ngram"
    wide = release.default("spec_extend", "steps") == "draft_tokens" and tokens != steps + 1
    extend = tokens if wide else 0
    non_overlap = gpu_draft and release.default("spec_overlap", "on") == "off"
    spec = speculative.build(
        model,
        method,
        steps,
        verify=tokens,
        topk=topk,
        draft_model=str(raw.get("speculative_draft_model_path") or ""),
        length=None if length is None else (length, "SGLANG_SIMULATE_ACC_LEN"),
        acceptance=None if acceptance is None else ("--set speculative_acceptance", acceptance),
        verify_states=True,
        extend_tokens=extend if gpu_draft else 0,
        forward_host=2 if non_overlap else 0,
        loop_host=SGLANG_SPEC_V1_LOOP_HOST if non_overlap else (0.0, 0.0),
    )
    out["speculative"] = spec.to_dict()
    out.setdefault("max_running", SPEC_MAX_RUNNING)


# The twin's speculative methods by SGLang's --speculative-algorithm (the memory rule's).
SGLANG_ALGORITHMS = {method: name for name, method in ALGORITHM_METHODS.items()}

# SGLang's speculative flags: how each value reads (``_sglang_spec``), the default the help
# shows, the help.
_FLAGS = {
    "speculative_algorithm": (
        "algorithm",
        "none",
        "EAGLE, EAGLE3, NEXTN (MTP), STANDALONE (draft model), NGRAM; max_running_requests then 48",
    ),
    "speculative_draft_model_path": (
        "str",
        "none",
        "STANDALONE: the draft (a preset or config.json); EAGLE heads: recorded",
    ),
    "speculative_num_steps": (
        "int",
        "auto",
        "draft passes a step (unset: 5/4/8 for Llama, else 3/1/4)",
    ),
    "speculative_eagle_topk": ("int", "auto", "branches a draft pass"),
    "speculative_num_draft_tokens": ("int", "auto", "tokens verified a step (topk 1: steps + 1)"),
    "sglang_simulate_acc_len": (
        "float",
        "-1 (off)",
        "acceptance length a verify (env SGLANG_SIMULATE_ACC_LEN)",
    ),
}
SPECULATIVE_FLAGS: dict[str, Flag] = {
    **{
        name: Flag(help, _sglang_spec(name, kind), default)
        for name, (kind, default, help) in _FLAGS.items()
    },
    "speculative_acceptance": Flag(
        "twin: drafted tokens accepted, one rate or one per position "
        "(default: the method's published one; EAGLE, EAGLE3, NEXTN)",
        _acceptance,
        "published",
    ),
}
