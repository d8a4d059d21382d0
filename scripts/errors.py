"""Autograd errors side by side: what PyTorch and JAX do for the same mistake.

For each mistake the table shows each framework's behaviour: the exception type and
the first line of its message, or "no error" and what silently happened. Then the
errors jaxgrad's own functions raise for bad input. Every row is run live.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable


def outcome(fn: Callable[[], str]) -> str:
    """``"raises Type: first line"`` or ``"no error: <what fn returned>"``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return "no error: " + fn()
    except Exception as error:  # the point is to show whatever is raised
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return f"raises {type(error).__name__}: {first}"


# ------------------------------------------------------------------------- torch side


def torch_non_scalar() -> str:
    import torch

    x = torch.ones(3, requires_grad=True)
    (x * 2).backward()
    return "?"


def torch_backward_twice() -> str:
    import torch

    x = torch.ones(3, requires_grad=True)
    y = (x.exp() * 2).sum()
    y.backward()
    y.backward()
    return "?"


def torch_nothing_requires_grad() -> str:
    import torch

    torch.ones(3).sum().backward()
    return "?"


def torch_item_mid_graph() -> str:
    import torch

    x = torch.tensor(2.0, requires_grad=True)
    y = x * (x * 3).item()
    y.backward()
    return f"d/dx [x * (3x).item()] at 2 = {x.grad.item()} (true: 12.0) — graph cut silently"


def torch_inplace_saved() -> str:
    import torch

    x = torch.ones(3, requires_grad=True)
    a = x.sigmoid()
    a.mul_(2)
    a.sum().backward()
    return "?"


def torch_integer_input() -> str:
    import torch

    torch.tensor([1, 2], requires_grad=True)
    return "?"


def torch_unused_input() -> str:
    import torch

    x = torch.ones(2, requires_grad=True)
    unused = torch.ones(2, requires_grad=True)
    (x * 2).sum().backward()
    result = f"backward(): unused.grad = {unused.grad}; "
    try:
        torch.autograd.grad((x * 2).sum(), [x, unused])
    except RuntimeError as error:
        return result + f"autograd.grad raises RuntimeError: {str(error).splitlines()[0]}"
    return result


# --------------------------------------------------------------------------- JAX side


def jax_non_scalar() -> str:
    import jax
    import jax.numpy as jnp

    jax.grad(lambda x: x * 2)(jnp.ones(3))
    return "?"


def jax_backward_twice() -> str:
    import jax
    import jax.numpy as jnp

    f = jax.grad(lambda x: jnp.sum(jnp.exp(x) * 2))
    f(jnp.ones(3))
    _, vjp = jax.vjp(lambda x: jnp.sum(jnp.exp(x) * 2), jnp.ones(3))
    vjp(1.0)
    vjp(1.0)
    return "grad is a function, call it again; a jax.vjp pullback can be reused too"


def jax_nothing_requires_grad() -> str:
    import jax
    import jax.numpy as jnp

    grad = jax.grad(lambda x: jnp.sum(jnp.ones(3)))(jnp.ones(3))
    return f"gradients are w.r.t. arguments; a constant gives zeros {grad}"


def jax_item_mid_graph() -> str:
    import jax

    jax.grad(lambda x: x * float(x * 3))(2.0)
    return "?"


def jax_inplace_saved() -> str:
    import jax
    import jax.numpy as jnp

    a = jax.nn.sigmoid(jnp.ones(3))
    a[0] = 2.0
    return "?"


def jax_integer_input() -> str:
    import jax
    import jax.numpy as jnp

    jax.grad(lambda x: jnp.sum(x * 2))(jnp.array([1, 2]))
    return "?"


def jax_unused_input() -> str:
    import jax
    import jax.numpy as jnp

    grads = jax.grad(lambda x, unused: jnp.sum(x * 2), argnums=(0, 1))(jnp.ones(2), jnp.ones(2))
    return f"gradient w.r.t. the unused input is zeros {grads[1]}"


CASES = [
    ("backward on a non-scalar output", torch_non_scalar, jax_non_scalar),
    ("backward twice through one graph", torch_backward_twice, jax_backward_twice),
    ("nothing requires grad", torch_nothing_requires_grad, jax_nothing_requires_grad),
    (".item() / float() mid-graph", torch_item_mid_graph, jax_item_mid_graph),
    ("in-place change of a saved tensor", torch_inplace_saved, jax_inplace_saved),
    ("integer inputs", torch_integer_input, jax_integer_input),
    ("an input the output does not use", torch_unused_input, jax_unused_input),
]


def _jaxgrad_case(build: Callable) -> Callable[[], object]:
    """A case that calls ``build(jnp, accumulate_grads, jautodiff, joptim)`` when run."""

    def case():
        import jax.numpy as jnp

        from jaxgrad import autodiff as jautodiff
        from jaxgrad import optim as joptim
        from jaxgrad.accumulate import accumulate_grads

        return build(jnp, accumulate_grads, jautodiff, joptim)

    return case


JAXGRAD_CASES = [
    (title, _jaxgrad_case(build))
    for title, build in [
        (
            "accumulate_grads: non-scalar loss",
            lambda jnp, accumulate_grads, jautodiff, joptim: accumulate_grads(
                lambda p, b: p * b, jnp.ones(2), jnp.ones((3, 2))
            ),
        ),
        (
            "accumulate_grads: mismatched micro-batch axes",
            lambda jnp, accumulate_grads, jautodiff, joptim: accumulate_grads(
                lambda p, b: jnp.sum(p), jnp.ones(2), {"x": jnp.ones((4, 2)), "y": jnp.ones((3, 1))}
            ),
        ),
        (
            "freeze: a prefix matching no parameter",
            lambda jnp, accumulate_grads, jautodiff, joptim: joptim.freeze(
                joptim.adamw(), ["encoder"]
            ).init({"0.weight": jnp.ones(2)}),
        ),
        (
            "freeze: not a predicate or prefixes",
            lambda jnp, accumulate_grads, jautodiff, joptim: joptim.freeze(joptim.sgd(0.1), 3),
        ),
        (
            "intermediate_grads: an untapped name",
            lambda jnp, accumulate_grads, jautodiff, joptim: jautodiff.intermediate_grads(
                lambda x, tap: jnp.sum(tap("h", x)), (jnp.ones(2),), ["hidden"]
            ),
        ),
        (
            "grad_wrt: non-scalar loss",
            lambda jnp, accumulate_grads, jautodiff, joptim: jautodiff.grad_wrt(
                lambda p: p["w"], {"w": jnp.ones(2)}, ["w"]
            ),
        ),
        (
            "clip_grad_norm: negative max_norm",
            lambda jnp, accumulate_grads, jautodiff, joptim: joptim.clip_grad_norm(
                {"w": jnp.ones(2)}, -1.0
            ),
        ),
        (
            "sgd: nesterov without momentum",
            lambda jnp, accumulate_grads, jautodiff, joptim: joptim.sgd(0.1, nesterov=True),
        ),
        (
            "adam: betas not a pair",
            lambda jnp, accumulate_grads, jautodiff, joptim: joptim.adam(betas=0.9),
        ),
    ]
]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--width",
        type=int,
        default=110,
        help="truncate each message to this many characters (default 110)",
    )
    args = parser.parse_args(argv)
    if args.width < 20:
        parser.error(f"--width (={args.width}) must be >= 20")
    import jax
    import torch

    def cut(text: str) -> str:
        return text if len(text) <= args.width else text[: args.width - 1] + "…"

    print(f"torch {torch.__version__}, jax {jax.__version__}\n")
    for title, torch_case, jax_case in CASES:
        print(title)
        print(f"  torch: {cut(outcome(torch_case))}")
        print(f"  JAX:   {cut(outcome(jax_case))}")
    print("\njaxgrad's own input errors")
    for title, case in JAXGRAD_CASES:
        print(f"  {title:<46} {cut(outcome(lambda: str(case())))}")  # noqa: B023


if __name__ == "__main__":
    main()
