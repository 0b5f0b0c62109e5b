"""Prompt Cache (issue 15): the modules column, the doc-qa generator, the module store's rules.

Each rule of ``twin/cache/module_cache.py`` (Gim et al., MLSys 2024) has a test:
reuse at shifted positions, the question always computed, host copies priced
at the link, recurrent layers recompute modules out of prefix position, LRU
eviction never touching pinned modules.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_engine_helpers import doc_qa

from twin.cache import RequestCache
from twin.costmodel import CostModel
from twin.costmodel.profile_store import load_profile
from twin.engine.cost import CostModelPricer
from twin.errors import TwinError
from twin.hardware import get_gpu
from twin.policies import get_policy
from twin.policies.structures import make_cache
from twin.presets import get_model
from twin.replay import Trace, replay
from twin.workloads.generators import get_generator
from twin.workloads.reader import Workload
from twin.workloads.schema import WorkloadRow
from twin.workloads.writer import WorkloadWriter

A = np.arange(100, 140, dtype=np.int32)  # module 1: 40 tokens
B = np.arange(200, 260, dtype=np.int32)  # module 2: 60 tokens
Q = np.array([7, 8, 9], dtype=np.int32)  # an uncached question


def mods(*parts: tuple[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A prompt made of modules (id, tokens) then the question, and its modules array."""
    rows, start = [], 0
    for mid, toks in parts:
        rows.append((mid, start, len(toks)))
        start += len(toks)
    prompt = np.concatenate([t for _, t in parts] + [Q])
    return prompt, np.array(rows, np.int64)


def store(model: str = "tiny-transformer", capacity: int = 10**9, storage: str = "gpu"):
    policy = get_policy("prompt-cache", storage=storage)
    return make_cache(policy, get_model(model), capacity)


def serve(cache, prompt, modules):
    return RequestCache(cache).serve(prompt, np.concatenate((prompt, [1])), modules)


# ----- the module store's rules -------------------------------------------------------


def test_modules_are_reused_at_shifted_positions_and_the_question_is_computed():
    cache = store()
    p1, m1 = mods((1, A), (2, B))
    assert serve(cache, p1, m1).length == 0  # first sight: computed, then stored
    p2, m2 = mods((2, B), (1, A))  # the same modules in the other order
    hit = serve(cache, p2, m2)
    assert hit.length == len(A) + len(B)  # both reused though neither sits where it was
    assert hit.length < len(p2)  # the question stays uncached
    assert hit.recompute == 0 and hit.host_tokens == 0  # a Transformer on GPU memory
    cache.verify()
    assert cache.kv_bytes == (len(A) + len(B)) * get_model("tiny-transformer").kv_bytes_per_token


def test_a_prefix_cache_would_miss_the_reordered_prompt():
    # The contrast that motivates modules: sglang+ reuses only a shared prefix.
    policy = get_policy("sglang+")
    cache = make_cache(policy, get_model("tiny-transformer"), 10**9)
    p1, _ = mods((1, A), (2, B))
    p2, _ = mods((2, B), (1, A))
    serve(cache, p1, None)
    assert serve(cache, p2, None).length == 0


def test_recurrent_layers_recompute_modules_out_of_prefix_position():
    cache = store("tiny-hybrid")
    p1, m1 = mods((1, A), (2, B))
    serve(cache, p1, m1)
    # A was computed at position 0: its end state is kept (one checkpoint); B's is not.
    assert cache.n_ckpts == 1
    same = serve(cache, p1, m1)
    assert (same.length, same.recompute) == (len(A) + len(B), len(B))
    moved = serve(cache, *mods((2, B), (1, A)))
    # B now at position 0 has no state of its own yet; A is out of prefix position.
    assert (moved.length, moved.recompute) == (len(A) + len(B), len(A) + len(B))
    cache.verify()


def test_pure_ssm_modules_reuse_nothing_but_the_leading_state():
    cache = store("tiny-ssm")
    p, m = mods((1, A), (2, B))
    serve(cache, p, m)
    hit = serve(cache, p, m)
    assert hit.recompute == len(B)  # only A's position-0 state is reusable
    assert cache.kv_bytes == 0


def test_host_storage_copies_every_reused_module():
    cache = store(storage="host")
    p, m = mods((1, A), (2, B))
    serve(cache, p, m)
    hit = serve(cache, p, m)
    assert hit.host_tokens == hit.length == len(A) + len(B)


def test_lru_eviction_keeps_pinned_modules():
    kv = get_model("tiny-transformer").kv_bytes_per_token
    cache = store(capacity=(len(A) + len(B)) * kv)  # room for A and B, not a third
    requests = RequestCache(cache)
    p, m = mods((1, A), (2, B))
    requests.serve(p, np.concatenate((p, [1])), m)
    pa, ma = mods((1, A))
    held = requests.admit(pa, np.concatenate((pa, [1])).astype(np.int32), ma)
    assert held.hit.length == len(A)
    c = np.arange(300, 330, dtype=np.int32)
    pc, mc = mods((3, c))
    requests.serve(pc, np.concatenate((pc, [1])), mc)
    # B (unpinned, least recent) went; A, pinned by the running request, stayed.
    assert set(cache.modules) == {1, 3}
    requests.release(held)
    cache.verify()


def test_a_module_longer_than_the_store_is_not_kept():
    kv = get_model("tiny-transformer").kv_bytes_per_token
    cache = store(capacity=len(A) * kv - 1)
    p, m = mods((1, A))
    serve(cache, p, m)
    assert cache.num_nodes == 0 and cache.used_bytes == 0


def test_storage_option_is_checked():
    with pytest.raises(TwinError, match="storage must be one of gpu, host"):
        get_policy("prompt-cache", storage="disk")


# ----- pricing ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def a100_pricer() -> CostModelPricer:
    return CostModelPricer(CostModel(get_model("marconi-hybrid-7b"), load_profile("a100-80gb")))


def test_host_copy_is_priced_at_the_host_link(a100_pricer):
    model = get_model("marconi-hybrid-7b")
    n = 5000
    seconds = a100_pricer.hit_work_time(0, n)
    assert seconds == pytest.approx(a100_pricer.cost_model.kv_transfer_s(n, "host", "device"))
    # Never faster than the link's peak, and linear in the tokens moved.
    assert seconds >= n * model.kv_bytes_per_token / get_gpu("a100-80gb").host_bw
    assert a100_pricer.hit_work_time(0, 2 * n) == pytest.approx(2 * seconds, rel=0.05)


@pytest.mark.parametrize("model", ["qwen3.5-9b", "tiny-mamba1-hybrid"])
def test_recompute_prices_every_recurrent_kind(model):
    cm = CostModel(get_model(model), load_profile("a100-80gb"))
    by_kind = cm.prefill(512, 0, breakdown=True).by_kind
    recurrent = sum(v for k, v in by_kind.items() if k in ("ssm", "mamba1", "mamba2", "gdn"))
    assert recurrent > 0
    assert CostModelPricer(cm).hit_work_time(512, 0) == pytest.approx(recurrent)


def test_recompute_is_priced_as_the_recurrent_layers_share(a100_pricer):
    cm = a100_pricer.cost_model
    n = 4096
    assert a100_pricer.hit_work_time(n, 0) == pytest.approx(
        cm.prefill(n, 0, breakdown=True).by_kind["ssm"]
    )
    assert 0 < a100_pricer.hit_work_time(n, 0) < cm.prefill(n, 0)


# ----- the workload column and the generator --------------------------------------------


def _row(tokens: np.ndarray, modules: np.ndarray | None, sid: int = 0) -> WorkloadRow:
    return WorkloadRow(sid, 0, float(sid), None, tokens, False, None, 1, modules)


def _write(path: Path, rows: list[WorkloadRow]) -> Path:
    with WorkloadWriter(path, {"generator": "test"}, modules=True) as w:
        w.write_all(rows)
    return path


def test_modules_round_trip(tmp_path):
    p, m = mods((1, A), (2, B))
    path = _write(tmp_path / "m.parquet", [_row(p, m), _row(Q, None, 1)])
    reqs = list(Workload.open(path).requests())
    assert reqs[0].modules.tolist() == m.tolist()
    assert reqs[1].modules is None


@pytest.mark.parametrize(
    ("modules", "message"),
    [
        ([(1, 0, 40), (2, 30, 10)], "starts at 30, before the end of module 0 at 40"),
        ([(1, 0, 0)], "module length must be at least 1"),
        ([(-1, 0, 5)], "negative module id"),
    ],
)
def test_writer_refuses_bad_modules_naming_the_row(tmp_path, modules, message):
    with pytest.raises(TwinError, match=rf"m.parquet, row 1, column 'modules': .*{message}"):
        _write(
            tmp_path / "m.parquet",
            [_row(Q, None), _row(np.concatenate((A, B)), np.array(modules, np.int64), 1)],
        )
    assert not (tmp_path / "m.parquet").exists()


def test_writer_refuses_modules_without_the_column(tmp_path):
    with (
        pytest.raises(TwinError, match="opened without a modules column"),
        WorkloadWriter(tmp_path / "m.parquet", {"generator": "test"}) as w,
    ):
        w.write(_row(A, np.array([(1, 0, 5)], np.int64)))


def _raw(path: Path, rows: list[dict]) -> Path:
    """A file written around the writer's checks (what another tool might produce)."""
    table = pa.table(
        {
            "session_id": pa.array([r["sid"] for r in rows], pa.int64()),
            "turn": pa.array([0] * len(rows), pa.int32()),
            "arrival_s": pa.array([float(r["sid"]) for r in rows], pa.float64()),
            "think_s": pa.array([None] * len(rows), pa.float64()),
            "input_tokens": pa.array([r["tokens"] for r in rows], pa.list_(pa.int32())),
            "extends_history": pa.array([False] * len(rows)),
            "output_tokens": pa.array([None] * len(rows), pa.list_(pa.int32())),
            "output_len": pa.array([1] * len(rows), pa.int32()),
            "modules": pa.array(
                [[{"id": i, "start": s, "length": n} for i, s, n in r["modules"]] for r in rows],
                pa.list_(
                    pa.struct([("id", pa.int64()), ("start", pa.int32()), ("length", pa.int32())])
                ),
            ),
        }
    )
    pq.write_table(table, path)
    return path


def test_reader_refuses_a_module_past_the_prompt(tmp_path):
    path = _raw(tmp_path / "r.parquet", [{"sid": 0, "tokens": A.tolist(), "modules": [(1, 0, 50)]}])
    with pytest.raises(TwinError, match=r"row 0, column 'modules'.*past the prompt's 40 tokens"):
        list(Workload.open(path).requests())


def test_reader_refuses_one_id_naming_two_segments(tmp_path):
    rows = [
        {"sid": 0, "tokens": A.tolist(), "modules": [(1, 0, 40)]},
        {"sid": 1, "tokens": B[:40].tolist(), "modules": [(1, 0, 40)]},
    ]
    path = _raw(tmp_path / "r.parquet", rows)
    with pytest.raises(TwinError, match=r"row 1, column 'modules': module id 1 names different"):
        list(Workload.open(path).requests())


def test_reader_refuses_a_wrong_column_type(tmp_path):
    path = _raw(tmp_path / "r.parquet", [{"sid": 0, "tokens": A.tolist(), "modules": []}])
    table = pq.read_table(path).drop(["modules"]).append_column("modules", pa.array(["x"]))
    pq.write_table(table, path)
    with pytest.raises(TwinError, match=r"column 'modules': type string, expected list<struct"):
        Workload.open(path)


def test_doc_qa_declares_documents_as_modules_in_varying_order():
    cls = get_generator("doc-qa")
    gen = cls()
    rows = list(gen.rows(120, 1.0, 5, 65536))
    docs: dict[int, bytes] = {}
    orders = set()
    for row in rows:
        m = row.modules
        assert m is not None and 1 <= len(m) <= 3
        assert (m[:, 2] >= 4000).all() and (m[:, 2] <= 10000).all()
        for mid, start, n in m.tolist():
            seg = row.input_tokens[start : start + n].tobytes()
            assert docs.setdefault(mid, seg) == seg  # one id, one document
        # A short uncached question follows the modules.
        assert 1 <= len(row.input_tokens) - int(m[-1, 1] + m[-1, 2]) <= 256
        orders.add(tuple(m[:, 0].tolist()))
    assert any(len(o) > 1 and tuple(reversed(o)) in orders for o in orders) or len(orders) > 60
    assert gen.metadata(1, 1.0, 1, 100)["modules"] is True


def test_doc_qa_under_a_small_context_keeps_one_document():
    gen = get_generator("doc-qa")(get_generator("doc-qa").parse_params({"doc_max_tokens": "5000"}))
    for row in gen.rows(20, 1.0, 2, 6000):
        assert len(row.input_tokens) + row.output_len <= 6000
        assert len(row.modules) == 1


def test_replay_shows_the_saving_that_survives_on_a_hybrid(tmp_path):
    path = doc_qa(tmp_path / "d.parquet")
    trace = Trace.load(path)
    hybrid = replay(trace, "tiny-hybrid", 10**9, "prompt-cache")
    dense = replay(trace, "tiny-transformer", 10**9, "prompt-cache")
    assert hybrid.hit_tokens == dense.hit_tokens > 0  # the same modules are reused
    assert 0 < hybrid.details["saving_kept"] < 1
    assert hybrid.flops_saved == pytest.approx(
        hybrid.details["flops_saved_attention_only"] - hybrid.details["flops_recomputed_recurrent"]
    )
    assert "saving_kept" not in dense.details
    # Without the modules column nothing is reused.
    bare = Trace(trace.fulls, trace.prompt_lens)
    assert replay(bare, "tiny-transformer", 10**9, "prompt-cache").hit_tokens == 0


# ----- the engine ---------------------------------------------------------------------


def _ttft_of_hits(path: Path, model: str, policy: str, **options: str) -> dict[int, float]:
    from test_engine_helpers import run

    pricer = CostModelPricer(CostModel(get_model(model), load_profile("a100-80gb")))
    _, records = run(
        path,
        pricer,
        model,
        policy=policy,
        policy_options=options,
        cache_bytes=10**10,
        gpu_memory_bytes=80e9,
    )
    return {r.row: r.ttft_s for r in records if policy == "vanilla" or r.hit_tokens}


def test_engine_prices_gpu_modules_below_host_modules_below_computing_them(tmp_path):
    # Documents long enough that copying their KV beats recomputing it (a 44-token
    # module is cheaper to recompute than to fetch over PCIe); nothing queues.
    path = doc_qa(tmp_path / "d.parquet", sessions=30, rate=0.01, doc_tokens=(1000, 1200))
    base = _ttft_of_hits(path, "llama-7b-transformer", "vanilla")
    gpu = _ttft_of_hits(path, "llama-7b-transformer", "prompt-cache", storage="gpu")
    host = _ttft_of_hits(path, "llama-7b-transformer", "prompt-cache", storage="host")
    assert gpu and set(gpu) == set(host)
    for row in gpu:
        assert gpu[row] < host[row] < base[row]


def test_the_advantage_grows_with_the_prompt_length():
    # Prompt Cache sec. 5.4: computing a document is superlinear in its length, the
    # question after its cached KV nearly constant; the host copy is linear.
    cm = CostModel(get_model("llama-7b-transformer"), load_profile("a100-80gb"))
    pricer = CostModelPricer(cm)
    q = 32
    gpu, host = [], []
    for n in (1000, 4000, 16000):
        cached = cm.prefill(q, n)
        gpu.append(cm.prefill(n + q, 0) / cached)
        host.append(cm.prefill(n + q, 0) / (cached + pricer.hit_work_time(0, n)))
    assert gpu[0] < gpu[1] < gpu[2]
    assert host[0] < host[1] < host[2]
    assert all(h < g for h, g in zip(host, gpu, strict=True))
