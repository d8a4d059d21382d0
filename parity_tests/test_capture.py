"""Capture that reaches real models: both modes, random ops, aliasing, constants, ops.

Each case is a model a user wrote for which an earlier ``from_torch`` gave a wrong
answer without an error; torch is the reference, float64, at the float64 tier:

- an in-place write through a view (``torch.export`` functionalises it exactly; the
  layer path refuses it, naming the node);
- ``if self.training:`` in a forward: ``apply(train=...)`` follows torch's mode on
  both front ends, whatever mode the module was converted in;
- stochastic depth and dropout draw from the key in training mode, and with torch's
  own draws injected the training forward and its gradients match torch;
- non-persistent buffers (a position-id table, a rotary ``inv_freq``, a causal mask)
  become constants (not params, not buffers), as in torch's ``state_dict``;
- tied weights are one parameter whose gradient sums both uses;
- the ops a traced forward commonly uses (``==``, ``<``, ``arange``, ``max(dim)``,
  ``chunk``, ``split``, ``cumsum``, ``einsum``, ``expand``, ``unbind``,
  ``new_empty``), and in-place writes on values nothing aliases (``y.relu_();
  y += 1``), on the layer path.
"""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from parity_checks._capture_parity import grads_both
from torch import nn as tnn

from jaxgrad import nn
from jaxgrad.nn.capture import fx_ops
from jaxgrad.parity import assert_parity
from parity_tests._sampling import one_in


# ----------------------------------------------------- writes through views
class WritesThroughAView(tnn.Module):
    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(3, 3)

    def forward(self, x):
        y = self.fc(x)
        flat = y.view(-1)
        flat.mul_(2)  # y doubles too
        return y


def test_write_through_a_view_is_reproduced_by_export_and_refused_by_layers(x64, rng):
    torch.manual_seed(0)
    module = WritesThroughAView().double()
    x = rng.standard_normal((2, 3))
    with pytest.raises(
        ValueError,
        match=r"node 'mul_' .* overwrites 'view' in place and "
        r"'view' is a view of another value",
    ):
        nn.from_torch(module, capture="layers")
    model, params = nn.from_torch(module, example=(torch.from_numpy(x),))
    assert type(model).__name__ == "ExportedModule"
    assert_parity(*grads_both(module, model, params, [x]))
    # the doubled result, not the unwritten one: 2·fc(x) against torch's own fc
    np.testing.assert_allclose(
        np.asarray(model.apply(params, jnp.asarray(x))),
        2 * module.fc(torch.from_numpy(x)).detach().numpy(),
        rtol=1e-15,
    )


class SafeInPlace(tnn.Module):
    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(3, 3)

    def forward(self, x):
        y = self.fc(x)
        y.mul_(2)
        y += 1  # reads the written y
        y.relu_()
        z = y * 2
        z.sub_(y)
        return z + y


def test_in_place_writes_nothing_aliases_are_reproduced_on_the_layer_path(x64, rng):
    torch.manual_seed(1)
    module = SafeInPlace().double()
    model, params = nn.from_torch(module, capture="layers")
    assert type(model).__name__ == "GraphModule"
    assert_parity(*grads_both(module, model, params, [rng.standard_normal((4, 3))]))


class WritesItsInput(tnn.Module):
    def forward(self, x):
        x.mul_(2)
        return x + 1


def test_a_forward_writing_its_input_is_refused_on_both_paths():
    x = torch.randn(2, 3)
    with pytest.raises(
        ValueError,
        match=r"overwrites 'x' in place and it is the forward's "
        r"input 'x'",
    ):
        nn.from_torch(WritesItsInput(), capture="layers")
    with pytest.raises(ValueError, match=r"writes its input in place"):
        nn.from_torch(WritesItsInput(), example=(x,), capture="export")


# ----------------------------------------------------------- both modes
class ModeBranch(tnn.Module):
    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(3, 3)

    def forward(self, x):
        if self.training:
            return self.fc(x) * 3.0
        return self.fc(x) - 1.0


# converted in train with layers, in eval with export in the default run; the two other
# pairs in the exhaustive run (CI: -m "exhaustive or long")
@pytest.mark.parametrize(
    "converted_in,capture",
    one_in(
        2,
        [
            pytest.param(mode, capture, id=f"{mode}-{capture}")
            for mode, capture in [
                ("train", "layers"),
                ("train", "export"),
                ("eval", "export"),
                ("eval", "layers"),
            ]
        ],
    ),
)
def test_apply_follows_torchs_mode_whatever_mode_the_module_was_converted_in(
    x64, rng, capture, converted_in
):
    torch.manual_seed(2)
    module = ModeBranch().double().train(converted_in == "train")
    x = rng.standard_normal((2, 3))
    model, params = nn.from_torch(module, example=(torch.from_numpy(x),), capture=capture)
    assert module.training is (converted_in == "train")  # the module's flags are restored
    for train in (True, False):
        assert_parity(*grads_both(module, model, params, [x], train=train))


# ----------------------------------------------- randomness in training
class StochasticDepthBlock(tnn.Module):
    """torchvision's ``stochastic_depth(mode='row')`` written out, with dropout."""

    def __init__(self, p=0.5):
        super().__init__()
        self.fc = tnn.Linear(4, 4)
        self.drop = tnn.Dropout(0.3)
        self.p = p

    def forward(self, x):
        y = self.drop(self.fc(x))
        if not self.training:
            return x + y
        keep = 1.0 - self.p
        size = [x.shape[0]] + [1] * (x.ndim - 1)
        noise = torch.empty(size, dtype=x.dtype, device=x.device).bernoulli_(keep)
        noise.div_(keep)
        return x + y * noise


def test_stochastic_depth_and_dropout_are_active_in_training_and_match_torchs_draws(x64, rng):
    torch.manual_seed(3)
    module = StochasticDepthBlock().double()
    x = rng.standard_normal((6, 4))
    model, params = nn.from_torch(module, example=(torch.from_numpy(x),), capture="export")
    random_ops = [n.target for n in model.train_program.random_nodes()]
    assert sorted(random_ops) == ["aten.bernoulli.p", "aten.native_dropout.default"]
    assert model.eval_program.random_nodes() == []
    # torch's draws injected: the training forward and gradients match torch
    assert_parity(*grads_both(module, model, params, [x], train=True, draws=True))
    # our own draws: keyed, different per key, rows dropped, none in eval mode
    xj = jnp.asarray(x)
    first = model.apply(params, xj, train=True, key=jax.random.key(0))
    np.testing.assert_array_equal(first, model.apply(params, xj, train=True, key=jax.random.key(0)))
    assert not np.array_equal(first, model.apply(params, xj, train=True, key=jax.random.key(1)))
    assert np.any(np.all(np.asarray(first) == x, axis=1))  # a dropped row is its input
    with pytest.raises(ValueError, match=r"random op .* needs a key"):
        model.apply(params, xj, train=True)
    evaluated = model.apply(params, xj)  # no key needed: nothing random in eval
    np.testing.assert_allclose(
        evaluated, module.eval()(torch.from_numpy(x)).detach().numpy(), rtol=1e-13
    )


def test_stochastic_depth_on_the_layer_path_is_keyed_and_off_in_eval(x64, rng):
    torch.manual_seed(3)
    module = StochasticDepthBlock(p=0.5).double()
    x = jnp.asarray(rng.standard_normal((64, 4)))
    model, params = nn.from_torch(module, capture="layers")
    assert type(model).__name__ == "GraphModule" and model.eval_nodes is not None
    first = np.asarray(model.apply(params, x, train=True, key=jax.random.key(0)))
    np.testing.assert_array_equal(first, model.apply(params, x, train=True, key=jax.random.key(0)))
    assert not np.array_equal(first, model.apply(params, x, train=True, key=jax.random.key(1)))
    dropped = np.all(first == np.asarray(x), axis=1).mean()  # whole rows: p=0.5 (+ dropout)
    assert 0.3 < dropped < 0.7, dropped
    np.testing.assert_allclose(
        model.apply(params, x),
        module.eval()(torch.from_numpy(np.asarray(x))).detach().numpy(),
        rtol=1e-13,
    )


# ------------------------------------------------ constants and tied weights
class WithConstants(tnn.Module):
    def __init__(self, n=5, d=4):
        super().__init__()
        self.embed = tnn.Embedding(10, d)
        self.pos = tnn.Embedding(n, d)
        self.register_buffer("position_ids", torch.arange(n)[None], persistent=False)
        self.register_buffer(
            "inv_freq", 1.0 / (100 ** (torch.arange(0, d, 2).double() / d)), persistent=False
        )
        self.register_buffer(
            "causal", torch.tril(torch.ones(n, n, dtype=torch.bool)), persistent=False
        )
        self.head = tnn.Linear(d, 10, bias=False)
        self.head.weight = self.embed.weight  # tied, as in GPT-2

    def forward(self, ids):
        n = ids.shape[1]
        h = self.embed(ids) + self.pos(self.position_ids[:, :n])
        angles = self.position_ids[0, :n, None].double() * self.inv_freq[None]
        h = h + torch.cat([angles.sin(), angles.cos()], dim=-1)
        scores = (h @ h.transpose(1, 2)).masked_fill(~self.causal[:n, :n], float("-inf"))
        return self.head(torch.softmax(scores, -1) @ h)


def test_non_persistent_buffers_are_constants_and_tied_weights_one_parameter(x64):
    torch.manual_seed(4)
    module = WithConstants().double()
    ids = np.array([[1, 2, 3, 4, 0], [5, 6, 7, 8, 9]])
    model, params = nn.from_torch(module, example=(torch.from_numpy(ids),))
    assert list(params) == [n for n, _ in module.named_parameters()]  # 'head.weight' is tied
    assert model.buffer_shapes() == {}
    assert sorted(model.constants.arrays) == ["causal", "inv_freq", "position_ids"]
    assert list(model.state_dict(params)) == list(module.state_dict())
    module.zero_grad(set_to_none=True)
    out = module(torch.from_numpy(ids))
    cotangent = np.linspace(-1, 1, out.numel()).reshape(out.shape)
    (out * torch.from_numpy(cotangent)).sum().backward()
    grads, ours = jax.grad(
        lambda p: (
            jnp.sum(model.apply(p, jnp.asarray(ids)) * cotangent),
            model.apply(p, jnp.asarray(ids)),
        ),
        has_aux=True,
    )(params)
    assert_parity(
        {
            "output": out.detach().numpy(),
            "grads": {n: p.grad.numpy() for n, p in module.named_parameters()},
        },
        {"output": ours, "grads": grads},
    )


class PositionIds(tnn.Module):
    """Hugging Face's pattern: an int64 ``position_ids`` buffer, sliced to the length."""

    def __init__(self, n=6, d=4):
        super().__init__()
        self.embed, self.pos = tnn.Embedding(10, d), tnn.Embedding(n, d)
        self.register_buffer("position_ids", torch.arange(n)[None], persistent=False)

    def forward(self, ids):
        return self.embed(ids) + self.pos(self.position_ids[:, : ids.shape[1]])


def test_int64_constants_run_without_x64_as_jax_canonicalises_them():
    """Without ``jax_enable_x64`` torch's int64 is JAX's int32; a NumPy int64 constant
    sliced by a node is held to that, not refused as a wrong dtype (docs/capture.md's BERT
    example crashed on ``position_ids`` so)."""
    torch.manual_seed(0)
    module = PositionIds()
    ids = np.array([[1, 2, 3], [4, 5, 6]])
    model, params = nn.from_torch(module, example=(torch.from_numpy(ids),))
    with torch.no_grad():
        assert_parity(module(torch.from_numpy(ids)).numpy(), model.apply(params, jnp.asarray(ids)))


# ------------------------------------------------------- the fx op table
class CommonOps(tnn.Module):
    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(6, 6)

    def forward(self, x):
        h = self.fc(x)
        a, b = h.chunk(2, dim=-1)
        c, d, e = torch.split(h, [1, 2, 3], dim=-1)
        values, indices = h.max(dim=-1)
        steps = torch.arange(h.shape[-1], dtype=h.dtype)
        mask = (steps < 3) == (h > 0)
        rows = torch.unbind(h, dim=0)
        mixed = torch.einsum("bi,bj->bij", a, b).sum(-1)
        total = torch.cumsum(h, dim=-1) * mask + values[:, None] * indices[:, None]
        # uninitialised memory (inf·0 made torch's output NaN now and then): only its
        # shape and dtype are used
        blank = h.new_empty((2, 3))
        return (
            total
            + mixed[:, :1].expand(-1, 6)[:, :1]
            + c
            + d.sum(-1, keepdim=True)
            + e[:, :1]
            + rows[0]
            + blank.new_zeros(blank.shape).sum()
        )


def test_common_ops_on_the_layer_path_match_torch(x64, rng):
    torch.manual_seed(5)
    module = CommonOps().double()
    model, params = nn.from_torch(module, capture="layers")
    assert type(model).__name__ == "GraphModule"
    assert_parity(*grads_both(module, model, params, [rng.standard_normal((4, 6))]))


def test_register_op_refuses_to_replace_a_built_in_unless_asked():
    original = fx_ops.OPS["torch.cat"]
    with pytest.raises(
        ValueError,
        match=r"'torch.cat' is already in the op table .* "
        r"`replace=True`",
    ):
        fx_ops.register_op("torch.cat", lambda tensors, dim=0: None)
    try:
        fx_ops.register_op("torch.cat", original.fn, replace=True)
        assert fx_ops.OPS["torch.cat"].fn is original.fn
    finally:
        fx_ops.OPS["torch.cat"] = original


class DropsAlways(tnn.Module):
    def forward(self, x):
        return TF.dropout(x, 0.5)  # no `training=`: torch drops in eval mode too


def test_functional_dropout_without_training_drops_in_eval_as_torch_does(x64):
    module = DropsAlways().eval()
    x = torch.ones(200, dtype=torch.float64)
    assert (module(x) == 0).any()  # torch: dropped although in eval mode
    model, params = nn.from_torch(module, capture="layers")
    with pytest.raises(ValueError, match=r"torch drops even in eval mode here"):
        model.apply(params, jnp.asarray(x.numpy()))
    dropped = np.asarray(model.apply(params, jnp.asarray(x.numpy()), key=jax.random.key(0)))
    assert set(np.unique(dropped)) == {0.0, 2.0}


# ------------------------------------------------------------ the doctor
class LayerNormNet(tnn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = tnn.Linear(4, 8)
        self.norm = tnn.LayerNorm(8)
        self.act = tnn.GELU()
        self.fc2 = tnn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.act(self.norm(self.fc1(x)))) + x[:, :3]


def test_the_doctor_localises_a_captured_program_by_torch_module_path(x64):
    import dataclasses

    from jaxgrad.doctor import diagnose

    torch.manual_seed(6)
    net = LayerNormNet().double()
    x = torch.randn(5, 4, dtype=torch.float64)
    model, params = nn.from_torch(net, example=(x,), capture="export")
    clean = diagnose(net, (model, params), x)
    assert clean.clean and [row["path"] for row in clean.layers] == ["fc1", "norm", "act", "fc2"]
    # a planted mistake in the captured program: LayerNorm's eps 1e-5 -> 1e-3
    program = model.eval_program
    nodes = tuple(
        dataclasses.replace(n, args=n.args[:4] + (1e-3,))
        if n.target == "aten.native_layer_norm.default"
        else n
        for n in program.nodes
    )
    planted = dataclasses.replace(model, eval_program=dataclasses.replace(program, nodes=nodes))
    report = diagnose(net, (planted, params), x)
    assert report.first_layer == "norm", report.verdict
    own = {row["path"]: row["injected"] for row in report.layers}
    assert own["act"] < 1e-12 and own["fc2"] < 1e-12  # later layers are fine on torch's input
    assert "captured with torch.export" in report.verdict


class IntegerDivision(tnn.Module):
    def forward(self, a, b):
        return torch.div(a, b, rounding_mode="trunc"), torch.div(a, b, rounding_mode="floor")


def test_traced_integer_division_with_a_rounding_mode_stays_integer_like_torch(x64):
    a, b = torch.tensor([7, -7, 7, -7]), torch.tensor([2, 2, -2, -2])
    model, params = nn.from_torch(IntegerDivision(), capture="layers")
    ours = model.apply(params, jnp.asarray(a.numpy()), jnp.asarray(b.numpy()))
    assert_parity([t.numpy() for t in IntegerDivision()(a, b)], list(ours))  # dtype int64 too


class NoisyLayer(tnn.Module):
    """Noise injection the way research code writes it: rand, rand_like, randn_like,
    and a shuffle of the batch (randperm)."""

    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        if self.training:
            h = h + 0.1 * torch.rand_like(h) + 0.01 * torch.randn_like(h)
            h = h * (torch.rand(h.shape[0], 1, dtype=h.dtype) < 0.8)
            h = h[torch.randperm(h.shape[0])]
        return h


def test_uniform_normal_and_permutation_draws_match_torch(x64, rng):
    torch.manual_seed(7)
    module = NoisyLayer().double()
    x = rng.standard_normal((5, 4))
    model, params = nn.from_torch(module, example=(torch.from_numpy(x),), capture="export")
    targets = sorted(n.target for n in model.train_program.random_nodes())
    assert targets == [
        "aten.rand.default",
        "aten.rand_like.default",
        "aten.randn_like.default",
        "aten.randperm.default",
    ]
    assert_parity(*grads_both(module, model, params, [x], train=True, draws=True))
    draws = jax.random.key(0)
    ours = np.asarray(model.apply(params, jnp.asarray(x), train=True, key=draws))
    assert not np.array_equal(
        ours, model.apply(params, jnp.asarray(x), train=True, key=jax.random.key(1))
    )


# ------------------------------------------------------- attention's safe softmax
class MaskedAttention(tnn.Module):
    """Self-attention through ``F.scaled_dot_product_attention`` with a boolean mask
    that leaves query 1 no key at all (torch: output 0 there, gradient 0)."""

    def __init__(self):
        super().__init__()
        self.qkv = tnn.Linear(4, 12)
        self.register_buffer(
            "attend",
            torch.tensor([[True, False, True], [False, False, False], [True, True, True]]),
            persistent=False,
        )

    def forward(self, x):
        q, k, v = self.qkv(x).unflatten(-1, (3, 2, 2)).permute(2, 0, 3, 1, 4)
        return TF.scaled_dot_product_attention(q, k, v, attn_mask=self.attend)


def test_exported_attention_keeps_safe_softmax_whole_and_matches_torch_on_a_fully_masked_row(x64):
    torch.manual_seed(7)
    module = MaskedAttention().double()
    x = np.random.default_rng(7).standard_normal((2, 3, 4))
    model, params = nn.from_torch(module, example=(torch.from_numpy(x),), capture="export")
    targets = [node.target for node in model.eval_program.nodes]
    assert "aten._safe_softmax.default" in targets  # not softmax, eq, all and where
    expected, got = grads_both(module, model, params, [x])
    assert np.all(np.isfinite(np.asarray(got["grads"]["qkv.weight"])))
    assert_parity(expected, got)
    assert not np.any(np.asarray(got["output"])[:, :, 1])  # the query with no key


# ------------------------------------------------- conversion without side effects
class CountsItsCalls(tnn.Module):
    """Writes a module tensor directly in its forward, as timm's BatchNormAct2d does
    (``self.num_batches_tracked.add_(1)``): torch.fx runs that line on the real buffer."""

    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(3, 3)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.calls.add_(1)
        return self.fc(x)


def _state_of(module):
    return (
        {k: v.clone() for k, v in module.state_dict().items()},
        {n: m.training for n, m in module.named_modules()},
        {n: p.requires_grad for n, p in module.named_parameters()},
    )


def _assert_untouched(module, before):
    state, flags, requires = _state_of(module)
    assert flags == before[1] and requires == before[2]
    assert state.keys() == before[0].keys()
    changed = [k for k in state if not torch.equal(state[k], before[0][k])]
    assert not changed, f"from_torch changed {changed}"


@pytest.mark.parametrize("capture", ["auto", "layers", "export"])
def test_from_torch_leaves_the_module_as_it_found_it(capture, x64):
    module = CountsItsCalls().double().eval()
    before = _state_of(module)
    try:
        nn.from_torch(module, example=(torch.zeros(2, 3, dtype=torch.float64),), capture=capture)
    except ValueError:
        assert capture == "layers"  # an in-place write to a module tensor is refused there
    _assert_untouched(module, before)


def test_from_torch_leaves_timms_batchnormact_untouched(x64):
    import _zoo_models

    if not _zoo_models.installed("timm"):
        pytest.skip("timm (the zoo extra) is not installed")
    timm = _zoo_models.import_library("timm")
    module = tnn.Sequential(tnn.Conv2d(3, 4, 3), timm.layers.BatchNormAct2d(4)).double()
    before = _state_of(module)
    model, params = nn.from_torch(module, example=(torch.zeros(2, 3, 8, 8, dtype=torch.float64),))
    _assert_untouched(module, before)
    assert int(module[1].num_batches_tracked) == 0


class RunsOnlyChosenExperts(tnn.Module):
    """A mixture-of-experts layer as Hugging Face's eager experts run it: a Python loop
    over the experts some token chose (``nonzero``), each on its tokens
    (``torch.where``): shapes and the loop count depend on the routing."""

    def __init__(self):
        super().__init__()
        self.router, self.experts = (
            tnn.Linear(4, 3),
            tnn.ModuleList(tnn.Linear(4, 4) for _ in range(3)),
        )

    def forward(self, x):
        choice = self.router(x).argmax(-1)
        out = torch.zeros_like(x)
        hit = torch.nn.functional.one_hot(choice, 3).sum(0).nonzero()
        for expert in hit:
            rows = torch.where(choice == expert[0])[0]
            out = out.index_add(0, rows, self.experts[0](x[rows]))
        return out


def test_a_loop_over_data_dependent_experts_is_refused_with_what_to_do(x64):
    with pytest.raises(ValueError, match=r"depend on tensor values .*experts_implementation"):
        nn.from_torch(
            RunsOnlyChosenExperts().double(),
            example=(torch.randn(5, 4, dtype=torch.float64),),
            capture="export",
        )


# ----------------------------------------------- namedtuple outputs
class AuxOutputs(collections.namedtuple("AuxOutputs", ["logits", "aux_logits"])):
    """GoogLeNet's and Inception v3's training output: the logits and an auxiliary
    head's, as a namedtuple."""


class WithAuxHead(tnn.Module):
    def __init__(self):
        super().__init__()
        self.body = tnn.Linear(3, 4)
        self.head = tnn.Linear(4, 2)
        self.aux = tnn.Linear(4, 2)

    def forward(self, x):
        hidden = torch.tanh(self.body(x))
        if self.training:
            return AuxOutputs(self.head(hidden), self.aux(hidden))
        return self.head(hidden)


def test_a_namedtuple_output_converts_as_the_tuple_of_its_fields(x64, rng):
    """torch's pytree files every namedtuple under ``collections.namedtuple``: captured,
    its fields come back as a tuple in their order, and the gradient through both heads
    is torch's."""
    torch.manual_seed(3)
    module = WithAuxHead().double().train()
    x = rng.standard_normal((5, 3))
    model, params = nn.from_torch(module, example=(torch.from_numpy(x),), capture="export")
    weights = [np.linspace(-1.0, 1.0, 10).reshape(5, 2), np.linspace(2.0, 0.5, 10).reshape(5, 2)]
    out = module(torch.from_numpy(x))
    assert isinstance(out, AuxOutputs)
    sum(((o * torch.from_numpy(w)).sum() for o, w in zip(out, weights)), torch.zeros(())).backward()
    reference = {
        "output": [o.detach().numpy() for o in out],
        "grads": {n: p.grad.numpy() for n, p in module.named_parameters()},
    }

    def objective(params):
        output = model.apply(params, jnp.asarray(x), train=True)
        return sum((o * w).sum() for o, w in zip(output, weights)), output

    (_, output), grads = jax.value_and_grad(objective, has_aux=True)(params)
    assert isinstance(output, tuple) and len(output) == 2
    assert_parity(reference, {"output": list(output), "grads": grads})


# ----------------------------------------------- attention's output layout
class TransposedAttention(tnn.Module):
    """Hugging Face's BEiT/Data2VecVision attention: heads split by a view and a
    transpose, SDPA, then ``permute(...).contiguous().view(...)``. Traced on the CPU flash
    kernel, whose output is laid out (batch, length, heads, dim), the ``contiguous`` is a
    no-op and leaves the graph; the math form jaxgrad decomposes SDPA to is laid out
    (batch, heads, length, dim), and the ``view`` then fails."""

    def __init__(self, width=32, heads=2):
        super().__init__()
        self.qkv = tnn.Linear(width, 3 * width)
        self.heads = heads

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = (
            t.view(batch, length, self.heads, width // self.heads).transpose(1, 2)
            for t in self.qkv(x).chunk(3, dim=-1)
        )
        out = TF.scaled_dot_product_attention(q, k, v)
        return out.permute(0, 2, 1, 3).contiguous().view(batch, length, width)


def test_attention_transposed_back_and_viewed_converts_and_matches_torch(x64, rng):
    torch.manual_seed(4)
    module = TransposedAttention().double()
    x = rng.standard_normal((2, 17, 32))
    model, params = nn.from_torch(module, example=(torch.from_numpy(x),), capture="export")
    for train in (True, False):
        assert_parity(*grads_both(module, model, params, [x], train=train))
