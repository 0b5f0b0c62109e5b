"""Marconi (Pan et al., MLSys 2025, arXiv 2411.19379): the experiments the twin reruns.

This module is the plan: which workloads stand in for the paper's traces,
which cache sizes and policies are replayed or simulated on them. The claims
(the paper's numbers and how the twin's are judged) are in
:mod:`reports.reproduce.marconi_claims`.

Stand-ins (the datasets cannot be downloaded here): ``chat`` for LMSys,
``sharegpt`` for ShareGPT, ``swebench`` for the SWE-bench agent traces
(``twin workload kinds`` cites each knob). Arrival patterns are the paper's
session rates 0.5/1/2 per second (sec. 5.1); replay order follows them.

Cache sizes: the paper's absolute sizes (e.g. 60-140 GB in Fig. 10) belong to
its traces; a synthetic trace's needs differ. Every cache here is a fraction
of the workload's *footprint*: the bytes an unbounded SGLang+ cache holds after
the whole trace (``twin replay W --cache-gb 1e+06 -p sglang+``, its peak
bytes). The paper's 60/80/100/120/140 GB become a geometric sweep of
fractions, wide enough that contention goes from severe to none.
"""

from __future__ import annotations

from twin.reports.reproduce import marconi_claims, marconi_claims_single
from twin.reports.reproduce.base import (
    BASE_RATE,
    D_STATES,
    FOCUS,
    FRACTIONS,
    GRID_POLICIES,
    KINDS,
    MIXES,
    RATES,
    THINK_S,
    Claim,
    Computation,
    Recipe,
    ReplayPoint,
    Results,
    SimSet,
    cache_gb_of,
)

# Sessions per workload: full (what the README quotes) and --quick.
SESSIONS = {
    False: {"chat": 200, "sharegpt": 200, "swebench": 100},
    True: {"chat": 60, "sharegpt": 60, "swebench": 25},
}
# Engine runs: one H100 replica; caches above this are capped so weights and
# running requests fit (the capacity report's default sweep tops out at 40 GB).
SIM_CAP_GB = 40.0
SIM_POLICIES = ("vanilla", "vllm+", "sglang+", "marconi")
THINK_KNOB = "tool_median_s"  # swebench's inter-request (tool) time, seconds


def mix_set(attn: int, ssm: int) -> tuple[str, ...]:
    return (f"n_attention_layers={attn}", f"n_ssm_layers={ssm}")


class Marconi:
    name = "marconi"
    title = "Marconi: Prefix Caching for the Era of Hybrid LLMs"
    citation = "Pan et al., MLSys 2025 (arXiv 2411.19379); artifact github.com/ruipeterpan/marconi"

    def __init__(self, sessions: dict[bool, dict[str, int]] | None = None) -> None:
        # Tests pass tiny session counts; the CLI uses SESSIONS.
        self.sessions = sessions or SESSIONS

    def workload_name(
        self, kind: str, rate: float, quick: bool, think_s: float | None = None
    ) -> str:
        extra = "" if think_s is None else f"-think{think_s:g}"
        return f"{kind}-n{self.sessions[quick][kind]}-r{rate:g}{extra}"

    def workloads(self, quick: bool) -> list[Recipe]:
        out = [
            Recipe(self.workload_name(k, r, quick), k, self.sessions[quick][k], r)
            for k in KINDS
            for r in RATES
        ]
        out.append(
            Recipe(
                self.workload_name("swebench", BASE_RATE, quick, THINK_S[1]),
                "swebench",
                self.sessions[quick]["swebench"],
                BASE_RATE,
                knobs=((THINK_KNOB, THINK_S[1]),),
            )
        )
        return out

    def footprint_workloads(self, quick: bool) -> list[str]:
        return [self.workload_name(k, BASE_RATE, quick) for k in KINDS]

    def focus_gb(self, kind: str, quick: bool, footprint: dict[str, float]) -> float:
        return cache_gb_of(FOCUS, footprint[self.workload_name(kind, BASE_RATE, quick)])

    def grid(self, kind: str, quick: bool, footprint: dict[str, float]) -> list[ReplayPoint]:
        """Claims 1, 2, 4, 7: fractions x session rates x policies on one kind."""
        fp = footprint[self.workload_name(kind, BASE_RATE, quick)]
        return [
            ReplayPoint(self.workload_name(kind, r, quick), p, cache_gb_of(f, fp))
            for r in RATES
            for f in FRACTIONS[quick]
            for p in GRID_POLICIES
        ]

    def replays(self, quick: bool, footprint: dict[str, float]) -> list[ReplayPoint]:
        points = [p for k in KINDS for p in self.grid(k, quick, footprint)]
        points += self.length_bins(quick, footprint)
        points += [p for row in self.mixes(quick, footprint) for p in row]
        points += [p for row in self.d_states(quick, footprint) for p in row]
        points += self.think_times(quick, footprint)
        return points

    def length_bins(self, quick: bool, footprint: dict[str, float]) -> list[ReplayPoint]:
        """Claim 3: SGLang+ and Marconi on one SWE-bench-like trace, per request."""
        w = self.workload_name("swebench", BASE_RATE, quick)
        gb = self.focus_gb("swebench", quick, footprint)
        return [ReplayPoint(w, p, gb, per_request=True) for p in ("sglang+", "marconi")]

    def mixes(self, quick: bool, footprint: dict[str, float]) -> list[list[ReplayPoint]]:
        """Claim 5: per layer mix, vLLM+ / SGLang+ / Marconi on the LMSys-like trace."""
        w = self.workload_name("chat", BASE_RATE, quick)
        gb = self.focus_gb("chat", quick, footprint)
        return [[ReplayPoint(w, p, gb, mix_set(a, s)) for p in GRID_POLICIES] for a, s in MIXES]

    def d_states(self, quick: bool, footprint: dict[str, float]) -> list[list[ReplayPoint]]:
        """Claim 6: per SSM state size, vLLM+ and Marconi on the LMSys-like trace."""
        w = self.workload_name("chat", BASE_RATE, quick)
        gb = self.focus_gb("chat", quick, footprint)
        return [
            [ReplayPoint(w, p, gb, (f"ssm_d_state={n}",)) for p in ("vllm+", "marconi")]
            for n in D_STATES
        ]

    def think_times(self, quick: bool, footprint: dict[str, float]) -> list[ReplayPoint]:
        """Claim 7: SWE-bench-like traces with 5 s and 10 s median tool time."""
        gb = self.focus_gb("swebench", quick, footprint)
        names = [
            self.workload_name("swebench", BASE_RATE, quick),
            self.workload_name("swebench", BASE_RATE, quick, THINK_S[1]),
        ]
        return [ReplayPoint(w, p, gb) for w in names for p in ("sglang+", "marconi")]

    def sims(self, quick: bool, footprint: dict[str, float]) -> list[SimSet]:
        """Claims 3 and 8: the engine on each kind's base trace at the focus cache."""
        return [
            SimSet(
                self.workload_name(k, BASE_RATE, quick),
                SIM_POLICIES,
                min(self.focus_gb(k, quick, footprint), SIM_CAP_GB),
            )
            for k in KINDS
        ]

    def artifact_points(self, quick: bool, footprint: dict[str, float]) -> list[ReplayPoint]:
        """With $TWIN_MARCONI_ARTIFACT: claim 1's policies at the focus cache and base rate."""
        return [
            ReplayPoint(
                self.workload_name(k, BASE_RATE, quick), p, self.focus_gb(k, quick, footprint)
            )
            for k in KINDS
            for p in GRID_POLICIES
        ]

    def computations(self, quick: bool) -> list[Computation]:
        return []  # everything is a replay or an engine run

    def claims(self, results: Results, quick: bool) -> list[Claim]:
        grid, single = marconi_claims, marconi_claims_single
        return [
            f(self, results, quick)
            for f in (
                grid.claim_vs_vllm,
                grid.claim_vs_sglang,
                single.claim_one_trace,
                grid.claim_contention,
                single.claim_layers,
                single.claim_state_dim,
                grid.claim_arrivals,
                single.claim_ttft,
                single.claim_footprint,
            )
        ]

    def notes(self) -> list[str]:
        return marconi_claims.NOTES
