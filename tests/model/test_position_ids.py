"""Each token's own rotary position (``position_ids``): the default's numbers, relative
positions only, tokens rotated alike when given one position, and the packed route."""

from __future__ import annotations

import pytest
import torch

from protein_performer.model import ProteinLM
from protein_performer.model.rotary import RotaryEmbedding, apply_rotary, rotate_packed
from tests.model.test_model import V, random_ids, tiny_config


def _model(attention: str = "transformer", **kw) -> ProteinLM:
    torch.manual_seed(0)
    cfg = tiny_config(attention, position="rotary", max_len=64, **kw)
    return ProteinLM(cfg, V).double().eval()


@pytest.mark.parametrize(
    "kw",
    [
        {"attention": "transformer"},
        {"attention": "performer_softmax", "exact_layers": (1,), "nope_layers": (1,)},
        {"attention": "performer_relu", "qkv_conv": 3},
    ],
)
def test_position_ids_zero_to_l_are_the_default(kw):
    model = _model(**kw)
    ids = random_ids(2, 17)
    default = model(ids)["logits"]
    given = model(ids, position_ids=torch.arange(17).expand(2, 17))["logits"]
    torch.testing.assert_close(given, default, atol=1e-12, rtol=1e-10)
    # logits_at reads the rows forward gives, with any positions
    tied = torch.tensor([[0.0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 9]])
    tied = torch.cat([tied, torch.arange(17.0)[None] * 2])
    at = torch.tensor([[3], [9]])
    torch.testing.assert_close(
        model.logits_at(ids, None, at, position_ids=tied),
        model(ids, position_ids=tied)["logits"].gather(1, at[..., None].expand(-1, -1, V)),
        atol=1e-10,
        rtol=1e-8,
    )


def test_exact_attention_reads_relative_positions_only_and_rows_keep_their_own():
    model = _model()
    ids = random_ids(2, 13)
    base = torch.arange(13.0).expand(2, 13)
    ref = model(ids, position_ids=base)["logits"]
    shifted = base + torch.tensor([[100.0], [-7.5]])  # each row its own shift
    torch.testing.assert_close(
        model(ids, position_ids=shifted)["logits"], ref, atol=1e-9, rtol=1e-8
    )
    # positions that are not a shift change the result, in that row only
    bent = base.clone()
    bent[1, 6:] += 3.0
    out = model(ids, position_ids=bent)["logits"]
    torch.testing.assert_close(out[0], ref[0], atol=1e-12, rtol=0)
    assert (out[1] - ref[1]).abs().max() > 1e-5


def test_tokens_moved_with_their_positions_are_read_the_same():
    """Order reaches an exact layer only through the positions: permute the tokens and their
    positions together and each token's output moves with it (no convolution here)."""
    model = _model()
    ids = random_ids(1, 11)
    pos = torch.tensor([[0.0, 1, 2, 3, 1, 2, 3, 4, 5, 2, 6]])  # tied: several tokens per position
    perm = torch.tensor([0, 4, 2, 9, 1, 3, 7, 5, 6, 8, 10])
    out = model(ids, position_ids=pos)["logits"]
    moved = model(ids[:, perm], position_ids=pos[:, perm])["logits"]
    torch.testing.assert_close(moved, out[:, perm], atol=1e-10, rtol=1e-8)
    # the same permutation without its positions reads otherwise
    assert (model(ids[:, perm], position_ids=pos)["logits"] - out[:, perm]).abs().max() > 1e-5


def test_rotary_angles_are_roformers():
    # position p, pair i of a head of D: angle p / 10000^(2i / D), each pair's twice (halves)
    cos, sin = RotaryEmbedding(8)(5, torch.device("cpu"), torch.float64)
    angle = torch.arange(5.0, dtype=torch.float64)[:, None] / 10000.0 ** (torch.arange(4) * 2 / 8)
    angle = torch.cat([angle, angle], dim=1)
    torch.testing.assert_close(cos, angle.cos(), atol=1e-6, rtol=0)
    torch.testing.assert_close(sin, angle.sin(), atol=1e-6, rtol=0)


def test_rotary_tables_per_row_rotate_as_apply_rotary_and_packed_alike():
    rot = RotaryEmbedding(8)
    pos = torch.tensor([[0.0, 5, 5, 2], [7, 1, 1, 3]])
    cos, sin = rot(4, torch.device("cpu"), torch.float64, pos)
    assert cos.shape == (2, 4, 8)
    for b in range(2):  # each row's tables are those of its own positions
        for i, p in enumerate(pos[b].tolist()):
            c, s = rot(int(p) + 1, torch.device("cpu"), torch.float64)
            torch.testing.assert_close(cos[b, i], c[int(p)], atol=1e-6, rtol=0)
            torch.testing.assert_close(sin[b, i], s[int(p)], atol=1e-6, rtol=0)
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(2, 4, 3, 2, 8, generator=g, dtype=torch.float64, requires_grad=True)
    q, k, v = qkv.permute(2, 0, 3, 1, 4)
    want = torch.stack([*apply_rotary(q, k, cos, sin), v]).permute(1, 3, 0, 2, 4)
    # apply_rotary by hand: row b, head h, token i rotated by its own angle
    q1, q2 = q[1, 0, 2].chunk(2)
    c, s = cos[1, 2], sin[1, 2]
    torch.testing.assert_close(want[1, 2, 0, 0], q[1, 0, 2] * c + torch.cat((-q2, q1)) * s)
    got = rotate_packed(qkv, cos, sin)
    torch.testing.assert_close(got, want, atol=1e-15, rtol=0)
    assert torch.autograd.gradcheck(lambda x: rotate_packed(x, cos, sin), (qkv,))


def test_favor_layers_take_position_ids_with_gradients():
    model = _model("performer_softmax", qkv_conv=3)
    model.train()
    ids = random_ids(2, 9)
    pos = torch.tensor([[0.0, 1, 2, 1, 2, 3, 2, 3, 4]]).expand(2, 9)
    loss = model(ids, position_ids=pos)["logits"].square().mean()
    loss.backward()
    assert all(
        p.grad is not None and torch.isfinite(p.grad).all()
        for p in model.parameters()
        if p.requires_grad and p.dim() > 1
    )


def test_position_ids_errors_are_clear():
    learned = ProteinLM(tiny_config("transformer"), V).eval()
    with pytest.raises(ValueError, match="position_ids needs a model with rotary positions"):
        learned(random_ids(1, 5), position_ids=torch.arange(5.0)[None])
    model = _model()
    with pytest.raises(ValueError, match=r"must be a \(1, 5\) tensor, got shape \(5,\)"):
        model(random_ids(1, 5), position_ids=torch.arange(5.0))
    with pytest.raises(ValueError, match="finite"):
        model(random_ids(1, 5), position_ids=torch.tensor([[0.0, 1, float("nan"), 3, 4]]))


def test_iter_attention_reads_the_positions_forward_reads():
    model = _model(depth=2)
    ids = random_ids(1, 10)
    pos = torch.tensor([[0.0, 1, 2, 3, 4, 1, 2, 3, 4, 5]])
    want = model(ids, position_ids=pos, return_attentions=True)["attentions"]
    for layer, start, rows in model.iter_attention(ids, position_ids=pos, chunk_size=4):
        torch.testing.assert_close(
            rows, want[layer][:, :, start : start + rows.shape[2]], atol=1e-12, rtol=1e-10
        )
    plain = model(ids, return_attentions=True)["attentions"]
    assert (plain[1] - want[1]).abs().max() > 1e-6


def test_reads_columns_only_for_a_model_configured_so():
    from protein_performer.model.performer import reads_columns

    columns = ProteinLM(
        tiny_config(position="rotary", context_positions="columns"), V, 0
    )  # fmt: skip
    window = ProteinLM(tiny_config(position="rotary"), V, 0)
    assert reads_columns(columns) and not reads_columns(window)
    assert not reads_columns(torch.nn.Linear(2, 2))  # no config: a window, as before
