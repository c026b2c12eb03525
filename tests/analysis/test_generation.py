"""Sampling from a causal model: reproducible, only residues and <eos>, the length bounds, the
log-probability it reports, top-k / top-p, refusals, and the generate command's FASTA."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pytest
import torch

from protein_performer.analysis.generation import _truncate, generate
from protein_performer.cli.main import main
from protein_performer.data.alphabet import STANDARD_AMINO_ACIDS, default_alphabet
from protein_performer.errors import ConfigError
from protein_performer.model.checkpoints import save_model_checkpoint
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM

A = default_alphabet()


def causal_model(attention: str = "performer_relu", seed: int = 0) -> ProteinLM:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        attention=attention, dim=32, depth=2, heads=4, ffn_dim=64, max_len=48, nb_features=16
    )
    return ProteinLM(cfg, len(A), A.pad_idx, causal=True)


@pytest.mark.parametrize("attention", ["performer_relu", "transformer"])
def test_samples_are_reproducible_residues_within_the_window(attention) -> None:
    model = causal_model(attention)
    first = generate(model, A, 6, seed=3, prompt="mk", batch_size=4)
    again = generate(model, A, 6, seed=3, prompt="MK", batch_size=4)
    assert [s.sequence for s in first] == [s.sequence for s in again]
    other = generate(model, A, 6, seed=4, prompt="MK", batch_size=4)
    assert [s.sequence for s in first] != [s.sequence for s in other]
    # protein i is protein i, however many are sampled and in what batches
    alone = [generate(model, A, i + 1, seed=3, prompt="MK", batch_size=1)[i] for i in (0, 4)]
    assert [s.sequence for s in alone] == [first[0].sequence, first[4].sequence]
    for s in first:
        assert s.sequence.startswith("MK") and set(s.sequence) <= set(STANDARD_AMINO_ACIDS)
        assert len(s.sequence) <= 48 - 2  # with <cls> and <eos> it fits the window
        assert s.ended or len(s.sequence) == 46  # a cut sequence is cut at the window
        assert math.isfinite(s.log_prob) and s.log_prob < 0


def test_the_reported_log_prob_is_that_of_the_drawn_tokens() -> None:
    model = causal_model("transformer").eval()
    allowed = torch.zeros(len(A), dtype=torch.bool)
    allowed[[A.index(a) for a in STANDARD_AMINO_ACIDS] + [A.eos_idx]] = True
    for s in generate(model, A, 3, seed=1, prompt="M", max_length=20):
        ids = [A.cls_idx, *A.encode(s.sequence).tolist()] + ([A.eos_idx] if s.ended else [])
        logits = model(torch.tensor([ids]))["logits"][0].masked_fill(~allowed, -math.inf)
        logp = torch.log_softmax(logits, -1)
        expected = sum(logp[t, ids[t + 1]].item() for t in range(1, len(ids) - 1))  # after M
        assert s.log_prob == pytest.approx(expected, abs=1e-4)


def test_top_k_and_top_p_keep_the_likeliest_tokens() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isfinite(_truncate(logits, 2, None)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(_truncate(logits, None, 0.8)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(_truncate(logits, None, 0.81)).tolist() == [[True, True, True, False]]
    assert torch.isfinite(_truncate(logits, None, 0.4)).tolist() == [[True, False, False, False]]
    model = causal_model()
    for s in generate(model, A, 4, seed=0, top_k=1, max_length=12):  # greedy: one answer
        assert s.sequence == generate(model, A, 1, seed=9, top_k=1, max_length=12)[0].sequence


def test_no_empty_protein_before_min_length() -> None:
    model = causal_model()
    with torch.no_grad():  # a model that wants to end at once: <eos> is all but certain
        model.head.bias[A.eos_idx] = 50.0
    eager = [s.sequence for s in generate(model, A, 8, seed=0, min_length=0)]
    held = generate(model, A, 8, seed=0, min_length=5)
    assert eager.count("") == 8 and all(len(s.sequence) == 5 and s.ended for s in held)
    assert [len(s.sequence) for s in generate(model, A, 4, seed=0)] == [1] * 4  # default: 1


def test_refusals() -> None:
    mlm = ProteinLM(ModelConfig(dim=32, depth=1, heads=4, ffn_dim=64, max_len=48), len(A))
    with pytest.raises(ConfigError, match=r"causal .* this one is a masked LM"):
        generate(mlm, A)
    model = causal_model()
    for kwargs, message in (
        ({"temperature": 0}, "temperature must be a number from 0.001 up"),
        ({"temperature": math.inf}, "temperature must be a number from 0.001 up"),
        ({"batch_size": 0}, "batch_size must be a whole number"),
        ({"top_k": True}, "top_k must be a whole number"),
        ({"min_length": 47}, "min_length must be a whole number from 0 to max_length - 2"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"top_k": 0}, "top_k must be a whole number"),
        ({"max_length": 64}, "exceeds the model's 48 positions"),
        ({"prompt": "M" * 47}, "leave no room"),
        ({"prompt": "M" * 46}, "leave no room for a drawn residue in max_length=48"),
        ({"min_length": -1}, r"min_length must be a whole number >= 0 residues \(got -1\)"),
        ({"n": 0}, r"n must be a whole number >= 1 \(got 0\)"),
        ({"n": 2.0}, r"n must be a whole number >= 1 \(got 2.0\)"),
        ({"temperature": 0.0009}, "temperature must be a number from 0.001 up"),
        ({"prompt": "MK1"}, r"^prompt: invalid residue '1' at position 3$"),
    ):
        with pytest.raises(ConfigError, match=message):
            generate(model, A, **kwargs)
    # the bounds themselves are taken
    assert len(generate(model, A, 1, temperature=1e-3, max_length=12, top_p=1.0)) == 1


def test_generate_writes_a_fasta_and_replaces_only_its_own(tmp_path, capsys) -> None:
    save_model_checkpoint(tmp_path / "c.ckpt", causal_model(), A, "causal")
    base = ["generate", f"checkpoint={tmp_path / 'c.ckpt'}", "n=3", "max_length=24"]
    out = tmp_path / "gen.fasta.gz"
    assert main([*base, f"out={out}"]) == 0
    assert "generated 3 proteins (seed=0 temperature=1 max_length=24)" in capsys.readouterr().out
    text = gzip.decompress(out.read_bytes()).decode()
    headers = [line for line in text.splitlines() if line.startswith(">")]
    assert len(headers) == 3 and all("protein-performer generate seed=0" in h for h in headers)
    assert main([*base, f"out={out}"]) == 2  # exists
    assert main([*base, f"out={out}", "overwrite=true", "seed=1"]) == 0
    assert gzip.decompress(out.read_bytes()).decode() != text
    mine = tmp_path / "mine.fasta"
    mine.write_text(">x\nMKV\n")
    assert main([*base, f"out={mine}", "overwrite=true"]) == 2
    assert mine.read_text() == ">x\nMKV\n" and "is never replaced" in capsys.readouterr().err
    assert main([*base, f"out={tmp_path / 'g.fa'}", "temperature=0"]) == 2
    assert not (tmp_path / "g.fa").exists()
    assert main([*base, f"out={tmp_path / 'G.FASTA.GZ'}"]) == 0  # any case: compressed
    assert gzip.decompress((tmp_path / "G.FASTA.GZ").read_bytes()).startswith(b">gen1 ")
    capsys.readouterr()
    assert main([*base, f"out={tmp_path / 'g.csv'}"]) == 2  # not a FASTA name
    assert "end it in .fasta" in capsys.readouterr().err and not (tmp_path / "g.csv").exists()
    mlm = ProteinLM(ModelConfig(dim=32, depth=1, heads=4, ffn_dim=64, max_len=48), len(A))
    save_model_checkpoint(tmp_path / "m.ckpt", mlm, A, "mlm")
    assert main(["generate", f"checkpoint={tmp_path / 'm.ckpt'}", f"out={tmp_path / 'h.fa'}"]) == 2
    assert "masked LM" in capsys.readouterr().err and not (tmp_path / "h.fa").exists()
    np.testing.assert_equal(len(list(tmp_path.glob(".*tmp*"))), 0)  # no temporaries left


def test_generate_never_replaces_a_file_that_appeared_meanwhile(tmp_path, monkeypatch, capsys):
    import protein_performer.analysis.generation as generation

    save_model_checkpoint(tmp_path / "c.ckpt", causal_model(), A, "causal", {"max_length": 20})
    out = tmp_path / "gen.fasta"
    real = generation.generate

    def slow(*args, **kwargs):
        samples = real(*args, **kwargs)
        assert kwargs["max_length"] == 20  # unset: the length the model trained on
        out.write_text(">theirs\nMKV\n")  # someone else's file, written while sampling
        return samples

    monkeypatch.setattr(generation, "generate", slow)
    assert main(["generate", f"checkpoint={tmp_path / 'c.ckpt'}", f"out={out}", "n=2"]) == 2
    assert out.read_text() == ">theirs\nMKV\n"
    assert "appeared there while generating" in capsys.readouterr().err


def test_a_prompt_is_recorded_as_read_and_rare_letters_are_said(tmp_path, capsys) -> None:
    save_model_checkpoint(tmp_path / "c.ckpt", causal_model(), A, "causal")
    base = ["generate", f"checkpoint={tmp_path / 'c.ckpt'}", "n=2", "max_length=12"]
    assert generate(causal_model(), A, 2, prompt="M" * 45, seed=0)[0].sequence.startswith("M" * 45)
    assert main([*base, f"out={tmp_path / 'a.fa'}", "prompt=m k*"]) == 0
    out = capsys.readouterr().out
    headers = [x for x in (tmp_path / "a.fa").read_text().splitlines() if x.startswith(">")]
    assert all(" prompt=MK " in h for h in headers) and "prompt=MK)" in out
    assert "not one of the 20" not in out
    assert main([*base, f"out={tmp_path / 'b.fa'}", "prompt=*"]) == 0
    assert "prompt=" not in (tmp_path / "b.fa").read_text()  # '*' alone: no prompt
    assert main([*base, f"out={tmp_path / 'c.fa'}", "prompt=MXB"]) == 0
    out = capsys.readouterr().out
    assert "the prompt holds B, X (not one of the 20 amino acids)" in out
    assert main([*base, "min_length=-1", f"out={tmp_path / 'd.fa'}"]) == 2
    assert "min_length must be a whole number >= 0 residues (got -1)" in capsys.readouterr().err


def test_overwrite_keeps_a_generated_fasta_a_user_added_to(tmp_path, capsys) -> None:
    save_model_checkpoint(tmp_path / "c.ckpt", causal_model(), A, "causal")
    base = ["generate", f"checkpoint={tmp_path / 'c.ckpt'}", "n=2", "max_length=12"]
    out = tmp_path / "g.fasta"
    assert main([*base, f"out={out}"]) == 0
    with open(out, "a") as fh:
        fh.write(">my_design\nMKVLA\n")
    mine = out.read_text()
    assert main([*base, f"out={out}", "overwrite=true"]) == 2
    assert "never replaced" in capsys.readouterr().err and out.read_text() == mine


def test_a_max_length_past_the_trained_length_is_said(tmp_path, capsys) -> None:
    save_model_checkpoint(tmp_path / "c.ckpt", causal_model(), A, "causal", {"max_length": 10})
    base = ["generate", f"checkpoint={tmp_path / 'c.ckpt'}", "n=1"]
    assert main([*base, f"out={tmp_path / 'a.fa'}", "max_length=12"]) == 0
    assert "max_length=12 is past the 10 tokens the model trained on" in capsys.readouterr().out
    assert main([*base, f"out={tmp_path / 'b.fa'}"]) == 0
    assert "past the" not in capsys.readouterr().out


def test_no_two_seeds_alias() -> None:
    from protein_performer.analysis.generation import _generator

    seeds = [0, 5, 2**63 - 1, 2**63, -1, -(2**63), 2**64]
    states = [_generator(s, 0).initial_seed() for s in seeds]
    assert len(set(states)) == len(seeds)
    old = np.random.SeedSequence([5, 3]).generate_state(2)  # the seeds in use keep their draws
    assert _generator(5, 3).initial_seed() == int(old[0]) << 32 | int(old[1])


def test_generate_makes_the_output_folder_as_score_and_extract_do(tmp_path) -> None:
    save_model_checkpoint(tmp_path / "c.ckpt", causal_model(), A, "causal")
    out = tmp_path / "new" / "deep" / "g.fasta"
    argv = ["generate", f"checkpoint={tmp_path / 'c.ckpt'}", "n=1", "max_length=12"]
    assert main([*argv, f"out={out}"]) == 0 and out.is_file()


def test_a_model_trained_on_packed_windows_samples_between_separators() -> None:
    """Such a model never saw <cls>/<eos>: a protein follows a <sep> and ends at the next."""
    model = causal_model("transformer").eval()
    allowed = torch.zeros(len(A), dtype=torch.bool)
    allowed[[A.index(a) for a in STANDARD_AMINO_ACIDS] + [A.sep_idx]] = True
    samples = generate(model, A, 4, seed=2, prompt="M", max_length=20, packed=True)
    for s in samples:
        ids = [A.sep_idx, *A.encode(s.sequence).tolist()] + ([A.sep_idx] if s.ended else [])
        logits = model(torch.tensor([ids]))["logits"][0].masked_fill(~allowed, -math.inf)
        logp = torch.log_softmax(logits, -1)
        expected = sum(logp[t, ids[t + 1]].item() for t in range(1, len(ids) - 1))
        assert s.log_prob == pytest.approx(expected, abs=1e-4)
    plain = generate(model, A, 4, seed=2, prompt="M", max_length=20)
    assert [s.log_prob for s in plain] != [s.log_prob for s in samples]


def test_generate_frames_proteins_as_the_checkpoints_run_trained(tmp_path, kwarg_spy):
    import protein_performer.analysis.generation as generation

    seen = kwarg_spy(generation, "generate", "packed")
    for mode in ("concat", "crop"):
        ckpt = tmp_path / f"{mode}.ckpt"
        save_model_checkpoint(ckpt, causal_model(), A, "causal", data={"mode": mode})
        out = tmp_path / f"{mode}.fasta"
        assert main(["generate", f"checkpoint={ckpt}", "n=2", "max_length=24", f"out={out}"]) == 0
    assert seen == [True, False]


def test_generation_builds_no_autograd_graph() -> None:
    """Every step's activations would be kept to the end (19.6 GB instead of 1.1 GB measured
    for 8 proteins of 400 tokens) if sampling ran with gradients."""
    model = causal_model()
    seen = []
    model.register_forward_hook(lambda *_: seen.append(torch.is_grad_enabled()))
    generate(model, A, 2, seed=0, max_length=12)
    generate(model, A, 2, seed=0, max_length=12, packed=True)
    assert seen and not any(seen)


def test_a_packed_model_s_proteins_say_they_ended_at_sep(tmp_path, monkeypatch, capsys):
    import protein_performer.analysis.generation as generation

    def ends(*args, **kwargs):
        return [generation.Sample("MKV", True, -1.0), generation.Sample("MKVL", False, -2.0)]

    monkeypatch.setattr(generation, "generate", ends)
    ckpt = tmp_path / "c.ckpt"
    save_model_checkpoint(ckpt, causal_model(), A, "causal", data={"mode": "concat"})
    out = tmp_path / "g.fasta"
    assert main(["generate", f"checkpoint={ckpt}", "n=2", "max_length=24", f"out={out}"]) == 0
    headers = [line for line in out.read_text().splitlines() if line.startswith(">")]
    assert "ended=sep" in headers[0] and "ended=max_length" in headers[1]
    assert "1 reached max_length without <sep>" in capsys.readouterr().out


def test_generate_without_a_checkpoint_says_how_to_get_one(capsys) -> None:
    """No causal checkpoint is shipped: the missing key's error says how to train one."""
    from protein_performer.cli.main import main

    assert main(["generate", "n=2", "out=never.fasta"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checkpoint=... is required for generate" in err
    assert "train experiment=demo objective=causal" in err
