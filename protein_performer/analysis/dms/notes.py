"""What ``score context=`` says of the homologs it read and of the windows it scored them in:
the printed notes and their part of the JSON summary."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from protein_performer.analysis.dms.homologs import (
    CONTEXT_COLUMN,
    DEFAULT_SAMPLING,
    PSSM_COLUMN,
    RETRIEVAL_COLUMN,
    ScanContext,
)
from protein_performer.data.search import search_rounds

#: Fewer homologs than this from a sequence search: profile rounds are suggested.
FEW_HOMOLOGS = 5


def context_notes(context: ScanContext, summary: dict[str, Any], causal: bool) -> str:
    """What the printed result says of the homologs, and their part of ``summary``."""
    used = context.used
    aligned = context.msa is not None
    summary["context"] = {
        "path": context.path,
        "records_read": context.read,
        "homologs": len(context.homologs),
        "homologs_used": len(used),
        "identical_to_wild_type_left_out": context.identical,
        "other_queries_left_out": context.other_queries,
        "beyond_context_max_homologs_left_out": context.beyond_max,
        "profile": context.pssm.params,
        **context.info,
    }
    if not aligned:  # an alignment's thousands of rows stay out of the summary
        summary["context"]["homolog_alignments"] = [
            {"id": h.id, **i} for h, i in zip(context.homologs, context.pssm.homologs, strict=True)
        ]
    if aligned:
        notes = context.info["alignment"]
        text = (
            f"\n  context: {notes['format']} alignment {context.path}: {notes['records_read']:,} "
            f"records, query {notes['query']}"
            + (
                f" (record {notes['query_record']}: record 1, {notes.get('record_1', '')}, is not "
                f"the wild type: {notes.get('record_1_differs', '')}; it is read as a homolog)"
                if notes.get("query_record", 1) != 1
                else ""
            )
            + (
                f" (its name's /{ignored} does not match the wild type: placed by its residues)"
                if (ignored := notes.get("query_range_in_name_ignored"))
                else ""
            )
            + (
                f", its residues {inside} = wild-type residues "
                if (inside := notes.get("query_residues_read"))
                else " = wild-type residues "
            )
            + f"{notes['wild_type_residues_covered']} ({notes['columns']:,} columns"
            + (
                f"; {odd:,} {'letter' if odd == 1 else 'letters'} other than the 20 amino "
                "acids in them read as gaps"
                if (odd := notes.get("other_letters_read_as_gaps"))
                else ""
            )
            + "); "
            f"{len(used):,} homologs used, Neff {notes['neff']:,.1f}"
            + (" with the query" if context.pssm.params.get("include_query") else "")
            + " (weights 1 / neighbours at >= 80 % identity"
            + (
                f", counted among {notes['weights_estimated_from']:,} rows drawn at random"
                if "weights_estimated_from" in notes
                else ""
            )
            + f"); left out: {_left_out(notes, context.beyond_max)}; profile "
            f"column {PSSM_COLUMN} (bits)"
        )
    else:
        text = (
            f"\n  context: {len(used):,} of the {len(context.homologs):,} homologs in "
            f"{context.path} align to the wild type above chance: PSSM column {PSSM_COLUMN} (bits)"
        )
    if "read_seconds" in context.info:  # a deep alignment's weights take longer than scoring
        text += f"; read in {context.info['read_seconds']:.1f} s"
    if outside := context.info.get("mutants_outside_columns"):
        text += (
            f"; {outside:,} mutants at residues outside its columns (there the profile holds "
            "the wild type alone)"
        )
    if causal:
        text += (
            "; the model's score with homologs is a masked LM's (masked marginals): this "
            "checkpoint is causal, so the profile is the only homolog column"
        )
    else:
        text += _windows_note(context.info, len(context.used))
    if not aligned and context.identical:
        text += f" ({context.identical:,} identical to the wild type left out)"
    if not aligned and context.beyond_max:
        text += (
            f"; {context.beyond_max:,} more left out by context_max_homologs "
            f"(the first {len(context.homologs):,} in the file are used)"
        )
    return text + _few_homologs_hint(context)


def _few_homologs_hint(context: ScanContext) -> str:
    """A pointer to profile rounds when FASTA hits gave fewer than :data:`FEW_HOMOLOGS`
    homologs and were not found in such rounds (nor cut to that number by the user)."""
    n = len(context.used)
    if context.msa is not None or context.beyond_max or n >= FEW_HOMOLOGS:
        return ""
    if (search_rounds(context.path) or 1) > 1:
        return ""
    return (
        f"; only {n} {'homolog' if n == 1 else 'homologs'}: data search --iterations 3 "
        "(profile rounds) may find more distant ones"
    )


def _windows_note(info: dict[str, Any], used: int) -> str:
    """What the printed result says of the model's windows (``info``: what
    :func:`~protein_performer.analysis.dms.homologs.context_log_probs` reported)."""
    samples = info.get("context_samples", 1)
    caps = info.get("context_window_homologs")
    several = isinstance(caps, list)
    crops = info.get("context_crop")
    whole = info.get("sites_scored_whole")
    mean = info.get("mean_homologs_in_window", 0)
    text = (
        f"; {CONTEXT_COLUMN}: masked marginals "
        + (
            f"from windows of {info.get('context_window_tokens', 0):,} tokens holding "
            f"{_each(mean, _mean)} homologs (a mean each) "
            "before the protein "
            if several
            else f"with a mean of {_each(mean, _mean)} homolog{'' if mean == 1 else 's'} "
            f"before the protein in windows of {info.get('context_window_tokens', 0):,} tokens "
        )
        + f"({info.get('context_sampling', DEFAULT_SAMPLING)} homologs"
        + (f", at most {_each(caps)} a window" if caps else "")
        + (", each site's log-probabilities averaged over these windows" if several else "")
        + (
            f", {samples} windows of each size per site averaged"
            if samples > 1 and several
            else f", {samples} windows per site averaged"
            if samples > 1
            else ""
        )
        + (
            f"; each window {_each(crops, '{:,}', 'all the')} residues about its site, the "
            "homologs cut to those columns (context_crop)"
            + (
                f", {_each(whole, '{:,}', '0')} sites no homolog covers scored whole"
                if any(_listed(whole))
                else ""
            )
            if any(_listed(crops))
            else ""
        )
        + _identity_note(info, used)
        + ")"
    )
    if info.get("context_samples_asked", 1) > samples:
        text += (
            f" (context_samples={info['context_samples_asked']} with "
            "context_sampling=first: every window would hold the same homologs, one is scored)"
        )
    if RETRIEVAL_COLUMN in info or info.get("context_retrieval"):
        w = info["context_retrieval"]
        text += f"; {RETRIEVAL_COLUMN}: {1 - w:g} x the model's + {w:g} x the profile's log-ratio"
    return text


def _listed(value: Any) -> list[Any]:
    """``value`` as a list: itself when it is one (one entry a kind of window), else ``[value]``."""
    return value if isinstance(value, list) else [value]


def _each(value: Any, fmt: str | Callable[[Any], str] = "{:,}", none: str = "all") -> str:
    """``value`` (or each of a list, ``none`` for None) in ``fmt`` (a format string or a
    function), joined "a and b"; once where every one reads the same."""
    say = fmt if callable(fmt) else fmt.format
    said = [none if v is None else say(v) for v in _listed(value)]
    if len(set(said)) == 1:
        return said[0]
    return " and ".join([", ".join(said[:-1]), said[-1]])


def _mean(value: float) -> str:
    """A mean count of homologs: whole where it is one (every window held as many), else to a
    tenth."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _identity_note(info: dict[str, Any], used: int) -> str:
    """What the windows left out as near-copies of the wild type (``context_max_identity``)."""
    near, limit = info.get("homologs_over_max_identity", 0), info.get("context_max_identity")
    if not near or limit is None:
        return ""
    if near == used:
        return f"; all {used:,} over {limit:.0%} identical to the wild type: used all the same"
    return f"; {near:,} over {limit:.0%} identical to the wild type kept out"


def _left_out(notes: dict[str, Any], beyond: int) -> str:
    parts = [
        (notes.get("copies_of_wild_type_left_out", 0), "cop{y|ies} of the wild type"),
        (notes.get("duplicates_left_out", 0), "duplicate{|s}"),
        (notes.get("gap_only_rows", 0), "row{|s} with no residue in the query's columns"),
        (notes.get("annotation_rows_skipped", 0), "HH-suite annotation row{|s} (ss_pred, ...)"),
        (notes.get("fragments_left_out", 0), "fragment{|s} (context_min_coverage)"),
        (beyond, "beyond context_max_homologs"),
    ]
    said = [f"{n:,} {_number(what, n)}" for n, what in parts if n]
    return ", ".join(said) if said else "none"


def _number(text: str, n: int) -> str:
    """``text`` with each ``{one|many}`` chosen for ``n``."""
    return re.sub(r"\{([^|}]*)\|([^}]*)\}", lambda m: m.group(1) if n == 1 else m.group(2), text)


__all__ = ["context_notes"]
