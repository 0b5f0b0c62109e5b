"""The reference executor: a real PyTorch hybrid model over a real prefix cache of real states.

It needs torch (``pip install 'twin[torch]'``); import its modules lazily.
"""
