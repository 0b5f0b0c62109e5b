"""GPU datasheet peaks, and recognising which GPU a device name is.

A100, H100, H200 and L4 numbers come from ``shared/reference/gpu_datasheets.md``
(NVIDIA's datasheets; dense FP16/BF16 tensor rates, no sparsity). The GPUs that
NVIDIA's public kernel database covers (B200, B300, GB200, GB300, L40S, RTX PRO
6000 Server) take NVIDIA's datasheet figures (dense = half the sparse rate) as
tabulated in ``aiconfigurator-core`` 0.12.0 ``systems/<gpu>.yaml``; each entry
says where it departs from that table. The
datasheet's NVLink column is the total of both directions (A100: 12 links x
50 GB/s); a ring all-reduce sends and receives at once, so the cost model uses
half of it per direction. PCIe figures in the table are already per direction.

Device memory (``hbm_bytes``) is not the datasheet's decimal "80 GB": the engines size
their pools from the total the driver reports (vLLM ``gpu_memory_utilization`` x the
total of ``torch.cuda.mem_get_info()``, ``vllm/v1/worker/gpu_worker.py``; SGLang's
``mem_fraction_static`` of ``get_device_memory_capacity()``; TensorRT-LLM's
``free_gpu_memory_fraction`` of the free memory), which is the marketed figure read in
GiB for the HBM parts and nvidia-smi's MiB total for the rest. Each GPU takes
``aiconfigurator-core`` 0.12.0's ``systems/<gpu>.yaml`` ``mem_capacity`` where that
table has the GPU (``mem_source`` names the file; a test checks the two agree), else
nvidia-smi's total. Messages still print decimal GB (``GB``) of these byte counts: an
H100 shows as 85.9 GB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from twin.errors import TwinError

GB = 1e9  # decimal units, as datasheets and the Marconi paper quote sizes (every --cache-gb)
TB = 1e12
GIB = 1 << 30  # binary units: device memory as the driver reports it
MIB = 1 << 20

# Assumed, not measured: the fixed latency of one small all-reduce inside one
# NVLink/PCIe node (NCCL's ring/tree start-up), of the order of 10 us. It only
# matters for tensor parallelism with small batches; a measured profile may
# override it through its peaks.
DEFAULT_ALLREDUCE_LATENCY_S = 10e-6


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet peaks of one GPU model."""

    name: str  # registry key used on the command line (``a100``, ``h100``...)
    display_name: str  # as a person names it
    flops: float  # dense FP16/BF16 tensor-core FLOP/s
    hbm_bytes: float  # device memory as the driver reports it, bytes (module docstring)
    hbm_bw: float  # device memory bandwidth, bytes/s
    host_bw: float  # host link bandwidth per direction, bytes/s
    nvlink_bw: float | None  # NVLink total of both directions, bytes/s; None: no NVLink
    fp32_flops: float | None = None  # FP32 non-tensor FLOP/s where the sheet gives it
    # Dense TF32 tensor-core FLOP/s where the sheet gives it (half the sheet's figure
    # "with sparsity"): an fp32 GEMM under TF32 (``twin.costmodel.mixer_kernels.tf32_peak``).
    tf32_flops: float | None = None
    # Dense FP8 and FP4 tensor-core FLOP/s (None: no such tensor cores). Every value is
    # aiconfigurator-core 0.12.0's ``systems/<gpu>.yaml`` ``fp8_tc_flops`` /
    # ``fp4_tc_flops`` (NVIDIA's datasheets, dense = half the sparse rate): the FP8 and
    # FP4 GEMM fits of the kernel tables run against them (twin.precision).
    fp8_flops: float | None = None
    fp4_flops: float | None = None
    source: str = "NVIDIA datasheet via shared/reference/gpu_datasheets.md"
    mem_source: str = ""  # where ``hbm_bytes`` comes from (:func:`_aic_mem` or nvidia-smi)

    @property
    def sm_count(self) -> int | None:
        """Streaming multiprocessors (``SM_COUNTS``; None where not tabulated): how many
        CTAs a kernel runs at once, one a SM, for the wave counts of
        ``twin.costmodel.mla_features``."""
        return SM_COUNTS.get(self.name)

    @property
    def l2_bytes(self) -> float | None:
        """Bytes of L2 cache (``L2_BYTES``; None where not tabulated): the working set a
        kernel timed again and again on the same buffers keeps on chip, for the absorbed
        MLA BMMs' features (``twin.costmodel.mla_bmm.mla_bmm_features``)."""
        return L2_BYTES.get(self.name)

    @property
    def interconnect_bw(self) -> float:
        """Bytes/s per direction between two GPUs: NVLink if present, else the host link."""
        return self.nvlink_bw / 2 if self.nvlink_bw else self.host_bw

    def low_precision_peaks(self) -> dict[str, float]:
        """``fp8_flops`` / ``fp4_flops`` where the GPU has such tensor cores (the peaks a
        profile with quantised GEMM fits adds)."""
        out = {"fp8_flops": self.fp8_flops, "fp4_flops": self.fp4_flops}
        return {k: v for k, v in out.items() if v}

    def peaks(self) -> dict[str, float]:
        """The peaks a profile stores and the cost model reads (see twin.costmodel.formulas)."""
        return {
            "flops": self.flops,
            "mem_bw": self.hbm_bw,
            "host_bw": self.host_bw,
            "interconnect_bw": self.interconnect_bw,
            "allreduce_latency_s": DEFAULT_ALLREDUCE_LATENCY_S,
            "mem_bytes": self.hbm_bytes,
        }


_PCIE4 = 32 * GB  # PCIe Gen4 x16, per direction (datasheet table)
_PCIE5 = 64 * GB  # PCIe Gen5 x16, per direction (datasheet table)
_PCIE6 = 128 * GB  # PCIe Gen6 x16, per direction (HGX B300; aiconfigurator b300_sxm.yaml)
_NVLINK5 = 1800 * GB  # fifth-generation NVLink, both directions (HGX/GB200 datasheets)
_C2C = 450 * GB  # NVLink-C2C to the Grace CPU: 900 GB/s both directions (GB200 datasheet)
# FP32 (non-tensor) and dense TF32 tensor-core peaks: NVIDIA A100 datasheet 19.5 and 156
# (312 with sparsity); H100 SXM and H200 SXM datasheets 67 and 494.5 (989 with sparsity).
# HGX B200 and HGX B300 per GPU: FP32 600 TFLOP/s and TF32 tensor core 18 PFLOP/s (with
# sparsity) for the 8-GPU board (NVIDIA HGX platform specifications), 75 and 2,250 a GPU,
# TF32 1,125 dense (the Blackwell datasheet rounds B200's to 75 TFLOP/s FP32, 2.2 PFLOP/s
# TF32 with sparsity). Not in aiconfigurator's tables.
_HGX_B_FP32 = 75 * TB
_HGX_B_TF32 = 1125 * TB
_AIC = "NVIDIA datasheet via aiconfigurator-core 0.12.0 systems/{}.yaml"
AIC_MEM = "aiconfigurator-core 0.12.0 systems/{}.yaml mem_capacity"


def _aic_mem(system: str, note: str) -> str:
    """``mem_source`` of a GPU whose memory is aiconfigurator's ``mem_capacity`` for
    ``system`` (the yaml's own comment in ``note``)."""
    return f"{AIC_MEM.format(system)} ({note})"


GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        GpuSpec(
            "a100",
            "A100 40GB SXM4",
            312 * TB,
            40 * GIB,
            1555 * GB,
            _PCIE4,
            600 * GB,
            fp32_flops=19.5 * TB,
            tf32_flops=156 * TB,
            # Not in aiconfigurator's tables: nvidia-smi's total on four A100-SXM4-40GB
            # (400 W) in github.com/pc2/cc-slurm-sync README.md is 40,960 MiB, the
            # datasheet's 40 GB read in GiB as aiconfigurator reads the 80GB part's.
            # CUDA itself leaves a little less (deviceQuery on an A100 40GB at Paderborn's
            # PC2 wiki: 42,405,855,232 bytes); the table keeps nvidia-smi's, like the rest.
            mem_source="nvidia-smi: 40,960 MiB on an A100-SXM4-40GB",
        ),
        GpuSpec(
            "a100-80gb",
            "A100 80GB SXM4",
            312 * TB,
            80 * GIB,
            2039 * GB,
            _PCIE4,
            600 * GB,
            fp32_flops=19.5 * TB,
            tf32_flops=156 * TB,
            mem_source=_aic_mem("a100_sxm", "80 GiB"),
        ),
        GpuSpec(
            "a100-80gb-pcie",
            "A100 80GB PCIe",
            312 * TB,
            80 * GIB,
            1935 * GB,
            _PCIE4,
            600 * GB,  # over the NVLink bridge
            fp32_flops=19.5 * TB,
            tf32_flops=156 * TB,
            mem_source=_aic_mem("a100_pcie", "80 GiB"),
        ),
        GpuSpec(
            "h100",
            "H100 SXM5",
            989 * TB,
            80 * GIB,
            3350 * GB,
            _PCIE5,
            900 * GB,
            fp32_flops=67 * TB,
            tf32_flops=494.5 * TB,
            fp8_flops=1978 * TB,
            mem_source=_aic_mem("h100_sxm", "80 GiB"),
        ),
        GpuSpec(
            "h200",
            "H200 SXM",
            989 * TB,
            141 * GIB,
            4800 * GB,
            _PCIE5,
            900 * GB,
            fp32_flops=67 * TB,
            tf32_flops=494.5 * TB,
            fp8_flops=1978 * TB,
            mem_source=_aic_mem("h200_sxm", "141 GiB"),
        ),
        GpuSpec(
            "l4",
            "L4",
            121 * TB,
            24 * GIB,
            300 * GB,
            _PCIE4,
            None,
            fp8_flops=242 * TB,
            mem_source=_aic_mem("l4", "24 GiB"),
        ),
        # HGX B200: 180 GB HBM3e at 8 TB/s per GPU (the yaml's 7.7 TB/s is a derating).
        GpuSpec(
            "b200",
            "B200 SXM (HGX)",
            2250 * TB,
            180 * GIB,
            8000 * GB,
            _PCIE5,
            _NVLINK5,
            fp8_flops=4500 * TB,
            fp4_flops=9000 * TB,
            fp32_flops=_HGX_B_FP32,
            tf32_flops=_HGX_B_TF32,
            source=_AIC.format("b200_sxm"),
            mem_source=_aic_mem("b200_sxm", "180 GiB"),
        ),
        GpuSpec(
            "b300",
            "B300 SXM (HGX)",
            2250 * TB,
            275_040 * MIB,
            8000 * GB,
            _PCIE6,
            _NVLINK5,
            fp8_flops=4500 * TB,
            fp4_flops=14000 * TB,
            fp32_flops=_HGX_B_FP32,
            tf32_flops=_HGX_B_TF32,
            source=_AIC.format("b300_sxm"),
            mem_source=_aic_mem("b300_sxm", "275,040 MiB reported by nvidia-smi"),
        ),
        # GB200 NVL72: 13.4 TB HBM3e over 72 GPUs (186 GB marketed; nvidia-smi shows
        # 189,471 MiB), host link NVLink-C2C.
        GpuSpec(
            "gb200",
            "GB200 (NVL72)",
            2500 * TB,
            189_471 * MIB,
            8000 * GB,
            _C2C,
            _NVLINK5,
            fp8_flops=5000 * TB,
            fp4_flops=10000 * TB,
            source=_AIC.format("gb200"),
            mem_source=_aic_mem("gb200", "189,471 MiB reported by nvidia-smi"),
        ),
        GpuSpec(
            "gb300",
            "GB300 (NVL72)",
            2500 * TB,
            284_208 * MIB,
            8000 * GB,
            _C2C,
            _NVLINK5,
            fp8_flops=5000 * TB,
            fp4_flops=15000 * TB,
            source=_AIC.format("gb300"),
            mem_source=_aic_mem("gb300", "284,208 MiB reported by nvidia-smi"),
        ),
        GpuSpec(
            "l40s",
            "L40S",
            362.05 * TB,
            46_068 * MIB,
            864 * GB,
            _PCIE4,
            None,
            fp32_flops=91.6 * TB,
            fp8_flops=733 * TB,
            source=_AIC.format("l40s"),
            mem_source=_aic_mem("l40s", "46,068 MiB"),
        ),
        # The table gives 467.8 TFLOP/s dense BF16 at 2430 MHz; memory 96 GB GDDR7 (nvidia-smi:
        # 97,887 MiB) at 1.6 TB/s (NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet).
        GpuSpec(
            "rtx-pro-6000",
            "RTX PRO 6000 Blackwell Server",
            467.8 * TB,
            97_887 * MIB,
            1597 * GB,
            _PCIE5,
            None,
            fp8_flops=935.6 * TB,
            fp4_flops=1871.2 * TB,
            source=_AIC.format("rtx_pro_6000_server"),
            mem_source=_aic_mem("rtx_pro_6000_server", "97,887 MiB reported by nvidia-smi"),
        ),
    )
}


# Streaming multiprocessors per GPU (CUDA's ``multiProcessorCount``), from NVIDIA's
# architecture whitepapers and datasheets (CUDA cores / 128 a SM where a sheet gives
# cores): A100 108 (NVIDIA A100 Tensor Core GPU Architecture whitepaper), H100 SXM5 and
# H200 132 (NVIDIA H100 Tensor Core GPU Architecture whitepaper; H200 is the same GH100
# configuration), L4 58 (7,424 CUDA cores, L4 datasheet), L40S 142 (18,176 CUDA cores, L40S
# datasheet), RTX PRO 6000 Blackwell Server 188 (24,064 CUDA cores, its datasheet),
# Blackwell Ultra (B300, GB300) 160 (NVIDIA technical blog "Inside NVIDIA Blackwell Ultra",
# Aug 2025: 160 SMs, 20,480 CUDA cores). B200 and GB200 148: NVIDIA's datasheets give no
# SM count; 148 is the count commonly reported for the part, an assumption of this table
# (docs/decisions.md, issue 34).
SM_COUNTS: dict[str, int] = {
    "a100": 108,
    "a100-80gb": 108,
    "a100-80gb-pcie": 108,
    "h100": 132,
    "h200": 132,
    "l4": 58,
    "l40s": 142,
    "rtx-pro-6000": 188,
    "b200": 148,
    "gb200": 148,
    "b300": 160,
    "gb300": 160,
}


# L2 cache per GPU (decimal MB as NVIDIA quotes them): A100 40 MB (NVIDIA A100 Tensor Core
# GPU Architecture whitepaper), H100 SXM5 50 MB (NVIDIA H100 Tensor Core GPU Architecture
# whitepaper; H200 is the same GH100 configuration, an assumption as for ``SM_COUNTS``).
# Assumptions of this table (no NVIDIA datasheet of the part gives its L2; docs/decisions.md,
# issue 34): L40S 96 MB (the full AD102's, NVIDIA Ada GPU Architecture whitepaper), RTX PRO
# 6000 Blackwell Server 128 MB (the full GB202's, NVIDIA RTX Blackwell GPU Architecture
# whitepaper), B200 and GB200 126 MB (the count commonly reported for the two-die part),
# B300 and GB300 the same.
L2_BYTES: dict[str, float] = {
    "a100": 40e6,
    "a100-80gb": 40e6,
    "a100-80gb-pcie": 40e6,
    "h100": 50e6,
    "h200": 50e6,
    "l40s": 96e6,
    "rtx-pro-6000": 128e6,
    "b200": 126e6,
    "gb200": 126e6,
    "b300": 126e6,
    "gb300": 126e6,
}


def get_gpu(name: str) -> GpuSpec:
    """The GPU called ``name``; a ``TwinError`` listing the valid names otherwise."""
    try:
        return GPUS[name.lower()]
    except KeyError:
        raise TwinError(f"unknown GPU {name!r}; valid names: {', '.join(GPUS)}") from None


def identify_gpu(device_name: str, total_memory: float | None = None) -> str | None:
    """Registry name of a CUDA device from its name (``torch.cuda.get_device_name``).

    ``None`` when the device is none of ours (an H100 PCIe, say, whose peaks differ
    from the SXM part's). ``total_memory`` in bytes separates A100 40GB from 80GB
    when the name does not say.
    """
    upper = device_name.upper()
    pcie = "PCIE" in upper
    for marker, name in (
        ("GB300", "gb300"),
        ("GB200", "gb200"),
        ("B300", "b300"),
        ("B200", "b200"),
    ):
        if marker in upper:
            return name
    if "RTX PRO 6000" in upper and "SERVER" in upper:
        return "rtx-pro-6000"
    if re.search(r"\bL40S\b", upper):
        return "l40s"
    if "H200" in upper:
        return "h200"
    if "H100" in upper:
        return None if pcie or "NVL" in upper else "h100"
    if "A100" in upper:
        big = "80GB" in upper or (total_memory is not None and total_memory > 60 * GB)
        if not big:
            return "a100"  # SXM4 and PCIe 40GB share the 1,555 GB/s of the table
        return "a100-80gb-pcie" if pcie else "a100-80gb"
    if re.search(r"\bL4\b", upper):  # not L40 / L40S
        return "l4"
    return None
