"""FASTA header parsing into metadata: UniRef50/90/100, UniProtKB and a generic fallback.

UniRef (UniProt help "fasta-headers")::

    >UniRef50_Q9K794 Putative AgrB-like protein n=2 Tax=Bacillus TaxID=1386 RepID=AGRB_BACHD

UniProtKB::

    >sp|P00974|BPT1_BOVIN Pancreatic trypsin inhibitor OS=Bos taurus OX=9913 GN=... PE=1 SV=2

Anything else: the first word is the id, the rest is the name.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

# UniRef50/90/100, and other identity levels written by `data cluster` (UniRef30_...)
_UNIREF_ID = re.compile(r"^(UniRef(?:\d{1,3}))_(\S+)$")
_UNIPROT_ID = re.compile(r"^(sp|tr)\|([^|\s]+)\|([^|\s]*)$")
_UNIREF_KEYS = ("n", "Tax", "TaxID", "RepID")
_UNIPROT_KEYS = ("OS", "OX", "GN", "PE", "SV")
_ISOFORM = re.compile(r"-\d+$")


@dataclass(frozen=True)
class HeaderInfo:
    """Metadata parsed from one FASTA title line (the text after ``>``)."""

    id: str
    kind: str  # "uniref" | "uniprotkb" | "generic"
    name: str = ""
    # UniRef
    cluster_id: str | None = None
    uniref_level: int | None = None
    members: int | None = None
    taxon: str | None = None
    taxid: int | None = None
    representative: str | None = None
    # UniProtKB
    db: str | None = None
    accession: str | None = None
    entry_name: str | None = None
    organism: str | None = None
    organism_id: int | None = None
    gene: str | None = None
    protein_existence: int | None = None
    sequence_version: int | None = None

    @property
    def split_key(self) -> str:
        """Key hashed for the train/val/test split.

        The UniRef cluster id when present; for UniProtKB the accession without an isoform
        suffix (so ``P12345-2`` lands in the same split as ``P12345``); else the id.
        """
        if self.cluster_id:
            return self.cluster_id
        if self.accession:
            return _ISOFORM.sub("", self.accession)
        return self.id

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != ""}


def _split_fields(rest: str, keys: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """Split ``"<name> K1=v1 K2=v two ..."`` into the name and a dict of key → value.

    Values may contain spaces (``Tax=Escherichia coli``); a value extends to the next known
    key. Unknown ``x=y`` words stay inside the value (or name) they appear in.
    """
    pattern = re.compile(r"(?:^|\s)(" + "|".join(map(re.escape, keys)) + r")=")
    matches = list(pattern.finditer(rest))
    if not matches:
        return rest.strip(), {}
    name = rest[: matches[0].start()].strip()
    fields: dict[str, str] = {}
    for m, nxt in zip(matches, [*matches[1:], None], strict=True):
        end = nxt.start() if nxt is not None else len(rest)
        fields.setdefault(m.group(1), rest[m.end() : end].strip())
    return name, fields


def _to_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def parse_header(title: str) -> HeaderInfo:
    """Parse a FASTA title (without ``>``) into :class:`HeaderInfo`. Never raises."""
    title = title.strip()
    # the id ends at the first whitespace of any kind (a tab too), as FastaRecord.id's does
    first, rest = ([*title.split(None, 1), "", ""])[:2]
    if not first:
        return HeaderInfo(id="", kind="generic", name=rest.strip())
    m = _UNIREF_ID.match(first)
    if m:
        name, f = _split_fields(rest, _UNIREF_KEYS)
        return HeaderInfo(
            id=first,
            kind="uniref",
            name=name,
            cluster_id=first,
            uniref_level=int(m.group(1)[len("UniRef") :]),
            members=_to_int(f.get("n")),
            taxon=f.get("Tax"),
            taxid=_to_int(f.get("TaxID")),
            representative=f.get("RepID"),
            accession=m.group(2),
        )
    m = _UNIPROT_ID.match(first)
    if m:
        name, f = _split_fields(rest, _UNIPROT_KEYS)
        return HeaderInfo(
            id=first,
            kind="uniprotkb",
            name=name,
            db=m.group(1),
            accession=m.group(2),
            entry_name=m.group(3) or None,
            organism=f.get("OS"),
            organism_id=_to_int(f.get("OX")),
            gene=f.get("GN"),
            protein_existence=_to_int(f.get("PE")),
            sequence_version=_to_int(f.get("SV")),
        )
    return HeaderInfo(id=first, kind="generic", name=rest.strip())
