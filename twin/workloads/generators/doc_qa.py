"""``doc-qa``: document question answering with schema-declared prompt modules.

The Prompt Cache workload (Gim et al., "Prompt Cache: Modular Attention Reuse
for Low-Latency Inference", MLSys 2024, sec. 5.1): a library of long documents
(LongBench-like), each request importing one to a few of them, in an order of
its own, followed by a short question that is never cached. Every request is
its own session (one turn, open loop), and its ``modules`` column names the
documents it imports with their positions, as a prompt schema would declare
them (sec. 3.2), so a module can be reused wherever it appears, not only as a
prefix.

All documents are drawn once per seed; document popularity is Zipf-like.
Context cap: documents are dropped from the end of a request until the prompt
with its question and reply fits ``--max-context``; a cap below the shortest
document plus two tokens is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from twin.errors import TwinError
from twin.workloads.generators.base import (
    GeneratorParams,
    Turn,
    WorkloadGenerator,
    knob,
    lognormal_int,
    token_ids,
    zipf_weights,
)

_LONGBENCH = "LongBench (Bai et al., arXiv 2308.14508)"
_PROMPT_CACHE = "Prompt Cache (Gim et al., MLSys 2024)"


@dataclass(frozen=True)
class DocQAParams(GeneratorParams):
    """Knobs of the ``doc-qa`` kind."""

    n_documents: int = knob(
        64,
        "documents in the library (each a prompt module)",
        "assumption: a document store of a few dozen long documents serving many questions",
        lo=1,
    )
    doc_min_tokens: int = knob(
        4000,
        "shortest document (tokens); lengths are uniform in [min, max]",
        f"{_PROMPT_CACHE} sec. 5.1 uses {_LONGBENCH} documents; its English single- and "
        "multi-document QA samples run to several thousand tokens, 4-10K here",
        lo=1,
    )
    doc_max_tokens: int = knob(10000, "longest document (tokens)", "as doc_min_tokens", lo=1)
    docs_min: int = knob(
        1,
        "fewest documents a request imports",
        f"{_LONGBENCH} single-document QA: one document per question",
        lo=1,
    )
    docs_max: int = knob(
        3,
        "most documents a request imports (uniform in [min, max], distinct, random order)",
        f"{_LONGBENCH} multi-document QA (HotpotQA, 2WikiMQA, MuSiQue) joins several passages; "
        "assumption: up to three documents",
        lo=1,
    )
    zipf_s: float = knob(
        0.8,
        "Zipf exponent of document popularity: document k is picked with weight k^-s",
        "Breslau et al., INFOCOM 1999: request popularity is Zipf-like with exponents 0.64-0.83",
        lo=0,
    )
    question_mean_tokens: float = knob(
        32.0,
        "mean question length (tokens): the uncached text after the modules",
        f"{_LONGBENCH}: questions are one sentence; assumption: ~32 tokens with the "
        "answer instruction",
        gt=0,
    )
    question_sigma: float = knob(
        0.5, "log-spread of question lengths", "assumption: 5-95% range x0.44-x2.3 the median", lo=0
    )
    question_max_tokens: int = knob(
        256, "longest question (tokens)", "guard: P(question > 256) < 1e-4 by default", lo=1
    )
    output_mean_tokens: float = knob(
        48.0,
        "mean answer length (tokens)",
        f"{_LONGBENCH} caps QA answers at 32-128 new tokens (its dataset2maxlen config)",
        gt=0,
    )
    output_sigma: float = knob(
        0.5, "log-spread of answer lengths", "assumption: 5-95% range x0.44-x2.3 the median", lo=0
    )
    output_max_tokens: int = knob(
        128, "longest answer (tokens)", f"{_LONGBENCH}'s largest QA generation cap", lo=1
    )

    def check(self) -> None:
        self.require_ordered("doc_min_tokens", "doc_max_tokens")
        self.require_ordered("docs_min", "docs_max")
        if self.docs_max > self.n_documents:
            raise TwinError(
                f"--set docs_max={self.docs_max}: more than the library's "
                f"n_documents={self.n_documents}"
            )


@dataclass(frozen=True)
class _Library:
    docs: list[np.ndarray]  # document i's tokens (module id i)
    weights: np.ndarray  # Zipf popularity, normalised


class DocQAGenerator(WorkloadGenerator):
    """Single-turn requests: one to a few library documents in any order, then a question."""

    name: ClassVar[str] = "doc-qa"
    description: ClassVar[str] = (
        "single-turn document QA: 1-3 of 64 documents (4-10K tokens, Zipf popularity) in "
        "varying order as prompt modules, then a short question (Prompt Cache's workload)"
    )
    Params: ClassVar[type[GeneratorParams]] = DocQAParams
    has_modules: ClassVar[bool] = True

    def shared(self, rng: np.random.Generator, max_context: int) -> _Library:
        p: DocQAParams = self.params  # type: ignore[assignment]
        if p.doc_min_tokens + 2 > max_context:
            raise TwinError(
                f"--max-context {max_context} is too small: the shortest document is "
                f"{p.doc_min_tokens} tokens, and a question token and a reply token must fit "
                "too; raise it or lower --set doc_min_tokens"
            )
        lengths = rng.integers(p.doc_min_tokens, p.doc_max_tokens + 1, p.n_documents)
        docs = [token_ids(rng, int(n), p.vocab_size) for n in lengths]
        return _Library(docs, zipf_weights(p.n_documents, p.zipf_s))

    def session(self, rng: np.random.Generator, shared: Any, max_context: int) -> Iterator[Turn]:
        p: DocQAParams = self.params  # type: ignore[assignment]
        k = int(rng.integers(p.docs_min, p.docs_max + 1))
        # Distinct documents by popularity; the draw's order is the prompt's order.
        picked = [int(i) for i in rng.choice(len(shared.docs), k, replace=False, p=shared.weights)]
        n_q = lognormal_int(rng, p.question_mean_tokens, p.question_sigma, 1, p.question_max_tokens)
        n_out = lognormal_int(rng, p.output_mean_tokens, p.output_sigma, 1, p.output_max_tokens)
        while len(picked) > 1 and sum(len(shared.docs[i]) for i in picked) + 2 > max_context:
            picked.pop()
        docs_len = sum(len(shared.docs[i]) for i in picked)
        if docs_len + 2 > max_context:
            picked = [min(range(len(shared.docs)), key=lambda i: len(shared.docs[i]))]
            docs_len = len(shared.docs[picked[0]])
        n_q = max(1, min(n_q, max_context - docs_len - 1))
        n_out = max(1, min(n_out, max_context - docs_len - n_q))
        modules = np.zeros((len(picked), 3), np.int64)
        start = 0
        for j, i in enumerate(picked):
            modules[j] = (i, start, len(shared.docs[i]))
            start += len(shared.docs[i])
        question = token_ids(rng, n_q, p.vocab_size)
        prompt = np.concatenate([shared.docs[i] for i in picked] + [question])
        yield Turn(0.0, prompt, False, token_ids(rng, n_out, p.vocab_size), modules)
