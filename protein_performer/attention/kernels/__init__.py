"""FAVOR's linear-attention kernels: bidirectional and causal (PyTorch autograd functions), the
generic feature attention of the Taylor/Hedgehog maps, and the fused CPU kernel (``csrc/``)."""
