"""torch.optim's L-BFGS as a pure step over a ``value_and_grad`` closure.

torch's ``LBFGS.step(closure)`` re-evaluates the model many times per step and keeps
its history in ``optimizer.state``. Here the closure is an argument and the history a
value: ``lbfgs(...).step(value_and_grad, params, state) -> (loss, params, state)``,
where ``value_and_grad(params) -> (loss, grads)`` (``jax.value_and_grad(loss_fn)``,
jitted or not) and ``loss`` is the loss at the params given, as torch's ``step``
returns it.

The algorithm is torch's, operation for operation: the flat gradient (parameters
concatenated in the params' order — a flat dict's insertion order, torch's
``named_parameters()`` order — otherwise JAX's leaf order); the first direction
``−g`` with the step ``min(1, 1/‖g‖₁)·lr``; the two-loop recursion over at most
``history_size`` pairs, a pair kept only when ``yᵀs > 1e-10``, the initial Hessian
``yᵀs / yᵀy``; either a fixed step ``lr`` (``line_search_fn=None``) or torch's
strong-Wolfe search (``c1=1e-4``, ``c2=0.9``, cubic interpolation, bracketing then
zoom, at most ``max_eval`` evaluations in the step); and torch's stopping tests
(``tolerance_grad`` on ``max|g|``, ``tolerance_change`` on the directional
derivative, the step and the change of the loss).

``p.add_(d, alpha=t)`` is rounded once, as torch's CPU kernel (an FMA) does: near the
minimum the parameters hold the optimum to the last bit, and a second rounding would
show up in every gradient after.

Not jittable end to end: torch's loop branches on values at every iteration (how many
iterations, which pairs are kept, where the line search lands), so the step is a
Python loop over JAX arrays, with the two-loop recursion and the history update
jitted; jit the closure (``jax.jit(jax.value_and_grad(loss_fn))``), where the time
goes. The history is held in `(history_size, n)` arrays from the first step (torch
grows its lists to that size). The state is a NamedTuple of arrays with torch's names,
readable with ``torch_style_state`` (one entry, under the first parameter's name, as
torch keeps it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxgrad.optim._args import check_hyper, check_lr
from jaxgrad.optim.optimizers import _two_product
from jaxgrad.optim.state import register_whole_state


class LbfgsState(NamedTuple):
    """``lbfgs``'s state; ``torch_style_state`` reads it as torch's
    ``optimizer.state[first parameter]`` (``old_dirs``, ``old_stps``, ``ro`` as lists of
    the ``count`` pairs kept, ``al`` as a list with None where torch has not set it).

    Attributes:
      step: ``()`` int32: steps taken (torch keeps none).
      func_evals: ``()`` int32: closure evaluations over all steps.
      n_iter: ``()`` int32: L-BFGS iterations over all steps.
      d: `(n,)`: the last direction (None before the first step).
      t: ``()``: the last step length (None before the first step).
      old_dirs: `(history_size, n)`: the gradient differences ``y`` kept, oldest first
        (rows from ``count`` on unused).
      old_stps: `(history_size, n)`: the steps ``s`` kept, oldest first.
      ro: `(history_size,)`: ``1 / yᵀs`` of each pair.
      H_diag: ``()``: the initial inverse Hessian's scale.
      prev_flat_grad: `(n,)`: the gradient at the start of the last iteration.
      prev_loss: ``()``: the loss at the start of the last iteration.
      al: `(history_size,)`: the two-loop coefficients (None before the first two-loop).
      count: ``()`` int32: the pairs kept.
    """

    step: jax.Array
    func_evals: jax.Array
    n_iter: jax.Array
    d: Any = None
    t: Any = None
    old_dirs: Any = None
    old_stps: Any = None
    ro: Any = None
    H_diag: Any = None
    prev_flat_grad: Any = None
    prev_loss: Any = None
    al: Any = None
    count: Any = None


def _torch_view(state: LbfgsState) -> dict:
    """torch's ``optimizer.state[first parameter]`` of an ``LbfgsState``."""
    out: dict[str, Any] = {"func_evals": state.func_evals, "n_iter": state.n_iter}
    for field in ("d", "t", "H_diag", "prev_flat_grad", "prev_loss"):
        if getattr(state, field) is not None:
            out[field] = getattr(state, field)
    if state.old_dirs is not None:
        count = int(state.count)
        out["old_dirs"] = [state.old_dirs[i] for i in range(count)]
        out["old_stps"] = [state.old_stps[i] for i in range(count)]
        out["ro"] = [state.ro[i] for i in range(count)]
    if state.al is not None:
        out["al"] = [
            state.al[i] if i < int(state.count) else None for i in range(state.al.shape[0])
        ]
    return out


register_whole_state(LbfgsState, _torch_view)


class _History(NamedTuple):
    dirs: jax.Array  # (history_size, n)
    stps: jax.Array  # (history_size, n)
    ro: jax.Array  # (history_size,)
    filled: jax.Array  # () int32: how many of the history_size rows hold pairs
    al: Any  # (history_size,) or None

    @staticmethod
    def empty(x, history_size):
        zeros = jnp.zeros((history_size, x.size), x.dtype)
        return _History(
            zeros, zeros, jnp.zeros((history_size,), x.dtype), jnp.zeros((), jnp.int32), None
        )

    @staticmethod
    def of(state, x):
        if state.old_dirs is None:
            return None
        return _History(state.old_dirs, state.old_stps, state.ro, state.count, state.al)

    def push(self, y, s, ro):
        dirs, stps, ros, filled = _push(
            self.dirs, self.stps, self.ro, self.filled, y, s, jnp.asarray(ro, y.dtype)
        )
        return self._replace(dirs=dirs, stps=stps, ro=ros, filled=filled)


@jax.jit
def _push(dirs, stps, ros, count, y, s, ro):
    # torch: pop(0) when full, then append
    full = count == dirs.shape[0]
    dirs, stps, ros = (jnp.where(full, jnp.roll(a, -1, axis=0), a) for a in (dirs, stps, ros))
    at = jnp.minimum(count, dirs.shape[0] - 1)
    return (
        dirs.at[at].set(y),
        stps.at[at].set(s),
        ros.at[at].set(ro),
        jnp.minimum(count + 1, dirs.shape[0]),
    )


@jax.jit
def _two_loop(flat_grad, dirs, stps, ros, count, h_diag, al):
    """torch's two-loop recursion over the ``count`` pairs kept: ``(direction, al)``;
    its ``add_(v, alpha=a)`` rounds once, as torch's on CPU."""

    def backward(j, carry):
        q, al = carry
        i = count - 1 - j
        coefficient = jnp.dot(stps[i], q) * ros[i]
        return _fused_add(q, -coefficient, dirs[i]), al.at[i].set(coefficient)

    q, al = jax.lax.fori_loop(0, count, backward, (-flat_grad, al))

    def forward(i, r):
        be_i = jnp.dot(dirs[i], r) * ros[i]
        return _fused_add(r, al[i] - be_i, stps[i])

    return jax.lax.fori_loop(0, count, forward, q * h_diag), al


class Lbfgs(NamedTuple):
    """``lbfgs``'s pair of pure functions.

    Attributes:
      init: ``init(params) -> LbfgsState``.
      step: ``step(value_and_grad, params, state) -> (loss, params, state)``.
    """

    init: Callable
    step: Callable


def _leaves_in_order(params):
    """The params' leaves, a function giving any tree of that structure's leaves in the
    same order (a flat dict: its keys' insertion order, torch's; JAX returns gradients
    of a dict with sorted keys), and a rebuild function."""
    if isinstance(params, dict) and not any(
        isinstance(v, (dict, list, tuple)) for v in params.values()
    ):
        names = list(params)

        def leaves_of(tree):
            return [tree[n] for n in names]

        return leaves_of(params), leaves_of, lambda leaves: dict(zip(names, leaves))
    leaves, treedef = jax.tree.flatten(params)
    return leaves, treedef.flatten_up_to, treedef.unflatten


def _flat(leaves) -> jax.Array:
    return jnp.concatenate([jnp.ravel(leaf) for leaf in leaves])


def _unflat(vector, like):
    out, offset = [], 0
    for leaf in like:
        out.append(vector[offset : offset + leaf.size].reshape(leaf.shape))
        offset += leaf.size
    return out


def _fused_add(x, t, d):
    """``x + t·d`` rounded once, as torch's ``p.add_(d, alpha=t)`` (an FMA on CPU).

    Near a minimum the parameters hold the optimum to the last bit; rounding ``t·d``
    first moves them by one unit in the last place of ``x``, which the next gradient
    sees as a relative error of ``ulp(x) / |x − x*|`` — the state inherits it.
    """
    product, error = _two_product(jnp.asarray(t, d.dtype), d)
    total = x + product  # TwoSum: total + low == x + product exactly
    virtual = total - x
    low = (x - (total - virtual)) + (product - virtual)
    return total + (low + error)


_add_scaled = jax.jit(_fused_add)


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    # torch's port of polyinterp.lua, in Python floats
    if bounds is not None:
        xmin_bound, xmax_bound = bounds
    else:
        xmin_bound, xmax_bound = (x1, x2) if x1 <= x2 else (x2, x1)
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1**2 - g1 * g2
    if d2_square >= 0:
        d2 = d2_square**0.5
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _dot(a, b) -> float:
    return float(jnp.dot(a, b))


def _strong_wolfe(obj_func, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """torch's ``_strong_wolfe`` (a port of lswolfe.lua): ``(f, g, t, evaluations)``."""
    d_norm = float(jnp.max(jnp.abs(d)))
    f_new, g_new = obj_func(t)
    ls_func_evals = 1
    gtd_new = _dot(g_new, d)
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new], [gtd_prev, gtd_new]
            break
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(
            t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(min_step, max_step)
        )
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new, gtd_new
        f_new, g_new = obj_func(t)
        ls_func_evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]

    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(
            bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]
        )
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                if abs(t - max(bracket)) < abs(t - min(bracket)):
                    t = max(bracket) - eps
                else:
                    t = min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        f_new, g_new = obj_func(t)
        ls_func_evals += 1
        gtd_new = _dot(g_new, d)
        ls_iter += 1
        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new, gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos] = bracket_g[low_pos]
                bracket_gtd[high_pos] = bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new, gtd_new
    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


def lbfgs(
    lr=1,
    max_iter: int = 20,
    max_eval: int | None = None,
    tolerance_grad: float = 1e-7,
    tolerance_change: float = 1e-9,
    history_size: int = 100,
    line_search_fn: str | None = None,
) -> Lbfgs:
    """``torch.optim.LBFGS``: ``init`` and a pure ``step`` over a ``value_and_grad`` closure.

    One ``step`` is one call of torch's ``optimizer.step(closure)``: up to ``max_iter``
    L-BFGS iterations and ``max_eval`` closure evaluations. Not jittable end to end
    (torch's loop is data-dependent; see the module's docstring): jit the closure.

    Args:
      lr: the step length (the first iteration of the first step scales it by
        ``min(1, 1/‖g‖₁)``): a float or a one-element array (used as its value).
      max_iter: iterations per step.
      max_eval: closure evaluations per step (torch's default ``max_iter * 5 // 4``).
      tolerance_grad: stop when ``max|g| <= tolerance_grad``.
      tolerance_change: stop when the directional derivative, the step or the change
        of the loss falls below it.
      history_size: the pairs ``(s, y)`` kept.
      line_search_fn: None (fixed step ``lr``) or ``"strong_wolfe"``.

    Returns:
      ``Lbfgs(init, step)``: ``init(params) -> LbfgsState``;
      ``step(value_and_grad, params, state) -> (loss, params, state)`` with
      ``value_and_grad(params) -> (loss, grads)``, ``loss`` the loss at the given params
      (what torch's ``step`` returns) and the new params in the given structure and
      key order.

    Raises:
      ValueError: a negative ``lr``, a one-element check torch makes, or a
        ``line_search_fn`` other than None and ``"strong_wolfe"`` (torch raises that
        at the first step; jaxgrad when the optimizer is made).
      TypeError: an ``lr`` of the wrong type.
    """
    lr = check_lr(lr)
    if callable(lr):
        raise TypeError(
            "`lr` must be a float or a one-element array: torch's LBFGS takes "
            "no scheduler-driven step per iteration here."
        )
    lr = float(lr)
    if max_eval is None:
        max_eval = max_iter * 5 // 4
    tolerance_grad = check_hyper("tolerance_grad", tolerance_grad, low=float("-inf"))
    tolerance_change = check_hyper("tolerance_change", tolerance_change, low=float("-inf"))
    if line_search_fn not in (None, "strong_wolfe"):
        raise ValueError(
            f"`line_search_fn` (={line_search_fn!r}) must be None or "
            "'strong_wolfe' (torch: \"only 'strong_wolfe' is supported\")."
        )

    def init_fn(params) -> LbfgsState:
        for path, leaf in jax.tree_util.tree_leaves_with_path(params):
            if jnp.issubdtype(jnp.result_type(leaf), jnp.complexfloating):
                raise ValueError(
                    f"`params` {jax.tree_util.keystr(path)} is complex: "
                    "jaxgrad's lbfgs takes real parameters."
                )
        zero = jnp.zeros((), jnp.int32)
        return LbfgsState(step=zero, func_evals=zero, n_iter=zero)

    def step_fn(value_and_grad: Callable, params, state: LbfgsState):
        leaves, leaves_of, rebuild = _leaves_in_order(params)

        def evaluate(leaves):
            loss, grads = value_and_grad(rebuild(leaves))
            return loss, _flat(leaves_of(grads))

        func_evals, n_iter_total = int(state.func_evals), int(state.n_iter)
        orig_loss, flat_grad = evaluate(leaves)
        loss = float(orig_loss)
        current_evals = 1
        func_evals += 1
        opt_cond = float(jnp.max(jnp.abs(flat_grad))) <= tolerance_grad
        d, t = state.d, (None if state.t is None else float(state.t))
        h_diag = state.H_diag
        prev_flat_grad = state.prev_flat_grad
        prev_loss = None if state.prev_loss is None else float(state.prev_loss)
        x = _flat(leaves)
        history = _History.of(state, x)
        if opt_cond:
            return orig_loss, params, state._replace(func_evals=jnp.asarray(func_evals, jnp.int32))

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            n_iter_total += 1
            if n_iter_total == 1:
                d = -flat_grad
                history = _History.empty(x, history_size)
                h_diag = 1
            else:
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = _dot(y, s)
                if ys > 1e-10:
                    history = history.push(y, s, 1.0 / ys)
                    h_diag = ys / _dot(y, y)
                al = history.al if history.al is not None else jnp.zeros_like(history.ro)
                d, al = _two_loop(
                    flat_grad,
                    history.dirs,
                    history.stps,
                    history.ro,
                    history.filled,
                    jnp.asarray(h_diag, x.dtype),
                    al,
                )
                history = history._replace(al=al)
            prev_flat_grad = flat_grad
            prev_loss = loss
            if n_iter_total == 1:
                t = min(1.0, 1.0 / float(jnp.sum(jnp.abs(flat_grad)))) * lr
            else:
                t = lr
            gtd = _dot(flat_grad, d)
            if gtd > -tolerance_change:
                break
            ls_func_evals = 0
            if line_search_fn == "strong_wolfe":
                x_init = x

                def obj_func(step_length, x_init=x_init, d=d):
                    loss_at, grad_at = evaluate(
                        _unflat(_add_scaled(x_init, step_length, d), leaves)
                    )
                    return float(loss_at), grad_at

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    obj_func,
                    t,
                    d,
                    loss,
                    flat_grad,
                    gtd,
                    tolerance_change=1e-9,
                    max_ls=max_eval - current_evals,
                )
                x = _add_scaled(x, t, d)
                opt_cond = float(jnp.max(jnp.abs(flat_grad))) <= tolerance_grad
            else:
                x = _add_scaled(x, t, d)
                if n_iter != max_iter:
                    loss_at, flat_grad = evaluate(_unflat(x, leaves))
                    loss = float(loss_at)
                    opt_cond = float(jnp.max(jnp.abs(flat_grad))) <= tolerance_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            func_evals += ls_func_evals
            if n_iter == max_iter:
                break
            if current_evals >= max_eval:
                break
            if opt_cond:
                break
            if float(jnp.max(jnp.abs(d * t))) <= tolerance_change:
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        def scalar(value):
            return None if value is None else jnp.asarray(value, x.dtype)

        new_state = LbfgsState(
            step=state.step + 1,
            func_evals=jnp.asarray(func_evals, jnp.int32),
            n_iter=jnp.asarray(n_iter_total, jnp.int32),
            d=d,
            t=scalar(t),
            old_dirs=history.dirs,
            old_stps=history.stps,
            ro=history.ro,
            H_diag=scalar(h_diag),
            prev_flat_grad=prev_flat_grad,
            prev_loss=scalar(prev_loss),
            al=history.al,
            count=history.filled,
        )
        return orig_loss, rebuild(_unflat(x, leaves)), new_state

    return Lbfgs(init_fn, step_fn)
