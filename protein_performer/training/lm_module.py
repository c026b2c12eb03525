"""LightningModule for masked / causal protein language modelling."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch

from protein_performer.attention import redraw_all
from protein_performer.attention.favor import prepare_fused_kernel
from protein_performer.config.schema import OBJECTIVES, AlignConfig, OptimConfig
from protein_performer.data.alphabet import Alphabet, default_alphabet
from protein_performer.errors import ConfigError, TrainingDiverged
from protein_performer.model.checkpoints import META_KEY, check_resume_compatible, make_metadata
from protein_performer.model.config import ModelConfig, as_section
from protein_performer.model.metrics import (
    IGNORE_INDEX,
    MLM_INPUT_KINDS,
    add_next_token_counts,
    alignment_nll,
    batch_sums,
    causal_unigram_sums,
    lm_token_stats,
    perplexity,
    unigram_log_probs,
)
from protein_performer.model.performer import ProteinLM
from protein_performer.training.optim import build_optimizer, build_scheduler, param_dims

#: the last validation (its step and metrics) in a training checkpoint: what a resumed run that
#: stops before validating reports
LAST_VALIDATION_KEY = "protein_performer_last_validation"


def step_seed(seed: int, step: int, rank: int, batch_idx: int = 0) -> int:
    """Seed for the dropout RNG of one training batch (a pure function of the position in
    training, so resuming is exact; ``batch_idx`` separates micro-batches of one step)."""
    key = f"{seed}:{step}:{rank}:{batch_idx}"
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & ((1 << 63) - 1)


#: Non-finite training losses in a row that fp16 training (whose loss scaler skips a step
#: that overflows) takes for divergence.
FP16_NONFINITE_STEPS = 3


def diverged(nonfinite_steps: int, precision: str) -> bool:
    """Whether ``nonfinite_steps`` non-finite training losses in a row end the run: one does,
    but under fp16 (``16-mixed``), whose loss scaler skips a step that overflows and lowers its
    scale, only :data:`FP16_NONFINITE_STEPS` in a row do."""
    return nonfinite_steps >= (FP16_NONFINITE_STEPS if precision == "16-mixed" else 1)


class ProteinLMModule(pl.LightningModule):
    """Trains :class:`ProteinLM` on batches ``{"input_ids", "labels", "padding_mask"}``.

    The loss is the mean cross-entropy over predicted positions (masked ones for MLM, next
    tokens for causal) of the *global* batch: under DDP each rank divides its summed loss by
    the token count of all ranks, so gradients equal a single-process run on the same global
    batch. With ``accumulate_grad_batches > 1`` the step's gradient is the mean of the
    micro-batches' per-token means (each micro-batch normalised by its own token count), not a
    per-token mean over all of them. Logged: ``train/loss``, ``train/perplexity``,
    ``train/accuracy``, ``train/lr`` per step; ``val/loss``, ``val/perplexity``,
    ``val/accuracy``, ``val/predicted_tokens`` and, for MLM, ``val/perplexity_mask``,
    ``val/accuracy_mask`` (positions shown as ``<mask>`` only) and
    ``val/unigram_perplexity_mask`` (the training data's residue frequencies on those
    positions: the baseline), for a causal model ``val/unigram_perplexity`` (the same baseline
    on its next-token targets, :func:`causal_unigram_sums`) per validation.

    Every batch the dropout RNG is reseeded from ``(seed, global_step, rank, batch_idx)``; FAVOR+
    features are redrawn as a function of ``global_step`` only (same on every rank), so a
    resumed run continues exactly.
    """

    def __init__(
        self,
        model_config: ModelConfig,
        optim: OptimConfig | None = None,
        *,
        objective: str = "mlm",
        alphabet: Alphabet | None = None,
        seed: int = 0,
        total_steps: int = 1000,
        data_info: Mapping[str, Any] | None = None,
        align: AlignConfig | None = None,
    ) -> None:
        super().__init__()
        if objective not in OBJECTIVES:
            raise ConfigError(
                f"objective must be one of: {', '.join(OBJECTIVES)}; got {objective!r}"
            )
        model_config = as_section(ModelConfig, model_config, "model_config")
        self.align = as_section(AlignConfig, align or {}, "align")
        self.alphabet = alphabet or default_alphabet()
        self.objective = objective
        self.causal = objective == "causal"
        self.optim_config = as_section(OptimConfig, optim or {}, "optim")
        self.seed = int(seed)
        self.total_steps = int(total_steps)
        self.data_info = dict(data_info or {})
        self.model = ProteinLM(
            model_config, len(self.alphabet), self.alphabet.pad_idx, causal=self.causal
        )
        # parameter shapes before any wrapping: weight decay by name under FSDP's flat shards
        self._param_dims = param_dims(self.model)
        self.last_batch_tokens = 0
        self.last_val_step: int | None = None  # global step of the last validation
        self.last_val_metrics: dict[str, float] = {}  # its metrics (saved in checkpoints)
        # set by GracefulInterrupt (one process only): the rest of a validation is skipped
        self.skip_validation = False
        self.nonfinite_steps = 0  # non-finite training losses in a row
        self.nonfinite_align = 0  # ... and attention-supervision losses
        self._val_sums = torch.zeros(7, dtype=torch.float64)
        # MLM: the unigram baseline's log-probabilities (training-data residue frequencies)
        self._unigram_logp: torch.Tensor | None = None
        # the training data's token counts (causal: the unigram baseline of val/perplexity)
        self._unigram_counts: np.ndarray | None = None

    # ---- forward / loss -------------------------------------------------------------------
    def forward(self, batch: Mapping[str, torch.Tensor], **kwargs: Any) -> dict[str, Any]:
        if "position_ids" in batch:  # rows of homologs read at their columns
            kwargs.setdefault("position_ids", batch["position_ids"])
        return self.model(batch["input_ids"], batch["padding_mask"], **kwargs)

    def _reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self._trainer is None or self.trainer.world_size == 1:
            return t
        return self.trainer.strategy.reduce(t.clone(), reduce_op="sum")

    def _world_size(self) -> int:
        return 1 if self._trainer is None else int(self.trainer.world_size)

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        step = self.global_step
        # the step loggers label rows with: Lightning restores it one short from a checkpoint
        # saved at a validation's end (every last.ckpt but a mid-epoch stop's), so a resumed
        # run's metrics.csv rows would be labelled one step too early
        epoch_loop = getattr(getattr(self._trainer, "fit_loop", None), "epoch_loop", None)
        if getattr(epoch_loop, "_batches_that_stepped", step) != step:
            epoch_loop._batches_that_stepped = step
        torch.manual_seed(step_seed(self.seed, step, self.global_rank, batch_idx))
        redraw_all(self.model, step)

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        supervise = self.align.weight > 0 and "align_to" in batch
        out = self(batch, probe=(self.align.layer, self.align.head) if supervise else None)
        stats = lm_token_stats(out["logits"], batch["labels"], self.causal)
        tokens = (~batch["padding_mask"]).sum()
        local = torch.stack(
            [
                stats.nll_sum.detach().double(),
                stats.count.double(),
                stats.correct.double(),
                tokens.double(),
            ]
        )
        total = self._reduce_sum(local)
        count = total[1].clamp_min(1.0)
        loss = stats.nll_sum * (self._world_size() / count.float())
        mean_nll = total[0] / count
        nll_sum, tokens = total[[0, 3]].tolist()  # one host sync for both
        self.last_batch_tokens = int(tokens)
        if math.isfinite(nll_sum):
            self.nonfinite_steps = 0
        else:  # the same on every rank: reduced above
            self.nonfinite_steps += 1
            if diverged(self.nonfinite_steps, str(getattr(self.trainer, "precision", ""))):
                # before backward: the weights are those of the last finite step's update
                raise TrainingDiverged(
                    f"training diverged: the loss is {nll_sum} at step {self.global_step} (lr "
                    f"{self.optimizers().param_groups[0]['lr']:.3g}); stopped before that "
                    "step's update, so checkpoints/last.ckpt (if written) holds an earlier "
                    "step's weights: start again with a lower optim.lr or a longer "
                    "optim.warmup_steps (a resume would keep this learning rate; init_from= "
                    "those weights only if their validation was finite)"
                )
        self.log("train/loss", mean_nll.float(), prog_bar=True, on_step=True, on_epoch=False)
        self.log("train/perplexity", mean_nll.exp().float(), on_step=True, on_epoch=False)
        self.log("train/accuracy", (total[2] / count).float(), on_step=True, on_epoch=False)
        self.log("train/lr", self.optimizers().param_groups[0]["lr"], on_step=True, on_epoch=False)
        if supervise:
            align_nll, on_target = alignment_nll(
                out["probe_attention"], batch["align_to"], batch["labels"]
            )
            bad = align_nll is not None and not bool(torch.isfinite(align_nll.detach()))
            # every rank asks (a rank without alignment targets too): the same answer on all
            bad = self._reduce_sum(torch.tensor([float(bad)], device=self.device)).item() > 0
            self.nonfinite_align = self.nonfinite_align + 1 if bad else 0
            precision = str(getattr(self.trainer, "precision", ""))
            if bad and diverged(self.nonfinite_align, precision):
                raise TrainingDiverged(
                    f"training diverged: the attention-supervision loss is not finite at step "
                    f"{self.global_step}; stopped before that step's update (lower align.weight "
                    "or optim.lr)"
                )
            if align_nll is not None:
                loss = loss + self.align.weight * align_nll
                self.log("train/align_loss", align_nll.detach().float(), on_step=True)
                self.log("train/align_mass", on_target.float(), on_step=True)
        return loss

    # ---- validation -------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        # nll, count, correct over all predicted positions, then over MLM <mask> inputs only,
        # then the unigram baseline's nll on those <mask> positions
        self._val_sums = torch.zeros(7, dtype=torch.float64, device=self.device)
        # causal: the histogram of the predicted tokens, for the unigram baseline
        self._val_targets = torch.zeros(len(self.alphabet), dtype=torch.float64, device=self.device)

    def validation_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> None:
        if self.skip_validation:  # the run was interrupted: finish without the rest
            return
        out = self(batch)
        total, kinds = batch_sums(
            out["logits"], batch["labels"], batch["input_ids"], self.causal, self.alphabet.mask_idx
        )
        self._val_sums[:3] += total
        if self.causal and self._unigram_counts is not None:
            add_next_token_counts(self._val_targets, batch["labels"])
        if kinds is not None:
            self._val_sums[3:6] += kinds[MLM_INPUT_KINDS.index("mask")]
            if self._unigram_logp is not None:
                labels = batch["labels"]
                at = (batch["input_ids"] == self.alphabet.mask_idx) & (labels != IGNORE_INDEX)
                if self._unigram_logp.device != labels.device:  # moved once
                    self._unigram_logp = self._unigram_logp.to(labels.device)
                uni = self._unigram_logp[labels[at]]
                self._val_sums[6] -= uni.double().sum()

    def on_validation_epoch_end(self) -> None:
        if self.skip_validation:  # partial sums describe nothing: log no val metrics
            self._val_sums.zero_()
            return
        sums = self._reduce_sum(self._val_sums).tolist()
        nll, count, correct, m_nll, m_count, m_correct, u_nll = sums
        if count == 0:
            return
        fp16 = str(getattr(self.trainer, "precision", "")) == "16-mixed"
        if not math.isfinite(nll) and not self.trainer.sanity_checking and not fp16:
            # finite weights whose outputs overflow: the next checkpoint would be broken
            raise TrainingDiverged(
                f"training diverged: the validation loss is {nll} at step "
                f"{self.trainer.global_step} (lr {self.optimizers().param_groups[0]['lr']:.3g}); "
                "stopped before this validation's checkpoints: start again with a lower optim.lr "
                "or a longer optim.warmup_steps (a resume would keep this learning rate, and "
                "the weights of this step give no finite output)"
            )
        if not self.trainer.sanity_checking:
            self.last_val_step = int(self.trainer.global_step)
            self.last_val_metrics = {}
        # Already summed over ranks; sync_dist only averages identical values (no warning).
        self._log_val("val/loss", nll / count, sync_dist=True)
        self._log_val("val/perplexity", perplexity(nll, count), prog_bar=True, sync_dist=True)
        self._log_val("val/accuracy", correct / count, prog_bar=True, sync_dist=True)
        self._log_val("val/predicted_tokens", count, sync_dist=True)
        if m_count > 0:  # MLM: positions the model saw as <mask> (no copying the input)
            self._log_val("val/perplexity_mask", perplexity(m_nll, m_count), sync_dist=True)
            self._log_val("val/accuracy_mask", m_correct / m_count, sync_dist=True)
            if self._unigram_logp is not None:
                self._log_val(
                    "val/unigram_perplexity_mask", perplexity(u_nll, m_count), sync_dist=True
                )
        if self.causal and self._unigram_counts is not None:  # the same next-token targets
            hist = self._reduce_sum(self._val_targets).cpu()
            sums, _ = causal_unigram_sums(hist, self._unigram_counts, self.alphabet, "")
            u_nll, u_count, _ = sums.tolist()
            if u_count > 0:
                self._log_val("val/unigram_perplexity", perplexity(u_nll, u_count), sync_dist=True)

    def _log_val(self, key: str, value: float, **kwargs: Any) -> None:
        """Log a validation metric and keep it with the step it describes: a resumed run that
        stops before its own first validation reports the checkpoint's."""
        self.log(key, value, **kwargs)
        if not self.trainer.sanity_checking:
            self.last_val_metrics[key] = float(value)

    # ---- optimisation -----------------------------------------------------------------------
    def configure_optimizers(self):
        optimizer = build_optimizer(self.model, self.optim_config, self._param_dims)
        scheduler = build_scheduler(optimizer, self.optim_config, self.total_steps)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }

    def on_fit_start(self) -> None:
        dm = getattr(self.trainer, "datamodule", None)
        # built apart from Python, the two can disagree: a bidirectional model given causal
        # batches reads each label at the next position and "learns" a perplexity near 1
        data_objective = getattr(dm, "objective", self.objective)
        if data_objective != self.objective:
            raise ConfigError(
                f"the datamodule makes objective={data_objective!r} batches but the module "
                f"trains objective={self.objective!r}: give both the same objective"
            )
        # residue counts of the training data: evaluate's unigram baseline comes from them
        train = getattr(dm, "datasets", {}).get("train") if dm is not None else None
        if train is not None:
            tokens = train.source.tokens
            counts = np.zeros(len(self.alphabet), dtype=np.int64)
            # in chunks: bincount widens uint8 to int64, 8 bytes a residue of a memory-mapped
            # shard set at once
            for start in range(0, len(tokens), 1 << 24):
                chunk = np.asarray(tokens[start : start + (1 << 24)])
                counts += np.bincount(chunk, minlength=len(self.alphabet))[: len(self.alphabet)]
            self.data_info["unigram_counts"] = [int(c) for c in counts]
            self._unigram_counts = counts
            if not self.causal:
                self._unigram_logp = unigram_log_probs(counts, self.alphabet)
        # the fused CPU kernel's compile (announced), before the first timed step, not in it
        prepare_fused_kernel(self.model)

    # ---- checkpoints ------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[META_KEY] = make_metadata(
            self.model, self.alphabet, self.objective, self.data_info
        )
        if self.last_val_step is not None:
            checkpoint[LAST_VALIDATION_KEY] = {
                "step": self.last_val_step,
                "metrics": dict(self.last_val_metrics),
            }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        check_resume_compatible(
            checkpoint.get(META_KEY), self.model.config, self.alphabet, self.objective, "checkpoint"
        )
        # the run this checkpoint belongs to goes on (a resume is the same run)
        run_id = ((checkpoint.get(META_KEY) or {}).get("data") or {}).get("run_id")
        if isinstance(run_id, str):
            self.data_info["run_id"] = run_id
        last = checkpoint.get(LAST_VALIDATION_KEY)
        if isinstance(last, dict) and isinstance(last.get("step"), int):
            self.last_val_step = last["step"]
            metrics = last.get("metrics") or {}
            self.last_val_metrics = {str(k): float(v) for k, v in metrics.items()}
