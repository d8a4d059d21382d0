"""An exported graph run again by PyTorch's autograd, recording what every grad_fn did.

``replay(graph)`` takes the plain-data graph of ``jaxgrad.html.export_graph`` (a
dict: no jax needed to read it), rebuilds its forward pass with the torch operation a
PyTorch user writes for each primitive (``logistic`` → ``torch.sigmoid``, the ``max(x,
0)`` of ``jax.nn.relu`` → ``torch.relu``, ``integer_pow`` → ``**``, ``dot_general`` →
``@``, ``transpose`` → ``permute``, ``reduce_sum`` → ``sum``), every input a float64 leaf with ``requires_grad=True``, and calls
``backward()``. Hooks record, per node, the class of its ``grad_fn``, the gradient
arriving at its output (``Tensor.register_hook``) and what its ``grad_fn`` passed to
each input (``Node.register_hook``'s ``grad_inputs``), and the ``.grad`` of every leaf.
The explorer page shows these beside JAX's numbers for the same node.
"""

from __future__ import annotations

import torch

from torchref.graph import autograd_graph

_BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "max": torch.maximum,
    "min": torch.minimum,
}
_UNARY = {
    "neg": torch.neg,
    "square": torch.square,
    "sqrt": torch.sqrt,
    "exp": torch.exp,
    "log": torch.log,
    "log1p": torch.log1p,
    "tanh": torch.tanh,
    "logistic": torch.sigmoid,
    "convert_element_type": lambda t: t.to(torch.float64),
    "copy": torch.clone,
}


def _as_list(tensor: torch.Tensor):
    value = tensor.detach().cpu().double()
    return value.item() if value.dim() == 0 else value.reshape(-1).tolist()  # row-major, flat


def _forward(node: dict, values: dict, constants: set):
    """The torch tensor of one node and, per JAX input, its slot in the grad_fn (or None)."""
    op, args = node["op"], [values[i] for i in node["inputs"]]
    if node.get("rule") == "relu":
        # jax.nn.relu traced as max(x, 0.0): torch's idiom is torch.relu, one input
        live = [k for k, i in enumerate(node["inputs"]) if i not in constants]
        return torch.relu(args[live[0]]), {live[0]: 0}
    if op == "integer_pow":
        return args[0] ** node["params"]["y"], {0: 0}
    shape = tuple(node["shape"])
    if op == "transpose":
        return args[0].permute(*node["params"]["permutation"]), {0: 0}
    if op in ("reshape", "squeeze", "expand_dims"):
        return args[0].reshape(shape), {0: 0}
    if op == "broadcast_in_dim":
        source = args[0]
        if source.numel() == _size(shape):  # only size-1 dimensions added
            return source.reshape(shape), {0: 0}
        if source.dim() == 0:
            return source.expand(shape), {0: 0}
        axes = node["params"]["broadcast_dimensions"]
        kept = [shape[i] if i in axes else 1 for i in range(len(shape))]
        return source.reshape(kept).expand(shape), {0: 0}
    if op == "reduce_sum":
        return args[0].sum(dim=tuple(node["params"]["axes"])), {0: 0}
    if op == "dot_general":
        a, b = args
        lhs_axis, rhs_axis = node["params"]["contract"]
        if lhs_axis == a.dim() - 1 and rhs_axis == 0:
            return a @ b, {0: 0, 1: 1}  # dot, mv or mm: one grad_fn
        # other contractions go through permutes: no single grad_fn to read per input
        return torch.tensordot(a, b, dims=([lhs_axis], [rhs_axis])), {}
    if op in _UNARY:
        return _UNARY[op](args[0]), {0: 0}
    if op in _BINARY:
        a, b = args
        return _BINARY[op](a, b), {0: 0, 1: 1}
    raise ValueError(f"replay: no torch operation for the primitive {op!r} (node {node['id']}).")


def _size(shape) -> int:
    size = 1
    for dim in shape:
        size *= dim
    return size


def replay(graph: dict) -> dict:
    """Run ``graph`` (``jaxgrad.html.export_graph``'s dict) forward and backward in torch.

    Returns:
      ``{"version", "grad_fn": {node id: class name}, "values": {node id: forward value},
      "upstream": {node id: dL/d(node)}, "passed": [{"node", "input", "value"}, …]
      (what each grad_fn sent to each input), "grads": {input label: .grad},
      "autograd_graph": torchref.graph.Graph}``; values are floats or lists of floats
      (pop ``autograd_graph`` before writing the rest as JSON).
    """
    values, leaves, constants = {}, {}, set()
    for entry in graph["inputs"]:
        leaf = torch.tensor(entry["value"], dtype=torch.float64).reshape(entry["shape"])
        leaf.requires_grad_(True)
        values[entry["id"]] = leaves[entry["label"]] = leaf
    upstream, passed, grad_fn, slots = {}, [], {}, {}
    for node in graph["nodes"]:
        if node["op"] == "constant":
            values[node["id"]] = torch.tensor(node["value"], dtype=torch.float64).reshape(
                node["shape"]
            )
            constants.add(node["id"])
            continue
        tensor, slot = _forward(node, values, constants)
        values[node["id"]] = tensor
        grad_fn[node["id"]] = type(tensor.grad_fn).__name__
        slots[node["id"]] = slot
        tensor.register_hook(lambda grad, key=node["id"]: upstream.__setitem__(key, _as_list(grad)))

        def record(grad_inputs, grad_outputs, node=node, slot=slot):
            for position, index in slot.items():
                source = node["inputs"][position]
                if source in constants or grad_inputs[index] is None:
                    continue
                passed.append(
                    {"node": node["id"], "input": source, "value": _as_list(grad_inputs[index])}
                )

        tensor.grad_fn.register_hook(record)
    loss = values[graph["output"]["id"]]
    recorded = autograd_graph(loss, leaves, label=graph["output"]["label"])
    loss.backward()
    return {
        "version": torch.__version__,
        "grad_fn": grad_fn,
        "values": {key: _as_list(t) for key, t in values.items() if key not in constants},
        "upstream": upstream,
        "passed": passed,
        "autograd_graph": recorded,
        "grads": {
            label: (
                _as_list(leaf.grad) if leaf.grad is not None else _as_list(torch.zeros_like(leaf))
            )
            for label, leaf in leaves.items()
        },
    }


__all__ = ["replay"]
