"""Attention and representation extraction: equal to the model's own matrices, streamed for long
records, one file per record."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from protein_performer.analysis import extraction as extract_mod
from protein_performer.analysis.extraction import (
    attention_maps,
    extract,
    record_file_names,
    representations,
)
from protein_performer.analysis.inputs import parse_indices, read_proteins
from protein_performer.analysis.npz import NpzWriter
from protein_performer.data.alphabet import default_alphabet
from protein_performer.errors import ConfigError, DataError
from protein_performer.model.config import ModelConfig
from protein_performer.model.performer import ProteinLM
from tests.analysis.planted import random_proteins

ALPHABET = default_alphabet()
KINDS = ["transformer", "performer_relu", "performer_softmax"]
#: float32 maps computed in other row blocks (other BLAS blocking and threads): the same
#: numbers up to rounding (3e-8 seen on an AMD EPYC)
BLOCKING_TOL = {"rtol": 1e-5, "atol": 1e-7}


def tiny_model(attention: str, causal: bool = False, seed: int = 0, **kw) -> ProteinLM:
    torch.manual_seed(seed)
    cfg = ModelConfig(
        attention=attention,
        dim=32,
        depth=2,
        heads=4,
        ffn_dim=64,
        dropout=0.0,
        max_len=64,
        nb_features=16,
        **kw,
    )
    return ProteinLM(cfg, len(ALPHABET), ALPHABET.pad_idx, causal=causal).eval()


def write_fasta(path, proteins) -> None:
    path.write_text(
        "".join(f">{p.id} {p.description}\n{ALPHABET.decode(p.residues)}\n" for p in proteins)
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_iter_attention_equals_full_matrices(kind: str, causal: bool) -> None:
    model = tiny_model(kind, causal)
    ids = torch.randint(5, 25, (2, 21))
    ids[1, 15:] = ALPHABET.pad_idx
    full = model(ids, return_attentions=True)["attentions"]
    blocks: dict[int, list[torch.Tensor]] = {}
    for layer, start, rows in model.iter_attention(ids, layers=[1], heads=[3, 0], chunk_size=4):
        assert start == sum(b.shape[2] for b in blocks.get(layer, []))
        blocks.setdefault(layer, []).append(rows)
    assert list(blocks) == [1]
    torch.testing.assert_close(torch.cat(blocks[1], 2), full[1][:, [3, 0]], rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_extracted_matrices_are_the_models(tmp_path, kind: str, causal: bool) -> None:
    model = tiny_model(kind, causal)
    proteins = random_proteins(3, 20, seed=1)
    fasta = tmp_path / "in.fasta"
    write_fasta(fasta, proteins)
    manifest = extract(
        model,
        ALPHABET,
        fasta,
        tmp_path / "out",
        include=["attention"],
        keep_specials=True,
        progress=False,
    )
    assert [r["id"] for r in manifest["records"]] == ["p0", "p1", "p2"]
    # the manifest names what was extracted, and only that
    assert manifest["attention_layers"] == [0, 1] and manifest["attention_heads"] == [0, 1, 2, 3]
    assert manifest["repr_layers"] is None
    for protein, rec in zip(proteins, manifest["records"], strict=True):
        data = np.load(tmp_path / "out" / rec["file"])
        att = data["attention"]
        assert att.shape == (2, 4, 22, 22)
        full = model(protein.tokens(ALPHABET), return_attentions=True)["attentions"]
        for layer in range(2):
            np.testing.assert_allclose(att[layer], full[layer][0].numpy(), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(att.sum(-1), 1.0, rtol=1e-5)
        if causal:
            assert np.all(np.triu(att, k=1) == 0)
        assert str(data["id"]) == protein.id
        assert str(data["sequence"]) == ALPHABET.decode(protein.residues)
        np.testing.assert_array_equal(data["tokens"], protein.tokens(ALPHABET)[0].numpy())


def test_favor_extraction_equals_attention_matrix() -> None:
    model = tiny_model("performer_softmax")
    protein = random_proteins(1, 30, seed=2)[0]
    tokens = protein.tokens(ALPHABET)
    block = model.blocks[0]
    x = block.norm1(model.embed(tokens))
    q, k, _ = block.attn._split(x)
    expected = block.attn.favor.attention_matrix(q, k)[0, :, 1:-1, 1:-1]
    got = attention_maps(model, protein, ALPHABET, layers=[0])
    np.testing.assert_allclose(got[0], expected.detach().numpy(), rtol=1e-6, atol=1e-7)
    assert got[0].sum(-1).max() < 1.0  # without <cls>/<eos> the rows miss their share


def test_streamed_long_records_equal_buffered(tmp_path, monkeypatch) -> None:
    model = tiny_model("performer_relu", position="rotary")
    proteins = random_proteins(2, 150, seed=3)
    fasta = tmp_path / "in.fasta"
    write_fasta(fasta, proteins)
    one_layer = 2 * 152 * 152 * 4  # bytes of one layer's two heads (with <cls>/<eos>)
    # all layers in one pass, a layer at a time, head by head in row blocks
    for out, budget in (("a", 10**9), ("b", one_layer), ("c", 0)):
        monkeypatch.setattr(extract_mod, "LAYER_BUFFER_BYTES", budget)
        extract(
            model,
            ALPHABET,
            fasta,
            tmp_path / out,
            include=["attention"],
            layers="0-1",
            heads=[0, 2],
            chunk_size=16,
            progress=False,
        )
    for name in ("p0.npz", "p1.npz"):
        a = np.load(tmp_path / "a" / name)
        assert a["attention"].shape == (2, 2, 150, 150)
        assert a["attention_heads"].tolist() == [0, 2]
        for other in ("b", "c"):  # other row blocks: other BLAS blocking, other rounding
            np.testing.assert_allclose(
                a["attention"], np.load(tmp_path / other / name)["attention"], **BLOCKING_TOL
            )
    full = attention_maps(model, proteins[0], ALPHABET, layers=[0, 1], heads=[0, 2])
    got = np.load(tmp_path / "c" / "p0.npz")["attention"]
    np.testing.assert_allclose(got, full, **BLOCKING_TOL)


def test_representations_follow_esm_conventions(tmp_path) -> None:
    model = tiny_model("transformer")
    proteins = random_proteins(5, 12, seed=4) + random_proteins(2, 30, seed=5)
    fasta = tmp_path / "in.fasta"
    write_fasta(fasta, proteins[:5])
    got = list(representations(model, proteins, ALPHABET, repr_layers=[0, -1], toks_per_batch=40))
    assert [p.id for p, _ in got] == [p.id for p in proteins]
    for protein, per_tok in got:
        hidden = model(protein.tokens(ALPHABET), return_hidden=True)["hidden_states"]
        np.testing.assert_allclose(per_tok[0], hidden[0][0, 1:-1].detach().numpy(), atol=1e-5)
        last = model.norm(hidden[2])[0, 1:-1]
        np.testing.assert_allclose(per_tok[1], last.detach().numpy(), atol=1e-5)
    extract(
        model,
        ALPHABET,
        fasta,
        tmp_path / "o",
        include=["per_tok", "mean"],
        float16=True,
        progress=False,
    )
    data = np.load(tmp_path / "o" / "p0.npz")
    assert data["per_tok"].dtype == np.float16 and data["per_tok"].shape == (1, 12, 32)
    np.testing.assert_allclose(
        data["mean"][0], data["per_tok"][0].astype(np.float32).mean(0), atol=2e-3
    )
    assert "attention" not in data.files
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["attention_layers"] is None and manifest["attention_heads"] is None


def test_long_record_is_cropped_by_default_and_an_error_when_asked(tmp_path) -> None:
    model = tiny_model("transformer")  # learned positions: 64 tokens
    proteins = random_proteins(1, 20, seed=6) + random_proteins(1, 80, seed=7)
    proteins[1].id = "long"
    fasta = tmp_path / "in.fasta"
    write_fasta(fasta, proteins)
    with pytest.raises(DataError, match=r"record 2 \(long\): 80 residues exceed the 62"):
        extract(model, ALPHABET, fasta, tmp_path / "o", truncate=False, progress=False)
    assert not (tmp_path / "o").exists()
    for truncate in ("auto", True):  # every record handled, the long one cropped and said
        out = tmp_path / str(truncate)
        manifest = extract(model, ALPHABET, fasta, out, truncate=truncate, progress=False)
        assert manifest["records"][0]["cropped"] == 0 and manifest["records"][1]["cropped"] == 18
        assert np.load(out / "long.npz")["attention"].shape[-1] == 62


def test_output_directory_rules(tmp_path) -> None:
    model = tiny_model("transformer")
    fasta = tmp_path / "in.fasta"
    write_fasta(fasta, random_proteins(2, 10, seed=8))
    out = tmp_path / "o"
    extract(model, ALPHABET, fasta, out, progress=False)
    with pytest.raises(DataError, match=r"exists \(use overwrite=true"):
        extract(model, ALPHABET, fasta, out, progress=False)
    extract(model, ALPHABET, fasta, out, overwrite=True, progress=False)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="never replaced"):
        extract(model, ALPHABET, fasta, out, overwrite=True, progress=False)
    assert (out / "notes.txt").read_text() == "mine"
    with pytest.raises(DataError, match="looks like a FASTA"):
        extract(model, ALPHABET, fasta, tmp_path / "x.fasta", progress=False)


def test_file_names_are_safe_and_distinct() -> None:
    names = record_file_names(["sp|P1|A", "a/b", "A", "a", "..x", "", "-rf", "-.-"])
    assert names == [
        "P1.npz",  # a UniProt id: its accession, no pipe to quote in a shell
        "a_b.npz",
        "A.npz",
        "a-2.npz",
        "x.npz",
        "record.npz",
        "rf.npz",  # not an option to `rm *.npz`
        "record-2.npz",
    ]
    long_a, long_b = record_file_names(["x" * 300 + "a", "x" * 300 + "b"])
    assert len(long_a) < 160 and long_a != long_b


def test_extract_names_files_by_accession_and_keeps_the_ids(tmp_path) -> None:
    """``sp|Q79PF4|KAIC_SYNE7.npz`` needs quoting in a shell: the file is the accession's, two
    records of one accession get a suffix, and the id stays in the file and the manifest."""
    import json

    (tmp_path / "u.fasta").write_text(
        ">sp|Q79PF4|KAIC_SYNE7 KaiC\nMKTAYIAKQR\n>tr|Q79PF4|OTHER_SYNE7\nMKVLAW\n"
        ">my/odd;id\nMKLVW\n>plain\nMKTW\n"
    )
    manifest = extract(
        tiny_model("transformer"), ALPHABET, tmp_path / "u.fasta", tmp_path / "o", progress=False
    )
    files = [r["file"] for r in manifest["records"]]
    assert files == ["Q79PF4.npz", "Q79PF4-2.npz", "my_odd_id.npz", "plain.npz"]
    assert [r["id"] for r in manifest["records"]] == [
        "sp|Q79PF4|KAIC_SYNE7",
        "tr|Q79PF4|OTHER_SYNE7",
        "my/odd;id",
        "plain",
    ]
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == sorted([*files, "manifest.json"])
    assert json.loads((tmp_path / "o" / "manifest.json").read_text())["records"][1]["id"] == (
        "tr|Q79PF4|OTHER_SYNE7"
    )
    with np.load(tmp_path / "o" / "Q79PF4-2.npz") as z:
        assert str(z["id"]) == "tr|Q79PF4|OTHER_SYNE7" and str(z["sequence"]) == "MKVLAW"
    assert record_file_names(["sp|P1|A+2", "P1+2"]) == ["P1+2.npz", "P1+2-2.npz"]  # join


def test_parse_indices() -> None:
    assert parse_indices(None, 4, "layers") == [0, 1, 2, 3]
    assert parse_indices("all", 4, "layers") == [0, 1, 2, 3]
    assert parse_indices("1-2", 4, "layers") == [1, 2]
    assert parse_indices([3, "0"], 4, "layers") == [0, 3]
    assert parse_indices(-1, 4, "layers") == [3]
    assert parse_indices("0,2", 4, "layers") == [0, 2]
    for bad in ("4", "2-1", "x", True, []):
        with pytest.raises(ConfigError, match="layers"):
            parse_indices(bad, 4, "layers")


def test_npz_blocks_must_fill_the_shape(tmp_path) -> None:
    with NpzWriter(tmp_path / "a.npz") as npz:
        npz.add_blocks("x", (2, 3), np.float32, [np.ones((1, 3)), np.zeros((1, 3))])
    np.testing.assert_array_equal(np.load(tmp_path / "a.npz")["x"], [[1, 1, 1], [0, 0, 0]])
    with NpzWriter(tmp_path / "b.npz") as npz, pytest.raises(ValueError, match="needs"):
        npz.add_blocks("x", (2, 3), np.float32, [np.ones((1, 3))])


def test_default_window_stops_at_the_trained_crop() -> None:
    from protein_performer.analysis.inputs import max_tokens

    model = tiny_model("transformer")  # 64 learned positions
    assert max_tokens(model, None) == 64
    assert max_tokens(model, None, trained_length=40) == 40  # positions 40-63 never trained
    assert max_tokens(model, 60, trained_length=40) == 60  # asked for explicitly
    with pytest.raises(ConfigError, match="exceeds the checkpoint's max_len=64"):
        max_tokens(model, 65)
    rotary = tiny_model("transformer", position="rotary")
    assert max_tokens(rotary, None, trained_length=40) is None


def test_read_proteins_refuses_a_file_listed_twice(tmp_path):
    fasta = tmp_path / "a.fasta"
    fasta.write_text(">a\nMKV\n>b\nACD\n")
    assert [p.id for p in read_proteins(fasta, default_alphabet())] == ["a", "b"]
    with pytest.raises(ConfigError, match=r"fasta: .*a\.fasta is already listed"):
        read_proteins([fasta, tmp_path / "." / "a.fasta"], default_alphabet())


def test_a_uniprot_record_is_found_by_its_accession_or_entry_name(tmp_path) -> None:
    fasta = tmp_path / "u.fasta"
    fasta.write_text(
        ">sp|Q79PF4|KAIC_SYNE7 Circadian clock protein KaiC OS=...\nMKVLA\n"
        ">tr|A0A0K0|A0A0K0_9CYAN Uncharacterized\nACDEF\n>plain\nWYHHE\n"
    )
    for name in ("sp|Q79PF4|KAIC_SYNE7", "Q79PF4", "KAIC_SYNE7"):
        (protein,) = read_proteins(fasta, ALPHABET, ids=[name])
        assert protein.id == "sp|Q79PF4|KAIC_SYNE7"
    assert read_proteins(fasta, ALPHABET, ids=["A0A0K0"])[0].id == "tr|A0A0K0|A0A0K0_9CYAN"
    with pytest.raises(DataError, match="no record with id Q79PF5"):
        read_proteins(fasta, ALPHABET, ids=["Q79PF5"])
    twice = tmp_path / "twice.fasta"
    twice.write_text(">sp|P1|A_HUMAN\nMKV\n>tr|P1|B_MOUSE\nMKW\n")
    with pytest.raises(
        DataError,
        match=r"record id P1 names 2 records \(sp\|P1\|A_HUMAN in twice.fasta record 1; "
        r"tr\|P1\|B_MOUSE in twice.fasta record 2\); give the full id",
    ):
        read_proteins(twice, ALPHABET, ids=["P1"])
    with pytest.raises(DataError, match=r"only the first 1 records of each file were read"):
        read_proteins(twice, ALPHABET, ids=["B_MOUSE"], max_records=1)
    # an exact id wins over accessions and entry names (isoforms share an entry name)
    iso = tmp_path / "iso.fasta"
    iso.write_text(">sp|P1|ABC_HUMAN\nMKV\n>sp|P1-2|ABC_HUMAN\nMKW\n>ABC_HUMAN\nMKY\n")
    (exact,) = read_proteins(iso, ALPHABET, ids=["ABC_HUMAN"])
    assert exact.id == "ABC_HUMAN"
    assert read_proteins(iso, ALPHABET, ids=["P1-2"])[0].id == "sp|P1-2|ABC_HUMAN"


def test_layers_and_heads_come_in_the_order_asked_and_in_eval_mode() -> None:
    """The in-memory API returns what was listed, in that order (it once sorted and merged the
    selection without saying so), and never with dropout, whatever mode the model is in."""
    model = tiny_model("transformer")
    (protein,) = random_proteins(1, 20, seed=3)
    tokens = protein.tokens(ALPHABET)
    full = model(tokens, return_attentions=True)["attentions"]
    maps = attention_maps(model, protein, ALPHABET, layers=[1, 0], heads=[3, 0, 2])
    for i, layer in enumerate([1, 0]):
        for j, head in enumerate([3, 0, 2]):
            np.testing.assert_allclose(maps[i, j], full[layer][0, head, 1:-1, 1:-1], atol=1e-6)
    hidden = model(tokens, return_hidden=True)["hidden_states"]
    ((_, reps),) = representations(model, [protein], ALPHABET, repr_layers=[-1, 0])
    np.testing.assert_allclose(reps[0], model.norm(hidden[2])[0, 1:-1].detach(), atol=1e-5)
    np.testing.assert_allclose(reps[1], hidden[0][0, 1:-1].detach(), atol=1e-6)
    for call in (
        lambda: next(representations(model, [protein], ALPHABET, repr_layers=[2, 2])),
        lambda: attention_maps(model, protein, ALPHABET, layers=[0, 1, -1]),
    ):
        with pytest.raises(ConfigError, match="is selected twice"):
            call()
    # a model in training mode with dropout: the same numbers, and it stays in training mode
    noisy = tiny_model("performer_relu")
    noisy.config.dropout = 0.5
    for module in noisy.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.5
    reference = attention_maps(noisy, protein, ALPHABET)
    ((_, ref_reps),) = representations(noisy, [protein], ALPHABET)
    noisy.train()
    # the same calls as the reference (same shapes, same kernels): exactly its numbers
    np.testing.assert_array_equal(attention_maps(noisy, protein, ALPHABET), reference)
    ((_, reps),) = representations(noisy, [protein], ALPHABET)
    np.testing.assert_array_equal(reps, ref_reps)
    # rows in blocks of 8, not 256: other products, equal up to rounding
    blocks = list(extract_mod.attention_blocks(noisy, tokens, 1, 2, chunk_size=8))
    np.testing.assert_allclose(np.concatenate(blocks), reference[1, 2], **BLOCKING_TOL)
    assert noisy.training
    # between blocks the model is in whatever mode the caller put it in
    stream = extract_mod.attention_blocks(noisy.eval(), tokens, 1, 2, chunk_size=8)
    first = next(stream)
    noisy.train()
    second = next(stream)
    assert noisy.training
    both = np.concatenate([first, second])  # <cls> row left out of the first block
    np.testing.assert_allclose(both, reference[1, 2][: len(both)], **BLOCKING_TOL)


def test_sequence_strings_and_devices_are_taken_as_a_user_writes_them() -> None:
    from protein_performer.utils.devices import pick_device

    model = tiny_model("performer_relu")
    (protein,) = random_proteins(1, 20, seed=4)
    text = ALPHABET.decode(protein.residues)
    np.testing.assert_array_equal(
        attention_maps(model, text.lower(), ALPHABET), attention_maps(model, protein, ALPHABET)
    )
    ((named, reps),) = representations(model, text, ALPHABET, repr_layers=-1)
    ((_, expected),) = representations(model, [protein], ALPHABET)
    assert named.id == "seq0"
    np.testing.assert_array_equal(reps, expected)
    with pytest.raises(TypeError, match=r"expected a Protein .* or a sequence string, got int"):
        next(representations(model, [3], ALPHABET))
    assert pick_device(torch.device("cpu")) == torch.device("cpu")
    with pytest.raises(ConfigError, match="device must be auto, cpu, cuda or cuda:N"):
        pick_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="device=cuda:1 but no CUDA device"):
            pick_device("cuda:1")


def test_the_output_size_is_estimated_and_a_disk_too_small_is_warned_about(
    tmp_path, monkeypatch, capsys, caplog
) -> None:
    from collections import namedtuple

    model = tiny_model("performer_relu")
    proteins = random_proteins(3, 20, seed=2)
    fasta = tmp_path / "in.fasta"
    write_fasta(fasta, proteins)
    kw = dict(include=["attention", "per_tok", "mean"], layers=[1], progress=True)
    monkeypatch.setattr(extract_mod, "ANNOUNCE_BYTES", 1)
    extract(model, ALPHABET, fasta, tmp_path / "o", **kw)
    stored = 0
    for p in proteins:
        data = np.load(tmp_path / "o" / f"{p.id}.npz")
        stored += sum(data[k].nbytes for k in ("attention", "per_tok", "mean"))
    # 1 layer x 4 heads of 20 x 20, per_tok 1 x 20 x 32 and mean 1 x 32, float32, x 3
    assert stored == 3 * 4 * (4 * 400 + 20 * 32 + 32)
    spans = [slice(0, 20)] * 3
    assert extract_mod.output_bytes(spans, kw["include"], 4, 32, 4) == stored
    assert f"extract: writing about {stored / 1e3:.1f} kB for 3 records" in capsys.readouterr().err
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(extract_mod.shutil, "disk_usage", lambda _: usage(10, 10, stored - 1))
    with caplog.at_level("WARNING"):
        extract(model, ALPHABET, fasta, tmp_path / "o2", **kw)
    assert f"about {stored / 1e3:.1f} kB for 3 records (before compression" in caplog.text
    assert f"and {(stored - 1) / 1e3:.1f} kB are free in" in caplog.text
