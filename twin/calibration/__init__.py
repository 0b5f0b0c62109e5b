"""Calibration: time real kernels, fit small latency models, ship them as profiles.

- ``calibration.kernels`` / ``kernels_ssm``: the kernel registry (torch imported lazily);
- ``twin.torch_ops.ssd``: the exact PyTorch Mamba2 SSD scan (needs torch);
- ``calibration.timing`` / ``sweep``: timing per device/METHOD.md, raw parquet;
- ``twin.costmodel.formulas`` / ``features`` / ``latency`` / ``fit``: the latency models
  and their scipy fits;
- ``twin.costmodel.profile`` / ``profile_store``: the ``Profile`` JSON with provenance,
  and where profiles live;
- ``calibration.datasheet`` / ``transfer``: profiles without measuring;
- ``calibration.harness``: the whole ``twin calibrate`` run.

Everything but the harness, kernels and SSD imports without torch.
"""

from twin.costmodel.profile import KernelFit, Profile
from twin.costmodel.profile_store import load_profile, shipped_profiles

__all__ = ["KernelFit", "Profile", "load_profile", "shipped_profiles"]
