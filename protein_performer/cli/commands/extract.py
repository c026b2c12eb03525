"""extract: one FASTA in, one .npz per record out (representations, attention maps, contacts), with a manifest."""

from __future__ import annotations

from protein_performer.analysis.extraction import extract, is_extract_dir, load_for_analysis
from protein_performer.cli.commands.common import CommandResult, check_out_dir
from protein_performer.config.schema import ExtractConfig
from protein_performer.config.validate import eval_fasta_paths
from protein_performer.model.checkpoints import trained_length


def run_extract(cfg: ExtractConfig) -> CommandResult:
    fasta = eval_fasta_paths(cfg)  # type: ignore[arg-type]
    check_out_dir(cfg, is_extract_dir, "extract directory")  # fail on it before loading anything
    model, alphabet, meta = load_for_analysis(
        cfg.checkpoint, cfg.device, cfg.attention, cfg.nb_features
    )
    manifest = extract(
        model,
        alphabet,
        fasta,
        cfg.out,
        include=cfg.include,
        layers=cfg.layers,
        heads=cfg.heads,
        repr_layers=cfg.repr_layers,
        max_length=cfg.max_length,
        trained_length=trained_length(meta),
        truncate=cfg.truncate,
        keep_specials=cfg.keep_specials,
        float16=cfg.float16,
        toks_per_batch=cfg.toks_per_batch,
        chunk_size=cfg.chunk_size,
        invalid=cfg.invalid,
        strip_gaps=cfg.strip_gaps,
        overwrite=cfg.overwrite,
        source=str(cfg.checkpoint),
        records=cfg.records,
        max_records=cfg.max_records,
        join=cfg.join,
    )
    n = len(manifest["records"])
    cropped = sum(1 for r in manifest["records"] if r["cropped"])
    what = ", ".join(manifest["include"])
    if cfg.join:
        window = manifest["records"][0]
        text = (
            f"wrote one window of {len(window['joined']):,} proteins, {window['length']:,} "
            f"positions ({what}) to {cfg.out}/{window['file']}"
        )
        dropped = window["proteins_read"] - len(window["joined"])
        if window["cropped"]:
            text += (
                f"\n  truncate=true cut the first {window['cropped']:,} positions of the window"
                + (f": {dropped} of {window['proteins_read']} proteins left out" if dropped else "")
            )
    else:
        text = f"wrote {n:,} record file{'s' if n != 1 else ''} ({what}) to {cfg.out}"
    if cropped and not cfg.join:
        text += (
            f"\n  cropped: {cropped:,} record{'s' if cropped != 1 else ''} longer than the "
            "window, their first residues kept (the manifest says how many each lost; "
            "truncate=false refuses them)"
        )
    if manifest.get("input_changes"):
        text += f"\n  input: {manifest['input_changes']}"
    renamed = [r for r in manifest["records"] if r["file"] != f"{r['id']}.npz"]
    if renamed and not cfg.join:
        first = renamed[0]
        text += (
            f"\n  {len(renamed):,} file{'s' if len(renamed) != 1 else ''} named other than "
            f"{'their record ids' if len(renamed) != 1 else 'its record id'} (first: "
            f"{first['file']} for {first['id']}; the accession of db|ACC|NAME ids, unsafe "
            "characters as _, -2 for a repeated name): manifest.json and each file's id "
            "keep the ids"
        )
    return CommandResult({"out": str(cfg.out), **manifest}, text)
