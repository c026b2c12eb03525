"""How a clusters table is built, said in one place: the recipe each experiment preset expects
(``protein-performer data cluster --experiment NAME OUTDIR`` follows it), the recipe a training
run records from its table's manifest, and the commands that rebuild the shipped checkpoints'
tables. MMseqs2's clusters depend on the order of the records, so the recipe names the files in
order: another order is another clustering, and so another held-out split."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# data.cluster's file names (not imported: data.cluster reads this module)
MANIFEST = "manifest.json"
MEMBERS = "members.tsv"


@dataclass(frozen=True)
class ClusterRecipe:
    """``keep_order``: the preset's ``data.files`` read as listed (``--keep-order``); False:
    in name order (``data cluster``'s default). ``min_seq_id``: MMseqs2's identity.
    ``checkpoint``: the shipped checkpoint trained on this table, when one was."""

    keep_order: bool = True
    min_seq_id: float = 0.5
    checkpoint: str | None = None

    def options(self) -> list[str]:
        """The ``data cluster`` options of this recipe."""
        return [
            *(["--keep-order"] if self.keep_order else []),
            "--min-seq-id",
            f"{self.min_seq_id:g}",
        ]


#: The recipe of every preset not in :data:`PRESET_RECIPES`: its files as listed, 50 % identity
#: (``checkpoint=default`` was trained on experiment=cpu_recipe_14's table made this way).
DEFAULT_RECIPE = ClusterRecipe()
#: Presets whose table is made otherwise: the shipped homolog model's run read the same 14
#: files in name order.
PRESET_RECIPES: dict[str, ClusterRecipe] = {
    "cpu_recipe_14": ClusterRecipe(checkpoint="default"),
    "homologs": ClusterRecipe(keep_order=False, checkpoint="homologs"),
}

#: The tables the shipped checkpoints split by (members digest -> how to rebuild it).
SHIPPED_TABLES: dict[str, str] = {
    "bb7d680dea303bfca5f207f799e458dff0061a4c7339a447a174727abb6b5a8f": (
        "`protein-performer data cluster --experiment cpu_recipe_14 OUTDIR` (its 14 files in "
        "the listed order, --keep-order, --min-seq-id 0.5: 58,171 clusters)"
    ),
    "4ed23d970bb287e503fbd8023cb3a0b72a419525297aecc3803fd368222926d2": (
        "`protein-performer data cluster --experiment homologs OUTDIR` (its 14 files in name "
        "order, --min-seq-id 0.5: 58,177 clusters)"
    ),
}


def preset_recipe(experiment: str) -> ClusterRecipe:
    """The recipe of the preset ``experiment`` (conf/experiment/NAME.yaml)."""
    return PRESET_RECIPES.get(experiment, DEFAULT_RECIPE)


def recipe_command(files: Sequence[str], recipe: ClusterRecipe, outdir: str) -> str:
    """The ``data cluster`` command line that builds ``recipe`` from ``files``."""
    return " ".join(["protein-performer data cluster", *map(str, files), outdir, *recipe.options()])


def table_recipe(table: str | os.PathLike[str]) -> dict[str, Any] | None:
    """What a training run records of how its clusters table was built, from the manifest
    ``data cluster`` wrote beside it: ``files`` (names, in the order read), ``file_order``,
    ``min_seq_id``, ``coverage``, ``method`` and ``clusters`` (the count). None for a table
    with no readable manifest (written by hand or by another tool)."""
    p = Path(table)
    manifest = (p if p.is_dir() else p.parent) / MANIFEST
    if not p.is_dir() and p.name != MEMBERS:
        return None  # a hand-made table next to some other manifest
    try:
        with open(manifest, encoding="utf-8") as fh:
            m = json.load(fh)
        params = m["params"]
        return {
            "files": [Path(s["path"]).name for s in m["sources"]],
            "file_order": params.get("file_order", "as given"),
            "min_seq_id": params["min_seq_id"],
            "coverage": params.get("coverage"),
            "method": params.get("method"),
            "clusters": m.get("counts", {}).get("clusters"),
        }
    except (OSError, ValueError, KeyError, TypeError):
        return None


def describe_recipe(stored: Mapping[str, Any]) -> str | None:
    """How the table a run split by (a checkpoint's ``data`` section, ``stored``) was built, in
    words: the shipped checkpoints' by the command that rebuilds it, a recorded recipe by its
    files in order and settings; None when the checkpoint says nothing of it."""
    known = SHIPPED_TABLES.get(str(stored.get("clusters_digest")))
    if known:
        return f"built by {known}"
    r = stored.get("clusters_recipe")
    if not isinstance(r, Mapping) or not r.get("files"):
        return None
    order = "as listed, --keep-order" if r.get("file_order") == "as given" else "in name order"
    count = f": {r['clusters']:,} clusters" if isinstance(r.get("clusters"), int) else ""
    return (
        f"built by `data cluster` from {', '.join(r['files'])} ({order}, "
        f"--min-seq-id {r['min_seq_id']:g}{count})"
    )
