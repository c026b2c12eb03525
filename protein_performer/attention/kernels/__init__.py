"""The linear-attention kernels: FAVOR's bidirectional and causal autograd functions, the
generic feature attention of the Taylor/Hedgehog maps, the fused CPU kernel (``csrc/``), and
the helpers they share (:mod:`.common`)."""
