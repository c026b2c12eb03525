"""ProteinLM: shapes, causality, padding, rotary positions, tied head, overfitting."""

from __future__ import annotations

import pytest
import torch

from protein_performer.data.alphabet import default_alphabet
from protein_performer.errors import ConfigError
from protein_performer.model import ATTENTION_KINDS, ModelConfig, ProteinLM
from protein_performer.model.rotary import RotaryEmbedding, apply_rotary

ALPHABET = default_alphabet()
V = len(ALPHABET)


def tiny_config(attention: str = "performer_relu", **kw) -> ModelConfig:
    base = dict(
        attention=attention,
        dim=32,
        depth=2,
        heads=4,
        ffn_dim=64,
        dropout=0.0,
        max_len=64,
        nb_features=32,
        redraw_interval=0,
    )
    base.update(kw)
    return ModelConfig(**base)


def random_ids(b: int, n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, 26, (b, n), generator=g)
    ids[:, 0] = ALPHABET.cls_idx
    ids[:, -1] = ALPHABET.eos_idx
    return ids


@pytest.mark.parametrize("attention", ATTENTION_KINDS)
def test_forward_returns_logits_attentions_and_hidden_states(attention):
    torch.manual_seed(0)
    model = ProteinLM(tiny_config(attention), V).eval()
    ids = random_ids(2, 10)
    out = model(ids, return_attentions=True, return_hidden=True)
    assert out["logits"].shape == (2, 10, V)
    assert len(out["attentions"]) == 2
    for a in out["attentions"]:
        assert a.shape == (2, 4, 10, 10)
        torch.testing.assert_close(a.sum(-1), torch.ones(2, 4, 10), atol=1e-4, rtol=0)
        assert (a >= -1e-6).all()
    assert len(out["hidden_states"]) == 3
    assert all(h.shape == (2, 10, 32) for h in out["hidden_states"])
    assert set(model(ids)) == {"logits"}


@pytest.mark.parametrize("attention", ATTENTION_KINDS)
@pytest.mark.parametrize("position", ["learned", "rotary"])
def test_causal_logits_ignore_future_tokens(attention, position):
    torch.manual_seed(0)
    model = ProteinLM(tiny_config(attention, position=position), V, causal=True).eval()
    ids = random_ids(2, 16)
    changed = ids.clone()
    t = 7
    changed[:, t + 1 :] = random_ids(2, 16, seed=1)[:, t + 1 :]
    with torch.no_grad():
        a = model(ids)["logits"]
        b = model(changed)["logits"]
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], atol=1e-5, rtol=1e-5)
    assert (a[:, t + 1 :] - b[:, t + 1 :]).abs().max() > 1e-3
    with torch.no_grad():
        attn = model(ids, return_attentions=True)["attentions"][1]
    assert attn.triu(1).abs().max() == 0  # no weight on future positions
    torch.testing.assert_close(attn.sum(-1), torch.ones(2, 4, 16), atol=1e-4, rtol=0)


@pytest.mark.parametrize("attention", ATTENTION_KINDS)
def test_bidirectional_logits_see_future_tokens(attention):
    torch.manual_seed(0)
    model = ProteinLM(tiny_config(attention), V).eval()
    ids = random_ids(1, 16)
    changed = ids.clone()
    changed[:, 12] = 6 if ids[0, 12] != 6 else 7
    with torch.no_grad():
        diff = (model(ids)["logits"][:, :5] - model(changed)["logits"][:, :5]).abs().max()
    assert diff > 1e-4


@pytest.mark.parametrize("attention", ATTENTION_KINDS)
def test_padding_does_not_change_real_positions(attention):
    # bidirectional only: with right padding a causal model never sees the pads anyway
    torch.manual_seed(0)
    model = ProteinLM(tiny_config(attention), V).eval()
    ids = random_ids(1, 12)
    padded = torch.cat([ids, torch.full((1, 5), ALPHABET.pad_idx)], dim=1)
    mask = padded == ALPHABET.pad_idx
    with torch.no_grad():
        a = model(ids)["logits"]
        b = model(padded, mask)["logits"][:, :12]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_rotary_dot_products_depend_only_on_relative_position():
    rot = RotaryEmbedding(8)
    cos, sin = rot(12, torch.device("cpu"), torch.float64)
    g = torch.Generator().manual_seed(0)
    q1 = torch.randn(8, generator=g, dtype=torch.float64)
    k1 = torch.randn(8, generator=g, dtype=torch.float64)
    q = q1.expand(1, 1, 12, 8)
    k = k1.expand(1, 1, 12, 8)
    rq, rk = apply_rotary(q, k, cos, sin)
    scores = rq[0, 0] @ rk[0, 0].T  # (12, 12): score(m, n)
    for offset in (0, 1, 3):
        diag = torch.diagonal(scores, offset=offset)
        torch.testing.assert_close(diag, diag[0].expand_as(diag))
    # rotation keeps norms, and is not the identity
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1))
    assert not torch.allclose(rq[0, 0, 5], q1)


def test_learned_positions_limit_is_a_clear_error():
    model = ProteinLM(tiny_config(max_len=8), V)
    with pytest.raises(
        ConfigError,
        match=r"^9 tokens \(the residues with <cls> and <eos>\) exceed "
        r"model.max_len=8 \(learned positions\): .* read_proteins\(\.\.\., truncate",
    ):
        model(random_ids(1, 9))
    model(random_ids(1, 8))  # the limit itself fits


def test_output_head_is_tied_to_the_token_embedding():
    model = ProteinLM(tiny_config(), V).eval()
    matrices = [n for n, p in model.named_parameters() if p.shape == (V, 32)]
    assert matrices == ["embed.tokens.weight"]
    ids = random_ids(1, 6)
    with torch.no_grad():
        before = model(ids)["logits"]
        model.embed.tokens.weight[10] += torch.linspace(-1, 1, 32)
        after = model(ids)["logits"]
    # column 10 of the logits changes through the head even where token 10 is absent
    assert (after[..., 10] - before[..., 10]).abs().min() > 1e-4


def test_invalid_config_is_a_one_line_error():
    with pytest.raises(ConfigError, match=r"model\.attention='lsh' is not valid; choose one of"):
        ProteinLM(tiny_config("lsh"), V)
    with pytest.raises(ConfigError, match="divisible"):
        ProteinLM(tiny_config(dim=30), V)


@pytest.mark.slow
@pytest.mark.parametrize("attention", ATTENTION_KINDS)
def test_overfits_one_batch(attention):
    from protein_performer.model.metrics import lm_token_stats

    torch.manual_seed(0)
    model = ProteinLM(tiny_config(attention, dim=64, ffn_dim=128), V)
    ids = random_ids(4, 24)
    labels = torch.full_like(ids, -100)
    g = torch.Generator().manual_seed(1)
    masked = torch.rand(ids.shape, generator=g) < 0.3
    masked[:, [0, -1]] = False
    labels[masked] = ids[masked]
    inputs = ids.masked_fill(masked, ALPHABET.mask_idx)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(200):
        stats = lm_token_stats(model(inputs)["logits"], labels, causal=False)
        loss = stats.nll_sum / stats.count
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05
    assert int(stats.correct) == int(stats.count)


# ---- hybrid blocks and activation checkpointing -----------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("attention", ATTENTION_KINDS)
def test_hybrid_heads_match_their_own_attention_matrices(attention, causal):
    torch.manual_seed(0)
    model = ProteinLM(
        tiny_config(attention, local_heads=2, local_window=3), V, causal=causal
    ).eval()
    ids = random_ids(2, 20)
    ids[1, 15:] = ALPHABET.pad_idx
    out = model(ids, return_attentions=True)
    attn = out["attentions"][0]
    assert attn.shape == (2, 4, 20, 20)
    offset = torch.arange(20)[None, :] - torch.arange(20)[:, None]
    outside = offset.abs() > 3
    if causal:
        outside |= offset > 0
    # local heads: zero outside the window, rows sum to 1 (over valid keys)
    assert (attn[:, :2][..., outside] == 0).all()
    assert (attn[1, :, :, 15:] == 0).all()
    torch.testing.assert_close(attn[0].sum(-1), torch.ones(4, 20), atol=1e-5, rtol=0)
    # the block's output is exactly those matrices applied to the values
    block = model.blocks[0]
    x = block.norm1(model.embed(ids))
    _q, _k, v = block.attn._split(x)
    head_out = torch.einsum("bhij,bhjd->bhid", attn, v)
    mixed = block.attn.out(head_out.transpose(1, 2).reshape(2, 20, -1))
    expected, _ = block.attn(x, ids == ALPHABET.pad_idx)
    torch.testing.assert_close(mixed[0], expected[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(mixed[1, :15], expected[1, :15], atol=1e-5, rtol=1e-4)
    # weights transfer between plain and hybrid models (same parameters)
    plain = ProteinLM(tiny_config(attention), V, causal=causal)
    plain.load_state_dict(model.state_dict())


def test_hybrid_config_is_validated():
    with pytest.raises(
        ConfigError, match=r"model\.local_heads must be an integer in 0\.\.model\.heads"
    ):
        ProteinLM(tiny_config(local_heads=5), V)
    with pytest.raises(ConfigError, match=r"model\.local_window must be a positive integer"):
        ProteinLM(tiny_config(local_heads=1, local_window=0), V)


@pytest.mark.parametrize("attention", ATTENTION_KINDS)
def test_activation_checkpointing_gives_the_same_gradients(attention, monkeypatch):
    import protein_performer.model.performer as performer

    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return torch.utils.checkpoint.checkpoint(*args, **kwargs)

    monkeypatch.setattr(performer, "checkpoint", counting)
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = ProteinLM(
            tiny_config(attention, dropout=0.1, checkpointing=checkpointing, local_heads=1), V
        ).double()
        ids = random_ids(2, 24)
        torch.manual_seed(1)  # the same dropout masks in both runs
        loss = model(ids)["logits"].logsumexp(-1).mean()
        loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    assert len(calls) == 2  # one per block, in the checkpointed run only
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("attention", ["performer_relu", "performer_softmax"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_kept_or_rebuilt_features_give_the_same_gradients(attention, checkpointing):
    grads, kept = [], []
    for save_features in (True, False):
        torch.manual_seed(0)
        config = tiny_config(
            attention, save_features=save_features, checkpointing=checkpointing, nb_features=20
        )
        model = ProteinLM(config, V).double()
        assert all(b.attn.favor.save_features is save_features for b in model.blocks)
        ids = random_ids(2, 24)
        ids[1, 18:] = ALPHABET.pad_idx
        sizes = []

        def pack(t, sizes=sizes):
            sizes.append(t.shape[-1])
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(ids)["logits"].logsumexp(-1).mean()
        loss.backward()
        kept.append(sizes.count(config.nb_features))
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    # query and key features of every layer are saved tensors: seen by saved-tensor hooks, so
    # inside a checkpointed block the checkpoint's own hooks take them (and drop them)
    assert kept == [0 if checkpointing else 2 * len(model.blocks), 0]
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-12, rtol=1e-10)


def test_training_step_at_8192_tokens():
    torch.manual_seed(0)
    config = tiny_config(
        "performer_relu",
        dim=16,
        heads=2,
        depth=1,
        ffn_dim=32,
        max_len=8192,
        nb_features=16,
        checkpointing=True,
        local_heads=1,
        local_window=32,
    )
    model = ProteinLM(config, V)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ids = random_ids(1, 8192)
    loss = model(ids)["logits"].logsumexp(-1).mean()
    loss.backward()
    opt.step()
    assert torch.isfinite(loss) and all(torch.isfinite(p).all() for p in model.parameters())


def test_every_head_local_is_a_sliding_window_transformer():
    torch.manual_seed(0)
    model = ProteinLM(tiny_config("performer_relu", local_heads=4, local_window=2), V).eval()
    assert model.blocks[0].attn.favor is None  # no FAVOR heads left to build
    ids = random_ids(1, 12)
    attn = model(ids, return_attentions=True)["attentions"][1]
    assert attn.shape == (1, 4, 12, 12)
    offset = torch.arange(12)[None, :] - torch.arange(12)[:, None]
    assert (attn[..., offset.abs() > 2] == 0).all()
    torch.testing.assert_close(attn.sum(-1), torch.ones(1, 4, 12), atol=1e-5, rtol=0)


@pytest.mark.parametrize("attention", ATTENTION_KINDS)
def test_every_parameter_gets_a_gradient_with_every_head_local(attention):
    # a parameter without a gradient stops DDP (find_unused_parameters=False) at step 2
    model = ProteinLM(tiny_config(attention, local_heads=4, local_window=2), V)
    model(random_ids(2, 12))["logits"].sum().backward()
    unused = [name for name, p in model.named_parameters() if p.grad is None]
    assert not unused


@pytest.mark.parametrize(
    "kind, extra",
    [
        ("transformer", {}),
        ("taylor", {}),
        ("performer_softmax", {"local_heads": 2, "local_window": 4}),
        ("performer_relu", {}),
    ],
)
def test_probe_attention_is_the_heads_matrix_and_carries_gradients(kind, extra) -> None:
    alphabet = ALPHABET
    torch.manual_seed(0)
    cfg = ModelConfig(
        attention=kind, dim=32, depth=2, heads=4, ffn_dim=64, dropout=0.0, max_len=64,
        nb_features=16, **extra,
    )  # fmt: skip
    model = ProteinLM(cfg, len(alphabet), alphabet.pad_idx).eval()
    ids = torch.randint(5, 25, (2, 19))
    ids[1, 14:] = alphabet.pad_idx
    for layer, head in [(1, 3), (0, 0), (-1, -1)]:
        out = model(ids, probe=(layer, head))
        reference = model(ids, return_attentions=True)["attentions"][layer][:, head]
        torch.testing.assert_close(out["probe_attention"], reference, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(out["logits"], model(ids)["logits"])  # forward unchanged
    # the supervision reaches the query/key projections of that layer only (and below)
    out = model(ids, probe=(0, 3))
    out["probe_attention"][:, 3, 7].sum().backward()
    assert model.blocks[0].attn.qkv.weight.grad.abs().sum() > 0
    assert model.blocks[1].attn.qkv.weight.grad is None


# ---- layer-wise hybrid: exact attention in some layers -----------------------------------------
@pytest.mark.parametrize("attention", ["performer_relu", "performer_softmax", "taylor"])
@pytest.mark.parametrize("causal", [False, True])
def test_exact_layers_are_exact_and_the_others_keep_their_kind(attention, causal):
    torch.manual_seed(0)
    hybrid = ProteinLM(tiny_config(attention, depth=3, exact_layers=[-1, 0]), V, causal=causal)
    hybrid = hybrid.double().eval()
    with torch.no_grad():  # far from uniform attention, where every kernel agrees with exp
        for block in hybrid.blocks:
            block.attn.qkv.weight.mul_(25.0)
    assert hybrid.config.layer_kinds() == ["transformer", attention, "transformer"]
    plain = ProteinLM(tiny_config(attention, depth=3), V, causal=causal).double().eval()
    exact = ProteinLM(tiny_config("transformer", depth=3), V, causal=causal).double().eval()
    plain.load_state_dict(hybrid.state_dict(), strict=False)  # same draws of features (seeded)
    exact.load_state_dict(hybrid.state_dict(), strict=False)
    ids = random_ids(2, 17)
    ids[1, 12:] = ALPHABET.pad_idx
    hidden = hybrid(ids, return_hidden=True)["hidden_states"]
    pad = ids == ALPHABET.pad_idx
    # each layer of the hybrid computes what that layer of the plain model of its kind computes
    for i, reference in enumerate([exact, plain, exact]):
        want, _ = reference.blocks[i](hidden[i], pad)
        torch.testing.assert_close(hidden[i + 1], want, rtol=1e-10, atol=1e-10)
    assert hybrid.blocks[0].attn.favor is None and hybrid.blocks[2].attn.favor is None
    # and the exact layers really differ from the kernel they replace
    other, _ = plain.blocks[0](hidden[0], pad)
    assert (other - hidden[1]).abs().max() > 1e-3


def test_exact_layers_are_validated():
    for bad in ([2], [-3], [0, -2], [True], ["1"], 1, None):
        with pytest.raises(ConfigError, match=r"model\.exact_layers"):
            ProteinLM(tiny_config(exact_layers=bad), V)
    assert ModelConfig.from_dict(tiny_config(exact_layers=[-1]).to_dict()).layer_kinds() == [
        "performer_relu",
        "transformer",
    ]


def test_kind_label_names_the_exact_layers():
    assert tiny_config("performer_softmax").kind_label == "performer_softmax"
    assert tiny_config(exact_layers=[-1]).kind_label == "performer_relu+exact[-1]"


# ---- nope_layers: layers without rotary positions ---------------------------------------------
@pytest.mark.parametrize("attention", ["transformer", "performer_softmax"])
def test_nope_layers_skip_the_rotation_and_only_there(attention):
    torch.manual_seed(0)
    cfg = dict(position="rotary", depth=3)
    mixed = ProteinLM(tiny_config(attention, nope_layers=[-1], **cfg), V).double().eval()
    with torch.no_grad():  # far from uniform attention, where positions hardly matter
        for block in mixed.blocks:
            block.attn.qkv.weight.mul_(10.0)
    rotary = ProteinLM(tiny_config(attention, **cfg), V).double().eval()
    rotary.load_state_dict(mixed.state_dict())  # same shapes: weights move freely
    assert [mixed.config.layer_rotary(i) for i in range(3)] == [True, True, False]
    ids = random_ids(2, 17)
    ids[1, 12:] = ALPHABET.pad_idx
    pad = ids == ALPHABET.pad_idx
    hidden = mixed(ids, return_hidden=True)["hidden_states"]
    tables = rotary.rotary(17, ids.device, torch.float64)
    for i in range(3):  # layers 0, 1 as in the rotary model; layer 2 with no rotation
        want, _ = rotary.blocks[i](hidden[i], pad, tables if i < 2 else None)
        torch.testing.assert_close(hidden[i + 1], want, rtol=1e-10, atol=1e-10)
    other, _ = rotary.blocks[2](hidden[2], pad, tables)
    assert (other - hidden[3]).abs().max() > 1e-3  # the rotation did matter there
    # the attention the analysis extracts is the one the forward pass used
    forward = mixed(ids, return_attentions=True)["attentions"]
    rows = torch.cat([r for layer, _, r in mixed.iter_attention(ids, layers=[2], chunk_size=5)], 2)
    torch.testing.assert_close(rows, forward[2], rtol=1e-8, atol=1e-10)
    probe = mixed(ids, probe=(2, 1))["probe_attention"]
    torch.testing.assert_close(probe, forward[2][:, 1], rtol=1e-8, atol=1e-10)


def test_a_model_with_every_layer_nope_is_permutation_equivariant():
    # no positions anywhere (and no convolution): moving tokens moves their predictions, so a
    # content match scores the same at any distance
    torch.manual_seed(0)
    model = (
        ProteinLM(tiny_config("transformer", position="rotary", nope_layers=[0, 1]), V)
        .double()
        .eval()
    )
    with torch.no_grad():  # sharp attention, where positions would show
        for block in model.blocks:
            block.attn.qkv.weight.mul_(10.0)
    ids = random_ids(1, 20)
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(1))
    logits = model(ids)["logits"]
    torch.testing.assert_close(model(ids[:, perm])["logits"], logits[:, perm])
    rotary = ProteinLM(tiny_config("transformer", position="rotary"), V).double().eval()
    rotary.load_state_dict(model.state_dict())
    moved = rotary(ids[:, perm])["logits"] - rotary(ids)["logits"][:, perm]
    assert moved.abs().max() > 1e-3  # with rotary positions it is not


def test_nope_layers_are_validated():
    for bad in ([2], [-3], [0, -2], [True], ["1"], 1, None):
        with pytest.raises(ConfigError, match=r"model\.nope_layers"):
            ProteinLM(tiny_config(position="rotary", nope_layers=bad), V)
    with pytest.raises(ConfigError, match=r"model\.nope_layers needs model\.position=rotary"):
        ProteinLM(tiny_config(position="learned", nope_layers=[-1]), V)
    restored = ModelConfig.from_dict(tiny_config(position="rotary", nope_layers=[-1]).to_dict())
    assert [restored.layer_rotary(i) for i in range(2)] == [True, False]
    assert not tiny_config(position="learned").layer_rotary(0)


# ---- scalable_softmax: exact scores times log(n) / log(B) ------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_scalable_softmax_changes_only_the_exact_layers_and_only_away_from_its_length(causal):
    torch.manual_seed(0)
    cfg = dict(position="rotary", depth=3, exact_layers=[-1])
    scaled = (
        ProteinLM(tiny_config("performer_softmax", scalable_softmax=17, **cfg), V, causal=causal)
        .double()
        .eval()
    )
    with torch.no_grad():
        for block in scaled.blocks:
            block.attn.qkv.weight.mul_(10.0)
    plain = ProteinLM(tiny_config("performer_softmax", **cfg), V, causal=causal).double().eval()
    plain.load_state_dict(scaled.state_dict())  # no new weights
    ids = random_ids(2, 17)
    ids[1, 12:] = ALPHABET.pad_idx  # row 1 sees 12 keys
    pad = ids == ALPHABET.pad_idx
    got = scaled(ids, return_hidden=True, return_attentions=True)
    want = plain(ids, return_hidden=True)["hidden_states"]
    hidden = got["hidden_states"]
    for i in range(3):  # FAVOR layers 0, 1 unchanged
        torch.testing.assert_close(hidden[i], want[i], rtol=1e-10, atol=1e-10)
    tables = plain.rotary(17, ids.device, torch.float64)
    same, _ = plain.blocks[2](hidden[2], pad, tables)
    if causal:  # query i sees i + 1 keys: only the last query of row 0 is at the base length
        torch.testing.assert_close(hidden[3][0, -1], same[0, -1], rtol=1e-10, atol=1e-10)
        assert (hidden[3][0, :-1] - same[0, :-1]).abs().max() > 1e-4
    else:  # row 0 sees 17 keys, the base: unchanged; row 1 sees 12: softer
        torch.testing.assert_close(hidden[3][0], same[0], rtol=1e-10, atol=1e-10)
        assert (hidden[3][1, :12] - same[1, :12]).abs().max() > 1e-4
    # the attention the analysis extracts and the probe supervises is the forward's
    rows = torch.cat([r for _, _, r in scaled.iter_attention(ids, layers=[2], chunk_size=5)], 2)
    torch.testing.assert_close(rows, got["attentions"][2], rtol=1e-8, atol=1e-10)
    probe = scaled(ids, probe=(2, 1))["probe_attention"]
    torch.testing.assert_close(probe, got["attentions"][2][:, 1], rtol=1e-8, atol=1e-10)


def test_scalable_softmax_is_validated():
    for bad in (1, -1, True, 2.5, "512"):
        with pytest.raises(ConfigError, match=r"model\.scalable_softmax must be 0"):
            ProteinLM(tiny_config("transformer", scalable_softmax=bad), V)
    with pytest.raises(ConfigError, match=r"applies to exact global heads"):
        ProteinLM(tiny_config("performer_relu", scalable_softmax=512), V)
    with pytest.raises(ConfigError, match=r"applies to exact global heads"):
        ProteinLM(tiny_config("transformer", scalable_softmax=512, local_heads=4), V)
    ProteinLM(tiny_config("performer_relu", scalable_softmax=512, exact_layers=[0]), V)
    restored = ModelConfig.from_dict(tiny_config("transformer", scalable_softmax=64).to_dict())
    assert restored.scalable_softmax == 64


# ---- qkv_conv: a depthwise convolution over positions on queries, keys and values -------------
def _conv_pair(attention: str, causal: bool) -> tuple[ProteinLM, ProteinLM]:
    """(plain, with qkv_conv=3) sharing every other weight, float64, eval."""
    torch.manual_seed(0)
    conv = ProteinLM(tiny_config(attention, position="rotary", qkv_conv=3), V, causal=causal)
    plain = ProteinLM(tiny_config(attention, position="rotary"), V, causal=causal)
    plain.load_state_dict(conv.state_dict(), strict=False)
    return plain.double().eval(), conv.double().eval()


@pytest.mark.parametrize("attention", ["transformer", "performer_softmax", "taylor"])
@pytest.mark.parametrize("causal", [False, True])
def test_qkv_conv_starts_as_the_identity_and_then_mixes_neighbours(attention, causal):
    plain, conv = _conv_pair(attention, causal)
    ids = random_ids(2, 17)
    ids[1, 12:] = ALPHABET.pad_idx
    real = ids != ALPHABET.pad_idx
    with torch.no_grad():
        torch.testing.assert_close(
            conv(ids)["logits"][real], plain(ids)["logits"][real], rtol=1e-12, atol=1e-12
        )
        for block in conv.blocks:
            block.attn.conv.weight.normal_()
    # against a reference built by hand: each q/k/v channel a weighted sum of its neighbours
    attn = conv.blocks[0].attn
    x = torch.randn(2, 17, 32, dtype=torch.float64)
    pad = ~real
    h = attn.qkv(x).masked_fill(pad[..., None], 0.0)
    w, bias = attn.conv.weight[:, 0], attn.conv.bias  # (3·dim, 3), (3·dim,)
    left = 2 if causal else 1
    want = torch.zeros_like(h) + bias
    for i in range(17):
        for t in range(3):
            j = i - left + t
            if 0 <= j < 17:
                want[:, i] += w[:, t] * h[:, j]
    q, k, v = attn._split(x, pad)
    got = torch.stack([q, k, v]).permute(1, 3, 0, 2, 4).reshape(2, 17, 96)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("attention", ["transformer", "performer_relu"])
def test_qkv_conv_keeps_causality_and_ignores_padding(attention):
    _, causal = _conv_pair(attention, True)
    _, bidir = _conv_pair(attention, False)
    for model in (causal, bidir):
        with torch.no_grad():
            for block in model.blocks:
                block.attn.conv.weight.normal_()
    ids = random_ids(1, 16)
    later = ids.clone()
    later[0, 10:] = random_ids(1, 6, seed=5)
    with torch.no_grad():
        torch.testing.assert_close(causal(ids)["logits"][:, :10], causal(later)["logits"][:, :10])
        assert (bidir(ids)["logits"][:, :10] - bidir(later)["logits"][:, :10]).abs().max() > 1e-6
        # the same protein padded in a batch scores as it does alone
        padded = torch.cat([ids[:, :12], torch.full((1, 4), ALPHABET.pad_idx)], dim=1)
        for model in (causal, bidir):
            alone = model(ids[:, :12])["logits"]
            torch.testing.assert_close(model(padded)["logits"][:, :12], alone)


def test_qkv_conv_hands_attention_rows_with_unit_stride_in_the_head_dimension():
    # SDPA's fused kernels (flash, memory-efficient) refuse other strides and fall back to the
    # math path, which stores the L×L probabilities: the convolution must not cause that
    _, conv = _conv_pair("transformer", False)
    attn = conv.blocks[0].attn
    q, k, v = attn._split(torch.randn(2, 9, 32, dtype=torch.float64))
    assert q.stride(-1) == k.stride(-1) == v.stride(-1) == 1


def test_qkv_conv_gradients_match_finite_differences():
    _, model = _conv_pair("transformer", False)
    attn = model.blocks[0].attn
    with torch.no_grad():
        attn.conv.weight.normal_()
    x = torch.randn(1, 6, 32, dtype=torch.float64, requires_grad=True)
    w = attn.conv.weight.detach().clone().requires_grad_(True)

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(attn, {"conv.weight": w}, (x,))[0]

    assert torch.autograd.gradcheck(f, (x, w), eps=1e-6, atol=1e-6)


def test_qkv_conv_is_validated_and_part_of_the_architecture():
    for bad in (-1, True, 2.5, "3"):
        with pytest.raises(ConfigError, match=r"model\.qkv_conv"):
            ProteinLM(tiny_config(qkv_conv=bad), V)
    from protein_performer.model.checkpoints import architecture_mismatch

    stored = tiny_config().to_dict()
    assert architecture_mismatch(stored, tiny_config(qkv_conv=3)) == [
        "model.qkv_conv: checkpoint 0, config 3"
    ]
    del stored["qkv_conv"]  # a checkpoint from before the option: no convolution
    assert architecture_mismatch(stored, tiny_config()) == []
    assert ModelConfig.from_dict(stored).qkv_conv == 0


def test_ids_and_masks_the_model_cannot_mean_are_clear_errors():
    model = ProteinLM(tiny_config(), V, ALPHABET.pad_idx).eval()
    ids = random_ids(2, 10)
    cases = [
        (ids[0], ValueError, r"input_ids must be \(B, L\)"),
        (ids.float(), TypeError, "must be integer token ids"),
        (ids[:0], ValueError, "input_ids is empty"),
        (ids[:, :0], ValueError, "input_ids is empty"),
        (torch.full((1, 5), V), ValueError, f"token id {V} is outside the vocabulary"),
        (torch.full((1, 5), -1), ValueError, "token id -1 is outside"),
    ]
    for bad, error, message in cases:
        with pytest.raises(error, match=message):
            model(bad)
    with pytest.raises(TypeError, match="padding_mask must be bool"):
        model(ids, torch.zeros(2, 10))
    with pytest.raises(ValueError, match=r"padding_mask must have input_ids' shape \(2, 10\)"):
        model(ids, torch.zeros(2, 5, dtype=torch.bool))  # all False: it was ignored
    with pytest.raises(ValueError, match="pad_idx < vocab_size"):
        ProteinLM(tiny_config(), V, pad_idx=V)
    assert model(ids)["logits"].shape == (2, 10, V)
    with pytest.raises(TypeError, match=r"got uint8.*encode_batch"):
        model(ids.to(torch.uint8))


def test_sequences_to_a_batch_and_masks_of_another_convention():
    from protein_performer.data import encode_batch

    model = ProteinLM(tiny_config(), V, ALPHABET.pad_idx).eval()
    batch = encode_batch(["MKTAYIAKQR", "gnif ik\n*"], ALPHABET)
    a, pad = ALPHABET.index, ALPHABET.pad_idx
    expected = [
        [ALPHABET.cls_idx, *map(a, "MKTAYIAKQR"), ALPHABET.eos_idx],
        [ALPHABET.cls_idx, *map(a, "GNIFIK"), ALPHABET.eos_idx, pad, pad, pad, pad],
    ]
    assert batch["input_ids"].tolist() == expected
    assert batch["padding_mask"].tolist() == [[False] * 12, [False] * 8 + [True] * 4]
    logits = model(**batch)["logits"]
    alone = model(**encode_batch(["GNIFIK"], ALPHABET))["logits"]
    torch.testing.assert_close(logits[1, :8], alone[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="position 3"):
        encode_batch(["MK1"], ALPHABET)
    with pytest.raises(TypeError, match="wrap it in"):
        encode_batch("MKV", ALPHABET)
    # Hugging Face's attention_mask (True where to attend) is the opposite: refused
    with pytest.raises(ValueError, match="padding_mask is False at <pad> tokens"):
        model(batch["input_ids"], ~batch["padding_mask"])
    with pytest.raises(ValueError, match="padding_mask pads a whole row of tokens"):
        model(batch["input_ids"][:1], torch.ones(1, 12, dtype=torch.bool))
    # a row of <pad> only (a batch filled to a fixed size), masked as padding: accepted, and the
    # other rows are unchanged
    filled = torch.cat([batch["input_ids"], torch.full((1, 12), ALPHABET.pad_idx)])
    mask = torch.cat([batch["padding_mask"], torch.ones(1, 12, dtype=torch.bool)])
    torch.testing.assert_close(model(filled, mask)["logits"][:2], logits, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="padding_mask is False at <pad> tokens"):
        list(model.iter_attention(batch["input_ids"], ~batch["padding_mask"]))


def test_layer_head_and_probe_selections_out_of_range_are_errors():
    model = ProteinLM(tiny_config(), V, ALPHABET.pad_idx).eval()
    ids = random_ids(1, 10)
    depth, heads = model.config.depth, model.config.heads
    with pytest.raises(ValueError, match=f"layers: {depth} is not one of"):
        list(model.iter_attention(ids, layers=[depth]))
    with pytest.raises(ValueError, match=f"heads: {heads} is not one of"):
        list(model.iter_attention(ids, heads=[heads]))
    with pytest.raises(ValueError, match=r"probe=.* is outside"):
        model(ids, probe=(depth, 0))
    assert model(ids, probe=(-1, 0))["probe_attention"].shape == (1, 10, 10)
    assert len(list(model.iter_attention(ids, layers=[0]))) >= 1


def test_return_attentions_larger_than_memory_is_refused_up_front(monkeypatch):
    from protein_performer.utils import devices

    monkeypatch.setattr(devices, "memory_available", lambda: (100_000, 100_000))
    model = ProteinLM(tiny_config(), len(ALPHABET), ALPHABET.pad_idx)
    ids = random_ids(1, 60)
    depth, heads = model.config.depth, model.config.heads
    with pytest.raises(ConfigError, match=rf"every layer \({depth} × 1 × {heads} × 60 × 60\)"):
        model(ids, return_attentions=True)
    assert model(ids)["logits"].shape[:2] == (1, 60)  # without the matrices it runs


def test_a_transformer_is_not_labelled_a_hybrid():
    from protein_performer.model.config import ModelConfig

    assert ModelConfig(attention="transformer", exact_layers=[-1]).kind_label == "transformer"
    assert ModelConfig(attention="performer_relu", exact_layers=[-1]).kind_label == (
        "performer_relu+exact[-1]"
    )


def test_a_hugging_face_attention_mask_is_read_as_padding_mask():
    """``model(ids, attention_mask=...)`` (1 = a token, 0 = padding) gave a bare TypeError."""
    from protein_performer.data import encode_batch

    model = ProteinLM(tiny_config(), V, ALPHABET.pad_idx).eval()
    batch = encode_batch(["MKTAYIAKQR", "GNIFIK"], ALPHABET)
    expected = model(batch["input_ids"], batch["padding_mask"])["logits"]
    for keep in (
        ~batch["padding_mask"],
        (~batch["padding_mask"]).long(),
        (~batch["padding_mask"]).float(),
    ):
        got = model(batch["input_ids"], attention_mask=keep)["logits"]
        torch.testing.assert_close(got, expected)
    with pytest.raises(ValueError, match=r"padding_mask .* or attention_mask .* not both"):
        model(batch["input_ids"], batch["padding_mask"], attention_mask=~batch["padding_mask"])
    with pytest.raises(TypeError, match="own argument is padding_mask"):
        model(batch["input_ids"], attention_mask=[[1] * 12, [1] * 8 + [0] * 4])
    # the flipped convention is still refused by the <pad> check, not silently inverted
    with pytest.raises(ValueError, match="padding_mask is False at <pad> tokens"):
        model(batch["input_ids"], attention_mask=batch["padding_mask"])
