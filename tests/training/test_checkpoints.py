"""Checkpoints: safe loading, round trips, clear errors, exact → Performer conversion."""

from __future__ import annotations

import os
import pickle
import warnings

import pytest
import torch

from protein_performer.data.alphabet import Alphabet, default_alphabet
from protein_performer.errors import ConfigError, DataError
from protein_performer.model import ModelConfig, ProteinLM
from protein_performer.model.checkpoints import (
    META_KEY,
    _zip_problem,
    init_weights_from,
    load_model,
    model_state,
    read_checkpoint,
    save_model_checkpoint,
)
from protein_performer.training import lm_module
from protein_performer.training.builders import build_module
from protein_performer.training.run import train
from tests.model.test_model import tiny_config as tiny_model_config
from tests.training.helpers import tiny_config

ALPHABET = default_alphabet()


def _config(attention: str, **kw) -> ModelConfig:
    return tiny_model_config(attention, **{"nb_features": 16, **kw})


def _ids(b=2, n=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, 26, (b, n), generator=g)
    ids[:, 0], ids[:, -1] = ALPHABET.cls_idx, ALPHABET.eos_idx
    return ids


def test_trained_checkpoint_round_trip_gives_identical_outputs(tiny_fasta, tmp_path):
    result = train(tiny_config(tiny_fasta, max_steps=3), tmp_path / "run")
    ckpt = torch.load(result.last_checkpoint, map_location="cpu", weights_only=True)
    meta = ckpt["protein_performer"]
    assert meta["alphabet"] == ALPHABET.to_dict()
    assert meta["model"]["attention"] == "performer_relu"
    assert len(meta["projections"]) == 2  # one projection per layer, stored explicitly
    model, _ = load_model(result.last_checkpoint)
    ids = _ids()
    # the stored projections are the ones in the loaded model (not a fresh draw)
    for name, proj in meta["projections"].items():
        torch.testing.assert_close(dict(model.named_buffers())[name], proj, rtol=0, atol=0)
    # and the loaded model computes what the trained weights compute
    state = {k[len("model.") :]: v for k, v in ckpt["state_dict"].items()}
    fresh = ProteinLM(ModelConfig(**meta["model"]), len(ALPHABET)).eval()
    fresh.load_state_dict(state)
    with torch.no_grad():
        torch.testing.assert_close(model(ids)["logits"], fresh(ids)["logits"], rtol=0, atol=0)


def test_training_checkpoints_are_renamed_into_place_from_their_own_folder(
    tiny_fasta, tmp_path, monkeypatch
):
    """Never staged elsewhere: a rename across file systems fails, and Lightning's fallback
    rewrote last.ckpt in place (a kill during that copy lost the last good checkpoint)."""
    import protein_performer.utils.atomic as atomic

    renames = []
    real_replace = os.replace

    def recording_replace(src, dst):
        renames.append((os.fspath(src), os.fspath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", recording_replace)
    result = train(tiny_config(tiny_fasta, max_steps=3), tmp_path / "run")
    ckpts = [(s, d) for s, d in renames if d.endswith(".ckpt")]
    assert {os.path.basename(d) for _, d in ckpts} >= {"last.ckpt", "best.ckpt"}
    assert all(os.path.dirname(s) == os.path.dirname(d) for s, d in ckpts)
    load_model(result.last_checkpoint)  # what was renamed is a whole checkpoint
    assert not [p for p in (tmp_path / "run" / "checkpoints").iterdir() if p.suffix == ".tmp"]
    # a spawning strategy pickles the trainer's plugins into its worker processes
    import pickle

    from protein_performer.training.checkpoint_io import AtomicCheckpointIO

    assert type(pickle.loads(pickle.dumps(AtomicCheckpointIO()))) is AtomicCheckpointIO


def test_save_model_checkpoint_round_trip(tmp_path):
    torch.manual_seed(0)
    model = ProteinLM(_config("performer_softmax"), len(ALPHABET), causal=True).eval()
    path = tmp_path / "m.ckpt"
    save_model_checkpoint(path, model, ALPHABET, "causal")
    loaded, meta = load_model(path)
    assert loaded.causal and meta["objective"] == "causal"
    ids = _ids()
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids)["logits"], model(ids)["logits"], rtol=0, atol=0)
    # an objective or alphabet that is not the model's would load as another model: refused
    other = tmp_path / "other.ckpt"
    for objective in ("mlm", "MLM"):
        with pytest.raises(ValueError, match=r"objective=.* does not describe this model"):
            save_model_checkpoint(other, model, ALPHABET, objective)
    wide = ProteinLM(_config("performer_softmax"), len(ALPHABET) + 9)
    with pytest.raises(ValueError, match="the alphabet has 31 tokens, the model's vocabulary 40"):
        save_model_checkpoint(other, wide, ALPHABET, "mlm")
    assert not other.exists()


class _Payload:
    def __reduce__(self):
        return (print, ("this must never run",))


class _Shell:
    def __reduce__(self):
        return (os.system, ("echo this must never run",))


def test_unsafe_or_foreign_files_give_clear_errors(tmp_path):
    with pytest.raises(DataError, match=r"missing\.ckpt: checkpoint: no such file$"):
        read_checkpoint(tmp_path / "missing.ckpt")
    with pytest.raises(
        DataError, match=r"nope: .* no such file \(nor a shipped name: default, homologs,"
    ):
        read_checkpoint("nope")  # a bare word: the shipped names are said
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(DataError, match=r"junk\.ckpt: not a PyTorch checkpoint \(a text file\)"):
        read_checkpoint(junk)
    # a run's other files given as checkpoint= (torch.load ended in IndexError on a CSV)
    csv_file = tmp_path / "metrics.csv"
    csv_file.write_text("epoch,step,train/loss\n0,0,3.4\n")
    with pytest.raises(DataError, match=r"metrics\.csv: not a PyTorch checkpoint \(a text"):
        read_checkpoint(csv_file)
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match=r"not a PyTorch checkpoint \(an empty file\)"):
        read_checkpoint(empty)
    broken_zip = tmp_path / "broken.ckpt"
    broken_zip.write_bytes(b"PK\x03\x04" + bytes(range(256)))
    with pytest.raises(DataError, match=r"broken\.ckpt: truncated or corrupt checkpoint"):
        read_checkpoint(broken_zip)
    # torch.load checks no CRC: flipped bytes in a weight would load silently as other weights
    whole = tmp_path / "whole.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(10_000)}}, whole)
    data = bytearray(whole.read_bytes())
    flipped = tmp_path / "flipped.ckpt"
    flipped.write_bytes(
        bytes(data[: len(data) // 2]) + b"\xff" * 64 + bytes(data[len(data) // 2 + 64 :])
    )
    with pytest.raises(DataError, match=r"flipped\.ckpt: truncated or corrupt checkpoint \(CRC"):
        read_checkpoint(flipped)
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(bytes(data[:-200]))
    with pytest.raises(DataError, match=r"cut\.ckpt: truncated or corrupt checkpoint"):
        read_checkpoint(cut)
    # the archive's own words (zipfile's), not only the exception's class
    assert _zip_problem(cut) == "File is not a zip file"
    with pytest.raises(DataError, match="not a protein-performer checkpoint"):
        read_checkpoint(whole)  # intact: gets past the archive check
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {}, "epoch": 1}, foreign)
    with pytest.raises(DataError, match="not a protein-performer checkpoint"):
        read_checkpoint(foreign)
    evil = tmp_path / "evil.ckpt"
    torch.save({"state_dict": _Payload()}, evil)
    with pytest.raises(DataError, match=r"refusing to load: .* does not allow \(print\)$"):
        read_checkpoint(evil)
    legacy = tmp_path / "legacy.ckpt"
    with open(legacy, "wb") as f:
        pickle.dump({"state_dict": _Payload()}, f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's protocol warning is not the user's business
        with pytest.raises(DataError, match=r"not a readable PyTorch checkpoint \(a plain pickle"):
            read_checkpoint(legacy)
    # a blocked module (os.system): torch words it otherwise; still "refusing", not "corrupt"
    shell = tmp_path / "shell.ckpt"
    torch.save({"state_dict": _Shell()}, shell)
    with pytest.raises(
        DataError, match=r"refusing to load: .* does not allow \((posix|nt)\.system\)$"
    ):
        read_checkpoint(shell)


def test_a_checkpoint_in_torchs_legacy_format_reads_everywhere(tmp_path):
    """Legacy (non-zip) files cannot be memory-mapped: the metadata-only read used by
    resume and score refused them as unreadable while evaluate read them."""
    path = tmp_path / "new.ckpt"
    save_model_checkpoint(
        path, ProteinLM(_config("performer_relu"), len(ALPHABET)), ALPHABET, "mlm"
    )
    ckpt = torch.load(path, weights_only=True)
    legacy = tmp_path / "legacy.ckpt"
    torch.save(ckpt, legacy, _use_new_zipfile_serialization=False)
    for mmap in (False, True):
        meta = read_checkpoint(legacy, mmap=mmap)[META_KEY]
        assert meta["model"] == ckpt[META_KEY]["model"] and meta["objective"] == "mlm"


def test_damaged_metadata_is_one_line_not_a_key_error(tmp_path):
    model = ProteinLM(_config("transformer"), len(ALPHABET))
    path = tmp_path / "t.ckpt"
    save_model_checkpoint(path, model, ALPHABET, "mlm")
    ckpt = torch.load(path, weights_only=True)
    key = next(k for k, v in ckpt.items() if isinstance(v, dict) and "alphabet" in v)
    meta = ckpt[key]
    edits = {
        "no_model": lambda m: m.pop("model"),
        "no_specials": lambda m: m["alphabet"].pop("specials"),
        "model_not_a_dict": lambda m: m.update(model=[1, 2]),
        "unknown_objective": lambda m: m.update(objective="weird"),
    }
    for name, edit in edits.items():
        broken = {**ckpt, key: {**meta, "alphabet": dict(meta["alphabet"])}}
        edit(broken[key])
        bad = tmp_path / f"{name}.ckpt"
        torch.save(broken, bad)
        with pytest.raises(DataError, match=rf"{name}\.ckpt: damaged checkpoint metadata"):
            load_model(bad)
    assert isinstance(load_model(path)[0], ProteinLM)  # the intact one loads


def test_checkpoint_of_another_alphabet_or_architecture_is_refused(tmp_path):
    model = ProteinLM(_config("transformer"), len(ALPHABET))
    path = tmp_path / "t.ckpt"
    save_model_checkpoint(path, model, ALPHABET, "mlm")
    other_alphabet = Alphabet(residues="ACDEFGHIKLMNPQRSTVWY", version="pp-aa-test")
    with pytest.raises(DataError, match=r"alphabet pp-aa-v1 .* but this is pp-aa-test"):
        load_model(path, alphabet=other_alphabet)
    wider = ProteinLM(_config("performer_relu", dim=64), len(ALPHABET))
    with pytest.raises(
        ConfigError, match=r"another architecture: model\.dim: checkpoint 32, config 64"
    ):
        init_weights_from(wider, path, ALPHABET, "mlm")
    same = ProteinLM(_config("performer_relu"), len(ALPHABET))
    with pytest.raises(ConfigError, match="objective=mlm, this run uses objective=causal"):
        init_weights_from(same, path, ALPHABET, "causal")


def test_metadata_that_does_not_describe_the_weights_is_refused_before_building(
    tmp_path, monkeypatch
):
    """A checkpoint whose stored model settings say dim=65536 over 32-wide weights was built
    at that size (51 GB) before the shapes were compared: a traceback, or the machine's
    memory. Now the shapes are compared on the meta device first."""
    from protein_performer.model import checkpoints

    path = tmp_path / "t.ckpt"
    save_model_checkpoint(
        path, ProteinLM(_config("performer_relu"), len(ALPHABET)), ALPHABET, "mlm"
    )
    ckpt = torch.load(path, weights_only=True)
    ckpt["protein_performer"]["model"] |= {"dim": 2048, "heads": 2}  # (65536 in the report)
    torch.save(ckpt, tmp_path / "huge.ckpt")
    built = []
    real_init = ProteinLM.__init__

    def init(self, *args, **kwargs):
        built.append(torch.empty(()).device.type)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(checkpoints.ProteinLM, "__init__", init)
    with pytest.raises(ConfigError, match=r"does not fit this model: \d+ shape mismatches .*2048"):
        load_model(tmp_path / "huge.ckpt")
    assert built == ["meta"]
    model, _ = load_model(path)  # a checkpoint that fits: built for real after the check
    assert built[1:] == ["meta", "cpu"] and next(model.parameters()).device.type == "cpu"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("old", [0, 3, 4])
def test_init_from_widens_the_qkv_convolution_to_the_same_function(tmp_path, causal, old):
    torch.manual_seed(0)
    src = ProteinLM(
        _config("transformer", position="rotary", qkv_conv=old), len(ALPHABET), causal=causal
    )
    with torch.no_grad():  # a trained-looking filter (not the identity) and sharp attention
        for block in src.blocks:
            if block.attn.conv is not None:
                block.attn.conv.weight.normal_(0.0, 0.5)
                block.attn.conv.bias.normal_(0.0, 0.1)
            block.attn.qkv.weight.mul_(5.0)
    path = tmp_path / "narrow.ckpt"
    save_model_checkpoint(path, src, ALPHABET, "causal" if causal else "mlm")
    wide = ProteinLM(
        _config("transformer", position="rotary", qkv_conv=7), len(ALPHABET), causal=causal
    )
    init_weights_from(wide, path, ALPHABET, "causal" if causal else "mlm")
    ids = torch.randint(6, 26, (2, 19), generator=torch.Generator().manual_seed(1))
    ids[1, 14:] = ALPHABET.pad_idx
    src.eval(), wide.eval()
    keep = ids != ALPHABET.pad_idx
    torch.testing.assert_close(
        wide(ids)["logits"][keep], src(ids)["logits"][keep], rtol=1e-5, atol=1e-5
    )
    taps = wide.blocks[0].attn.conv.weight
    assert taps.shape[-1] == 7 and (taps != 0).any(-1).all()
    narrower = ProteinLM(_config("transformer", position="rotary", qkv_conv=0), len(ALPHABET))
    if old:  # narrowing (or dropping) a convolution is another architecture
        with pytest.raises(ConfigError, match=r"another architecture: model\.qkv_conv"):
            init_weights_from(narrower, path, ALPHABET, "causal" if causal else "mlm")


def test_resume_from_another_model_is_refused(tiny_fasta, tmp_path):
    result = train(tiny_config(tiny_fasta, max_steps=2), tmp_path / "a")
    cfg = tiny_config(tiny_fasta, "transformer", max_steps=4)
    cfg.ckpt_path = result.last_checkpoint
    with pytest.raises(ConfigError, match="cannot resume from ckpt_path: it is another model"):
        train(cfg, tmp_path / "b")


def test_init_from_converts_exact_attention_to_performer(tiny_fasta, tmp_path, capsys):
    exact = train(tiny_config(tiny_fasta, "transformer", max_steps=2), tmp_path / "exact")
    cfg = tiny_config(tiny_fasta, "performer_softmax", max_steps=2)
    cfg.init_from = exact.last_checkpoint
    # the module built for the run starts from the exact model's weights (not a fresh init)
    module = build_module(cfg, ALPHABET)
    source = model_state(read_checkpoint(exact.last_checkpoint))
    n_shared = 0
    for k, v in module.model.state_dict().items():
        if ".attn.favor." not in f".{k}":
            torch.testing.assert_close(v, source[k], rtol=0, atol=0)
            n_shared += 1
    assert n_shared == len(source)
    capsys.readouterr()
    tuned = train(cfg, tmp_path / "tuned")
    assert tuned.steps == 2
    assert f"weights from: {exact.last_checkpoint} (init_from" in capsys.readouterr().err
    # a wrong init_from is said before any data is read, and a run folder points at its files
    from protein_performer.training import run as run_module

    def no_data(*_, **__):
        raise AssertionError("data was read before init_from was checked")

    cfg.model.dim *= 2
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run_module, "build_datamodule", no_data)
        with pytest.raises(ConfigError, match=r"another architecture: model\.dim"):
            train(cfg, tmp_path / "wider")
        cfg.init_from = str(tmp_path / "exact")
        with pytest.raises(DataError, match=r"init_from: .*a run directory\? its checkpoints"):
            train(cfg, tmp_path / "wider")
    assert not (tmp_path / "wider").exists()


def test_converted_performer_softmax_approaches_the_exact_model(tmp_path):
    """A transformer checkpoint run with FAVOR+ softmax features: the output error shrinks as
    the number of random features grows (the backward-compatibility property)."""
    torch.manual_seed(0)
    cfg = _config("transformer", dim=64, heads=4, depth=2, max_len=64)
    model = ProteinLM(cfg, len(ALPHABET)).double().eval()
    with torch.no_grad():  # larger q/k weights so attention is clearly not uniform
        for block in model.blocks:
            block.attn.qkv.weight.mul_(4.0)
    path = tmp_path / "exact.ckpt"
    save_model_checkpoint(path, model, ALPHABET, "mlm")
    ids = _ids(2, 48)
    with torch.no_grad():
        reference = model(ids)["logits"].softmax(-1)
        attn = model(ids, return_attentions=True)["attentions"][0]
    assert attn.max() > 3.0 / 48  # well above uniform attention (1/48)
    errors = {}
    for m in (8, 64, 512):
        errs = []
        for seed in range(4):
            perf, _ = load_model(path, attention="performer_softmax", nb_features=m)
            perf.config.feature_seed = seed
            _redraw_with_seed(perf, seed)
            perf = perf.double()
            with torch.no_grad():
                probs = perf(ids)["logits"].softmax(-1)
            errs.append((probs - reference).abs().mean().item())
        errors[m] = sum(errs) / len(errs)
    assert errors[8] > errors[64] > errors[512]
    assert errors[512] < errors[8] / 4  # ~ 1/sqrt(m): 8x fewer errors for 64x more features


def _redraw_with_seed(model: ProteinLM, seed: int) -> None:
    for module in model.favor_modules():
        module.seed = seed
        module.redraw_projection(0)


def test_last_checkpoint_is_the_final_step_even_when_validation_did_not_improve(
    tiny_fasta, tmp_path, monkeypatch
):
    calls = iter(range(1, 1000))  # every validation reports a worse perplexity than the last
    monkeypatch.setattr(lm_module, "perplexity", lambda nll, count: float(next(calls)))
    result = train(tiny_config(tiny_fasta, max_steps=6, val_check_interval=2), tmp_path / "run")
    best = torch.load(result.best_checkpoint, weights_only=True)
    last = torch.load(result.last_checkpoint, weights_only=True)
    assert best["global_step"] == 2 and last["global_step"] == 6 == result.steps


def test_last_checkpoint_is_written_without_validation_data(tiny_fasta, tmp_path, caplog):
    cfg = tiny_config(tiny_fasta, max_steps=3)
    cfg.data.split_fractions = [1.0, 0.0, 0.0]
    result = train(cfg, tmp_path / "run")
    assert caplog.text.count("the validation split is empty (0 proteins") == 1  # said once
    assert result.best_checkpoint is None
    assert torch.load(result.last_checkpoint, weights_only=True)["global_step"] == 3


def test_resume_from_a_file_that_is_not_a_training_checkpoint_is_one_line(tiny_fasta, tmp_path):
    cfg = tiny_config(tiny_fasta, max_steps=2)
    junk = tmp_path / "junk.ckpt"
    junk.write_text(">not a checkpoint\nACDE\n")
    model_only = tmp_path / "model.ckpt"
    save_model_checkpoint(model_only, build_module(cfg, ALPHABET).model, ALPHABET, "mlm")
    for path, problem in [
        (junk, r"not a PyTorch checkpoint \(a text file that looks like FASTA"),
        (model_only, "not a training checkpoint .* use init_from=PATH"),
        (tmp_path, "checkpoint path is not a file"),
    ]:
        cfg.ckpt_path = str(path)
        with pytest.raises(DataError, match=f"^{path}: ckpt_path: {problem}") as err:
            train(cfg, tmp_path / "run")
        assert "\n" not in str(err.value)


def test_a_run_directory_given_as_checkpoint_points_to_its_checkpoint(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    with pytest.raises(DataError, match=r"checkpoint path is not a file$"):
        read_checkpoint(run)
    model = ProteinLM(_config("transformer"), len(ALPHABET))
    save_model_checkpoint(run / "checkpoints" / "last.ckpt", model, ALPHABET, "mlm")
    with pytest.raises(
        DataError, match=r"a run directory\? its checkpoints: last .*run/checkpoints/last\.ckpt\)$"
    ):
        read_checkpoint(run)


def test_a_projection_not_taken_from_the_checkpoint_is_counted_as_the_first_draw(tmp_path):
    model = ProteinLM(_config("performer_softmax"), len(ALPHABET))
    for module in model.favor_modules():
        module.redraw_projection(3)
    path = tmp_path / "m.ckpt"
    save_model_checkpoint(path, model, ALPHABET, "mlm")
    same, _ = load_model(path)
    assert [int(m.redraw_counter) for m in same.favor_modules()] == [3] * len(same.favor_modules())
    for a, b in zip(same.favor_modules(), model.favor_modules(), strict=True):
        assert torch.equal(a.projection, b.projection)
    other, _ = load_model(path, nb_features=2 * model.config.nb_features)  # its own draw 0
    for module in other.favor_modules():
        assert int(module.redraw_counter) == 0
        assert torch.equal(module.projection, module._draw(0))


@pytest.mark.parametrize(
    "name", ["default", "homologs", "homologs-msa", "homologs-columns", "homologs-columns-deep"]
)
def test_a_users_file_named_like_a_shipped_checkpoint_is_the_users(tmp_path, monkeypatch, name):
    from protein_performer.model.checkpoints import SHIPPED_CHECKPOINTS, resolve_checkpoint

    assert name in SHIPPED_CHECKPOINTS
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    mine = ProteinLM(tiny_model_config(dim=16, heads=2, ffn_dim=16), 31, 0)
    save_model_checkpoint(tmp_path / name, mine, default_alphabet(), "mlm")
    assert resolve_checkpoint(name) == tmp_path.joinpath(name).relative_to(tmp_path)
    model, _ = load_model(name)
    assert model.config.dim == 16
    torch.testing.assert_close(model.state_dict(), mine.state_dict(), rtol=0, atol=0)


def test_a_pairs_run_records_how_it_built_its_rows(tiny_fasta, tmp_path):
    cfg = tiny_config(tiny_fasta, max_steps=1)
    assert not any(k.startswith("pair_") for k in build_module(cfg, ALPHABET).data_info)
    cfg.data.packing, cfg.data.pair_partners, cfg.data.pair_alone = "pairs", 7, 0.25
    cfg.data.pair_homologs = str(tmp_path / "hits")
    info = build_module(cfg, ALPHABET).data_info
    assert info["packing"] == "pairs"
    assert {k: info[k] for k in ("pair_partners", "pair_alone", "pair_copy", "pair_mask")} == {
        "pair_partners": 7,
        "pair_alone": 0.25,
        "pair_copy": 0.0,
        "pair_mask": "all",
    }
    assert info["pair_homologs"] == str((tmp_path / "hits").resolve())
    assert info["pair_fill"] is False
