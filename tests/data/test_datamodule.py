"""ProteinDataModule end to end: FlatSource, FASTA, shards, DDP shares, Lightning epochs."""

from __future__ import annotations

import re
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from lightning_fabric.utilities.data import _set_sampler_epoch

from protein_performer.data.alphabet import default_alphabet
from protein_performer.data.datamodule import ProteinDataModule
from protein_performer.data.datasets import CropDataset
from protein_performer.data.masking import IGNORE_INDEX
from protein_performer.data.sources import FlatSource
from protein_performer.errors import ConfigError, DataError

A = default_alphabet()
AA = "ACDEFGHIKLMNPQRSTVWY"
SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
ECOLI = SHARED / "uniprot_UP000000625_ecoli_k12.fasta"


def random_seqs(n: int, lo: int, hi: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    seqs = {"".join(rng.choice(list(AA), size=int(rng.integers(lo, hi + 1)))) for _ in range(n)}
    return sorted(seqs)  # unique, so every row can be traced back to its protein


def originals(batch) -> list[str]:
    """Undo MLM corruption (labels hold the original at selected positions); drop specials."""
    x, y, pad = batch["input_ids"], batch["labels"], batch["padding_mask"]
    orig = torch.where(y != IGNORE_INDEX, y, x)
    return [A.decode(orig[r][~pad[r]].numpy()) for r in range(x.shape[0])]


def check_contract(batch, toks_per_batch=None):
    x, y, pad = batch["input_ids"], batch["labels"], batch["padding_mask"]
    assert set(batch) == {"input_ids", "labels", "padding_mask"}
    assert x.dtype == torch.int64 and y.dtype == torch.int64 and pad.dtype == torch.bool
    assert x.ndim == 2 and x.shape == y.shape == pad.shape
    assert (x[pad] == A.pad_idx).all() and (y[pad] == IGNORE_INDEX).all()
    if toks_per_batch is not None and x.shape[0] > 1:
        assert x.numel() <= toks_per_batch


def write_fasta(path: Path, seqs: list[str]) -> Path:
    path.write_text(
        "".join(f">UniRef50_P{i:05d} protein {i} n=1\n{s}\n" for i, s in enumerate(seqs))
    )
    return path


# ---- from FlatSource --------------------------------------------------------------------------
def test_from_sources_train_epochs_and_fixed_validation():
    train_seqs, val_seqs = random_seqs(90, 5, 120, seed=1), random_seqs(30, 5, 120, seed=2)
    dm = ProteinDataModule(
        train_source=FlatSource.from_strings(train_seqs),
        val_source=FlatSource.from_strings(val_seqs),
        max_length=200,
        toks_per_batch=1000,
        seed=3,
    )
    assert dm.alphabet == A
    dm.setup("fit")
    train_dl, val_dl = dm.train_dataloader(), dm.val_dataloader()
    epochs = []
    for epoch in range(2):
        _set_sampler_epoch(train_dl, epoch)
        batches = list(train_dl)
        assert len(batches) == len(train_dl.batch_sampler)
        for b in batches:
            check_contract(b, 1000)
        got = [s for b in batches for s in originals(b)]
        assert Counter(got) == Counter(train_seqs), "each protein once per epoch"
        epochs.append(batches)
    assert [b["labels"].tolist() for b in epochs[0]] != [b["labels"].tolist() for b in epochs[1]]
    vals = []
    for epoch in (0, 5):
        _set_sampler_epoch(val_dl, epoch)
        vals.append(list(val_dl))
    assert len(vals[0]) == len(vals[1]) > 1
    for a, b in zip(*vals, strict=True):
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["labels"], b["labels"])
    assert Counter(s for b in vals[0] for s in originals(b)) == Counter(val_seqs)


def test_crop_mode_crops_long_proteins():
    seqs = random_seqs(10, 300, 400, seed=4)
    dm = ProteinDataModule(
        train_source=FlatSource.from_strings(seqs), max_length=64, toks_per_batch=256
    )
    batches = list(dm.train_dataloader())  # setup on demand
    rows = [s for b in batches for s in originals(b)]
    assert len(rows) == 10
    for b in batches:
        assert b["input_ids"].shape[1] == 64
        assert (b["input_ids"][:, 0] == A.cls_idx).all() and (
            b["input_ids"][:, -1] == A.eos_idx
        ).all()
    for r in rows:
        assert len(r) == 62 and any(r in s for s in seqs)


def test_concat_mode_windows_and_causal_objective():
    seqs = random_seqs(60, 20, 80, seed=5)
    src = FlatSource.from_strings(seqs)
    dm = ProteinDataModule(
        train_source=src, mode="concat", objective="causal", max_length=128, toks_per_batch=512
    )
    assert dm.max_length == 128
    dm.setup("fit")
    ds = dm.datasets["train"]
    total = sum(len(s) + 1 for s in seqs)
    assert len(ds) == total // 128 and ds.dropped_tokens == total % 128
    batches = list(dm.train_dataloader())
    assert [b["input_ids"].shape for b in batches[:-1]] == [(4, 128)] * (len(batches) - 1)
    assert sum(b["input_ids"].shape[0] for b in batches) == len(ds)
    for b in batches:
        check_contract(b)
        assert not b["padding_mask"].any()
        assert torch.equal(b["labels"], b["input_ids"])  # causal: unshifted copy
    n_sep = sum(int((b["input_ids"] == A.sep_idx).sum()) for b in batches)
    assert len(seqs) - 2 <= n_sep <= len(seqs)
    assert ProteinDataModule(train_source=src, mode="concat").max_length == 8192


def test_concat_mode_evaluation_scores_every_token():
    seqs = random_seqs(30, 20, 80, seed=6)
    src = FlatSource.from_strings(seqs)
    dm = ProteinDataModule(
        train_source=src,
        val_source=src,
        mode="concat",
        objective="causal",
        max_length=128,
        toks_per_batch=512,
    )
    dm.setup("validate")
    total = sum(len(s) + 1 for s in seqs)
    assert total % 128  # the stream does not end on a window boundary
    batches = list(dm.val_dataloader())
    scored = sum(int((b["labels"] != -100).sum()) for b in batches)
    assert scored == total  # the shorter last window is padded, not dropped
    assert sum(b["input_ids"].shape[0] for b in batches) == -(-total // 128)


def test_ddp_shares_from_trainer_are_disjoint_and_equal():
    seqs = random_seqs(101, 5, 150, seed=6)
    src = FlatSource.from_strings(seqs)
    for world in (2, 3):
        shares = []
        for rank in range(world):
            dm = ProteinDataModule(train_source=src, max_length=200, toks_per_batch=600)
            dm.trainer = SimpleNamespace(
                global_rank=rank,
                world_size=world,
                _accelerator_connector=SimpleNamespace(use_distributed_sampler=False),
            )
            dl = dm.train_dataloader()
            _set_sampler_epoch(dl, 1)
            shares.append(list(dl))
        assert len({len(s) for s in shares}) == 1
        rows = Counter(r for share in shares for b in share for r in originals(b))
        assert set(rows) == set(seqs)
        n_pad = dl.batch_sampler.num_padding_batches
        assert sum(rows.values()) - len(seqs) <= n_pad * 600  # only repeated batches add rows
        if n_pad == 0:
            assert all(c == 1 for c in rows.values())


def test_ddp_requires_use_distributed_sampler_false():
    dm = ProteinDataModule(train_source=FlatSource.from_strings(["ACD"]))
    dm.trainer = SimpleNamespace(
        global_rank=0,
        world_size=2,
        _accelerator_connector=SimpleNamespace(use_distributed_sampler=True),
    )
    with pytest.raises(ConfigError, match="use_distributed_sampler=False"):
        dm.train_dataloader()
    dm.trainer = None
    assert dm.distributed_info() == (0, 1)


# ---- from FASTA / shards ----------------------------------------------------------------------
def test_fasta_hash_split_end_to_end(tmp_path):
    seqs = random_seqs(200, 5, 60, seed=7)
    fasta = write_fasta(tmp_path / "p.fa", seqs)
    dm = ProteinDataModule(
        files=[str(fasta)], split_fractions=(0.7, 0.15, 0.15), toks_per_batch=500, num_workers=2
    )
    dm.setup(None)
    got = {}
    for split, loader in (
        ("train", dm.train_dataloader),
        ("val", dm.val_dataloader),
        ("test", dm.test_dataloader),
    ):
        batches = list(loader())
        for b in batches:
            check_contract(b, 500)
        got[split] = [s for b in batches for s in originals(b)]
        assert len(got[split]) == len(set(got[split])) > 0
    assert sum(len(v) for v in got.values()) == 200
    assert set(got["train"]) | set(got["val"]) | set(got["test"]) == set(seqs)
    assert len(got["train"]) > len(got["val"])


def test_explicit_split_files_and_max_records(tmp_path):
    train = write_fasta(tmp_path / "train.fa", random_seqs(50, 5, 40, seed=8))
    val_seqs = random_seqs(20, 5, 40, seed=9)
    val = write_fasta(tmp_path / "val.fa", val_seqs)
    dm = ProteinDataModule(files=str(train), val_files=[val], max_records=30, val_max_records=12)
    dm.setup("fit")
    assert len(dm.datasets["train"]) == 30 and len(dm.datasets["val"]) == 12
    rows = [s for b in dm.val_dataloader() for s in originals(b)]
    assert sorted(rows) == sorted(val_seqs[:12])
    with pytest.raises(ConfigError, match="no test data"):
        dm.test_dataloader()


def test_held_out_files_identical_to_training_records_are_named(tmp_path, caplog):
    seqs = random_seqs(30, 5, 40, seed=8)
    train = write_fasta(tmp_path / "train.fa", seqs)
    (tmp_path / "val.fa").write_text(
        f">V1\n{seqs[3]}\n>V2\nMKVLAYYWWW\n>V3\n{seqs[7]}\n"  # two copied, under new ids
    )
    test = write_fasta(tmp_path / "test.fa", random_seqs(10, 50, 60, seed=9))
    dm = ProteinDataModule(files=[train], val_files=[tmp_path / "val.fa"], test_files=[test])
    with caplog.at_level("WARNING"):
        dm.setup("fit")
        dm.setup("test")
        dm.setup(None)  # once per split
    said = [r.getMessage() for r in caplog.records if "held out" in r.getMessage()]
    assert said == [
        "2 of 3 val records are identical to a training sequence (e.g. V1): their metrics are "
        "not held out"
    ]


def test_a_hash_split_says_when_held_out_records_copy_training_ones(tmp_path, caplog):
    """Two strains give the same protein two ids: a split by record puts copies on both sides
    (9% of the 14 proteomes' val/test); said, and not for a split by cluster."""
    seqs = random_seqs(200, 20, 40, seed=3)
    body = "".join(f">a{i}\n{s}\n>b{i}\n{s}\n" for i, s in enumerate(seqs))  # every one twice
    (tmp_path / "two.fa").write_text(body)
    dm = ProteinDataModule(files=[tmp_path / "two.fa"], split_fractions=[0.8, 0.2, 0.0])
    with caplog.at_level("WARNING"):
        dm.setup("fit")
    (said,) = [r.getMessage() for r in caplog.records if "held out" in r.getMessage()]
    assert re.match(
        r"\d+ of \d+ val records are identical to a training sequence .* not held out "
        r"\(data.split_by=cluster keeps such copies on one side\)",
        said,
    )
    caplog.clear()
    table = {f"{p}{i}": f"c{i}" for i in range(len(seqs)) for p in "ab"}
    by_cluster = ProteinDataModule(
        files=[tmp_path / "two.fa"], split_fractions=[0.8, 0.2, 0.0], clusters=table,
        split_by="cluster",
    )  # fmt: skip
    with caplog.at_level("WARNING"):
        by_cluster.setup("fit")
    assert "held out" not in caplog.text


def test_repeated_training_ids_are_named(tmp_path, caplog):
    seqs = random_seqs(12, 5, 40, seed=8)
    a = write_fasta(tmp_path / "a.fa", seqs)
    b = write_fasta(tmp_path / "b.fa", seqs[:4])
    dm = ProteinDataModule(files=[a, b], split_fractions=[1.0, 0.0, 0.0])
    with caplog.at_level("WARNING"):
        dm.setup("fit")
    said = [r.getMessage() for r in caplog.records if "repeat" in r.getMessage()]
    assert said == [
        "4 of 16 training records repeat an earlier record's id (UniRef50_P00000): the same "
        "protein given twice?"
    ]


def test_test_files_only_for_evaluation(tmp_path):
    seqs = random_seqs(40, 5, 300, seed=10)
    fasta = write_fasta(tmp_path / "eval.fa", seqs)
    dm = ProteinDataModule(test_files=[fasta], max_length=128, toks_per_batch=1024)
    dm.setup("test")
    runs = [list(dm.test_dataloader()) for _ in range(2)]
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["labels"], b["labels"])
    rows = [s for b in runs[0] for s in originals(b)]
    assert len(rows) == 40 and all(any(r in s for s in seqs) for r in rows)
    assert len(list(dm.predict_dataloader())) == len(runs[0])
    with pytest.raises(ConfigError, match="no train data"):
        dm.setup("fit")
    assert dm.val_dataloader() == []


def test_shards_match_fasta_split(tmp_path):
    from protein_performer.data.shards import preprocess

    seqs = random_seqs(150, 5, 60, seed=11)
    fasta = write_fasta(tmp_path / "p.fa", seqs)
    preprocess([fasta], tmp_path / "shards", seed=2, progress=False)
    from_shards = ProteinDataModule(shards=tmp_path / "shards", files=["ignored.fa"])
    from_files = ProteinDataModule(files=[fasta], split_seed=2)
    for split in ("train", "val", "test"):
        from_shards.setup(None)
        from_files.setup(None)
        a, b = from_shards.datasets[split], from_files.datasets[split]
        assert [a[(i, 0)]["tokens"].tolist() for i in range(len(a))] == [
            b[(i, 0)]["tokens"].tolist() for i in range(len(b))
        ]


def test_invalid_residue_policy_is_passed_through(tmp_path):
    fasta = tmp_path / "bad.fa"
    fasta.write_text(">a\nMKV\n>b\nMK1V\n>c\nACD\n")
    with pytest.raises(DataError, match="invalid residue"):
        ProteinDataModule(test_files=[fasta]).setup("test")
    dm = ProteinDataModule(test_files=[fasta], invalid="skip")
    dm.setup("test")
    assert len(dm.datasets["test"]) == 2


@pytest.mark.realdata
def test_real_proteome_evaluation_batches():
    if not ECOLI.exists():
        pytest.skip(f"{ECOLI} not available")
    dm = ProteinDataModule(test_files=[ECOLI], val_max_records=300, toks_per_batch=8192)
    batches = list(dm.test_dataloader())
    assert sum(b["input_ids"].shape[0] for b in batches) == 300
    for b in batches:
        check_contract(b, 8192)
        assert b["input_ids"].shape[1] <= 1024
    from protein_performer.data.sources import load_fasta_source

    proteins = [A.decode(p) for p in load_fasta_source(ECOLI, max_records=300)]
    rows = [r for b in batches for r in originals(b)]
    assert sorted(r for r in rows if len(r) < 1022) == sorted(p for p in proteins if len(p) < 1022)
    long = [p for p in proteins if len(p) >= 1022]
    cropped = [r for r in rows if len(r) == 1022]
    assert len(cropped) == len(long) > 0
    assert all(any(r in p for p in long) for r in cropped)


# ---- argument validation ----------------------------------------------------------------------
SRC = FlatSource.from_strings(["ACDE"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"objective": "bert"}, "objective='bert' is not valid; choose one of: mlm, causal"),
        ({"mode": "pack"}, "mode='pack' is not valid; choose one of: crop, concat"),
        ({"invalid": "drop"}, "invalid='drop' is not valid; choose one of: error, skip, replace"),
        ({"max_length": 2}, "max_length must be an integer >= 3"),
        ({"max_length": 1, "mode": "concat"}, "max_length must be an integer >= 2"),
        ({"toks_per_batch": 0}, "toks_per_batch"),
        ({"batch_size": 0}, "batch_size"),
        ({"mask_prob": 1.5}, "mask_prob"),
        ({"num_workers": -1}, "num_workers"),
        ({"max_records": 0}, "max_records"),
        ({"split_fractions": (0.5, 0.5, 0.5)}, "split_fractions"),
        ({"seed": "x"}, "seed"),
        ({"train_source": None}, "no data"),
        ({"train_source": ["ACD"]}, "train_source must be a FlatSource"),
    ],
)
def test_bad_arguments_raise_config_error(kwargs, message):
    args = {"train_source": SRC} | kwargs
    with pytest.raises(ConfigError, match=message) as exc:
        ProteinDataModule(**args)
    assert "\n" not in str(exc.value)


def test_bad_stage_and_empty_training_set():
    dm = ProteinDataModule(train_source=SRC)
    with pytest.raises(ConfigError, match="stage"):
        dm.setup("train")
    dm = ProteinDataModule(train_source=SRC, mode="concat", max_length=64)
    with pytest.raises(ConfigError, match="training set is empty"):
        dm.setup("fit")


# ---- with a real Lightning Trainer ------------------------------------------------------------
class Recorder(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(len(A), 8)
        self.head = torch.nn.Linear(8, len(A))
        self.seen: dict[str, dict[int, list]] = {
            "train": defaultdict(list),
            "val": defaultdict(list),
        }

    def _loss(self, batch):
        logits = self.head(self.emb(batch["input_ids"]))
        return F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)

    def training_step(self, batch, batch_idx):
        self.seen["train"][self.current_epoch].append({k: v.clone() for k, v in batch.items()})
        return self._loss(batch)

    def validation_step(self, batch, batch_idx):
        self.seen["val"][self.current_epoch].append({k: v.clone() for k, v in batch.items()})
        self.log("val_loss", self._loss(batch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_lightning_trainer_sets_epochs():
    train_seqs, val_seqs = random_seqs(60, 5, 80, seed=12), random_seqs(20, 5, 80, seed=13)
    dm = ProteinDataModule(
        train_source=FlatSource.from_strings(train_seqs),
        val_source=FlatSource.from_strings(val_seqs),
        toks_per_batch=600,
    )
    model = Recorder()
    trainer = pl.Trainer(
        max_epochs=3,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, datamodule=dm)
    train, val = model.seen["train"], model.seen["val"]
    assert sorted(train) == sorted(val) == [0, 1, 2]
    for e in range(3):
        assert Counter(s for b in train[e] for s in originals(b)) == Counter(train_seqs)
        assert Counter(s for b in val[e] for s in originals(b)) == Counter(val_seqs)
        for a, b in zip(val[0], val[e], strict=True):
            assert torch.equal(a["labels"], b["labels"])
    # Lightning reached the batch sampler's set_epoch: epochs differ, and match a fresh loader
    assert [b["labels"].tolist() for b in train[0]] != [b["labels"].tolist() for b in train[1]]
    fresh = dm.train_dataloader()
    _set_sampler_epoch(fresh, 2)
    for a, b in zip(train[2], fresh, strict=True):
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["labels"], b["labels"])


class Predictor(Recorder):
    def predict_step(self, batch, batch_idx):
        return originals(batch)


def test_lightning_predict_over_test_split():
    seqs = random_seqs(30, 5, 60, seed=14)
    dm = ProteinDataModule(test_source=FlatSource.from_strings(seqs), toks_per_batch=400)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        use_distributed_sampler=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = trainer.predict(Predictor(), datamodule=dm)
    assert sorted(r for rows in out for r in rows) == sorted(seqs)


def test_rank_from_torch_distributed(monkeypatch):
    monkeypatch.setattr(torch.distributed, "is_available", lambda: True)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: 1)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 3)
    dm = ProteinDataModule(train_source=FlatSource.from_strings(random_seqs(40, 5, 30)))
    assert dm.distributed_info() == (1, 3)
    sampler = dm.train_dataloader().batch_sampler
    assert (sampler.rank, sampler.world_size) == (1, 3)


def test_fixed_batch_size_in_crop_mode():
    seqs = random_seqs(25, 5, 60, seed=15)
    dm = ProteinDataModule(train_source=FlatSource.from_strings(seqs), batch_size=4)
    batches = list(dm.train_dataloader())
    assert [b["input_ids"].shape[0] for b in batches] == [4] * 6 + [1]
    assert Counter(r for b in batches for r in originals(b)) == Counter(seqs)


def test_only_training_scores_batches_repeated_for_ddp():
    src = FlatSource.from_strings(random_seqs(20, 5, 40, seed=21))
    dm = ProteinDataModule(train_source=src, val_source=src, test_source=src, toks_per_batch=200)
    dm.setup()
    assert dm.batch_sampler("train").score_repeats
    assert not dm.batch_sampler("val").score_repeats
    assert not dm.batch_sampler("test").score_repeats


# ---- family packing ---------------------------------------------------------------------------
def test_family_packing_on_the_embedded_sample_fills_windows_by_family():
    root = Path(__file__).resolve().parents[2] / "data"
    dm = ProteinDataModule(
        files=[root / "simulated_families.fasta.gz"],
        clusters=root / "simulated_families.members.tsv",
        mode="concat",
        packing="family",
        max_length=2048,
        batch_size=2,
        max_records=600,
    )
    dm.setup("fit")
    ds = dm.datasets["train"]
    src = ds.source
    family = [rid.split("_")[1][:9] for rid in src.ids]  # UniRef50_SIMF00012M003 -> SIMF00012
    order = ds.order(0)
    fams = [family[int(r)] for r in order]
    # the stream visits each family once: its members are back to back
    starts = [f for i, f in enumerate(fams) if i == 0 or fams[i - 1] != f]
    assert len(starts) == len(set(fams)) > 10
    batch = next(iter(dm.train_dataloader()))
    check_contract(batch)
    assert batch["input_ids"].shape == (2, 2048)
    with pytest.raises(ConfigError, match="packing=family needs mode=concat"):
        ProteinDataModule(files=[root / "x.fa"], packing="family", clusters="c.tsv")
    with pytest.raises(ConfigError, match="packing=family needs clusters"):
        ProteinDataModule(files=[root / "x.fa"], packing="family", mode="concat")
    with pytest.raises(ConfigError, match="packing='families' is not valid; choose one of"):
        ProteinDataModule(files=[root / "x.fa"], packing="families", mode="concat")


def test_min_members_keeps_only_families_that_size_in_training_windows():
    # families: a (3 members), b (1), c (2), d (1); records in a scattered order
    ids = ["a1", "b1", "c1", "a2", "d1", "a3", "c2"]
    seqs = random_seqs(len(ids), 20, 40, seed=31)
    table = {rid: rid[0] for rid in ids}
    src = FlatSource.from_strings(seqs, ids)
    kw = dict(clusters=table, mode="concat", packing="family", max_length=16, batch_size=1)
    dm = ProteinDataModule(train_source=src, val_source=src, min_members=2, **kw)
    dm.setup("fit")
    train, val = dm.datasets["train"], dm.datasets["val"]
    assert sorted(train.source.ids) == ["a1", "a2", "a3", "c1", "c2"]
    for i, rid in enumerate(train.source.ids):  # residues travel with their record
        assert np.array_equal(train.source[i], src[ids.index(rid)])
    assert len(val.source) == len(ids)  # evaluation splits keep every record
    for epoch in range(3):  # families stay together in every epoch's stream
        fam = [train.source.ids[int(r)][0] for r in train.order(epoch)]
        assert fam in (list("aaacc"), list("ccaaa"))
    kept = sum(len(s) + 1 for s, rid in zip(seqs, ids, strict=True) if rid[0] in "ac")
    assert train.total_tokens == kept
    # what was left out and how the windows were packed is said (the run's header prints it)
    residues = sum(len(s) for s, rid in zip(seqs, ids, strict=True) if rid[0] in "ac")
    total = sum(len(s) for s in seqs)
    notes = dm.notes["train"]
    assert notes[0] == (
        f"min_members=2 keeps 2 of 4 clusters (5 of 7 proteins, {residues} of {total} residues)"
    )
    assert notes[1].startswith(f"family packing of 2 clusters: 5 proteins -> {len(train)} windows")
    assert dm.notes["val"][0].startswith("family packing of 4 clusters: 7 proteins")
    # degenerate family packing is said: singletons only; a spread beyond the clusters
    singles = ProteinDataModule(
        train_source=src, **{**kw, "clusters": {rid: rid for rid in ids}}, family_spread=9
    )
    singles.setup("fit")
    assert singles.notes["train"][:2] == [
        "every cluster here has one member: family packing is stream packing (no protein has "
        "a homolog in its window)",
        "family_spread=9 is more than the 7 clusters: all of them are interleaved",
    ]
    # a cap on the records read cuts families where it falls: said
    capped = ProteinDataModule(train_source=src, max_records=4, **kw)
    capped.setup("fit")
    assert capped.notes["train"][0] == (
        "data.max_records=4: 2 of 3 clusters have members in the table that are not here "
        "(after the cap, in another split, or in files not given)"
    )
    with pytest.raises(ConfigError, match="no cluster of the training split"):
        dm4 = ProteinDataModule(train_source=src, min_members=4, **kw)
        dm4.setup("fit")
    copy = ProteinDataModule(
        train_source=src, val_source=src, mode="concat", packing="copy", max_length=16
    )
    copy.setup("fit")
    assert copy.datasets["train"].repeat == 2 and copy.datasets["val"].repeat == 1
    assert copy.datasets["train"].total_tokens == 2 * copy.datasets["val"].total_tokens
    with pytest.raises(ConfigError, match="packing=copy needs mode=concat"):
        ProteinDataModule(train_source=src, packing="copy")
    with pytest.raises(ConfigError, match="min_members > 1 needs packing=family or pairs"):
        ProteinDataModule(train_source=src, min_members=2, mode="concat")
    with pytest.raises(ConfigError, match="min_members"):
        ProteinDataModule(train_source=src, min_members=0, **kw)
    # family_spread interleaves the two families kept: a c a c a (or c a c a a)
    spread = ProteinDataModule(
        train_source=src, val_source=src, min_members=2, family_spread=2, **kw
    )
    spread.setup("fit")
    fam = [
        spread.datasets["train"].source.ids[int(r)][0] for r in spread.datasets["train"].order(0)
    ]
    assert fam in (list("acaca"), list("cacaa"))
    assert spread.datasets["val"].spread == 2
    with pytest.raises(ConfigError, match="family_spread > 1 needs packing=family"):
        ProteinDataModule(train_source=src, family_spread=2, mode="concat")


def test_pairs_packing_trains_on_pairs_and_evaluates_single_proteins():
    ids = ["a1", "b1", "c1", "a2", "d1", "a3", "c2"]
    seqs = random_seqs(len(ids), 20, 200, seed=32)
    table = {rid: rid[0] for rid in ids}
    src = FlatSource.from_strings(seqs, ids)
    kw = dict(clusters=table, packing="pairs", max_length=96, batch_size=3)
    dm = ProteinDataModule(train_source=src, val_source=src, min_members=2, **kw)
    dm.setup("fit")
    train, val = dm.datasets["train"], dm.datasets["val"]
    assert type(val) is CropDataset and len(val) == len(ids)  # evaluation: one protein a row
    assert sorted(train.source.ids) == ["a1", "a2", "a3", "c1", "c2"]
    for index, rid in enumerate(train.source.ids):
        partner = train.source.ids[train.partner(index, 0)]
        assert partner != rid and partner[0] == rid[0]
    batch = next(iter(dm.train_dataloader()))
    check_contract(batch)
    x = batch["input_ids"]
    assert ((x == dm.alphabet.sep_idx).sum(1) == 1).all()  # one partner before each protein
    labelled = batch["labels"] != IGNORE_INDEX
    assert labelled[x == dm.alphabet.sep_idx].sum() == 0
    sep_at = (x == dm.alphabet.sep_idx).int().argmax(1)
    cols = torch.arange(x.shape[1])
    assert (labelled & (cols[None] < sep_at[:, None])).any()  # "all": partners masked too
    only = ProteinDataModule(train_source=src, min_members=2, pair_mask="protein", **kw)
    only.setup("fit")
    for b in only.train_dataloader():  # every batch of the epoch
        sep_at = (b["input_ids"] == only.alphabet.sep_idx).int().argmax(1)
        labelled = b["labels"] != IGNORE_INDEX
        pos = torch.arange(b["input_ids"].shape[1])
        assert not (labelled & (pos[None] <= sep_at[:, None])).any()  # partner left whole
        assert labelled.sum(1).min() >= 1
    copy = ProteinDataModule(train_source=src, pair_copy=1.0, **kw)
    copy.setup("fit")
    ds = copy.datasets["train"]
    assert all(ds.partner(i, e) == i for i in range(len(ids)) for e in range(3))
    lone = ProteinDataModule(train_source=src, pair_alone=1.0, pair_mask="protein", **kw)
    lone.setup("fit")
    for b in lone.train_dataloader():  # no partner: every row is one protein, all of it scored
        assert not (b["input_ids"] == lone.alphabet.sep_idx).any()
        assert (b["labels"] != IGNORE_INDEX).sum(1).min() >= 1
    fill_kw = kw | dict(max_length=1024, pair_fill=True, pair_mask="protein")
    filled = ProteinDataModule(train_source=src, min_members=2, **fill_kw)
    filled.setup("fit")
    b = next(iter(filled.train_dataloader()))  # partner (<= 200) and protein, then fill
    assert b["input_ids"].shape[1] > 1000
    assert ((b["input_ids"] == filled.alphabet.sep_idx).sum(1) >= 2).all()
    with pytest.raises(ConfigError, match="pair_fill needs packing=pairs"):
        ProteinDataModule(train_source=src, clusters=table, pair_fill=True)
    for bad, match in [
        (dict(mode="concat"), "packing=pairs needs mode=crop"),
        (dict(sample="cluster"), "needs sample=record and crop=random"),
        (dict(crop="sliding"), "needs sample=record and crop=random"),
        (dict(pair_copy=-0.1), "pair_copy must be a number from 0 to 1"),
        (dict(pair_alone=True), "pair_alone must be a number from 0 to 1"),
        (dict(pair_alone=1.5), "pair_alone must be a number from 0 to 1"),
        (dict(pair_mask="partner"), "pair_mask='partner' is not valid"),
    ]:
        with pytest.raises(ConfigError, match=match):
            ProteinDataModule(train_source=src, **(kw | bad))
    with pytest.raises(ConfigError, match="packing=pairs needs clusters"):
        ProteinDataModule(train_source=src, packing="pairs")
    several = ProteinDataModule(
        train_source=src, min_members=2, pair_partners=2, **(kw | dict(max_length=512))
    )
    several.setup("fit")
    assert several.datasets["train"].max_partners == 2
    seps = [
        int(n)
        for b in several.train_dataloader()
        for n in (b["input_ids"] == several.alphabet.sep_idx).sum(1)
    ]
    assert set(seps) <= {1, 2} and 2 in seps  # cluster a has 2 others: 1 or 2 before a1
    with pytest.raises(ConfigError, match="pair_partners needs packing=pairs"):
        ProteinDataModule(train_source=src, clusters=table, pair_partners=2)


def test_more_workers_than_cpus_are_capped_with_one_warning(monkeypatch, caplog):
    monkeypatch.setattr("os.sched_getaffinity", lambda _: {0, 1}, raising=False)
    with caplog.at_level("WARNING"):
        dm = ProteinDataModule(files=["x.fa"], num_workers=64)
    assert dm.num_workers == 2
    assert "num_workers=64 but 2 CPUs are usable: using 2 data-loading workers" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert ProteinDataModule(files=["x.fa"], num_workers=2).num_workers == 2
    assert not caplog.text


def test_keep_records_rebuilds_a_split_from_some_of_its_records(tmp_path):
    """evaluate context=: the split scored as the records given only, in source order; long
    ones cut into windows again (crop=sliding), copies of training records renumbered."""
    seqs = random_seqs(12, 5, 30, seed=4)
    dm = ProteinDataModule(
        files=[write_fasta(tmp_path / "a.fa", seqs)], split_fractions=(0.5, 0.0, 0.5),
        max_length=12, crop="sliding", find_copies=True,
    )  # fmt: skip
    dm.setup("test")
    whole = dm._load_source("test")
    assert len(whole) > 2 and dm.windows["test"][0] == len(whole)
    dm.copies["test"] = (np.array([0, 2]), whole)  # as if records 0 and 2 were copies
    dm.keep_records("test", [2, 1], whole)
    ds = dm.datasets["test"]
    pieces = [A.decode(np.asarray(ds.source[i])) for i in range(len(ds.source))]
    assert "".join(pieces) == "".join(A.decode(np.asarray(whole[i])) for i in (1, 2))
    assert dm.windows["test"][0] == 2 and max(len(p) for p in pieces) <= 10
    shared, kept = dm.copies["test"]
    assert shared.tolist() == [1] and len(kept) == 2  # record 2 is the second one kept
    dm.keep_records("test", range(len(ds.source)))  # all of the split: left as it is
    assert dm.datasets["test"] is ds
