"""Two-process DDP on CPU (gloo): same projections, different data, single-process loss."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from protein_performer.data.alphabet import default_alphabet
from protein_performer.training.builders import build_module
from tests.training.ddp_worker import STEPS, Recorder, ddp_config

WORKER = Path(__file__).with_name("ddp_worker.py")


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _pad_cat(a: dict, b: dict) -> dict:
    """The global batch: rank 0's rows then rank 1's, padded to a common length."""
    n = max(a["input_ids"].shape[1], b["input_ids"].shape[1])
    fill = {"input_ids": default_alphabet().pad_idx, "labels": -100, "padding_mask": True}
    out = {}
    for key, value in fill.items():
        parts = []
        for batch in (a, b):
            t = batch[key]
            pad = torch.full((t.shape[0], n - t.shape[1]), value, dtype=t.dtype)
            parts.append(torch.cat([t, pad], dim=1))
        out[key] = torch.cat(parts)
    return out


@pytest.mark.slow
def test_ddp_two_cpu_processes_match_single_process(tiny_fasta, tmp_path):
    port = _free_port()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(tmp_path), str(tiny_fasta), str(r), port],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for r in (0, 1)
    ]
    logs = [p.communicate(timeout=180)[0].decode(errors="replace") for p in procs]
    for p, log in zip(procs, logs, strict=True):
        assert p.returncode == 0, log[-3000:]
    r0 = torch.load(tmp_path / "rank0.pt", weights_only=True)
    r1 = torch.load(tmp_path / "rank1.pt", weights_only=True)

    # identical FAVOR+ projections on both ranks, each drawn locally from the global step
    assert len(r0["draws"]) == len(r1["draws"]) == STEPS
    for d0, d1 in zip(r0["draws"], r1["draws"], strict=True):
        assert len(d0) == 2
        for name in d0:
            torch.testing.assert_close(d0[name], d1[name], rtol=0, atol=0)
    name = next(iter(r0["draws"][0]))
    assert not torch.equal(r0["draws"][1][name], r0["draws"][2][name])  # redrawn each step
    assert r0["buffers"].keys() == r1["buffers"].keys() and r0["buffers"]
    for name in r0["buffers"]:
        torch.testing.assert_close(r0["buffers"][name], r1["buffers"][name], rtol=0, atol=0)
    counters = [int(v) for k, v in r0["buffers"].items() if k.endswith("redraw_counter")]
    assert counters == [STEPS - 1] * 2  # redrawn at every step after the first
    # each rank trained on different data
    assert len(r0["batches"]) == len(r1["batches"]) == STEPS
    for a, b in zip(r0["batches"], r1["batches"], strict=True):
        assert a["input_ids"].shape != b["input_ids"].shape or not torch.equal(
            a["input_ids"], b["input_ids"]
        )
    # the same logged (global) loss on both ranks
    assert r0["losses"] == pytest.approx(r1["losses"], rel=1e-6)

    # single process on the concatenated global batches
    cfg = ddp_config(str(tiny_fasta), accelerator="cpu", devices=1)
    pl.seed_everything(cfg.seed, verbose=False)
    module = build_module(cfg, default_alphabet())
    batches = [_pad_cat(a, b) for a, b in zip(r0["batches"], r1["batches"], strict=True)]
    recorder = Recorder()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=STEPS,
        gradient_clip_val=cfg.trainer.gradient_clip_val,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[recorder],
    )
    trainer.fit(module, train_dataloaders=DataLoader(batches, batch_size=None))
    assert recorder.losses == pytest.approx(r0["losses"], rel=1e-5)
    assert recorder.losses[-1] != pytest.approx(recorder.losses[0], rel=1e-3)  # it did train
    # the gradients themselves (Adam's update hides a constant factor on them): DDP averages
    # the ranks' gradients, so each rank's loss must be its share of the global mean
    assert len(r0["grads"]) == len(r1["grads"]) == len(recorder.grads) == STEPS
    for g0, g1, single in zip(r0["grads"], r1["grads"], recorder.grads, strict=True):
        assert g0.keys() == single.keys() and len(single) > 0
        for name in single:
            torch.testing.assert_close(g0[name], g1[name], rtol=0, atol=0)
            torch.testing.assert_close(g0[name], single[name], rtol=1e-4, atol=1e-6)
    for name, p in module.model.named_parameters():
        torch.testing.assert_close(p.detach(), r0["params"][name], rtol=1e-4, atol=1e-5)
