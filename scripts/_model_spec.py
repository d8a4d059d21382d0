"""Where ``scripts/port.py``'s torch model comes from: the model spec on its command line.

Four forms, each building a module with random weights (nothing is downloaded):

  path/to/file.py:Name, pkg.module:Name
      a class, or any callable returning an ``nn.Module``, called with ``--kwargs``
      (``torchvision.models:resnet18``, ``mymodels:Net``)
  torchvision:NAME
      ``torchvision.models.NAME(**kwargs)`` (the names ``scripts/zoo.py`` prints)
  timm:NAME
      ``timm.create_model(NAME, pretrained=False, **kwargs)``
  transformers:CLASS
      ``CLASS(config, **kwargs)``, the config from ``--config`` (JSON):
      ``AutoConfig.for_model(model_type, **config)`` when it names a ``model_type``,
      else ``CLASS.config_class(**config)``; an ``Auto*`` class
      (``AutoModelForCausalLM``) is built with ``from_config`` and needs the
      ``model_type``. ``use_cache`` is off unless ``--config`` says otherwise (a
      KV cache is not an output ``torch.export`` can return).

A spec is checked in two steps, as ``_cli``'s targets are: ``parse_spec`` and
``check_spec`` before anything heavy is imported (the library installed, the name
known: a module's source, timm's registry read from its source, transformers' lazy
namespace, which imports no torch), each failure one ``error:`` line and exit 2;
``factory`` imports the library and returns a function building the module.

A forward that returns a dict or a Hugging Face ``ModelOutput`` is trained (train.py)
or compared (port.py) on one tensor of it, chosen by one rule: ``output_key`` (``logits``,
the only tensor, or ``--output-key``; several tensors without ``logits`` refused naming
the keys); ``select_output`` makes the module return that tensor alone.

torchvision's wheel on some indexes is a CUDA build whose import fails against a
CPU-only torch; jaxgrad's public helper (``jaxgrad.zoo_imports.import_torchvision``,
as the zoo uses it) imports it, and runs before timm and transformers, which import
torchvision themselves.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import importlib.util
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import NamedTuple

import _cli

LIBRARIES = ("torchvision", "timm", "transformers")
# keyword arguments that would download weights: port.py takes random weights, or yours
# through --state-dict
_DOWNLOADS = ("pretrained", "weights", "pretrained_cfg_overlay")


class ModelSpec(NamedTuple):
    """A parsed model spec.

    Attributes:
      kind: ``"callable"`` (a file's or module's callable), ``"timm"`` or
        ``"transformers"``.
      target: where the callable lives (``_cli.Target``); for ``timm`` and
        ``transformers``, the library and the model or class name.
      config: ``--config`` as a dict (``transformers`` only), else None.
      text: the spec as given, for messages.
    """

    kind: str
    target: _cli.Target
    config: dict | None
    text: str

    @property
    def library(self) -> str | None:
        """The optional library (one of ``LIBRARIES``) the spec needs, if any."""
        root = self.target.where.split(".")[0]
        return root if not self.target.is_file and root in LIBRARIES else None


def json_object(parser: argparse.ArgumentParser, option: str, text: str) -> dict:
    """``text`` (``--kwargs``'s JSON) as a dict; a usage error (exit 2) otherwise."""
    try:
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError
    except ValueError:
        parser.error(f"{option} must be a JSON object, got {text!r}")
    return value


def parse_spec(
    parser: argparse.ArgumentParser, option: str, text: str, config: str | None
) -> ModelSpec:
    """``text`` (and ``--config``'s JSON) -> ``ModelSpec``; a usage error otherwise."""
    where, sep, name = text.rpartition(":")
    if where == "timm":
        if not re.fullmatch(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_-]+)?", name):
            parser.error(f"{option} {text!r}: expected timm:MODEL_NAME (e.g. timm:convnext_atto)")
        kind, target = "timm", _cli.Target("timm", name)
    elif where == "transformers":
        if not name.isidentifier():
            parser.error(
                f"{option} {text!r}: expected transformers:CLASS (e.g. transformers:BertModel)"
            )
        kind, target = "transformers", _cli.Target("transformers", name)
    else:
        target = _cli.parse_target(parser, option, text)
        if target.where == "torchvision":  # the zoo's names: torchvision:resnet18
            target = _cli.Target("torchvision.models", target.name)
        kind = "callable"
    parsed = None
    if config is not None:
        if kind != "transformers":
            parser.error(
                f"--config is a Hugging Face config, for a transformers:CLASS spec "
                f"only; {text!r} takes its keyword arguments from --kwargs"
            )
        try:
            parsed = json.loads(config)
        except ValueError as exc:
            parser.error(f"--config must be a JSON object, got {config!r} ({exc})")
        if not isinstance(parsed, dict):
            parser.error(f"--config must be a JSON object, got {config!r}")
    return ModelSpec(kind, target, parsed, text)


def _missing_library(parser, option: str, spec: ModelSpec) -> None:
    library = spec.library
    if library is not None and importlib.util.find_spec(library) is None:
        from _zoo_models import INSTALL  # imports no torch

        parser.error(
            f"{option} {spec.text!r}: {library} is not installed; install the zoo extra: {INSTALL}"
        )


def timm_model_names() -> set | None:
    """timm's registered model names (and deprecated aliases), read from its sources
    without importing it (which imports torch): every ``@register_model`` function
    and every key of a ``register_model_deprecations`` map. None when the sources
    show no registry (another layout: ``timm.is_model`` decides after the import)."""
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        return None
    models = os.path.join(list(spec.submodule_search_locations)[0], "models")
    registered = re.compile(r"^@register_model\s*\n\s*def\s+(\w+)\s*\(", re.M)
    deprecations = re.compile(
        r"^register_model_deprecations\(\s*__name__\s*,\s*\{(.*?)\}\s*\)", re.M | re.S
    )
    names: set = set()
    try:
        entries = sorted(os.listdir(models))
    except OSError:
        return None
    for entry in entries:
        if not entry.endswith(".py"):
            continue
        try:
            with open(os.path.join(models, entry), encoding="utf-8") as handle:
                source = handle.read()
        except (OSError, UnicodeDecodeError):
            continue
        names.update(registered.findall(source))
        for block in deprecations.findall(source):
            names.update(re.findall(r"^\s*['\"]([\w.-]+)['\"]\s*:", block, re.M))
    return names or None


def _suggest(name: str, names) -> str:
    close = difflib.get_close_matches(name, sorted(names), n=4, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def check_spec(parser: argparse.ArgumentParser, option: str, spec: ModelSpec, kwargs: dict) -> None:
    """What can be told before torch is imported: the library installed, no keyword
    argument asking a library for pretrained weights, the callable found in its
    module's source, a timm model name in timm's registry, a transformers class in its
    namespace (``import transformers`` alone imports no torch, a few seconds). Each
    failure is a usage error (exit 2)."""
    _missing_library(parser, option, spec)
    _refuse_downloads(parser, spec, kwargs)
    if spec.kind == "callable":
        _cli.check_target(parser, option, spec.target)
        return
    if spec.kind == "timm":
        names = timm_model_names()
        architecture = spec.target.name.split(".")[0]  # a pretrained tag is not an architecture
        if names is not None and architecture not in names:
            parser.error(
                f"{option}: timm has no model {architecture!r}{_suggest(architecture, names)}"
            )
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded, whatever is asked
    try:
        import transformers  # a lazy namespace: no torch, no model code yet
    except Exception as exc:  # a broken install: say so in one line
        parser.error(
            f"{option}: cannot import transformers: {type(exc).__name__}: {_cli._first_line(exc)}"
        )
    names = set(dir(transformers))
    if spec.target.name not in names:
        parser.error(
            f"{option}: transformers has no {spec.target.name!r}{_suggest(spec.target.name, names)}"
        )
    if spec.target.name.startswith("Auto") and "model_type" not in (spec.config or {}):
        parser.error(
            f"{option}: transformers.{spec.target.name} picks its class from the "
            "config's model_type: give it in --config (e.g. "
            '\'{"model_type": "bert", "hidden_size": 64}\')'
        )


def _refuse_downloads(parser, spec: ModelSpec, kwargs: dict) -> None:
    asked = [k for k in _DOWNLOADS if kwargs.get(k) not in (None, False)]
    if asked and (spec.library is not None or spec.kind != "callable"):
        parser.error(
            f"--kwargs {asked[0]}={kwargs[asked[0]]!r}: port.py downloads nothing; "
            "it ports random weights, or yours with --state-dict PATH"
        )


def _call_text(kwargs: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


class Factory(NamedTuple):
    """``build()`` makes the module (random weights, drawn from torch's global
    generator); ``code`` is the Python expression that builds it, for the "to load it"
    lines; ``notes`` what the spec changed from the library's defaults."""

    build: Callable
    code: str
    notes: tuple


def factory(parser: argparse.ArgumentParser, option: str, spec: ModelSpec, kwargs: dict) -> Factory:
    """Import what ``spec`` names (torch and the library) and return its ``Factory``;
    a name that turns out not to be a model is a usage error (exit 2)."""
    if spec.library is not None or _mentions_libraries(spec):
        from jaxgrad.zoo_imports import import_torchvision

        if importlib.util.find_spec("torchvision") is not None:
            import_torchvision()  # a no-op where torchvision imports cleanly
    if spec.kind == "callable":
        obj = _cli.load_object(parser, spec.target, option)
        return Factory(lambda: obj(**kwargs), f"{spec.target.name}({_call_text(kwargs)})", ())
    if spec.kind == "timm":
        import timm

        if not timm.is_model(spec.target.name):
            parser.error(
                f"{option}: timm has no model {spec.target.name!r}"
                f"{_suggest(spec.target.name, timm.list_models())}"
            )
        call = _call_text(dict(pretrained=False, **kwargs))
        return Factory(
            lambda: timm.create_model(spec.target.name, pretrained=False, **kwargs),
            f"timm.create_model({spec.target.name!r}, {call})",
            (),
        )
    return _transformers_factory(parser, option, spec, kwargs)


def build_module(
    parser: argparse.ArgumentParser,
    spec: ModelSpec,
    kwargs: dict,
    built: Factory,
    *,
    state=None,
    seed: int = 0,
):
    """``built.build()`` under ``torch.manual_seed(seed)`` (the library's initialisation),
    its weights from ``state`` when given; a spec the library refuses is a usage error
    (exit 2) naming ``--kwargs`` or ``--config``."""
    import torch

    torch.manual_seed(seed)
    label = spec.text
    try:
        module = built.build()
    except TypeError as exc:
        parser.error(f"cannot build {label} with --kwargs {json.dumps(kwargs)}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a --config value the model refuses
        if spec.config is None:
            raise
        parser.error(
            f"cannot build {label} with --config {json.dumps(spec.config)}: "
            f"{type(exc).__name__}: {_cli._first_line(exc)}"
        )
    if not isinstance(module, torch.nn.Module):
        parser.error(f"{label}() returned a {type(module).__name__}, not a torch.nn.Module")
    if state is not None:
        try:
            module.load_state_dict(state)
        except RuntimeError as exc:  # torch lists every problem, one per line: keep one line
            problems = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            parser.error(f"--state-dict does not fit {label}: {problems}")
    return module


def _mentions_libraries(spec: ModelSpec) -> bool:
    """Whether the user's own model source names one of ``LIBRARIES`` (so torchvision's
    shim must run before it is imported); plain models skip torchvision's import."""
    if spec.kind != "callable":
        return True
    path = spec.target.where
    if not spec.target.is_file:
        with _cli._current_directory_on_path():
            path, _ = _cli._module_source(spec.target.where)
    if not path:
        return False
    try:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
    except (OSError, UnicodeDecodeError):
        return False
    return any(re.search(rf"\b(import|from)\s+{name}\b", source) for name in LIBRARIES)


def _transformers_factory(parser, option: str, spec: ModelSpec, kwargs: dict) -> Factory:
    import torch
    import transformers

    name = spec.target.name
    try:
        cls = getattr(transformers, name)
    except Exception as exc:  # transformers' lazy import names what it lacks
        parser.error(
            f"{option}: cannot import transformers.{name}: {type(exc).__name__}: "
            f"{_cli._first_line(exc)}"
        )
    auto = name.startswith("Auto")
    if not auto and not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        parser.error(
            f"{option}: transformers.{name} is not a model class (a torch.nn.Module); "
            "give one such as BertModel or GPT2LMHeadModel"
        )
    config = dict(spec.config or {})
    model_type = config.pop("model_type", None)
    try:
        config_class = (
            transformers.AutoConfig.for_model(model_type).__class__
            if model_type is not None
            else cls.config_class
        )
    except ValueError as exc:
        parser.error(f"--config: model_type {model_type!r}: {_cli._first_line(exc)[:200]}")
    if not auto and not issubclass(config_class, cls.config_class):
        parser.error(
            f"--config: model_type {model_type!r} gives a {config_class.__name__}; "
            f"transformers.{name} takes a {cls.config_class.__name__}"
        )
    defaults = config_class()
    known = (
        set(defaults.to_dict())
        | set(getattr(config_class, "attribute_map", {}))
        | set(_parameters(config_class))
        | {"num_labels", "attn_implementation"}
    )
    unknown = [k for k in config if k not in known]
    if unknown:  # transformers would keep a misspelt key as a stray attribute, silently
        parser.error(
            f"--config: {config_class.__name__} has no {unknown[0]!r}"
            f"{_suggest(unknown[0], known)}; transformers would ignore it and build "
            "the default size"
        )
    notes = []
    if "use_cache" in defaults.to_dict() and "use_cache" not in config:
        config["use_cache"] = False
        notes.append(
            "use_cache=False (a KV cache is not an output torch.export can return; "
            'give "use_cache": true in --config to keep it)'
        )
    try:
        built = (
            transformers.AutoConfig.for_model(model_type, **config)
            if model_type is not None
            else config_class(**config)
        )
    except Exception as exc:  # noqa: BLE001 - a value the config refuses, whatever it raises
        # huggingface_hub's strict dataclasses raise their own error for a value of the
        # wrong type, its reason on the second line: keep every line, as one
        reason = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        parser.error(
            f"--config: {config_class.__name__} refuses it: {type(exc).__name__}: "
            f"{reason or '(no message)'}"
        )
    config_code = (
        f"transformers.AutoConfig.for_model({model_type!r}, {_call_text(config)})"
        if model_type is not None
        else f"transformers.{config_class.__name__}({_call_text(config)})"
    )
    extra = f", {_call_text(kwargs)}" if kwargs else ""
    if auto:
        return Factory(
            lambda: cls.from_config(built, **kwargs),
            f"transformers.{name}.from_config({config_code}{extra})",
            tuple(notes),
        )
    return Factory(
        lambda: cls(built, **kwargs), f"transformers.{name}({config_code}{extra})", tuple(notes)
    )


def _parameters(cls) -> list:
    import inspect

    try:
        return [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    except (TypeError, ValueError):
        return []


def token_vocab(module) -> int | None:
    """The vocabulary size of a model that takes token ids (a Hugging Face model whose
    ``main_input_name`` is ``input_ids``), else None."""
    if getattr(module, "main_input_name", None) != "input_ids":
        return None
    vocab = getattr(getattr(module, "config", None), "vocab_size", None)
    return vocab if isinstance(vocab, int) and vocab > 0 else None


# ---- a forward that returns a dict or a Hugging Face ModelOutput: the one tensor that
# train.py trains on and port.py compares (issue 55), chosen by one rule for both

OUTPUT_KEY_HELP = (
    "a forward returning a dict or a Hugging Face ModelOutput: the key of the one tensor "
    "to {verb} (default: 'logits' where it is one of the values, else the only tensor "
    "among them; several tensors and no 'logits' are refused, naming the keys)"
)


def is_model_output(outputs) -> bool:
    """Whether ``outputs`` is a Hugging Face ``ModelOutput`` (duck-typed, no import of
    transformers: an ``OrderedDict`` with ``to_tuple``)."""
    return isinstance(outputs, Mapping) and callable(getattr(outputs, "to_tuple", None))


def output_key(outputs, key: str | None, label: str, verb: str) -> str | None:
    """The key of the tensor to use among a forward's ``outputs``, or None when they are
    no mapping (a tensor, a tuple: nothing to choose).

    A mapping (a dict, a Hugging Face ``ModelOutput``): ``key`` (``--output-key``) when
    given, which must name a tensor among the values; else ``"logits"`` when it names
    one; else the only tensor among the values.

    Args:
      outputs: what the torch forward returned on an example.
      key: ``--output-key`` (None: not given).
      label: the model, for messages (``"--model net.py:Net"``).
      verb: what the script does with the tensor, for messages (``"train on"``).

    Raises:
      ValueError: one line: ``key`` given for outputs that are no mapping, ``key`` not
        among the keys or not a tensor there, or no ``key`` and several tensors of
        which none is ``"logits"`` (or no tensor at all); the keys named.
    """
    import torch

    if not isinstance(outputs, Mapping):
        if key is not None:
            raise ValueError(
                f"--output-key {key}: {label}'s forward returns a {type(outputs).__name__}, "
                "not a dict or ModelOutput; there is no key to choose: drop --output-key"
            )
        return None
    kind = type(outputs).__name__ if is_model_output(outputs) else "dict"
    keys = ", ".join(repr(k) for k in outputs)
    tensors = [k for k, v in outputs.items() if isinstance(v, torch.Tensor)]
    if key is not None:
        if key not in outputs:
            raise ValueError(
                f"--output-key {key}: {label}'s forward returns a {kind} without {key!r}; "
                f"its keys: {keys}"
            )
        if key not in tensors:
            raise ValueError(
                f"--output-key {key}: {label}'s forward returns a "
                f"{type(outputs[key]).__name__} under {key!r}, not a tensor; its tensors: "
                f"{', '.join(repr(k) for k in tensors) or 'none'}"
            )
        return key
    if "logits" in tensors:
        return "logits"
    if len(tensors) == 1:
        return tensors[0]
    if not tensors:
        raise ValueError(
            f"{label}: its forward returns a {kind} without any tensor (keys: {keys}); "
            "it needs a tensor to " + verb
        )
    raise ValueError(
        f"{label}: its forward returns a {kind} of {len(tensors)} tensors "
        f"({', '.join(repr(k) for k in tensors)}) and none is 'logits': choose the one to "
        f"{verb} with --output-key KEY (e.g. --output-key {tensors[0]})"
    )


def select_output(module, key: str):
    """``module``, changed in place and returned, whose forward returns ``outputs[key]``
    alone: its class becomes a subclass of the same name whose ``forward`` (wrapped with
    ``functools.wraps``, so the original's signature stays visible) indexes the
    original's result. ``torch.fx`` traces the class's forward and ``torch.export`` the
    instance's, so both capture the selection; parameters, buffers and ``state_dict``
    keys are unchanged. ``SELECT_CODE`` is the same change written for a user."""
    cls = type(module)
    original = cls.forward

    @functools.wraps(original)
    def forward(self, *args, **kwargs):
        return original(self, *args, **kwargs)[key]

    module.__class__ = type(
        cls.__name__,
        (cls,),
        {"forward": forward, "__module__": cls.__module__, "__qualname__": cls.__qualname__},
    )
    return module


SELECT_CODE = (
    "forward = type(module).forward",
    "module.__class__ = type(type(module).__name__, (type(module),), {{'forward': "
    "functools.wraps(forward)(lambda self, *a, **k: forward(self, *a, **k)[{key!r}])}})",
)
"""``select_output(module, key)`` as a user writes it (``.format(key=...)``; needs
``import functools``), for port.py's "to load it" lines."""
