"""One capture, every shape: dynamic sizes and the torch-free artifact, against torch.

``from_torch`` captures with ``torch.export``'s dynamic dimensions: a model converted
with a batch of 2 runs at a batch of 3 or 5, a sequence model at other lengths, and
``batch_one=True`` adds torch's program at batch 1 (torch captures sizes 0 and 1 apart).
Each shape is checked the lessons' way: torch's forward and ``backward()`` on the same
weights and inputs, jaxgrad's ``apply`` and ``jax.grad``, compared at the float64 tier.
A shape torch's program cannot take is refused before JAX runs, naming the input, the
dimension and the constraint. ``save_exported`` writes the program with symbolic sizes
(``jax.export``) and the weights; ``load_exported`` runs it in a process that never
imports torch, and its outputs are compared with torch's.
"""

import dataclasses
import json
import subprocess
import sys
import textwrap
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch import nn as tnn

from jaxgrad import nn
from jaxgrad.nn.capture.program import TensorMeta
from jaxgrad.nn.capture.refs import Ref
from jaxgrad.nn.capture.shapes import SymDim
from jaxgrad.parity import assert_parity


class ConvHead(tnn.Module):
    """A convolution, BatchNorm and a Linear after the flatten: the Linear fixes the
    product of the two spatial sizes (a guard torch records), the batch stays free."""

    def __init__(self):
        super().__init__()
        self.conv = tnn.Conv2d(3, 4, 3)
        self.bn = tnn.BatchNorm2d(4)
        self.fc = tnn.Linear(4 * 6 * 6, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.flatten(1)) + y.mean()


class TinyLM(tnn.Module):
    """Embedding, learned positions over ``arange(length)``, causal attention: the
    sequence length is read as a size (``sym_size``) and built into tensors."""

    def __init__(self, vocab=11, width=8):
        super().__init__()
        self.tokens = tnn.Embedding(vocab, width)
        self.positions = tnn.Embedding(32, width)
        self.attention = tnn.MultiheadAttention(width, 2, batch_first=True)
        self.head = tnn.Linear(width, vocab)

    def forward(self, ids):
        length = ids.shape[1]
        x = self.tokens(ids) + self.positions(torch.arange(length))
        mask = torch.triu(torch.ones(length, length, dtype=torch.bool), 1)
        y, _ = self.attention(x, x, x, attn_mask=mask, need_weights=False)
        return self.head(y)


def torch_values(module, x, *, train=False):
    """torch's output, every parameter gradient and the input's gradient of
    ``sum(output * c)``, ``c`` a fixed ramp."""
    module.train(train)
    module.zero_grad()
    x_torch = torch.from_numpy(x)
    floating = x_torch.is_floating_point()
    if floating:
        x_torch.requires_grad_(True)
    out = module(x_torch)
    cotangent = np.linspace(-1.0, 1.0, out.numel()).reshape(out.shape)
    (out * torch.from_numpy(cotangent)).sum().backward()
    values = {
        "output": out.detach().numpy(),
        "grads": {n: p.grad.numpy() for n, p in module.named_parameters()},
    }
    if floating:
        values["input"] = x_torch.grad.numpy()
    return values, cotangent


def jax_values(model, params, x, cotangent, *, buffers=None, train=False):
    def objective(params, x):
        if buffers is None:
            out = model.apply(params, x, train=train)
        else:
            out, _ = model.apply(params, x, buffers=buffers, train=train)
        return jnp.sum(out * cotangent), out

    floating = np.issubdtype(x.dtype, np.floating)
    argnums = (0, 1) if floating else 0
    grads, out = jax.grad(objective, argnums=argnums, has_aux=True)(params, jnp.asarray(x))
    values = {"output": out, "grads": grads[0] if floating else grads}
    if floating:
        values["input"] = grads[1]
    return values


@pytest.fixture(scope="module")
def captured():
    """ConvHead captured once for the module (float64), with its batch-1 program."""
    torch.manual_seed(0)
    module = ConvHead().double()
    example = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    with jax.enable_x64(True):
        model, params, buffers = nn.from_torch(
            module, (example,), capture="export", with_buffers=True, batch_one=True
        )
    return module, model, params, buffers


@pytest.fixture
def conv_head(x64, captured):
    module, model, params, buffers = captured
    start = {k: v.clone() for k, v in module.state_dict().items()}
    yield module, model, params, buffers
    module.load_state_dict(start)  # a test's training forward moved its statistics


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_one_capture_runs_every_batch_size_as_torch(conv_head, train, rng):
    module, model, params, buffers = conv_head
    for batch in (2, 3, 5, 1):  # 1: the batch_one program
        x = rng.standard_normal((batch, 3, 8, 8))
        reference, cotangent = torch_values(module, x, train=train)
        candidate = jax_values(model, params, x, cotangent, buffers=buffers, train=train)
        assert_parity(reference, candidate, name=f"batch {batch}")


def test_training_statistics_at_another_batch_size_are_torchs(conv_head, rng):
    module, model, params, buffers = conv_head
    x = rng.standard_normal((5, 3, 8, 8))
    module.train()
    module(torch.from_numpy(x))
    _, new_buffers = model.apply(params, x, buffers=buffers, train=True)
    assert_parity(
        {k: v.numpy() for k, v in module.state_dict().items() if k in new_buffers},
        dict(new_buffers),
    )


@pytest.fixture(scope="module")
def tiny_lm():
    """TinyLM captured once for the module (float64) with token ids of 2 x 16."""
    torch.manual_seed(1)
    module = TinyLM().double()
    with jax.enable_x64(True):
        model, params = nn.from_torch(module, (torch.randint(0, 11, (2, 16)),), capture="export")
    return module, model, params


def test_sequence_model_runs_every_length_and_batch(x64, tiny_lm, rng):
    module, model, params = tiny_lm
    assert not model.shapes.static
    for batch, length in ((3, 24), (4, 5)):
        ids = rng.integers(0, 11, (batch, length))
        reference, cotangent = torch_values(module, ids)
        assert_parity(
            reference, jax_values(model, params, ids, cotangent), name=f"{batch}x{length}"
        )


class HalfGradientRound(torch.autograd.Function):
    """Rounding forward, half the incoming gradient backward: not the forward's
    derivative, so only the Function's own backward gives torch's gradients."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * 0.5


class Quantised(tnn.Module):
    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(6, 4)

    def forward(self, x):
        h = self.fc(x)
        with torch.no_grad():
            scale = h.abs().amax(dim=1, keepdim=True) + 1
        return HalfGradientRound.apply(h * 3 / scale) + h.detach() * 0.1


def test_autograd_in_the_forward_keeps_torchs_gradients_at_every_batch_size(x64, rng):
    torch.manual_seed(2)
    module = Quantised().double()
    model, params = nn.from_torch(
        module, (torch.zeros(2, 6, dtype=torch.float64),), capture="export"
    )
    assert not model.shapes.static  # the Function's own programs kept symbolic sizes too
    for batch in (2, 3, 7):
        x = rng.standard_normal((batch, 6))
        reference, cotangent = torch_values(module, x)
        assert_parity(reference, jax_values(model, params, x, cotangent), name=f"batch {batch}")


def test_a_batch_of_one_without_its_program_is_refused_naming_the_range(conv_head):
    _, model, params, buffers = conv_head
    model = dataclasses.replace(model, variants=())  # what batch_one=False captures
    with pytest.raises(ValueError, match=r"input 0 dim 0 must be >= 2 .*batch_one=True"):
        model.apply(params, np.zeros((1, 3, 8, 8)), buffers=buffers)


def test_a_size_the_linear_fixes_is_refused_naming_input_dimension_and_size(x64):
    class Rows(tnn.Module):
        def __init__(self):
            super().__init__()
            self.fc = tnn.Linear(8, 3)

        def forward(self, x):  # (batch, rows, 8): the Linear fixes the last size
            return self.fc(x).sum(1)

    model, params = nn.from_torch(
        Rows().double(), (torch.zeros(2, 4, 8, dtype=torch.float64),), capture="export"
    )
    assert model.apply(params, np.zeros((3, 7, 8))).shape == (3, 3)  # batch, rows: free
    with pytest.raises(
        ValueError,
        match=r"input 0 dim 2 must be 8, got 9 \(torch.export fixed "
        r"this size while capturing",
    ):
        model.apply(params, np.zeros((2, 4, 9)))


def test_a_guard_on_several_sizes_is_refused_naming_it(conv_head):
    _, model, params, buffers = conv_head
    with pytest.raises(
        ValueError,
        match=r"break a condition .*input 0 dim 3.*input 0 dim 2"
        r".*== 144.*got input 0 dim 3 = 9",
    ):
        model.apply(params, np.zeros((2, 3, 9, 9)), buffers=buffers)


def test_a_size_the_code_branches_on_stays_fixed_and_the_message_names_the_line(x64):
    class Branch(tnn.Module):
        def forward(self, x):
            if x.shape[1] == 3:  # torch specialises the size it branches on
                return x * 2
            return x

    model, params = nn.from_torch(
        Branch(), (torch.zeros(2, 3, dtype=torch.float64),), capture="export"
    )
    assert model.apply(params, np.ones((5, 3))).tolist() == [[2.0] * 3] * 5
    with pytest.raises(
        ValueError,
        match=r"input 0 dim 1 must be 3, got 4 .*"
        r"test_dynamic_shapes.py:\d+ `if x.shape\[1\] == 3",
    ):
        model.apply(params, np.ones((5, 4)))


def test_static_capture_is_the_examples_shapes_and_says_so(conv_head):
    module, _, _, _ = conv_head
    model, params, buffers = nn.from_torch(
        module,
        (torch.zeros(2, 3, 8, 8, dtype=torch.float64),),
        capture="export",
        with_buffers=True,
        dynamic_shapes=None,
    )
    assert "dynamic_shapes=None" in model.shapes.static
    with pytest.raises(ValueError, match=r"input 0 dim 0 must be 2, got 3 .*example's shapes"):
        model.apply(params, np.zeros((3, 3, 8, 8)), buffers=buffers)


# ---------------------------------------------------------------- the artifact
RUN_WITHOUT_TORCH = textwrap.dedent("""
    import sys
    import jax
    import numpy as np
    jax.config.update("jax_enable_x64", True)
    from jaxgrad.nn import load_exported

    artifact = load_exported(sys.argv[1])
    data = np.load(sys.argv[2])
    result = {}
    for name in data.files:
        out = artifact(data[name])
        if artifact.train:
            out, buffers = out
            result[name + ".buffers"] = {k: np.asarray(v).tolist() for k, v in buffers.items()}
        result[name] = np.asarray(out).tolist()
    try:
        artifact(np.zeros((2, 3, 9, 9)))
    except ValueError as error:
        result["refusal"] = str(error)
    result["torch imported"] = "torch" in sys.modules
    print("RESULT" + __import__("json").dumps(result))
""")


def run_without_torch(artifact, inputs, tmp_path):
    np.savez(tmp_path / "inputs.npz", **inputs)
    done = subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT_TORCH, str(artifact), str(tmp_path / "inputs.npz")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


@pytest.mark.parametrize(
    "train", [False, pytest.param(True, marks=pytest.mark.long)], ids=["eval", "train"]
)  # train: CI's long run (a second process)
def test_the_artifact_runs_without_torch_at_every_batch_size(conv_head, train, tmp_path, rng):
    module, model, params, buffers = conv_head
    path = tmp_path / "convhead.jaxgrad"
    nn.save_exported(path, model, params, buffers, train=train)
    inputs = {f"batch{b}": rng.standard_normal((b, 3, 8, 8)) for b in (1, 2, 5)}
    result = run_without_torch(path, inputs, tmp_path)
    assert result["torch imported"] is False
    assert "input 0 dim 3" in result["refusal"] and "== 144" in result["refusal"]
    start = {k: v.clone() for k, v in module.state_dict().items()}
    for name, x in inputs.items():
        module.load_state_dict(start)
        module.train(train)
        reference = module(torch.from_numpy(x)).detach().numpy()
        assert_parity(reference, np.asarray(result[name]), name=name)
        if train:
            assert_parity(
                {k: v.numpy() for k, v in module.state_dict().items() if k in buffers},
                {k: np.asarray(v) for k, v in result[name + ".buffers"].items()},
                name=f"{name} statistics",
            )
    module.load_state_dict(start)


def test_the_artifact_holds_state_dict_weights_and_symbolic_sizes(conv_head, tmp_path):
    _, model, params, buffers = conv_head
    path = tmp_path / "convhead.jaxgrad"
    nn.save_exported(path, model, params, buffers)
    artifact = nn.load_exported(path)
    assert list(artifact.params) == list(params) and list(artifact.buffers) == list(buffers)
    for name, value in params.items():
        np.testing.assert_array_equal(artifact.params[name], value)
    with zipfile.ZipFile(path) as archive:
        meta = json.loads(archive.read("meta.json"))
    assert [p["file"] for p in meta["programs"]] == ["program0.jaxexport", "program1.jaxexport"]
    assert meta["platforms"] == ["cpu", "cuda"]
    first = meta["programs"][0]["input_meta"][0][1]["shape"]
    assert [isinstance(size, dict) for size in first] == [True, False, True, True]


def test_load_exported_refuses_what_it_cannot_read(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not an artifact")
    with pytest.raises(ValueError, match="not a jaxgrad exported artifact"):
        nn.load_exported(text)
    other = tmp_path / "other.jaxgrad"
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("meta.json", json.dumps({"format": "jaxgrad-exported/99"}))
    with pytest.raises(
        ValueError,
        match=r"format 'jaxgrad-exported/99'.*reads "
        r"'jaxgrad-exported/1'",
    ):
        nn.load_exported(other)
    with pytest.raises(ValueError, match="not a jaxgrad exported artifact"):
        nn.load_exported(tmp_path / "missing.jaxgrad")


def test_save_exported_refuses_a_layer_path_model(x64):
    model, params = nn.from_torch(tnn.Linear(3, 2).double())
    with pytest.raises(TypeError, match=r"capture=\"export\""):
        nn.save_exported("unused.jaxgrad", model, params)


def test_batch_one_where_torch_cannot_train_a_batch_of_one(x64, rng):
    """BatchNorm1d over one value per channel: torch's training forward refuses a
    batch of 1, its evaluation forward runs it. The batch-1 program is then evaluation
    mode only, and training at batch 1 refuses with torch's own reason."""
    torch.manual_seed(3)
    module = tnn.Sequential(tnn.Linear(4, 3), tnn.BatchNorm1d(3)).double()
    model, params, buffers = nn.from_torch(
        module,
        (torch.zeros(4, 4, dtype=torch.float64),),
        capture="export",
        with_buffers=True,
        batch_one=True,
    )
    x = rng.standard_normal((1, 4))
    module.eval()
    out, _ = model.apply(params, x, buffers=buffers)
    assert_parity(module(torch.from_numpy(x)).detach().numpy(), np.asarray(out))
    module.train()
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        module(torch.from_numpy(x))
    with pytest.raises(
        ValueError,
        match=r"train=True\) at these sizes: torch cannot run its "
        r"training forward .*Expected more than 1 value",
    ):
        model.apply(params, x, buffers=buffers, train=True)


def test_a_wrong_shape_at_another_size_is_caught_as_a_table_bug(x64, tiny_lm, rng):
    """Every node's result is checked against the shape torch recorded, its symbols
    bound from the inputs given: a table entry wrong only at sizes other than the
    example's (planted: a node keeping the example's first 2 rows where torch's
    program keeps the batch) passes at batch 2 and is caught at batch 3."""
    _, model, params = tiny_lm
    program = model.eval_program
    index, head = next(
        (i, n)
        for i, n in enumerate(program.nodes)
        if isinstance(n.meta, TensorMeta) and n.meta.shape and isinstance(n.meta.shape[0], SymDim)
    )
    planted_node = dataclasses.replace(
        head, name="planted", target="aten.slice.Tensor", args=(Ref(head.name), 0, 0, 2), kwargs=()
    )
    nodes = program.nodes[: index + 1] + (planted_node,) + program.nodes[index + 1 :]
    planted = dataclasses.replace(model, eval_program=dataclasses.replace(program, nodes=nodes))
    planted.apply(params, rng.integers(0, 11, (2, 16)))
    with pytest.raises(ValueError, match=r"node 'planted' \(aten.slice.Tensor\).*This is a bug"):
        planted.apply(params, rng.integers(0, 11, (3, 16)))


def test_a_max_pool_in_the_artifact_picks_torchs_position(x64, tmp_path):
    """With symbolic sizes the max pool is one reduce_window over (value, index) pairs;
    torch's choice must survive any combining order: the first of tied maxima, a NaN
    over numbers, a real -inf over the padding. Values and indices against torch."""

    class Pool(tnn.Module):
        def forward(self, x):
            return torch.nn.functional.max_pool2d(x, 3, 2, padding=1, return_indices=True)

    x = np.round(np.random.default_rng(5).standard_normal((3, 2, 9, 7)))  # many ties
    x[0, 0, :3, :3] = -np.inf
    x[1, 1, 4, 4] = np.nan
    x[1, 1, 4, 5] = np.nan
    model, params = nn.from_torch(
        Pool(), (torch.zeros(2, 2, 9, 7, dtype=torch.float64),), capture="export"
    )
    nn.save_exported(tmp_path / "pool.jaxgrad", model, params)
    loaded = nn.load_exported(tmp_path / "pool.jaxgrad")
    for batch in (3, 2):
        values, indices = Pool()(torch.from_numpy(x[:batch]))
        got_values, got_indices = loaded(x[:batch])
        np.testing.assert_array_equal(np.asarray(got_indices), indices.numpy())
        np.testing.assert_array_equal(np.asarray(got_values), values.numpy())


def test_a_strided_view_in_the_artifact_is_torchs_at_every_batch_size(x64, tmp_path):
    """``as_strided`` with the batch symbolic (Swin's decomposition has one): the
    gather's index is built with the sizes as ``jax.export`` dimension variables."""

    class Windows(tnn.Module):
        def forward(self, x):  # (batch, 12): overlapping windows of 4 every 2 per row
            return x.as_strided((x.shape[0], 5, 4), (12, 2, 1)) * 2.0

    example = torch.zeros(2, 12, dtype=torch.float64)
    model, params = nn.from_torch(Windows(), (example,), capture="export")
    assert any(node.target == "aten.as_strided.default" for node in model.eval_program.nodes)
    nn.save_exported(tmp_path / "windows.jaxgrad", model, params)
    loaded = nn.load_exported(tmp_path / "windows.jaxgrad")
    x = np.random.default_rng(7).standard_normal((5, 12))
    for batch in (3, 5, 2):
        expected = Windows()(torch.from_numpy(x[:batch])).numpy()
        np.testing.assert_array_equal(np.asarray(loaded(x[:batch])), expected)
        np.testing.assert_array_equal(np.asarray(model.apply(params, x[:batch])), expected)


class ViewWrite(tnn.Module):
    """A write through a view of a Linear's output (``y.view(-1).mul_(0.5)``): a dynamic
    capture's functionalisation leaves a dead regenerated view of the Linear's inner
    ``addmm`` in torch's graph."""

    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        y.view(-1).mul_(0.5)
        return torch.relu(y)


def test_no_node_of_a_dynamic_capture_is_left_unread(x64):
    torch.manual_seed(0)
    module = ViewWrite().double()
    model, _ = nn.from_torch(module, (torch.zeros(2, 3, 8, dtype=torch.float64),), capture="export")
    for program in (model.train_program, model.eval_program):
        read = {
            ref.name
            for node in program.nodes
            for ref in jax.tree_util.tree_leaves(
                (node.args, node.kwargs), is_leaf=lambda v: isinstance(v, Ref)
            )
            if isinstance(ref, Ref)
        }
        read |= {
            ref.name
            for ref in jax.tree_util.tree_leaves(
                program.outputs, is_leaf=lambda v: isinstance(v, Ref)
            )
            if isinstance(ref, Ref)
        }
        unread = [node.name for node in program.nodes if node.name not in read]
        assert not unread, unread


def test_the_nnx_twin_of_a_dynamic_capture_runs_the_linear_as_stock_nnx(x64, rng):
    """The dead view read ``addmm`` from outside ``fc``'s region, which then had two
    outputs and stayed in the program (the parity report's nnx row failed on it)."""
    from flax import nnx

    from jaxgrad.flax import grads_to_torch, to_nnx

    torch.manual_seed(0)
    module = ViewWrite().double().eval()
    twin = to_nnx(module, example=(torch.zeros(2, 3, 8, dtype=torch.float64),))
    assert twin.stock_layers == {"fc": "Linear"}
    x = rng.standard_normal((4, 5, 8))  # another batch and length than the example's
    out = module(torch.from_numpy(x))
    cotangent = np.linspace(-1.0, 1.0, out.numel()).reshape(out.shape)
    (out * torch.from_numpy(cotangent)).sum().backward()

    def objective(twin):
        value = twin(jnp.asarray(x))
        return jnp.sum(value * cotangent), value

    (_, value), grads = nnx.value_and_grad(objective, has_aux=True)(twin)
    assert_parity(
        {
            "output": out.detach().numpy(),
            "grads": {n: p.grad.numpy() for n, p in module.named_parameters()},
        },
        {"output": value, "grads": grads_to_torch(twin, grads)},
    )


def test_dynamic_batch_only_keeps_the_other_sizes_and_says_who_fixed_them(conv_head, rng):
    module, _, _, _ = conv_head
    model, params, buffers = nn.from_torch(
        module,
        (torch.zeros(2, 3, 8, 8, dtype=torch.float64),),
        capture="export",
        with_buffers=True,
        dynamic_shapes="batch",
    )
    for batch in (3, 6):
        x = rng.standard_normal((batch, 3, 8, 8))
        reference, cotangent = torch_values(module, x)
        assert_parity(
            reference,
            jax_values(model, params, x, cotangent, buffers=buffers),
            name=f"batch {batch}",
        )
    # with every size dynamic this is a guard over both sides (4*(H-2)*(W-2) == 144)
    with pytest.raises(
        ValueError,
        match=r"input 0 dim 2 must be 8, got 9 .*"
        r"dynamic_shapes='batch'.*first size",
    ):
        model.apply(params, np.zeros((2, 3, 9, 9)), buffers=buffers)
    for capture in ("export", "layers"):  # refused before either front end runs
        with pytest.raises(ValueError, match=r"`dynamic_shapes` must be 'auto', 'batch', None"):
            nn.from_torch(
                module,
                (torch.zeros(2, 3, 8, 8, dtype=torch.float64),),
                capture=capture,
                dynamic_shapes="all",
            )


AVERAGE_POOLS = {
    "k3 s2 p1 ceil, padding counted": dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    "k3 s2 p1 ceil, padding not counted": dict(
        kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False
    ),
    "k2 s2 ceil (timm's avg2 downsampling)": dict(
        kernel_size=2, stride=2, ceil_mode=True, count_include_pad=False
    ),
    "k3 s1 p1 divisor 4": dict(kernel_size=3, stride=1, padding=1, divisor_override=4),
}


@pytest.mark.parametrize("options", list(AVERAGE_POOLS.values()), ids=list(AVERAGE_POOLS))
def test_an_average_pool_in_the_artifact_is_torchs_at_every_size(x64, tmp_path, options):
    """With symbolic image sides (timm's CoAtNet downsamples so) the average pool is a
    reduce_window of sums over one of ones; ceil_mode pads the right by stride - 1.
    Odd and even sides, against torch in float64."""

    class Pool(tnn.Module):
        def forward(self, x):
            return torch.nn.functional.avg_pool2d(x, **options)

    model, params = nn.from_torch(
        Pool(), (torch.zeros(2, 2, 8, 6, dtype=torch.float64),), capture="export"
    )
    nn.save_exported(tmp_path / "pool.jaxgrad", model, params)
    loaded = nn.load_exported(tmp_path / "pool.jaxgrad")
    rng = np.random.default_rng(11)
    for shape in ((3, 2, 9, 7), (2, 2, 6, 10), (4, 2, 5, 5)):
        x = rng.standard_normal(shape)
        assert_parity(Pool()(torch.from_numpy(x)).numpy(), np.asarray(loaded(x)), name=f"{shape}")


def test_a_ceil_mode_pool_torch_may_shorten_is_refused_in_the_artifact(x64, tmp_path):
    class Pool(tnn.Module):
        def forward(self, x):  # padding + stride > kernel: torch drops a last window
            return torch.nn.functional.max_pool2d(x, 2, 3, padding=1, ceil_mode=True)

    model, params = nn.from_torch(
        Pool(), (torch.zeros(2, 2, 8, 6, dtype=torch.float64),), capture="export"
    )
    with pytest.raises(ValueError, match=r"ceil_mode=True with symbolic sizes .*1 \+ 3 > 2"):
        nn.save_exported(tmp_path / "pool.jaxgrad", model, params)


def test_a_size_rounded_up_with_math_ceil_stays_symbolic_and_exports(x64, tmp_path):
    """MobileViT counts whole patches with ``math.ceil(width / patch)``: torch divides
    the symbolic size as a float (``CeilToInt(IntTrueDiv(...))`` in its shapes); jaxgrad
    keeps the integer ``-(-width // patch)``, and a tensor made at that size, in
    ``apply`` and in the artifact."""
    import math

    class Patches(tnn.Module):
        def forward(self, x):  # (batch, width) -> (batch, patches of 4, rounded up)
            count = math.ceil(x.shape[1] / 4)
            return x.new_ones(x.shape[0], count) * x.sum(1, keepdim=True)

    model, params = nn.from_torch(
        Patches(), (torch.zeros(2, 10, dtype=torch.float64),), capture="export"
    )
    assert not model.shapes.static, model.shapes.static
    assert any(node.target == "sym.ceildiv" for node in model.eval_program.nodes)
    nn.save_exported(tmp_path / "patches.jaxgrad", model, params)
    loaded = nn.load_exported(tmp_path / "patches.jaxgrad")
    rng = np.random.default_rng(2)
    for shape in ((3, 10), (2, 13), (5, 16), (2, 17)):
        x = rng.standard_normal(shape)
        expected = Patches()(torch.from_numpy(x)).numpy()
        assert_parity(expected, np.asarray(model.apply(params, x)), name=f"apply {shape}")
        assert_parity(expected, np.asarray(loaded(x)), name=f"artifact {shape}")


def test_unread_nodes_are_dropped_but_never_a_check_or_a_random_draw():
    """``build_nodes`` drops pure nodes nothing live reads; a runtime check on the sizes
    (``_assert_scalar``) and a random op (its key is numbered in program order) stay."""
    import operator

    import torch.fx

    from jaxgrad.nn.capture.export import _dead

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    size = graph.call_function(torch.ops.aten.sym_size.int, (x, 0))
    check = graph.call_function(
        torch.ops.aten._assert_scalar.default,
        (graph.call_function(operator.ge, (size, 2)), "batch >= 2"),
    )
    unread_view = graph.call_function(torch.ops.aten.view.default, (x, [-1]))
    unread_draw = graph.call_function(torch.ops.aten.bernoulli.p, (x, 0.5))
    graph.output(x)
    dead = _dead(list(graph.nodes))
    assert unread_view.name in dead
    assert check.name not in dead and size.name not in dead
    assert unread_draw.name not in dead


def test_a_slow_dynamic_capture_says_so_and_what_to_do(conv_head, monkeypatch, capfd):
    """Symbolic image sides can keep torch.export reasoning for minutes (a tiny HF Swin:
    524 s, 8.5 s with only the batch dynamic): past ``SLOW_CAPTURE_SECONDS`` the user
    is told on stderr why from_torch is still working and which option is faster."""
    from jaxgrad.nn.capture import export as export_capture

    real_export = torch.export.export

    def slow_export(*args, **kwargs):
        import time

        time.sleep(0.3)  # a capture past the (shortened) threshold
        return real_export(*args, **kwargs)

    monkeypatch.setattr(export_capture, "SLOW_CAPTURE_SECONDS", 0.05)
    monkeypatch.setattr(torch.export, "export", slow_export)
    module = conv_head[0]
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    nn.from_torch(module, example=(x,), capture="export")
    said = capfd.readouterr().err
    assert "still capturing ConvHead" in said and "dynamic_shapes='batch'" in said
    # only the batch dynamic already: the faster option left is the example's shapes
    nn.from_torch(module, example=(x,), capture="export", dynamic_shapes="batch")
    said = capfd.readouterr().err
    assert "still capturing ConvHead" in said and "dynamic_shapes=None" in said
    assert "dynamic_shapes='batch'" not in said
    nn.from_torch(module, example=(x,), capture="export", dynamic_shapes=None)
    assert "still capturing" not in capfd.readouterr().err  # static: nothing to say
