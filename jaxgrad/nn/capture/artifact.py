"""A converted model as one torch-free file: ``save_exported`` / ``load_exported``.

``save_exported(path, model, params, buffers)`` writes what a captured model
(``from_torch``'s export front end) needs to run anywhere JAX runs, without torch
and without the model's source:

- the forward serialised with ``jax.export`` (StableHLO), each size torch kept
  symbolic a ``jax.export`` dimension variable (so one artifact serves every batch
  size and sequence length the capture accepts), lowered for ``platforms``;
- the weights, keyed like ``state_dict()``, as ``.npy`` arrays (no pickle);
- the input structure, the sizes torch fixed, its ranges and guards (JSON), checked
  before a call, so a shape the program cannot take is refused by name as
  ``apply`` refuses it.

The file is a zip: ``meta.json``, ``program0.jaxexport`` (and one more per variant:
``from_torch(..., batch_one=True)``), ``weights/<n>.npy``. ``load_exported(path)``
reads and checks every member (a damaged file is refused there, naming the member) and
returns an ``ExportedArtifact``: call it as the model's ``apply`` is called, minus the
params, which it holds (pass ``params=`` to run other weights of the same shapes).
Integer inputs take any integer dtype whose values fit the program's, with
``jax_enable_x64`` on or off in either process (issue 55).
"""

from __future__ import annotations

import contextlib
import io
import json
import struct
import zipfile
import zlib

import jax
import numpy as np

from jaxgrad.nn.capture.program import ExportedModule, TensorMeta, flatten, unflatten
from jaxgrad.nn.capture.shapes import ShapeSpec, SymDim, as_json, evaluate, from_json, symbols

FORMAT = "jaxgrad-exported/1"
PLATFORMS = ("cpu", "cuda")


def _jax_text(expr) -> str:
    """An expression of symbolic sizes in ``jax.export.symbolic_shape``'s syntax (an
    expanded polynomial: jax's parser takes no parenthesised sums), by evaluating it
    on jax's own dimension variables."""
    names = sorted(symbols(expr))
    variables = jax.export.symbolic_shape(", ".join(names)) if names else ()
    return str(evaluate(expr, dict(zip(names, variables))))


def _equation(expr) -> str:
    """An equality guard as ``jax.export`` takes one: a single term on the left
    (``4*s0*s53 == 8*s0 + 8*s53 + 128``); empty when it has no such form. sympy (a torch
    dependency) expands it: only saving needs it, never loading."""
    import sympy

    def to_sympy(e):
        if isinstance(e, (bool, int)):
            return sympy.Integer(int(e))
        if e[0] == "sym":
            return sympy.Symbol(e[1], integer=True, positive=True)
        items = [to_sympy(item) for item in e[1:]]
        if e[0] == "add":
            return sympy.Add(*items)
        if e[0] == "mul":
            return sympy.Mul(*items)
        if e[0] == "pow":
            return items[0] ** items[1]
        raise ValueError(e[0])

    try:
        difference = sympy.expand(to_sympy(expr[1]) - to_sympy(expr[2]))
    except ValueError:
        return ""
    terms = difference.as_ordered_terms()
    if not terms or difference.is_number:
        return ""
    lead = terms[0]
    rest = sympy.expand(lead - difference)
    text = f"{lead} == {rest}"
    return "" if "**" in text else text


def _dim_text(size) -> str:
    if isinstance(size, SymDim):
        return size.symbol or _jax_text(size.expr)
    return str(int(size))


def _constraints(shapes: ShapeSpec) -> tuple:
    """The ranges and the guards ``jax.export`` can hold (``>=``, ``<=``, ``==`` of
    polynomials), in its syntax; the rest are checked before each call."""
    out = []
    for symbol, low, high in shapes.ranges:
        if low > 1:
            out.append(f"{symbol} >= {low}")
        if high is not None:
            out.append(f"{symbol} <= {high}")
    for expr, _ in shapes.guards:
        if isinstance(expr, tuple) and expr[0] == "eq":
            equation = _equation(expr)
            if equation:
                out.append(equation)
        elif isinstance(expr, tuple) and expr[0] in ("ge", "le"):
            try:
                sides = [_jax_text(side) for side in expr[1:]]
            except Exception:  # noqa: BLE001 - a form jax's dimension arithmetic lacks
                continue
            out.append(f" {dict(ge='>=', le='<=')[expr[0]]} ".join(sides))
    return tuple(out)


def _input_specs(model: ExportedModule, scope):
    """``jax.ShapeDtypeStruct``\\ s of the model's tensor inputs, symbolic sizes as
    dimension variables of ``scope``."""
    specs = []
    for _, meta in model.input_meta:
        if isinstance(meta, TensorMeta):
            shape = (
                jax.export.symbolic_shape(
                    ", ".join(_dim_text(s) for s in meta.shape) or None, scope=scope
                )
                if (meta.shape)
                else ()
            )
            specs.append(jax.ShapeDtypeStruct(shape, jax.dtypes.canonicalize_dtype(meta.dtype)))
    return specs


def _export_one(model: ExportedModule, params, buffers, train: bool, platforms):
    """One program of ``model`` as a ``jax.export.Exported``."""
    tensor_slots = [index for index, meta in model.input_meta if isinstance(meta, TensorMeta)]
    constants = {
        index: meta[1] for index, meta in model.input_meta if not isinstance(meta, TensorMeta)
    }
    count = len(model.input_meta)

    def forward(params, buffers, key_data, *tensors):
        leaves = [None] * count
        for index, value in zip(tensor_slots, tensors):
            leaves[index] = value
        for index, value in constants.items():
            leaves[index] = value
        inputs, kwargs = unflatten(model.in_tree, iter(leaves))
        key = jax.random.wrap_key_data(key_data) if train else None
        result = model.apply(
            params,
            *inputs,
            buffers=buffers if model.buffers else None,
            train=train,
            key=key,
            **kwargs,
        )
        if model.buffers:
            return result
        return result, {}

    scope = jax.export.SymbolicScope(_constraints(model.shapes))
    specs = _input_specs(model, scope)
    shapes = lambda tree: jax.tree.map(  # noqa: E731 - a one-line helper
        lambda a: jax.ShapeDtypeStruct(
            np.shape(a), np.asarray(a).dtype if not hasattr(a, "dtype") else a.dtype
        ),
        tree,
    )
    key_spec = jax.ShapeDtypeStruct((2,), np.uint32)
    try:
        return jax.export.export(jax.jit(forward), platforms=tuple(platforms))(
            shapes(params), shapes(buffers), key_spec, *specs
        )
    except Exception as error:  # jax's own message says which op or size
        text = str(error).strip().split("\n")[0][:400]
        raise ValueError(
            f"save_exported: jax.export cannot lower {model.class_name} with its symbolic "
            f"sizes ({type(error).__name__}: {text}). Convert with "
            "`from_torch(..., dynamic_shapes=None)` for an artifact at the example's shapes."
        ) from error


def save_exported(
    path, model, params, buffers=None, *, train: bool = False, platforms=PLATFORMS
) -> None:
    """Write ``model`` (a ``from_torch`` export-front-end model) and its weights to
    one file that ``load_exported`` runs without torch.

    Args:
      path: the file to write (a zip; ``.jaxgrad`` by convention). Written whole to
        a temporary name first, then renamed: an interrupted save leaves no
        half-written file under ``path``.
      model: an ``ExportedModule`` (``from_torch(..., capture="export")``).
      params: its weights, keyed like ``state_dict()``.
      buffers: its buffers (required when it has any).
      train: export torch's training-mode forward (dropout from a key, BatchNorm
        statistics returned) instead of the evaluation-mode one.
      platforms: ``jax.export`` platforms to lower for (default CPU and CUDA).

    Raises:
      TypeError: ``model`` is not a captured program.
      ValueError: weights that do not fit the model, or a program ``jax.export``
        cannot lower with symbolic sizes (the message says which).
    """
    import os
    import tempfile

    if not isinstance(model, ExportedModule):
        raise TypeError(
            f"save_exported takes a model captured by torch.export, got "
            f"{type(model).__name__}; convert with `from_torch(module, example, "
            'capture="export")`.'
        )
    params = model.load_state_dict(dict(params)) if params is not None else None
    if params is None:
        raise ValueError("save_exported: pass the model's `params`.")
    if model.buffers and buffers is None:
        raise ValueError(f"save_exported: {model.class_name} has buffers; pass `buffers=`.")
    buffers = model.load_buffers(dict(buffers)) if model.buffers else {}
    programs, blobs = [], {}
    usable = [v for v in (model, *model.variants) if not (train and v.train_refused)]
    for number, variant in enumerate(usable):
        exported = _export_one(variant, params, buffers, train, platforms)
        name = f"program{number}.jaxexport"
        blobs[name] = bytes(exported.serialize())
        programs.append(
            {
                "file": name,
                "input_meta": _meta_json(variant.input_meta),
                "shapes": _shapes_json(variant.shapes),
            }
        )
    names = list(params) + [n for n in buffers if n not in params]
    meta = {
        "format": FORMAT,
        "class_name": model.class_name,
        "train": bool(train),
        "random": bool(train and model.train_program.random_nodes()),
        "platforms": list(platforms),
        "in_tree": as_json(model.in_tree),
        "programs": programs,
        "params": list(params),
        "buffers": list(buffers),
        "weights": names,
        "jax": jax.__version__,
    }
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, suffix=".partial")
    os.close(handle)
    try:
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("meta.json", json.dumps(meta, indent=1))
            for name, blob in blobs.items():
                archive.writestr(name, blob)
            for number, name in enumerate(names):
                value = params[name] if name in params else buffers[name]
                buffer = io.BytesIO()
                np.save(buffer, np.asarray(value), allow_pickle=False)
                archive.writestr(f"weights/{number}.npy", buffer.getvalue())
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def _meta_json(input_meta) -> list:
    return [
        [
            index,
            {"shape": as_json(meta.shape), "dtype": meta.dtype}
            if isinstance(meta, TensorMeta)
            else {"const": meta[1]},
        ]
        for index, meta in input_meta
    ]


def _shapes_json(shapes: ShapeSpec) -> dict:
    return {
        "ranges": as_json(shapes.ranges),
        "guards": as_json(shapes.guards),
        "fixed": as_json(shapes.fixed),
        "static": shapes.static,
        "first_only": shapes.first_only,
    }


class ExportedArtifact:
    """A model ``load_exported`` read: ``artifact(*inputs, **keyword_inputs)`` runs it.

    Integer inputs (token ids) take any integer dtype, from any array-like, in a process
    with ``jax_enable_x64`` on or off: their values must fit the integer dtype the
    program was lowered with (``int32`` when saved with x64 off, torch's ``int64`` when
    saved with it on), and are passed in that dtype. A program with 64-bit integers
    runs with x64 enabled for the call only. Float inputs take the program's dtype.

    Attributes:
      class_name: the torch model's class.
      train: whether it runs torch's training-mode forward (then a call returns
        ``(output, new_buffers)``).
      random: whether that forward draws random numbers (then a call takes ``key=``).
      params, buffers: the weights it holds (``state_dict()`` keys).
      platforms: what ``jax.export`` lowered it for.
    """

    def __init__(self, meta: dict, programs: list, weights: dict):
        self.class_name = meta["class_name"]
        self.train = meta["train"]
        self.random = meta["random"]
        self.platforms = tuple(meta["platforms"])
        self.in_tree = from_json(meta["in_tree"])
        self.params = {name: weights[name] for name in meta["params"]}
        self.buffers = {name: weights[name] for name in meta["buffers"]}
        self._programs = programs

    def __call__(self, *inputs, params=None, buffers=None, key=None, **kwargs):
        """Run the program: inputs as the torch forward took them in the example.

        Returns:
          the output with torch's structure; with ``train``, ``(output, new_buffers)``.

        Raises:
          ValueError: a shape the captured program cannot take (naming the input,
            the dimension and the constraint), as ``apply`` refuses it; integer
            values outside the program's integer dtype (naming the input, the value
            and the range).
          TypeError: an input of another dtype than the program's (integers aside).
        """
        leaves = flatten(
            (tuple(inputs), dict(kwargs)), self.in_tree, f"{self.class_name} inputs", []
        )
        exported, input_meta = self._program_for(leaves)
        slots = [(index, meta) for index, meta in input_meta if isinstance(meta, TensorMeta)]
        # the program's own dtypes: the tensors are its last inputs (after the params,
        # the buffers and the key), as save_exported lowered them
        takes = [aval.dtype for aval in exported.in_avals[len(exported.in_avals) - len(slots) :]]
        tensors = [
            self._tensor(index, leaves[index], np.dtype(dtype), meta)
            for (index, meta), dtype in zip(slots, takes)
        ]
        for index, meta in input_meta:
            if not isinstance(meta, TensorMeta) and leaves[index] != meta[1]:
                raise ValueError(
                    f"{self.class_name}: input {index} is {leaves[index]!r}; the "
                    f"program was captured for {meta[1]!r}."
                )
        if self.train and self.random and key is None:
            raise ValueError(
                f"{self.class_name}: this artifact runs the training-mode "
                "forward, which draws random numbers: pass `key=`."
            )
        if key is None:
            key_data = np.zeros(2, np.uint32)
        elif jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            key_data = jax.random.key_data(key)
        else:
            key_data = key
        wide = any(
            np.dtype(aval.dtype).itemsize == 8 for aval in (*exported.in_avals, *exported.out_avals)
        )
        # 64-bit integers (torch's int64 ids, num_batches_tracked) of a program saved
        # with x64 on: an x64-off process cannot even hold them, so x64 is on for the call
        with jax.enable_x64(True) if wide else contextlib.nullcontext():
            output, new_buffers = exported.call(
                self.params if params is None else params,
                self.buffers if buffers is None else buffers,
                np.asarray(key_data, np.uint32),
                *tensors,
            )
        return (output, new_buffers) if self.train else output

    def _tensor(self, index: int, value, dtype: np.dtype, meta: TensorMeta):
        """Input ``index`` as the program takes it: in ``dtype``; an integer input of
        another integer dtype converted once its values are known to fit."""
        if not isinstance(value, jax.Array):
            value = np.asarray(value)
        given = np.dtype(value.dtype)
        if given == dtype:
            return value
        integers = dtype.kind in "iu" and given.kind in "iu"
        if not integers:
            accepts = " (any integer dtype whose values fit)" if dtype.kind in "iu" else ""
            raise TypeError(
                f"{self.class_name}: input {index} has dtype {given.name}, the artifact "
                f"takes {dtype.name}{accepts}."
            )
        host = np.asarray(value)
        limits, held = np.iinfo(dtype), np.iinfo(given)
        if host.size and (held.min < limits.min or held.max > limits.max):
            low, high = int(host.min()), int(host.max())
            outside = low if low < limits.min else high if high > limits.max else None
            if outside is not None:
                why = (
                    f" (torch's {meta.dtype}, lowered to {dtype.name}: it was saved with "
                    "jax_enable_x64 off)"
                    if meta.dtype != dtype.name
                    else ""
                )
                raise ValueError(
                    f"{self.class_name}: input {index} holds {outside}, outside the "
                    f"artifact's {dtype.name} range [{limits.min}, {limits.max}]{why}."
                )
        return host.astype(dtype)

    def _program_for(self, leaves):
        first_error = None
        for exported, input_meta, shapes in self._programs:
            try:
                shapes.check(self.class_name, input_meta, leaves)
                return exported, input_meta
            except ValueError as error:
                first_error = first_error or error
        raise first_error


def _damaged(path, member: str, why: str) -> ValueError:
    return ValueError(
        f"load_exported: {path!s} is damaged: {member} {why}; write the artifact again "
        "(or copy it whole)."
    )


def _what_is_cut(path) -> tuple[str, str]:
    """What a zip with no readable directory lacks, as ``(part, why)``, from its local
    headers read in order: the member whose header or data runs past the end of the
    file, or every member after the last whole one, or (every member whole) the zip's
    central directory, written last."""
    directory = ("the zip directory (after the last member)", "is cut off or unreadable")
    last = None
    inside = "is cut off inside its header"
    with open(path, "rb") as handle:
        size = handle.seek(0, io.SEEK_END)
        offset = 0
        while True:
            handle.seek(offset)
            header = handle.read(30)
            if not header and last is not None:
                return f"everything after member {last}", "is cut off (the file ends there)"
            if header[:4] != b"PK\x03\x04":
                return directory
            if len(header) < 30:
                return (f"the member after {last}" if last else "the first member"), inside
            _, _, flags, _, _, _, _, packed, _, name_length, extra_length = struct.unpack(
                "<IHHHHHIIIHH", header
            )
            name = handle.read(name_length)
            extra = handle.read(extra_length)
            if len(name) < name_length or len(extra) < extra_length:
                return (f"the member after {last}" if last else "the first member"), inside
            last = name.decode("utf-8", "replace")
            if packed == 0xFFFFFFFF:  # ZIP64: the sizes are in the extra field
                at = 0
                while at + 4 <= len(extra):
                    kind, length = struct.unpack("<HH", extra[at : at + 4])
                    if kind == 1 and length >= 16:
                        packed = struct.unpack("<Q", extra[at + 12 : at + 20])[0]
                    at += 4 + length
            offset = handle.tell() + packed
            if offset > size:
                return f"member {last}", "is cut off: the file ends inside it"
            if flags & 0x08:  # sizes after the data: jaxgrad never writes such members
                return directory


def _open_archive(path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        try:
            with open(path, "rb") as handle:
                is_zip = handle.read(4) == b"PK\x03\x04"
        except OSError:
            is_zip = False
        if not is_zip:
            raise ValueError(
                f"load_exported: {path!s} is not a jaxgrad exported artifact "
                f"({type(error).__name__}: {error}); write one with "
                "`jaxgrad.nn.save_exported`."
            ) from error
        part, why = _what_is_cut(path)
        raise _damaged(path, part, f"{why} ({type(error).__name__}: {error})") from error


def _read_member(path, archive: zipfile.ZipFile, name: str) -> bytes:
    """One member's bytes, checked against its CRC-32 as it is read (zipfile checks it
    when a read reaches the member's end)."""
    try:
        return archive.read(name)
    except KeyError as error:
        raise _damaged(path, f"member {name}", "is missing (meta.json lists it)") from error
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as error:
        raise _damaged(
            path, f"member {name}", f"does not read back ({type(error).__name__}: {error})"
        ) from error


def load_exported(path) -> ExportedArtifact:
    """Read a file ``save_exported`` wrote; imports jax and jaxgrad only (never torch).

    Every member is read and checked (its zip CRC-32; each program deserialised, each
    weight parsed) before this returns, so a damaged file is refused here, by name,
    never at a call.

    Raises:
      ValueError: the file is not such an artifact, or of another format version, or
        damaged (truncated, or bytes changed: naming the file and the member), or
        holds float64 weights while ``jax_enable_x64`` is off.
    """
    with _open_archive(path) as archive:
        if "meta.json" not in archive.namelist():
            raise ValueError(
                f"load_exported: {path!s} has no meta.json: not a jaxgrad exported artifact."
            )
        text = _read_member(path, archive, "meta.json")
        try:
            meta = json.loads(text)
        except ValueError as error:
            raise ValueError(
                f"load_exported: {path!s} has no readable meta.json ({error}): "
                "not a jaxgrad exported artifact."
            ) from error
        if meta.get("format") != FORMAT:
            raise ValueError(
                f"load_exported: {path!s} is of format {meta.get('format')!r}; "
                f"this jaxgrad reads {FORMAT!r}."
            )
        weights = {}
        for number, name in enumerate(meta["weights"]):
            file = f"weights/{number}.npy"
            data = _read_member(path, archive, file)
            try:
                weights[name] = np.load(io.BytesIO(data), allow_pickle=False)
            except (OSError, ValueError, EOFError) as error:
                raise _damaged(
                    path, f"member {file} ({name})", f"is not an array ({error})"
                ) from error
        wide = [n for n, v in weights.items() if v.dtype.itemsize >= 8 and v.dtype.kind in "fc"]
        if wide and not jax.config.jax_enable_x64:
            raise ValueError(
                f"load_exported: {path!s} holds 64-bit weights ({wide[0]}, ...): enable "
                'them first, `jax.config.update("jax_enable_x64", True)`.'
            )
        programs = []
        for program in meta["programs"]:
            data = _read_member(path, archive, program["file"])
            try:
                exported = jax.export.deserialize(bytearray(data))
            except Exception as error:  # noqa: BLE001 - jax's own reason, named below
                raise ValueError(
                    f"load_exported: {path!s}: member {program['file']} does not deserialise "
                    f"with jax {jax.__version__} (written with jax {meta.get('jax')}; "
                    f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}): "
                    "damaged, or from a jax this one cannot read; write it again."
                ) from error
            input_meta = tuple(
                (
                    index,
                    TensorMeta(from_json(item["shape"]), item["dtype"])
                    if "shape" in item
                    else ("const", item["const"]),
                )
                for index, item in program["input_meta"]
            )
            shapes = ShapeSpec(
                **{
                    k: from_json(v) if k not in ("static", "first_only") else v
                    for k, v in program["shapes"].items()
                }
            )
            programs.append((exported, input_meta, shapes))
        # members meta.json does not list are read too: a flipped byte anywhere is found
        read = {"meta.json", *(f"weights/{n}.npy" for n in range(len(meta["weights"])))}
        read |= {program["file"] for program in meta["programs"]}
        for name in archive.namelist():
            if name not in read:
                _read_member(path, archive, name)
    return ExportedArtifact(meta, programs, weights)


__all__ = ["save_exported", "load_exported", "ExportedArtifact", "PLATFORMS"]
