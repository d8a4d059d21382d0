"""Autograd written inside a forward, converted by both front ends, against torch.

Each model below computes something torch's autograd treats specially *inside* its
forward: ``detach()``, ``.data``, a ``no_grad`` / ``set_grad_enabled(False)`` /
``inference_mode`` region, ``requires_grad_(False)`` on a parameter, a custom
``autograd.Function`` with its own backward. Converted as torch records the values
alone, each gave torch's output to the last bit and a wrong gradient. Here each is
converted by the layer path (``capture="layers"``) and by the export path
(``capture="export"``), and the output, every parameter gradient and the input's
gradient of ``sum(output * c)`` are compared with torch's ``backward()`` at the
float64 tier, or the front end refuses the model naming the construct. The same
computation twice, compared.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from torch import nn as tnn
from torch.utils.checkpoint import checkpoint

from jaxgrad import nn
from jaxgrad.parity import assert_parity


def both(module, model, params, x, *, buffers=None, train=False):
    """``(torch, jaxgrad)``: output, every parameter gradient and the input's gradient
    of ``sum(output * c)``, ``c`` a fixed ramp. torch runs after the conversion (its
    forward may freeze a parameter as a side effect)."""
    module.train(train)
    module.zero_grad(set_to_none=True)
    x_torch = torch.from_numpy(x).requires_grad_(True)
    out = module(x_torch)
    cotangent = np.linspace(-1.0, 1.0, out.numel()).reshape(out.shape)
    (out * torch.from_numpy(cotangent)).sum().backward()
    reference = {
        "output": out.detach().numpy(),
        "input": x_torch.grad.numpy(),
        "grads": {
            n: p.grad.numpy() if p.grad is not None else np.zeros(p.shape)
            for n, p in module.named_parameters()
        },
    }

    def objective(params, x):
        options = {} if buffers is None else {"buffers": buffers}
        result = model.apply(params, x, train=train, **options)
        out = result[0] if buffers is not None else result
        return jnp.sum(out * cotangent), out

    (grads, grad_x), out = jax.grad(objective, argnums=(0, 1), has_aux=True)(params, jnp.asarray(x))
    assert out.dtype == jnp.float64
    return reference, {"output": out, "input": grad_x, "grads": grads}


def convert(module, x, capture, **options):
    """``from_torch`` at the example's shapes (``dynamic_shapes=None``: what these tests
    hold is the same at every size; test_dynamic_shapes.py converts a custom Function
    with symbolic sizes)."""
    return nn.from_torch(
        module, example=(torch.from_numpy(x),), capture=capture, dynamic_shapes=None, **options
    )


class Base(tnn.Module):
    def __init__(self):
        super().__init__()
        self.fc = tnn.Linear(4, 4)
        self.w = tnn.Parameter(torch.linspace(-1.5, 2.0, 4))


# ------------------------------------------------------------ stop-gradients
class Detach(Base):
    def forward(self, x):
        y = self.fc(x)
        return y * y.detach()


class StraightThrough(Base):
    """VQ-VAE / quantisation-aware training: round's value, the identity's gradient."""

    def forward(self, x):
        y = self.fc(x) * 3
        return (y + (torch.round(y) - y).detach()) * self.w


class NoGradScale(Base):
    def forward(self, x):
        y = self.fc(x)
        with torch.no_grad():
            scale = y.abs().mean() * self.w
        return y * scale


class FrozenTeacher(tnn.Module):
    """BYOL / DINO: a teacher branch run with grad disabled, its BatchNorm still
    updating its running statistics in training mode."""

    def __init__(self):
        super().__init__()
        self.student = tnn.Linear(4, 4)
        self.teacher = tnn.Sequential(tnn.Linear(4, 4), tnn.BatchNorm1d(4), tnn.Tanh())

    def forward(self, x):
        with torch.set_grad_enabled(False):
            target = self.teacher(x)
        return self.student(x) * target


class InferenceModeStatistic(Base):
    def forward(self, x):
        y = self.fc(x)
        with torch.inference_mode():
            centre = y.mean() * self.w
        return y - centre


class DotData(Base):
    def forward(self, x):
        y = self.fc(x)
        return y * y.data + TF.linear(y, self.fc.weight.data)


class NestedEnableGrad(Base):
    def forward(self, x):
        with torch.no_grad():
            a = self.fc(x).abs()
            with torch.enable_grad():
                b = self.fc(a) * self.w  # differentiable again: fc and w get gradients
            c = b * 2
        return x * c + b


class DetachInPlace(Base):
    def forward(self, x):
        y = self.fc(x)
        z = y * self.w
        z.detach_()  # later reads of z have no gradient
        return y * z


class GradModeCalls(Base):
    def forward(self, x):
        y = self.fc(x)
        torch.set_grad_enabled(False)  # as a call, not a context manager
        scale = (y * self.w).abs()
        torch.set_grad_enabled(True)
        return y * scale


STOP_GRADIENT_MODELS = [
    Detach,
    StraightThrough,
    NoGradScale,
    InferenceModeStatistic,
    DotData,
    NestedEnableGrad,
    DetachInPlace,
    GradModeCalls,
]


@pytest.mark.parametrize("capture", ["layers", "export"])
@pytest.mark.parametrize("model_class", STOP_GRADIENT_MODELS, ids=lambda c: c.__name__)
def test_stop_gradients_match_torch_on_both_front_ends(model_class, capture, x64, rng):
    torch.manual_seed(0)
    module = model_class().double()
    x = rng.standard_normal((3, 4))
    model, params = convert(module, x, capture)
    assert type(model).__name__ == ("GraphModule" if capture == "layers" else "ExportedModule")
    assert_parity(*both(module, model, params, x))


@pytest.mark.parametrize("capture", ["layers", "export"])
def test_a_frozen_teacher_gets_no_gradient_and_updates_its_statistics(capture, x64, rng):
    torch.manual_seed(1)
    module = FrozenTeacher().double()
    x = rng.standard_normal((5, 4))
    model, params, buffers = convert(module, x, capture, with_buffers=True)
    reference, result = both(module, model, params, x, buffers=buffers, train=True)
    assert_parity(reference, result)
    assert not np.any(reference["grads"]["teacher.0.weight"])  # torch: none at all
    _, new_buffers = model.apply(params, jnp.asarray(x), buffers=buffers, train=True)
    assert_parity(
        {k: v.detach().numpy() for k, v in module.state_dict().items() if k in buffers},
        dict(new_buffers),
    )


class RequiresGradFalse(Base):
    def forward(self, x):
        a = self.fc(x) * self.w
        self.w.requires_grad_(False)  # torch: no gradient for w, even for the use above
        return a * self.w


def test_requires_grad_false_on_a_parameter_is_reproduced_by_export(x64, rng):
    torch.manual_seed(2)
    module = RequiresGradFalse().double()
    x = rng.standard_normal((3, 4))
    with pytest.raises(ValueError, match=r"calls `requires_grad_` inside the forward"):
        convert(module, x, "layers")
    model, params = convert(module, x, "auto")
    assert module.w.requires_grad  # converting changed nothing
    reference, result = both(module, model, params, x)
    assert module.w.grad is None
    assert_parity(reference, result)


# ------------------------------------------------------- in-place under no_grad
class InPlaceUnderNoGrad(Base):
    def forward(self, x):
        y = self.fc(x) * 1.0
        with torch.no_grad():
            y.mul_(0.5)  # torch keeps y's old gradient path for the new values
        return y * self.w


@pytest.mark.parametrize("capture", ["layers", "export"])
def test_an_in_place_write_under_no_grad_is_refused_by_name(capture, x64, rng):
    module = InPlaceUnderNoGrad().double()
    with pytest.raises(
        ValueError,
        match=r"computed outside a `torch.no_grad\(\)` region.* in "
        r"place inside it",
    ):
        convert(module, rng.standard_normal((3, 4)), capture)


class GradientHook(Base):
    def forward(self, x):
        y = self.fc(x) * 1.0
        y.register_hook(lambda grad: -grad)  # gradient reversal; torch.export drops it
        return y * self.w


@pytest.mark.parametrize("capture", ["layers", "export"])
def test_a_gradient_hook_is_refused(capture, x64, rng):
    message = {"layers": "cannot trace GradientHook", "export": r"registers a gradient hook"}
    with pytest.raises(ValueError, match=message[capture]):
        convert(GradientHook().double(), rng.standard_normal((3, 4)), capture)


# ------------------------------------------------------ custom autograd.Function
class TripleGradient(torch.autograd.Function):
    """A hand-written backward three times the true one (torch honours it)."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x * weight

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return 3 * grad * weight, 3 * grad * x  # the weight's: broadcast, summed by torch


class RoundThrough(torch.autograd.Function):
    """Straight-through rounding: round's value, the identity's gradient."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class Square(torch.autograd.Function):
    """A backward that is the forward's own derivative."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class ScaledMax(torch.autograd.Function):
    """New-style (``setup_context``), a Python argument, two outputs of which one is
    marked non-differentiable, and a backward that branches on ``needs_input_grad``."""

    @staticmethod
    def forward(x, scale):
        values, indices = (x * scale).max(dim=-1)
        return values, indices.to(x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, scale = inputs
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(x)
        ctx.scale = scale

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (x,) = ctx.saved_tensors
        grad_x = None
        if ctx.needs_input_grad[0]:
            onehot = TF.one_hot((x * ctx.scale).argmax(dim=-1), x.shape[-1]).to(x.dtype)
            grad_x = onehot * grad_values.unsqueeze(-1) * ctx.scale * 0.5
        return grad_x, None


class WithFunctions(Base):
    def forward(self, x):
        y = self.fc(x)
        a = TripleGradient.apply(y, self.w)
        b = RoundThrough.apply(a * 2) * self.w
        c = Square.apply(y)
        values, indices = ScaledMax.apply(a, 2.5)
        return a + b + c + values.unsqueeze(-1) * indices.unsqueeze(-1)


def test_custom_functions_convert_with_their_own_backward(x64, rng):
    torch.manual_seed(3)
    module = WithFunctions().double()
    x = rng.standard_normal((3, 4))
    with pytest.raises(
        ValueError,
        match=r"calls the custom autograd.Function "
        r".*TripleGradient .*drop its backward",
    ):
        convert(module, x, "layers")
    model, params = convert(module, x, "auto")
    assert type(model).__name__ == "ExportedModule"
    reference, result = both(module, model, params, x)
    assert_parity(reference, result)
    # the backward is honoured, not the forward differentiated (that gives a third of w's
    # gradient through `a`), and jitting changes nothing
    jitted = jax.jit(lambda p, x: jax.grad(lambda p: jnp.sum(model.apply(p, x)))(p))
    plain = jax.grad(lambda p: jnp.sum(model.apply(p, jnp.asarray(x))))(params)
    np.testing.assert_array_equal(
        np.asarray(jitted(params, jnp.asarray(x))["w"]), np.asarray(plain["w"])
    )


class LegacyRelu(torch.autograd.Function):
    """Older research code: ``.data`` inside the Function, another Function inside its
    forward (its value only matters there), a backward that is not the derivative."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.data)
        return RoundThrough.apply(x.data.clamp(min=0) * 4) / 4

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x > 0).to(grad.dtype) * 3


class UsesLegacyRelu(Base):
    def forward(self, x):
        y = self.fc(x)
        return LegacyRelu.apply(y) * y


def test_a_function_reading_data_and_calling_another_function_converts(x64, rng):
    torch.manual_seed(11)
    module = UsesLegacyRelu().double()
    x = rng.standard_normal((3, 4))
    model, params = convert(module, x, "export")
    assert_parity(*both(module, model, params, x))


class EscapesTorch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.abs().max().item()  # a Python number from a tensor's value


class UsesEscapesTorch(Base):
    def forward(self, x):
        return EscapesTorch.apply(self.fc(x)) * self.w


def test_a_function_whose_backward_cannot_be_captured_is_refused_then_takes_a_jax_rule(x64, rng):
    torch.manual_seed(4)
    module = UsesEscapesTorch().double()
    x = rng.standard_normal((3, 4))
    name = f"{EscapesTorch.__module__}.{EscapesTorch.__qualname__}"
    with pytest.raises(
        ValueError,
        match=r"custom autograd.Function .*EscapesTorch.* cannot be "
        r"reproduced: its backward .*register_autograd_function",
    ):
        convert(module, x, "export")

    @jax.custom_vjp
    def rule(x):
        return x * 2

    rule.defvjp(lambda x: (x * 2, x), lambda x, grad: (grad * jnp.abs(x).max(),))
    nn.register_autograd_function(name, rule)
    try:
        model, params = convert(module, x, "export")
        assert_parity(*both(module, model, params, x))
    finally:
        from jaxgrad.nn.aten import _autograd

        _autograd.FUNCTIONS.pop(name)
    nn.register_autograd_function("x.Y", rule)
    try:
        with pytest.raises(ValueError, match="has a rule already"):
            nn.register_autograd_function("x.Y", rule)
    finally:
        _autograd.FUNCTIONS.pop("x.Y")


def test_capturing_a_function_leaves_torchs_global_rng_alone(x64, rng):
    """Capturing a Function's backward draws example inputs from a generator of its own."""
    module = WithFunctions().double()
    x = rng.standard_normal((3, 4))
    torch.manual_seed(15)
    expected = torch.rand(3)
    torch.manual_seed(15)
    convert(module, x, "export")
    torch.testing.assert_close(torch.rand(3), expected, rtol=0, atol=0)


def test_a_wrong_backward_is_caught(x64, rng):
    """The comparison can fail: the same model with a backward 1.001 times torch's."""
    torch.manual_seed(5)
    module = WithFunctions().double()
    x = rng.standard_normal((3, 4))
    model, params = convert(module, x, "export")
    reference, result = both(module, model, params, x)
    result["grads"] = {k: v * 1.001 for k, v in result["grads"].items()}
    with pytest.raises(AssertionError):
        assert_parity(reference, result)


# --------------------------------------------------------------- checkpointing
class Checkpointed(Base):
    def __init__(self, use_reentrant):
        super().__init__()
        self.use_reentrant = use_reentrant
        self.block = tnn.Sequential(tnn.Linear(4, 4), tnn.Tanh())

    def forward(self, x):
        y = self.fc(x)
        return checkpoint(self.block, y, use_reentrant=self.use_reentrant) * self.w


@pytest.mark.parametrize("capture", ["layers", "export"])
@pytest.mark.parametrize("use_reentrant", [True, False])
def test_checkpointing_is_the_autodiff_of_its_forward(use_reentrant, capture, x64, rng):
    """Reentrant checkpointing runs its function under no_grad and recomputes it in its
    backward: the plain function's gradient, not the no_grad region's none."""
    torch.manual_seed(6)
    module = Checkpointed(use_reentrant).double()
    x = rng.standard_normal((3, 4))
    model, params = convert(module, x, capture)
    assert_parity(*both(module, model, params, x))


# ------------------------------------------------ parameters torch leaves without .grad
class DetachedParameter(Base):
    def forward(self, x):
        return self.fc(x) * self.w.detach()  # w: read, but never with a gradient


@pytest.mark.parametrize("capture", ["layers", "export"])
def test_params_without_gradient_are_those_torch_leaves_without_grad(capture, x64, rng):
    torch.manual_seed(7)
    x = rng.standard_normal((5, 4))
    nested = tnn.Sequential(tnn.Linear(4, 4), FrozenTeacher())  # a traced child in a container
    for module in (
        FrozenTeacher().double(),
        DetachedParameter().double(),
        Detach().double(),
        nested.double(),
    ):
        model, params = convert(module, x, capture)
        module.train()
        module(torch.from_numpy(x)).sum().backward()
        assert set(model.params_without_gradient()) == {
            n for n, p in module.named_parameters() if p.grad is None
        }, type(module).__name__


@pytest.mark.parametrize("capture", ["layers", "export"])
def test_freezing_them_steps_like_torchs_sgd_with_weight_decay(capture, x64, rng):
    """torch's SGD skips a parameter whose .grad is None (no momentum, no decay): a
    teacher under no_grad keeps its weights; jaxgrad's SGD, frozen by
    params_without_gradient(), does the same (unfrozen, decay would shrink them)."""
    from jaxgrad import optim

    torch.manual_seed(8)
    module = FrozenTeacher().double()
    x = rng.standard_normal((5, 4))
    model, params, buffers = convert(module, x, capture, with_buffers=True)
    hyper = {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.1}
    optimizer = optim.freeze(optim.sgd(**hyper), model.params_without_gradient())
    torch_opt = torch.optim.SGD(module.parameters(), **hyper)
    state = optimizer.init(params)
    module.train()
    for _ in range(2):
        torch_opt.zero_grad()
        module(torch.from_numpy(x)).pow(2).sum().backward()
        torch_opt.step()

        def loss(params, buffers):
            out, new_buffers = model.apply(params, jnp.asarray(x), buffers=buffers, train=True)
            return jnp.sum(out**2), new_buffers

        grads, buffers = jax.grad(loss, has_aux=True)(params, buffers)
        updates, state = optimizer.update(grads, state, params)
        params = jax.tree_util.tree_map(lambda p, u: p + u, params, updates)
    assert_parity({n: p.detach().numpy() for n, p in module.named_parameters()}, params)


# ------------------------------------------------------- frozen parameters (issue 44)
class FrozenPositions(tnn.Module):
    """Whisper-style: a position table with requires_grad=False beside trained layers."""

    def __init__(self):
        super().__init__()
        self.embed = tnn.Linear(4, 4)
        self.positions = tnn.Parameter(torch.linspace(-1, 1, 12).reshape(3, 4), requires_grad=False)
        self.head = tnn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.embed(x) + self.positions))


def _frozen_backbone():
    module = tnn.Sequential(tnn.Linear(4, 6), tnn.Tanh(), tnn.Linear(6, 3))
    module[0].requires_grad_(False)  # a frozen backbone, a trained head
    return module


def _frozen_bias():
    module = tnn.Linear(4, 3)
    module.bias.requires_grad_(False)
    return module


FROZEN_MODELS = {"positions": FrozenPositions, "backbone": _frozen_backbone, "bias": _frozen_bias}


@pytest.mark.parametrize("capture", ["auto", "layers", "export"])
@pytest.mark.parametrize("name", FROZEN_MODELS)
def test_frozen_parameters_get_no_gradient_and_stay_frozen_in_training(name, capture, x64, rng):
    """requires_grad=False: torch gives no gradient and AdamW (weight decay included)
    never touches the parameter; jaxgrad's gradient is zero and AdamW frozen by
    params_without_gradient() keeps it too, over three steps, against torch."""
    from jaxgrad import optim

    torch.manual_seed(10)
    module = FROZEN_MODELS[name]().double()
    x = rng.standard_normal((3, 4))
    model, params = convert(module, x, capture)
    frozen = {n for n, p in module.named_parameters() if not p.requires_grad}
    assert set(model.params_without_gradient()) == frozen
    assert set(params) == {n for n, _ in module.named_parameters()}  # still in state_dict
    reference, result = both(module, model, params, x)
    assert_parity(reference, result)
    assert all(not np.any(np.asarray(result["grads"][n])) for n in frozen)

    hyper = {"lr": 0.05, "weight_decay": 0.1}
    optimizer = optim.freeze(optim.adamw(**hyper), model.params_without_gradient())
    torch_opt = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], **hyper)
    state = optimizer.init(params)
    target = np.linspace(-1.0, 1.0, reference["output"].size).reshape(reference["output"].shape)
    for _ in range(3):
        torch_opt.zero_grad()
        ((module(torch.from_numpy(x)) - torch.from_numpy(target)) ** 2).mean().backward()
        torch_opt.step()
        grads = jax.grad(lambda p: jnp.mean((model.apply(p, jnp.asarray(x)) - target) ** 2))(params)
        updates, state = optimizer.update(grads, state, params)
        params = jax.tree_util.tree_map(lambda p, u: p + u, params, updates)
    assert_parity({n: p.detach().numpy() for n, p in module.named_parameters()}, params)


def test_torch_is_left_as_it_was_after_a_conversion(x64, rng):
    """The capture patches torch's autograd entry points while it runs, and only then."""
    names = ("data", "requires_grad", "requires_grad_", "register_hook")
    before = {n: torch.Tensor.__dict__.get(n) for n in names}
    apply = torch.autograd.Function.__dict__["apply"]
    inference = dict(vars(torch.autograd.grad_mode.inference_mode))
    for capture in ("layers", "export"):
        convert(NoGradScale().double(), rng.standard_normal((3, 4)), capture)
    with pytest.raises(ValueError):
        convert(GradientHook().double(), rng.standard_normal((3, 4)), "export")
    assert {n: torch.Tensor.__dict__.get(n) for n in names} == before
    assert torch.autograd.Function.__dict__["apply"] is apply
    assert dict(vars(torch.autograd.grad_mode.inference_mode)) == inference
    y = torch.ones(2, requires_grad=True) * 2
    assert y.data.requires_grad is False and RoundThrough.apply(y).grad_fn is not None


class TiedHead(tnn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.head = tnn.Linear(4, 4), tnn.Linear(4, 4, bias=False)
        self.head.weight = self.embed.weight  # one tensor under two names (GPT-2's head)

    def forward(self, x):
        # read under its first name only: the second name's placeholder is never read
        return TF.linear(torch.tanh(self.embed(x)), self.embed.weight)


def test_a_tied_parameter_has_a_gradient(x64, rng):
    """One parameter, two placeholders in torch's program: a gradient through either."""
    module = TiedHead().double()
    x = rng.standard_normal((3, 4))
    model, params = convert(module, x, "export")
    module(torch.from_numpy(x)).sum().backward()
    assert module.embed.weight.grad is not None
    assert model.params_without_gradient() == ()


@pytest.mark.parametrize("name", ["positions", "backbone"])
def test_the_nnx_twin_keeps_frozen_parameters_frozen(name, x64, rng):
    """to_nnx: a parameter torch leaves without a gradient is a FrozenParam, which
    nnx.grad and nnx.Optimizer(wrt=nnx.Param) skip; two AdamW steps (weight decay
    included) against torch's, read back to torch's names."""
    import optax
    from flax import nnx

    from jaxgrad.flax import FrozenParam, grads_to_torch, nnx_state_dict, to_nnx

    torch.manual_seed(12)
    module = FROZEN_MODELS[name]().double()
    x = rng.standard_normal((3, 4))
    twin = to_nnx(module, layout="NCHW")
    frozen = [v for _, v in nnx.iter_graph(twin) if isinstance(v, FrozenParam)]
    assert len(frozen) == sum(not p.requires_grad for p in module.parameters())
    reference, _ = both(module, *nn.from_torch(module), x)
    grads = nnx.grad(
        lambda twin: jnp.sum(
            twin(jnp.asarray(x))
            * np.linspace(-1.0, 1.0, reference["output"].size).reshape(reference["output"].shape)
        )
    )(twin)
    assert_parity(reference["grads"], grads_to_torch(twin, grads))

    optimizer = nnx.Optimizer(twin, optax.adamw(0.05, weight_decay=0.1), wrt=nnx.Param)
    torch_opt = torch.optim.AdamW(
        [p for p in module.parameters() if p.requires_grad], lr=0.05, weight_decay=0.1
    )
    for _ in range(2):
        torch_opt.zero_grad()
        (module(torch.from_numpy(x)) ** 2).mean().backward()
        torch_opt.step()
        optimizer.update(twin, nnx.grad(lambda twin: jnp.mean(twin(jnp.asarray(x)) ** 2))(twin))
    assert_parity(
        {n: p.detach().numpy() for n, p in module.named_parameters()},
        {n: v for n, v in nnx_state_dict(twin).items() if n in dict(module.named_parameters())},
    )


def test_the_trainer_never_steps_a_frozen_parameter(x64, rng):
    """jaxgrad.train.Trainer as torch's loop: AdamW with weight decay over an epoch leaves
    a requires_grad=False parameter bit-identical (torch's optimizer skips it), and the
    trained ones match torch's loop."""
    from jaxgrad import losses, optim
    from jaxgrad.train import Trainer

    torch.manual_seed(13)
    module = _frozen_backbone().double()
    model, params = convert(module, rng.standard_normal((3, 4)), "auto")
    x, y = rng.standard_normal((16, 4)), rng.integers(0, 3, 16)
    trainer = Trainer(
        model, losses.cross_entropy, optim.adamw(lr=0.05, weight_decay=0.1), params, batch_size=4
    )
    trainer.train_epoch(x, y)
    np.testing.assert_array_equal(
        np.asarray(trainer.params["0.weight"]), np.asarray(params["0.weight"])
    )
    torch_opt = torch.optim.AdamW(module.parameters(), lr=0.05, weight_decay=0.1)
    for indices in trainer.batches(len(x), 0):
        torch_opt.zero_grad()
        TF.cross_entropy(
            module(torch.from_numpy(x[indices])), torch.from_numpy(y[indices])
        ).backward()
        torch_opt.step()
    assert_parity(
        {n: p.detach().numpy() for n, p in module.named_parameters()}, dict(trainer.params)
    )


def test_a_frozen_torch_layer_converts_on_the_layer_path(x64, rng):
    """A lone torch layer whose forward torch.fx cannot trace (an LSTM) with a frozen
    weight: the layer path wraps it (nn.Frozen); output and gradients against torch."""
    torch.manual_seed(14)
    module = tnn.LSTM(4, 3, batch_first=True).double()
    module.weight_hh_l0.requires_grad_(False)
    model, params = nn.from_torch(module)
    assert type(model).__name__ == "Frozen" and model.params_without_gradient() == ("weight_hh_l0",)
    x = rng.standard_normal((2, 5, 4))
    out, _ = module(torch.from_numpy(x))
    cotangent = np.linspace(-1.0, 1.0, out.numel()).reshape(out.shape)
    (out * torch.from_numpy(cotangent)).sum().backward()
    grads = jax.grad(lambda p: jnp.sum(model.apply(p, jnp.asarray(x))[0] * cotangent))(params)
    assert_parity(
        {
            n: p.grad.numpy() if p.grad is not None else np.zeros(p.shape)
            for n, p in module.named_parameters()
        },
        grads,
    )
