from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protein_performer.data.alphabet import (
    ALPHABET_VERSION,
    STANDARD_AMINO_ACIDS,
    Alphabet,
    InvalidPolicy,
    InvalidResidueError,
    default_alphabet,
)
from protein_performer.errors import DataError

A = default_alphabet()
RESIDUES = STANDARD_AMINO_ACIDS + "XBZUO"


def test_layout_and_specials():
    assert A.tokens[:6] == ("<pad>", "<cls>", "<eos>", "<mask>", "<unk>", "<sep>")
    assert (A.pad_idx, A.cls_idx, A.eos_idx, A.mask_idx, A.unk_idx, A.sep_idx) == (0, 1, 2, 3, 4, 5)
    assert len(A) == 31
    assert [A.tokens[i] for i in A.standard_ids] == list(STANDARD_AMINO_ACIDS)
    assert "".join(A.tokens[i] for i in A.residue_ids) == RESIDUES
    assert A.special_mask(np.arange(len(A))).tolist() == [True] * 6 + [False] * 25


@given(st.text(alphabet=RESIDUES, min_size=0, max_size=200))
def test_round_trip(seq):
    ids = A.encode(seq)
    assert ids.dtype == np.uint8
    assert A.decode(ids) == seq


def test_lowercase_and_single_trailing_stop():
    assert A.decode(A.encode("mkVl*")) == "MKVL"
    with pytest.raises(InvalidResidueError, match=r"'\*' at position 3"):
        A.encode("MK**")  # only one trailing stop is stripped


@pytest.mark.parametrize(
    ("seq", "char", "pos"),
    [("MK-VL", "-", 3), ("MK.V", ".", 3), ("M1K", "1", 2), ("MK#", "#", 3), ("M*KV", "*", 2)],
)
def test_invalid_characters_error_names_file_record_position(seq, char, pos):
    with pytest.raises(InvalidResidueError) as ei:
        A.clean_encode(seq, "error", path="x.fa", record=7, record_id="sp|P1|A_B")
    msg = str(ei.value)
    assert msg.startswith("x.fa: record 7 (sp|P1|A_B): invalid residue")
    assert f"{char!r} at position {pos}" in msg
    assert "\n" not in msg


def test_skip_and_replace_policies():
    skipped = A.clean_encode("MK-V1", "skip")
    assert skipped.ids is None and skipped.invalid_chars == "-1" and skipped.n_replaced == 0
    rep = A.clean_encode("MK-V1", InvalidPolicy.REPLACE)
    assert A.decode(rep.ids) == "MKXVX" and rep.n_replaced == 2


def test_unknown_policy_lists_choices():
    with pytest.raises(ValueError, match="error, skip, replace"):
        InvalidPolicy.parse("ignore")


def test_versioned_serialisation_and_compatibility():
    d = A.to_dict()
    assert d["version"] == ALPHABET_VERSION
    assert Alphabet.from_dict(d) == A
    A.check_compatible(d)
    other = Alphabet(residues=STANDARD_AMINO_ACIDS, version="other-v0")
    with pytest.raises(DataError, match="other-v0"):
        A.check_compatible(other.to_dict())


def test_incompatible_alphabet_of_the_same_version_says_where_it_differs():
    swapped = A.residues[1] + A.residues[0] + A.residues[2:]
    same_version = Alphabet(residues=swapped, version=A.version)
    first = len(A.specials)
    with pytest.raises(
        DataError, match=f"token {first} is '{swapped[0]}' there, '{A.residues[0]}' here"
    ):
        A.check_compatible(same_version.to_dict())
    shorter = Alphabet(residues=A.residues[:-1], version=A.version)
    with pytest.raises(DataError, match=f"1 more token\\(s\\) here, from '{A.residues[-1]}'"):
        A.check_compatible(shorter.to_dict())


def test_non_ascii_counts_once_per_character():
    rep = A.clean_encode("MKéV\tL", "replace")
    assert A.decode(rep.ids) == "MKXVL" and rep.n_replaced == 1 and rep.invalid_chars == "é"
    with pytest.raises(InvalidResidueError, match="'é' at position 3"):
        A.encode("MKéV")
    # beyond Latin-1 (code points from 256): one unknown letter each, never an index error
    rep = A.clean_encode("MK€VĀ", "replace")
    assert (
        A.decode(rep.ids) == "MKXVX" and rep.n_replaced == 2 and set(rep.invalid_chars) == set("€Ā")
    )
    with pytest.raises(InvalidResidueError, match="'Ā' at position 2"):
        A.encode("MĀ")
