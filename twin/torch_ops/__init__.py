"""PyTorch implementations of the model's operators, shared by the calibration harness and
the reference executor (``twin.reference``): the exact Mamba2 SSD scan (``ssd``), the
recurrences and sliding-window attention (``recurrent_refs``), the causal conv1d by taps
(``conv``), loading mamba_ssm's Triton kernels (``mamba_triton``) and naming the host CPU
(``host``). Below both users in the layers; torch is imported by the modules that need it.
"""
