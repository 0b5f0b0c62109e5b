"""GPU kernel-only timing (CUDA graph capture + replay), checked on the CPU with a fake
``torch.cuda`` that records what the timing code asks of it; and on a real GPU."""

from __future__ import annotations

import contextlib
import importlib.util
from typing import Any

import pytest

from twin.calibration.sweep import time_gpu_kernel
from twin.calibration.timing import TimingBudget, time_cuda_graph

BUDGET = TimingBudget(warmup_s=0.0, budget_s=0.0, min_repeats=4, max_repeats=4)


class FakeCuda:
    """Enough of ``torch.cuda`` for the timing code: graphs capture which call ran."""

    def __init__(self, capturable: bool = True) -> None:
        self.capturable = capturable
        self.log: list[str] = []
        self.capturing: FakeGraph | None = None

    # streams and syncs
    def synchronize(self) -> None:
        self.log.append("sync")

    def Stream(self) -> Any:
        return FakeStream()

    def current_stream(self) -> Any:
        return FakeStream()

    @contextlib.contextmanager
    def stream(self, s: Any) -> Any:
        self.log.append("side-stream")
        yield

    # graphs
    def CUDAGraph(self) -> Any:
        return FakeGraph(self)

    @contextlib.contextmanager
    def graph(self, g: FakeGraph) -> Any:
        if not self.capturable:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.capturing = g
        yield
        self.capturing = None

    def Event(self, enable_timing: bool = False) -> Any:
        return FakeEvent(self)


class FakeStream:
    def wait_stream(self, other: Any) -> None:
        pass


class FakeGraph:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda, self.calls = cuda, []

    def replay(self) -> None:
        self.cuda.log.append(f"replay {self.calls}")


class FakeEvent:
    clock = 0.0

    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda

    def record(self) -> None:
        FakeEvent.clock += 1.0  # 1 ms between consecutive records
        self.t = FakeEvent.clock

    def elapsed_time(self, end: FakeEvent) -> float:
        return end.t - self.t


class FakeTorch:
    def __init__(self, capturable: bool = True) -> None:
        self.cuda = FakeCuda(capturable)


def _kernel(torch: FakeTorch) -> Any:
    calls: list[int] = []

    def fn(i: int) -> None:
        g = torch.cuda.capturing
        if g is not None:
            g.calls.append(i)  # captured into the graph, not run
        else:
            calls.append(i)

    return fn, calls


def test_each_buffer_is_captured_once_and_replayed_in_rotation() -> None:
    torch = FakeTorch()
    fn, eager_calls = _kernel(torch)
    t = time_cuda_graph(fn, BUDGET, torch, n_buffers=3)
    assert t.mode == "cuda_graph"
    assert eager_calls == [0, 1, 2]  # warm-up: every buffer once, eagerly, on a side stream
    assert "side-stream" in torch.cuda.log
    replays = [e for e in torch.cuda.log if e.startswith("replay")]
    # one probe replay, then the timed ones, cycling through buffers 0, 1, 2
    assert replays[:4] == ["replay [0]", "replay [1]", "replay [2]", "replay [0]"]
    assert t.median_s == pytest.approx(1e-3)  # event pairs 1 ms apart
    assert t.host_issue_s is not None and t.host_issue_s >= 0


def test_an_uncapturable_kernel_is_timed_eagerly() -> None:
    from types import SimpleNamespace

    torch = FakeTorch(capturable=False)
    fn, eager_calls = _kernel(torch)
    ctx = SimpleNamespace(torch=torch, eager=False)
    t = time_gpu_kernel(ctx, fn, 2)  # type: ignore[arg-type]
    assert t.mode == "eager" and t.host_issue_s is None
    assert len(eager_calls) > 3  # warm-up, then the eager timed calls themselves
    assert not [e for e in torch.cuda.log if e.startswith("replay")]
    ctx = SimpleNamespace(torch=FakeTorch(), eager=True)  # validation's eager executor
    assert time_gpu_kernel(ctx, _kernel(ctx.torch)[0], 2).mode == "eager"  # type: ignore[arg-type]


HAS_CUDA = False
if importlib.util.find_spec("torch") is not None:
    import torch as _torch

    HAS_CUDA = _torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_graph_replay_removes_launch_overhead_on_a_real_gpu() -> None:
    import torch

    x = [torch.randn(64, 64, device="cuda") for _ in range(2)]

    def many_small(i: int) -> Any:  # 50 tiny launches: host-bound when eager
        y = x[i % 2]
        for _ in range(50):
            y = y * 1.0001
        return y

    budget = TimingBudget(warmup_s=0.01, budget_s=0.02, min_repeats=10, max_repeats=50)
    graph = time_cuda_graph(many_small, budget, torch, n_buffers=2)
    assert graph.mode == "cuda_graph" and graph.host_issue_s is not None
    # 50 launches take the host far longer to issue than the GPU to replay
    assert graph.median_s < graph.host_issue_s
