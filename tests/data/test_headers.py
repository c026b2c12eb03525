from __future__ import annotations

from protein_performer.data.headers import parse_header


def test_uniref_header():
    h = parse_header(
        "UniRef50_Q9K794 Putative AgrB-like protein n=2 Tax=Bacillus TaxID=1386 RepID=AGRB_BACHD"
    )
    assert h.kind == "uniref"
    assert h.id == h.cluster_id == "UniRef50_Q9K794"
    assert h.uniref_level == 50
    assert h.name == "Putative AgrB-like protein"
    assert (h.members, h.taxon, h.taxid, h.representative) == (2, "Bacillus", 1386, "AGRB_BACHD")
    assert h.split_key == "UniRef50_Q9K794"


def test_uniref_multiword_taxon_and_levels():
    h = parse_header(
        "UniRef90_A0A011 Cytochrome c n=12 Tax=Escherichia coli (strain K12) TaxID=83333 "
        "RepID=A0A011_ECOLI"
    )
    assert h.uniref_level == 90 and h.taxon == "Escherichia coli (strain K12)"
    assert h.taxid == 83333
    assert parse_header("UniRef100_P1 x n=1 Tax=a TaxID=1 RepID=P1").uniref_level == 100


def test_uniprotkb_header():
    h = parse_header(
        "sp|P00974|BPT1_BOVIN Pancreatic trypsin inhibitor OS=Bos taurus OX=9913 PE=1 SV=2"
    )
    assert h.kind == "uniprotkb"
    assert (h.db, h.accession, h.entry_name) == ("sp", "P00974", "BPT1_BOVIN")
    assert h.name == "Pancreatic trypsin inhibitor"
    assert (h.organism, h.organism_id, h.gene) == ("Bos taurus", 9913, None)
    assert (h.protein_existence, h.sequence_version) == (1, 2)
    # as JSON: the fields the header has, none it lacks (no gene here)
    d = h.to_dict()
    assert d["accession"] == "P00974" and d["organism_id"] == 9913 and d["kind"] == "uniprotkb"
    assert "gene" not in d and None not in d.values() and "" not in d.values()
    assert parse_header("P1").to_dict() == {"id": "P1", "kind": "generic"}  # no name either
    t = parse_header(
        "tr|A0A0|A0A0_ECOLI Some protein OS=Escherichia coli OX=83333 GN=yabC PE=4 SV=1"
    )
    assert t.db == "tr" and t.gene == "yabC" and t.organism == "Escherichia coli"


def test_a_tab_ends_the_id_as_a_space_does():
    """The record id (FastaRecord.id) ends at any whitespace: so must the parsed header's, or
    `data cluster` wrote ids with their descriptions that training could not match."""
    from protein_performer.data.fasta import FastaRecord

    title = "sp|P00974|BPT1_BOVIN\tPancreatic trypsin inhibitor OS=Bos taurus OX=9913 PE=1 SV=2"
    h = parse_header(title)
    assert h.kind == "uniprotkb" and h.accession == "P00974"
    assert h.id == FastaRecord(0, title, "").id == "sp|P00974|BPT1_BOVIN"
    assert h.name == "Pancreatic trypsin inhibitor" and h.organism_id == 9913


def test_isoforms_share_split_key():
    a = parse_header("sp|P12345|X_HUMAN Foo OS=Homo sapiens OX=9606 PE=1 SV=1")
    b = parse_header("sp|P12345-2|X_HUMAN Isoform 2 of Foo OS=Homo sapiens OX=9606")
    assert a.split_key == b.split_key == "P12345"


def test_generic_fallback():
    h = parse_header("P00974 some description with n=3 inside")
    assert h.kind == "generic" and h.id == "P00974"
    assert h.name == "some description with n=3 inside"
    assert h.split_key == "P00974"
    assert parse_header("UniRef50 not_an_id").kind == "generic"


def test_the_split_key_of_a_tab_header_is_the_one_it_always_was():
    """Parsing the id up to a tab changed the header's key: the hashed split key must not
    move (a run's held-out part, evaluate split= of its checkpoints)."""
    from protein_performer.data.fasta import FastaRecord
    from protein_performer.data.sources import split_key

    tab = FastaRecord(0, "sp|P00974-2|BPT1_BOVIN\tIsoform 2 of inhibitor OS=Bos taurus", "")
    assert split_key(tab, None) == "sp|P00974-2|BPT1_BOVIN\tIsoform"
    space = FastaRecord(1, "sp|P00974-2|BPT1_BOVIN Isoform 2 of inhibitor OS=Bos taurus", "")
    assert split_key(space, None) == "P00974"  # unchanged: the accession, isoforms together
