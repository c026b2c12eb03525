"""FAVOR kernels on a device (float32) against float64 CPU references, and bf16 finiteness.

Outputs and input gradients of every kernel (softmax/ReLU × bidirectional/causal, with a key
padding mask where bidirectional; the device's own block size and blocks of min(512, L/4)
rows) are compared with the same module run in float64 on the CPU; then bf16 autocast with
large-norm inputs must give finite outputs. Exit status 1 when a relative error exceeds
``--tol`` or an output is not finite.

    python benchmarks/device_check.py --device cuda
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import check_device, machine_line, positive_int

from protein_performer.attention import FavorAttention, exact_attention


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double().cpu() - b).norm() / b.norm()).item()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--length", type=positive_int, default=3000)
    parser.add_argument("--tol", type=float, default=1e-3)
    parser.add_argument("--bf16-length", type=positive_int, default=8192)
    args = parser.parse_args(argv)
    check_device(parser, args.device, allow_mps=True)
    print(machine_line(args.device))
    device = torch.device(args.device)
    torch.manual_seed(0)
    ok = True
    length = args.length
    # chunk_size None: the device's own block size (on a GPU often one block for the whole
    # sequence); then several blocks, so the state carried between blocks is checked too
    small = max(1, min(512, length // 4))
    for kernel, causal, chunk in itertools.product(
        ("softmax", "relu"), (False, True), (None, small)
    ):
        attn = FavorAttention(64, 256, kernel=kernel, causal=causal, chunk_size=chunk)
        attn = attn.double().eval()
        q, k, v = (0.5 * torch.randn(2, 4, length, 64, dtype=torch.float64) for _ in range(3))
        mask = None
        if not causal:
            mask = torch.zeros(2, length, dtype=torch.bool)
            mask[1, (4 * length) // 5 :] = True
        ref_in = [t.clone().requires_grad_() for t in (q, k, v)]
        ref = attn(*ref_in, key_padding_mask=mask)
        ref.square().sum().backward()
        dev = attn.float().to(device)
        dev_in = [t.float().to(device).requires_grad_() for t in (q, k, v)]
        out = dev(*dev_in, key_padding_mask=None if mask is None else mask.to(device))
        out.square().sum().backward()
        err = relative(out, ref)
        gerr = max(relative(a.grad, b.grad) for a, b in zip(dev_in, ref_in, strict=True))
        ok &= max(err, gerr) < args.tol
        print(
            f"{kernel:8s} causal={causal!s:5s} blocks={chunk or 'auto'!s:4s} float32 on "
            f"{device} vs float64 CPU: output {err:.2e}, gradients {gerr:.2e}"
        )
    # |q| ~ 64: logits in the hundreds; bf16 inputs, as the model's autocast qkv layer gives
    x = (8 * torch.randn(1, 8, args.bf16_length, 64, device=device)).bfloat16()
    with torch.autocast(device.type, dtype=torch.bfloat16):
        for causal in (False, True):
            xs = [x.clone().requires_grad_() for _ in range(3)]
            y = FavorAttention(64, 256, causal=causal).to(device)(*xs)
            y.float().square().mean().backward()
            z = exact_attention(x, x, x, causal=causal)
            finite = bool(torch.isfinite(y).all() and torch.isfinite(z).all())
            finite &= all(bool(torch.isfinite(t.grad).all()) for t in xs)
            finite &= y.dtype == torch.bfloat16  # the output keeps the input's dtype
            ok &= finite
            print(f"bf16 inputs under autocast, causal={causal}: finite={finite}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
