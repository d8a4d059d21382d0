"""State a forward writes: found by running torch's own forward, reproduced or refused.

Research code updates its own state inside ``forward``: a momentum encoder
(``pk.data = pk.data * m + pq.data * (1 - m)``), an EMA target (``pt.mul_(m)`` under
``no_grad``), an EMA codebook (``self.embedding.data = ...``), a step counter
(``self.steps += 1``). Neither front end sees every such write: ``.data =`` swaps a
tensor's storage and is recorded by neither ``torch.fx`` nor ``torch.export``, and
``torch.fx`` runs a write to a module tensor on the real tensor while it traces, outside
the graph. A converted model that leaves a write out gives torch's first output and
departs from it afterwards, silently.

So detection does not depend on the graph seeing the write. ``from_torch``:

- snapshots every parameter and buffer by its ``state_dict`` key (``snapshot``), runs
  torch's own forward on the example in each mode, and reads which keys changed and how
  (``changes``: an in-place write, a ``.data =`` assignment, or a new tensor assigned to
  the attribute), then puts everything back (``restore``);
- does the same around the layer path's trace: a key the trace changed is a write the
  traced graph does not hold;
- asks the converted model which keys it returns as new state in each mode
  (``updated_keys``), and refuses (``refuse_unreproduced``) a model that leaves any
  changed key out, naming the key, the construct and the module that owns it.

The export front end reproduces writes of buffers and of parameters torch gives no
gradient (``requires_grad=False``) as new state (``jaxgrad.nn.capture.export``); the
layer path reproduces only its converted layers' own statistics (BatchNorm).

torch is imported lazily, inside ``torch_writes``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

IN_PLACE = "an in-place write (an in-place op such as `+=`, `copy_` or `mul_`, on `.data` or under `no_grad`)"
DATA_ASSIGNMENT = "a `.data =` assignment"
REPLACED = "a new tensor assigned to the attribute (`self.name = ...`)"


@dataclasses.dataclass
class _Entry:
    owner: Any  # the module holding the tensor
    attr: str  # its attribute name there
    kind: str  # "_parameters" or "_buffers"
    tensor: Any  # the tensor object itself
    value: Any  # a copy of its value
    storage: Any  # `tensor.data` then (its storage, not a copy): `.data =` swaps it
    requires_grad: bool  # a forward may call requires_grad_(False) on a parameter


def snapshot(module) -> dict:
    """``{name: entry}`` for every parameter and buffer (non-persistent ones too, under
    their ``named_buffers()`` names; a tied tensor under each of its names): the tensor
    object, where it lives and one copy of its value (a tied tensor's is shared)."""
    entries, copies = {}, {}
    named = [
        *(("_parameters", n) for n, _ in module.named_parameters(remove_duplicate=False)),
        *(("_buffers", n) for n, _ in module.named_buffers(remove_duplicate=False)),
    ]
    modules = dict(module.named_modules(remove_duplicate=False))
    for kind, key in named:
        owner_path, _, attr = key.rpartition(".")
        owner = modules[owner_path]
        tensor = getattr(owner, kind).get(attr)
        if tensor is None or type(tensor).__name__.startswith("Uninitialized"):
            continue
        if id(tensor) not in copies:
            copies[id(tensor)] = tensor.detach().clone()
        entries[key] = _Entry(
            owner, attr, kind, tensor, copies[id(tensor)], tensor.data, tensor.requires_grad
        )
    return entries


def changes(entries: dict) -> dict:
    """``{key: construct}`` for every entry the forward changed since ``snapshot``."""
    found = {}
    for key, entry in entries.items():
        now = getattr(entry.owner, entry.kind).get(entry.attr)
        if now is not entry.tensor:
            found[key] = REPLACED
        elif now.data_ptr() != entry.storage.data_ptr():
            found[key] = DATA_ASSIGNMENT
        elif now.shape != entry.value.shape or not now.detach().equal(entry.value):
            found[key] = IN_PLACE
    return found


def restore(entries: dict) -> None:
    """Put back the tensor objects, values and ``requires_grad`` flags ``snapshot``
    saw."""
    for entry in entries.values():
        table = getattr(entry.owner, entry.kind)
        if table.get(entry.attr) is not entry.tensor:
            table[entry.attr] = entry.tensor
        tensor = entry.tensor
        if tensor.data_ptr() != entry.storage.data_ptr() or tensor.shape != entry.storage.shape:
            tensor.data = entry.storage
        if not tensor.detach().equal(entry.value):
            tensor.data.copy_(entry.value)
        if tensor.is_leaf and tensor.requires_grad != entry.requires_grad:
            tensor.requires_grad_(entry.requires_grad)


def torch_writes(module, args, kwargs, entries=None) -> dict:
    """``{train: {key: construct}}``: what torch's own forward on the example writes in
    training (``True``) and evaluation (``False``) mode (``entries``: the module's
    ``snapshot``, taken here if not given). The module, its mode flags and torch's
    random state are left as they were.

    Raises:
      ValueError: torch's own forward fails on the example.
    """
    import torch

    flags = {name: m.training for name, m in module.named_modules(remove_duplicate=False)}
    entries = snapshot(module) if entries is None else entries

    def fresh(value):  # the forward may write its inputs: each run gets its own copy
        return value.detach().clone() if isinstance(value, torch.Tensor) else value

    found = {}
    try:
        with torch.random.fork_rng(devices=[]):
            for train in (True, False):
                module.train(train)
                call_args, call_kwargs = torch.utils._pytree.tree_map(
                    fresh, (tuple(args), dict(kwargs))
                )
                try:
                    with torch.no_grad():
                        module(*call_args, **call_kwargs)
                except Exception:  # noqa: BLE001 - a forward that needs autograd itself
                    restore(entries)
                    try:
                        module(*call_args, **call_kwargs)
                    except Exception as error:
                        mode = "training" if train else "evaluation"
                        raise ValueError(
                            f"from_torch: torch's own {mode}-mode forward of "
                            f"{type(module).__name__} fails on the example "
                            f"({type(error).__name__}: {str(error).splitlines()[0][:300]}); "
                            "from_torch runs it to see what state the forward writes. Pass "
                            "an example torch's forward takes."
                        ) from error
                found[train] = changes(entries)
                restore(entries)
    finally:
        restore(entries)
        for name, m in module.named_modules(remove_duplicate=False):
            m.training = flags[name]
    return found


def updated_keys(model, train: bool) -> set:
    """The ``state_dict`` keys ``model.apply(..., train=train)`` returns as new state:
    a captured program's buffer updates; on the layer path, the buffers its converted
    layers keep (BatchNorm statistics) in training mode, and none in evaluation mode
    (a traced graph reads its own buffers, never writes them)."""
    if type(model).__name__ == "ExportedModule":
        program = model.train_program if train else model.eval_program
        return {name for name, _ in program.buffer_updates}
    if not train:
        return set()
    with jax.enable_x64(True):  # only the keys: a float64 model's, whatever the mode
        keys = set(jax.eval_shape(model.init_buffers))
    inner = getattr(model, "layer", model)  # Frozen wraps the layer path's model
    for name, _, _, kind in getattr(inner, "tensors", ()):
        if kind == "buffer":  # a GraphModule's own buffer, read by get_attr only
            keys.discard(name)
    return keys


def _owner(key: str) -> str:
    path = key.rpartition(".")[0]
    return f"module {path!r}" if path else "the top-level module"


def refuse_unreproduced(model, writes: dict, class_name: str, how: str) -> None:
    """Raise unless ``model`` returns every key torch's forward wrote (``writes``:
    ``{train: {key: construct}}``) as new state in that mode; ``how`` says which front
    end built ``model``, for the message."""
    for train in (True, False):
        missing = {
            k: c for k, c in writes.get(train, {}).items() if k not in updated_keys(model, train)
        }
        if not missing:
            continue
        mode = "training" if train else "evaluation"
        named = "; ".join(
            f"{key!r} ({_owner(key)}, by {construct})" for key, construct in missing.items()
        )
        raise ValueError(
            f"from_torch: {class_name}'s {mode}-mode forward writes its own state: {named}. "
            f"{how} does not return {'it' if len(missing) == 1 else 'them'} as new state, so "
            "the converted model would give torch's first output and depart from it on "
            "every later call. The export front end (`capture='export'` with "
            "`example=`) returns writes of buffers and of parameters without a gradient "
            "(requires_grad=False) as new state; a write it cannot reproduce is refused "
            "by name."
        )


__all__ = [
    "snapshot",
    "changes",
    "restore",
    "torch_writes",
    "updated_keys",
    "refuse_unreproduced",
]
