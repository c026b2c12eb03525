"""`data search` says how many hits each query got, not only one total."""

from __future__ import annotations

from protein_performer.data.search import Hit, hits_per_query, per_query_text


def _hit(query: int, target: int) -> Hit:
    return Hit(
        query=query, target=target, identity=0.5, alignment_length=50, query_start=1,
        query_end=50, query_length=60, target_start=1, target_end=50, target_length=70,
        evalue=1e-10, bits=80.0,
    )  # fmt: skip


def test_hits_are_counted_per_query_in_file_order_with_zeros():
    kept = [_hit(2, 0), _hit(0, 1), _hit(2, 3), _hit(2, 4)]
    counts = hits_per_query(kept, ["P1", "P2", "P3"])
    assert list(counts.items()) == [("P1", 1), ("P2", 0), ("P3", 3)]
    assert per_query_text(counts) == "hits per query: P1 1, P2 0, P3 3"


def test_many_queries_show_the_first_and_say_how_many_more():
    counts = {f"Q{i}": i for i in range(30)}
    text = per_query_text(counts, limit=3)
    assert text == (
        "hits per query: Q0 0, Q1 1, Q2 2, ... 27 more (manifest.json: counts.hits_per_query)"
    )
    assert per_query_text(dict(list(counts.items())[:3]), limit=3).endswith("Q2 2")
