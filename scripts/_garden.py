"""The garden: every model the libraries list, each through the zoo's checks in its own
process (``scripts/zoo.py --garden``; issue 42).

The zoo (``_zoo_models.MODELS``) is 20 models chosen by hand; the garden's list is
enumerated from the libraries themselves:

- **torchvision**: every builder ``torchvision.models.list_models(module=...)`` names for
  classification, semantic segmentation, video and optical flow, built with
  ``weights=None`` (and ``weights_backbone=None``: nothing is downloaded), 10 classes,
  8 images of 64x64 (video: 2 clips of 4 frames of 32x32; RAFT: a pair of 128x128 frames
  and 2 flow updates), except where the architecture fixes its input (``INPUTS``, each
  with its reason). RAFT is built with its pixel grid in the model's dtype
  (``ADAPTED``: torchvision makes it float32, and torch cannot run the float64 model;
  the record's note says so). A model XLA itself fails on runs with the XLA options
  ``XLA_OPTIONS`` names (its child only; the record keeps them and why). Detection builders are listed and run too, but only as far as
  ``from_torch``: their forwards filter boxes by score and call ``torchvision::nms``
  (output sizes that depend on tensor values) and, in training mode, draw the resize
  size with ``.item()``; ``from_torch`` refuses them, and the record keeps its reason.
  (On this machine torch cannot run them either: torchvision's C++ ``nms`` kernel is
  missing, see ``jaxgrad.zoo_imports``.) The quantized builders are left out: int8
  modules with no gradient to compare. Within a task the sweep takes the builders with
  the fewest parameters first (counted on the meta device), so a sweep cut short has
  covered the most models.
- **timm**: one model per family (``timm.list_modules()``, a family's models
  ``timm.list_models(module=...)``): the one with the fewest parameters. Where the family
  has timm's own test-size models (``test_*``, made to be the smallest) only those are
  counted; otherwise every model of the family is. Counting is cheap: each candidate is
  built by ``timm.create_model`` on torch's ``meta`` device (shapes, no memory, no
  initialisation), its ``parameters()`` summed (all 1,371 models of timm 1.0.31: 223 s
  on a shared 2-core machine; the test-model rule cuts that to the families without
  one). The choice is cached per timm version (``timm_smallest``). Built with
  ``pretrained=False``, 10 classes, 8 images of 64x64 (``img_size=64`` for the models
  whose configuration fixes the input size); a model torch cannot run at 64x64 is
  built again at its configuration's own ``input_size`` (2 images), and the record says
  which.
  The families are swept smallest first.
- **transformers**: ``HF_MODELS``, architectures built with ``from_config`` from a small
  dict each (widths 16-64, 1-2 layers, vocab 100; ``use_cache=False``; the
  mixture-of-experts models with ``experts_implementation="batched_mm"``, as the zoo's
  Mixtral): 2 sequences of 8 tokens, 2 images of 32x32, 2 clips of 400 audio samples, a
  Whisper log-mel of 16x16.

Each model is converted with ``from_torch``'s ``dynamic_shapes="auto"``, except that
image inputs get ``"batch"`` (``shapes_for``: symbolic image sides cost minutes of
torch.export's shape reasoning, and the sweep does not run other shapes).

Each model runs in a child process (``python scripts/_garden.py --child ...``, time
limit ``--timeout``) that builds it, runs it once in torch (evaluation and training
mode, float32: a model the library cannot run is not jaxgrad's to convert), then calls
``parity_checks._zoo.run_model`` (the zoo's own checks, columns as in
``scripts/zoo.py``; ``--skip-columns`` leaves some out and the record says which), and
classifies the outcome by the exception objects themselves:

- ``PASS``: every column of the zoo's verdict passed;
- ``FAIL``: a column's numbers differ from torch's (a leaf outside its tier), or
  jaxgrad crashed (an exception other than a ``ValueError`` raised in jaxgrad's code or
  in JAX under it): a defect either way;
- ``REFUSED``: ``from_torch`` (or a column's conversion) raised a ``ValueError``: the
  cause is the op or construct it names (``refusal_cause``);
- ``TIMEOUT``: the child ran past ``--timeout`` and was killed (by the parent);
- ``ERROR``: the library could not build or run the model in torch (the constructor,
  torch's own forward, or a torch-only step of a check raised), not jaxgrad's fault;
- ``CRASH``: the child ran out of the memory ``--memory-limit`` gives it (a
  ``MemoryError``), or died without writing its record (a signal, e.g. the kernel's
  out-of-memory killer): the parent records its exit status and last stderr line.

The parent appends one JSON line per model to ``--records`` as it goes (``--resume``
skips the models already there: a killed sweep loses at most the model that was
running), and ``report`` writes the docs page from the records alone.

Importing this module imports neither torch nor the libraries.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import _zoo_models as zoo_models
import numpy as np

# parity_checks._zoo.COLUMNS (that module imports jax and torch; run_one checks the two agree)
COLUMNS = ("float64", "float32", "float32_grads", "train", "shapes", "artifact")
OUTCOMES = ("PASS", "FAIL", "REFUSED", "TIMEOUT", "ERROR", "CRASH")
TASKS = ("classification", "segmentation", "video", "optical_flow", "detection")
TIMEOUT = 300
SEED = zoo_models.SEED
HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------ the list
@dataclasses.dataclass(frozen=True)
class GardenModel:
    """One model of the garden (JSON-able: the child gets it on its command line).

    Attributes:
      name: ``"library:model"`` (``"torchvision:resnet18"``, ``"timm:test_resnet"``,
        ``"transformers:BertModel"``).
      library: one of ``zoo_models.LIBRARIES``.
      family: torchvision: the builder's module (``"resnet"``); timm: the module
        (``timm.list_modules()``); transformers: the config's ``model_type``.
      task: ``"classification"``, ``"segmentation"``, ``"video"``, ``"optical_flow"``,
        ``"detection"`` (torchvision), ``"image"`` (timm), or the transformers kind
        (``"text"``, ``"decoder"``, ``"seq2seq"``, ``"audio"``, ``"vision"``).
      parameters: the count measured while enumerating (timm, on the meta device), or None.
    """

    name: str
    library: str
    family: str
    task: str
    parameters: int | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _tv_families(tv, module) -> dict:
    """``{builder name: its module's last component}`` for one torchvision module."""
    return {
        name: tv.models.get_model_builder(name).__module__.rsplit(".", 1)[-1]
        for name in tv.models.list_models(module=module)
    }


def torchvision_models() -> list[GardenModel]:
    """Every builder of torchvision's classification, segmentation, video, optical-flow
    and detection modules, task by task in that order, within a task the fewest
    parameters first (counted on the meta device, cached per torchvision version; ties
    and builders that do not build there by name)."""
    tv = zoo_models.import_torchvision()
    modules = {
        "classification": tv.models,
        "segmentation": tv.models.segmentation,
        "video": tv.models.video,
        "optical_flow": tv.models.optical_flow,
        "detection": tv.models.detection,
    }
    path = _cache_path(f"garden-torchvision-{tv.__version__}.json")
    cached = _read_cache(path)
    models = []
    for task in TASKS:
        families = _tv_families(tv, modules[task])
        for name in families:
            if name not in cached:
                cached[name] = _tv_count_on_meta(tv, name, task)
        for name in sorted(families, key=lambda n: (cached[n] is None, cached[n] or 0, n)):
            models.append(
                GardenModel(
                    f"torchvision:{name}", "torchvision", families[name], task, cached[name]
                )
            )
    _write_cache(path, cached)
    return models


def _tv_count_on_meta(tv, name: str, task: str) -> int | None:
    import torch

    options = {"weights": None}
    if task in ("segmentation", "detection"):
        options["weights_backbone"] = None
    try:
        with torch.device("meta"):
            module = tv.models.get_model(name, **options)
    except Exception:  # noqa: BLE001 - then it sorts last; the sweep still runs it
        return None
    return sum(p.numel() for p in module.parameters())


def _read_cache(path: str) -> dict:
    if os.path.exists(path):
        with open(path) as handle:
            return json.load(handle)
    return {}


def _write_cache(path: str, cached: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as handle:
        json.dump(cached, handle, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


def _cache_path(name: str) -> str:
    folder = os.environ.get("JAXGRAD_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "jaxgrad"
    )
    return os.path.join(folder, name)


def count_parameters_on_meta(timm, name: str) -> int:
    """The parameter count of ``timm.create_model(name)``, built on torch's meta device
    (shapes only: no memory, no initialisation), tied weights once."""
    import torch

    with torch.device("meta"):
        module = timm.create_model(name, pretrained=False)
    return sum(p.numel() for p in module.parameters())


def timm_smallest(families=None, *, cache: bool = True) -> list[GardenModel]:
    """The model with the fewest parameters of each timm family (``families``: module
    names, default all of ``timm.list_modules()``): among the family's ``test_*`` models
    where it has any, else among all its models, each counted on the meta device
    (``count_parameters_on_meta``); ties go to the first name. Cached in
    ``$JAXGRAD_CACHE_DIR`` (default ``~/.cache/jaxgrad``) per timm version. Returned
    the smallest first (the sweep's order)."""
    timm = zoo_models.import_library("timm")
    path = _cache_path(f"garden-timm-{timm.__version__}.json")
    cached = _read_cache(path) if cache else {}
    families = sorted(timm.list_modules()) if families is None else list(families)
    chosen = []
    for family in families:
        if family not in cached:
            names = sorted(timm.list_models(module=family))
            tests = [n for n in names if n.startswith("test_")]
            counts = {n: count_parameters_on_meta(timm, n) for n in (tests or names)}
            best = min(counts, key=lambda n: (counts[n], n))
            cached[family] = {"model": best, "parameters": counts[best], "counted": len(counts)}
        entry = cached[family]
        chosen.append(
            GardenModel(f"timm:{entry['model']}", "timm", family, "image", entry["parameters"])
        )
    if cache:
        _write_cache(path, cached)
    return sorted(chosen, key=lambda m: (m.parameters, m.family))


# transformers: (model class, config class, kind, config dict). The kinds' inputs are
# in _hf_inputs; every dict is small (widths 16-64, 1-2 layers, vocab 100)
TEXT = dict(
    vocab_size=100,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)
DECODER = dict(TEXT, num_attention_heads=4, num_key_value_heads=2, use_cache=False)
SEQ2SEQ = dict(
    vocab_size=100,
    d_model=32,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
    use_cache=False,
    pad_token_id=1,
    decoder_start_token_id=2,
)
T5 = dict(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, use_cache=False)
VISION = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    image_size=32,
    patch_size=8,
)
AUDIO = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    conv_dim=(16, 16),
    conv_stride=(5, 2),
    conv_kernel=(10, 3),
    num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=2,
    layerdrop=0.0,
    mask_time_prob=0.0,
)
STAGES = dict(hidden_sizes=[16, 32], depths=[1, 1], image_size=32)
MOE = dict(experts_implementation="batched_mm")

HF_MODELS = [
    # encoders
    ("BertModel", "BertConfig", "text", TEXT),
    ("RobertaModel", "RobertaConfig", "text", TEXT),
    ("XLMRobertaModel", "XLMRobertaConfig", "text", TEXT),
    ("DebertaModel", "DebertaConfig", "text", TEXT),
    ("DebertaV2Model", "DebertaV2Config", "text", TEXT),
    ("AlbertModel", "AlbertConfig", "text", dict(TEXT, embedding_size=16)),
    ("ElectraModel", "ElectraConfig", "text", dict(TEXT, embedding_size=16)),
    (
        "DistilBertModel",
        "DistilBertConfig",
        "text",
        dict(
            vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64
        ),
    ),
    ("MPNetModel", "MPNetConfig", "text", TEXT),
    ("RoFormerModel", "RoFormerConfig", "text", TEXT),
    ("SqueezeBertModel", "SqueezeBertConfig", "text", dict(TEXT, embedding_size=32)),
    (
        "FunnelModel",
        "FunnelConfig",
        "text",
        dict(vocab_size=100, d_model=32, n_head=2, d_head=16, d_inner=64, block_sizes=[1, 1]),
    ),
    ("ModernBertModel", "ModernBertConfig", "text", dict(TEXT, pad_token_id=0)),
    # decoders
    (
        "GPT2LMHeadModel",
        "GPT2Config",
        "decoder",
        dict(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64, use_cache=False),
    ),
    (
        "GPTNeoXForCausalLM",
        "GPTNeoXConfig",
        "decoder",
        dict(TEXT, use_cache=False),
    ),
    (
        "OPTForCausalLM",
        "OPTConfig",
        "decoder",
        dict(
            vocab_size=100,
            hidden_size=32,
            ffn_dim=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            word_embed_proj_dim=32,
            max_position_embeddings=64,
            use_cache=False,
        ),
    ),
    ("LlamaForCausalLM", "LlamaConfig", "decoder", DECODER),
    ("MistralForCausalLM", "MistralConfig", "decoder", DECODER),
    ("Qwen2ForCausalLM", "Qwen2Config", "decoder", DECODER),
    ("Qwen3ForCausalLM", "Qwen3Config", "decoder", dict(DECODER, head_dim=8)),
    ("GemmaForCausalLM", "GemmaConfig", "decoder", dict(DECODER, head_dim=8)),
    ("Gemma2ForCausalLM", "Gemma2Config", "decoder", dict(DECODER, head_dim=8)),
    ("Gemma3ForCausalLM", "Gemma3TextConfig", "decoder", dict(DECODER, head_dim=8)),
    ("PhiForCausalLM", "PhiConfig", "decoder", DECODER),
    (
        "Phi3ForCausalLM",
        "Phi3Config",
        "decoder",
        dict(DECODER, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    ),
    ("StableLmForCausalLM", "StableLmConfig", "decoder", DECODER),
    ("OlmoForCausalLM", "OlmoConfig", "decoder", dict(DECODER, pad_token_id=0)),
    ("Starcoder2ForCausalLM", "Starcoder2Config", "decoder", DECODER),
    ("CohereForCausalLM", "CohereConfig", "decoder", dict(DECODER, pad_token_id=0)),
    ("GraniteForCausalLM", "GraniteConfig", "decoder", DECODER),
    (
        "FalconForCausalLM",
        "FalconConfig",
        "decoder",
        dict(
            vocab_size=100,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            use_cache=False,
        ),
    ),
    (
        "BloomForCausalLM",
        "BloomConfig",
        "decoder",
        dict(vocab_size=100, hidden_size=32, n_layer=2, n_head=2, use_cache=False),
    ),
    (
        "GPTJForCausalLM",
        "GPTJConfig",
        "decoder",
        dict(
            vocab_size=100,
            n_embd=32,
            n_layer=2,
            n_head=2,
            rotary_dim=8,
            n_positions=64,
            use_cache=False,
        ),
    ),
    (
        "GPTNeoForCausalLM",
        "GPTNeoConfig",
        "decoder",
        dict(
            vocab_size=100,
            hidden_size=32,
            num_layers=2,
            num_heads=2,
            attention_types=[[["global", "local"], 1]],
            window_size=4,
            max_position_embeddings=64,
            use_cache=False,
        ),
    ),
    (
        "CodeGenForCausalLM",
        "CodeGenConfig",
        "decoder",
        dict(
            vocab_size=100,
            n_embd=32,
            n_layer=2,
            n_head=2,
            rotary_dim=8,
            n_positions=64,
            n_ctx=64,
            use_cache=False,
        ),
    ),
    (
        "GPTBigCodeForCausalLM",
        "GPTBigCodeConfig",
        "decoder",
        dict(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64, use_cache=False),
    ),
    ("BioGptForCausalLM", "BioGptConfig", "decoder", dict(TEXT, use_cache=False)),
    (
        "XGLMForCausalLM",
        "XGLMConfig",
        "decoder",
        dict(
            vocab_size=100,
            d_model=32,
            num_layers=2,
            attention_heads=2,
            ffn_dim=64,
            max_position_embeddings=64,
            use_cache=False,
        ),
    ),
    (
        "MixtralForCausalLM",
        "MixtralConfig",
        "decoder",
        dict(DECODER, num_local_experts=4, num_experts_per_tok=2, **MOE),
    ),
    (
        "Qwen2MoeForCausalLM",
        "Qwen2MoeConfig",
        "decoder",
        dict(
            DECODER,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            **MOE,
        ),
    ),
    # encoder-decoders
    ("T5Model", "T5Config", "seq2seq", dict(T5, decoder_start_token_id=0)),
    ("T5EncoderModel", "T5Config", "text", T5),
    ("MT5Model", "MT5Config", "seq2seq", dict(T5, decoder_start_token_id=0)),
    ("BartModel", "BartConfig", "seq2seq", SEQ2SEQ),
    ("MBartModel", "MBartConfig", "seq2seq", SEQ2SEQ),
    ("PegasusModel", "PegasusConfig", "seq2seq", SEQ2SEQ),
    ("MarianModel", "MarianConfig", "seq2seq", dict(SEQ2SEQ, decoder_vocab_size=100)),
    # audio
    (
        "WhisperModel",
        "WhisperConfig",
        "whisper",
        dict(
            vocab_size=100,
            d_model=32,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            num_mel_bins=16,
            max_source_positions=8,
            max_target_positions=16,
            use_cache=False,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            decoder_start_token_id=0,
        ),
    ),
    ("Wav2Vec2Model", "Wav2Vec2Config", "audio", AUDIO),
    ("HubertModel", "HubertConfig", "audio", AUDIO),
    ("WavLMModel", "WavLMConfig", "audio", AUDIO),
    (
        "ASTModel",
        "ASTConfig",
        "spectrogram",
        dict(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            patch_size=4,
            frequency_stride=4,
            time_stride=4,
            max_length=16,
            num_mel_bins=16,
        ),
    ),
    # vision
    ("ViTModel", "ViTConfig", "vision", VISION),
    ("DeiTModel", "DeiTConfig", "vision", VISION),
    ("BeitModel", "BeitConfig", "vision", VISION),
    ("Data2VecVisionModel", "Data2VecVisionConfig", "vision", VISION),
    ("Dinov2Model", "Dinov2Config", "vision", VISION),
    # its random masking draws in evaluation too, unless given `noise` (its API's way to
    # fix the mask): the garden passes it, as a user comparing two runs would
    ("ViTMAEModel", "ViTMAEConfig", "vision_noise", VISION),
    ("CLIPVisionModel", "CLIPVisionConfig", "vision", VISION),
    ("SiglipVisionModel", "SiglipVisionConfig", "vision", VISION),
    (
        "CLIPTextModel",
        "CLIPTextConfig",
        "text",
        dict(TEXT, eos_token_id=2, bos_token_id=0, pad_token_id=1),
    ),
    (
        "SwinModel",
        "SwinConfig",
        "vision",
        dict(
            image_size=32,
            patch_size=4,
            embed_dim=16,
            depths=[1, 1],
            num_heads=[2, 2],
            window_size=4,
        ),
    ),
    (
        "Swinv2Model",
        "Swinv2Config",
        "vision",
        dict(
            image_size=32,
            patch_size=4,
            embed_dim=16,
            depths=[1, 1],
            num_heads=[2, 2],
            window_size=4,
        ),
    ),
    ("ConvNextModel", "ConvNextConfig", "vision", dict(STAGES, num_stages=2)),
    ("ConvNextV2Model", "ConvNextV2Config", "vision", dict(STAGES, num_stages=2)),
    ("ResNetModel", "ResNetConfig", "vision", dict(STAGES, embedding_size=16)),
    ("RegNetModel", "RegNetConfig", "vision", dict(STAGES, embedding_size=16, groups_width=8)),
    (
        "SegformerModel",
        "SegformerConfig",
        "vision",
        dict(
            num_encoder_blocks=2,
            depths=[1, 1],
            sr_ratios=[2, 1],
            hidden_sizes=[16, 32],
            num_attention_heads=[1, 2],
            patch_sizes=[7, 3],
            strides=[4, 2],
            decoder_hidden_size=32,
        ),
    ),
    (
        "PoolFormerModel",
        "PoolFormerConfig",
        "vision",
        dict(
            num_encoder_blocks=2,
            depths=[1, 1],
            hidden_sizes=[16, 32],
            patch_sizes=[7, 3],
            strides=[4, 2],
            padding=[2, 1],
        ),
    ),
    ("MobileNetV2Model", "MobileNetV2Config", "vision", dict(depth_multiplier=0.35, image_size=32)),
    (
        "FocalNetModel",
        "FocalNetConfig",
        "vision",
        dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1]),
    ),
]


def transformers_models() -> list[GardenModel]:
    """``HF_MODELS`` as garden entries (family: the config class's ``model_type``, read
    without building anything)."""
    transformers = zoo_models.import_library("transformers")
    return [
        GardenModel(
            f"transformers:{model}",
            "transformers",
            getattr(transformers, config).model_type,
            {"vision_noise": "vision"}.get(kind, kind)
            if kind in ("text", "decoder", "seq2seq", "vision", "vision_noise")
            else "audio",
        )
        for model, config, kind, _ in HF_MODELS
    ]


HF_BY_NAME = {f"transformers:{row[0]}": row for row in HF_MODELS}


def enumerate_models(libraries=zoo_models.LIBRARIES, *, timings=None) -> list[GardenModel]:
    """The garden, in sweep order: torchvision (classification first), timm's families,
    transformers. ``timings``: a dict that gets each library's seconds (its import
    included)."""
    listers = {
        "torchvision": torchvision_models,
        "timm": timm_smallest,
        "transformers": transformers_models,
    }
    models = []
    for library in libraries:
        began = time.perf_counter()
        models += listers[library]()
        if timings is not None:
            timings[library] = time.perf_counter() - began
    return models


def enumeration_key(versions: dict | None = None) -> str:
    """What the garden's list depends on: the installed versions of torch and the zoo's
    libraries (read without importing them) and the sources of the rules (this file and
    ``_zoo_models.py``); a change to any of them is a new key."""
    if versions is None:
        versions = dict(zoo_models.versions(), torch=_version("torch"))
    digest = hashlib.sha256(json.dumps(versions, sort_keys=True).encode())
    for source in (__file__, zoo_models.__file__):
        with open(source, "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()[:16]


def _version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def enumerate_cached(*, timings=None) -> tuple[list[GardenModel], bool]:
    """``(enumerate_models(), whether it came from the cache)``. The list is cached in
    ``$JAXGRAD_CACHE_DIR`` under ``enumeration_key()``: a sweep started again (``--resume``,
    ``--rerun``, ``--list``) imports none of the three libraries before its first model
    (the children import what their model needs). Measured (``zoo.py --garden --list``,
    the shared 2-core machine): 0.6 s from the cache; 13.8 s enumerating with the
    per-library counts cached (imports 9 s of it: what every run spent before); the very
    first run also counts every candidate on the meta device, torchvision 21 CPU-s and
    timm 286 CPU-s (762 s under other tenants' load), once per library version."""
    path = _cache_path(f"garden-enumeration-{enumeration_key()}.json")
    cached = _read_cache(path)
    if cached.get("models"):
        return [GardenModel(**model) for model in cached["models"]], True
    models = enumerate_models(timings=timings)
    _write_cache(path, {"models": [model.to_dict() for model in models]})
    return models, False


def select(models: list[GardenModel], spec: str | None) -> list[GardenModel]:
    """The models ``spec`` names (comma-separated): a library (``timm``), a torchvision
    task (``torchvision:classification``), a family (``timm:resnet`` where no model has
    that name) or a full name; None for all, in order.

    Raises:
      ValueError: a part that names nothing.
    """
    if spec is None:
        return list(models)
    chosen = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        matches = [m for m in models if m.name == part]
        if not matches:
            library, _, rest = part.partition(":")
            matches = [
                m
                for m in models
                if m.library == library and (not rest or rest in (m.task, m.family))
            ]
        if not matches:
            raise ValueError(
                f"{part!r} names no garden model (a library, torchvision:TASK, "
                f"library:FAMILY or a full name such as {models[0].name if models else '-'})."
            )
        chosen.extend(m for m in matches if m not in chosen)
    return chosen


# ------------------------------------------------------------------ CI's subset
# The garden's fixed subset CI runs (parity_tests/test_garden.py, marked long): one model
# a library, each chosen for a rule a whole sweep leans on, as (name, family, task)
CI_SUBSET = (
    # BatchNorm over few values in training: step 1's deepest weight gradients leave
    # the float64 tier for torch against itself too (the train column's noise runs)
    ("torchvision:mnasnet0_5", "mnasnet", "classification"),
    # a key projection's bias: its gradient is zero in exact arithmetic, rounding noise
    # of ~1e-19 on both sides (the float64 columns declared float64)
    ("transformers:OPTForCausalLM", "opt", "decoder"),
    # timm's own test-size ViT: attention, LayerNorm, GELU through the export front end
    ("timm:test_vit", "vision_transformer", "image"),
)


# ------------------------------------------------------------ building one model
# The zoo's batch for image models: BatchNorm's training-mode statistics at the deepest,
# smallest stage are over batch x H x W values; with 2 images at 64 px some are over 2 to
# 8, where the normalised output barely depends on the input and the gradients through it
# are rounding noise (measured: 1e-9 relative apart in one element of a step's gradient,
# mobilenet_v2, shufflenet, efficientnet, mnasnet), which the float64 tier flags
VISION_BATCH = 8


def _images(batch, size, channels=3, seed=SEED):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, channels, size, size)).astype(np.float32)


def _tokens(batch=2, length=8, vocab=100, seed=SEED):
    rng = np.random.default_rng(seed)
    return rng.integers(3, vocab, size=(batch, length)).astype(np.int64)


# torchvision builders whose architecture fixes its input (why, each): (batch, size)
# for images, (batch, frames, size) for video
INPUTS = {
    # its auxiliary head (active in training) pools the 17x17 map of a 299x299 input
    # 5x5/3 and convolves it 5x5: any smaller input leaves it nothing to convolve
    "inception_v3": (2, 299),
    # RAFT's correlation pyramid needs feature maps of 16x16 and up: images of 128x128
    "raft_small": (1, 128),
    "raft_large": (1, 128),
    "maxvit_t": (2, 224),  # partition_size=7 is fixed: the grid at every stage is 7x7 at 224
    "mvit_v1_b": (1, 16, 224),  # spatial_size=(224, 224), temporal_size=16 are fixed
    "mvit_v2_s": (1, 16, 224),
    # its last pooling is a fixed 2x7x7 window: 16 frames of 224x224 are the least that
    # leave it a 2x7x7 map
    "s3d": (1, 16, 224),
    # image_size=56 (OPTIONS): the class token's position table is built for that size
    "vit_h_14": (VISION_BATCH, 56),
}
# builder options beside weights=None, num_classes (why, each)
OPTIONS = {
    "vit_b_16": {"image_size": 64},  # the default 224 is only the position table's size
    "vit_b_32": {"image_size": 64},
    "vit_l_16": {"image_size": 64},
    "vit_l_32": {"image_size": 64},
    "vit_h_14": {"image_size": 56},  # a multiple of its patch, 14
}


# What the garden changes in a model so that torch itself can run it in float64 (the
# note each record carries); the float32 model computes exactly as the library's
ADAPTED = {
    name: (
        "torchvision's make_coords_grid builds RAFT's pixel grid with .float(), float32 "
        "inside the float64 model, where torch raises 'Input type (float) and bias type "
        "(double)'; the garden builds the grid in the model's own dtype (whole numbers, "
        "exact in both), so torch runs the float64 model"
    )
    for name in ("raft_small", "raft_large")
}


# XLA options a model's child runs with, where XLA itself fails on the program jaxgrad
# emits (each with what was measured); the record's note names them
XLA_OPTIONS = {
    "torchvision:raft_large": (
        "--xla_cpu_experimental_ynn_fusion_type=",
        "XLA:CPU (jaxlib 0.10.2) crashes with a segmentation fault running the float32 "
        "gradient program, inside its YNNPACK fusion runtime (slinky "
        "fuse_contiguous_dims, from a YNN transpose, in gdb); with YNN fusions off it runs",
    ),
}


def _grid_in_model_dtype(torch, module):
    """``module`` (a torchvision RAFT) with its coordinate grid made in the dtype of its
    parameters (``ADAPTED``): the forward sets the dtype ``make_coords_grid`` casts its
    grid to, an explicit cast that ``torch.export`` records. (Setting torch's default
    dtype instead would also change ``torch.linspace`` in the correlation lookup at
    trace time, not when the exported program runs.)"""
    import importlib

    raft = importlib.import_module("torchvision.models.optical_flow.raft")
    if not hasattr(raft.make_coords_grid, "dtype"):
        original = raft.make_coords_grid

        def make_coords_grid(*args, **kwargs):
            return original(*args, **kwargs).to(make_coords_grid.dtype)

        make_coords_grid.dtype = torch.float32
        raft.make_coords_grid = make_coords_grid
    grid = raft.make_coords_grid

    class RAFTInItsDtype(type(module)):
        def forward(self, *args, **kwargs):
            grid.dtype = next(self.parameters()).dtype
            try:
                return super().forward(*args, **kwargs)
            finally:
                grid.dtype = torch.float32  # torchvision's own, for any other RAFT

    RAFTInItsDtype.__name__ = type(module).__name__
    module.__class__ = RAFTInItsDtype
    return module


def _tv_build(model: GardenModel):
    name = model.name.split(":", 1)[1]

    def build(tv):
        options = dict(weights=None, **OPTIONS.get(name, {}))
        if model.task in ("segmentation", "detection"):
            options["weights_backbone"] = None
        if model.task == "optical_flow":
            module = tv.models.get_model(name, **options)
            if name in ADAPTED:
                import torch

                module = _grid_in_model_dtype(torch, module)
            batch, size = INPUTS.get(name, (2, 64))
            first, second = _images(batch, size), _images(batch, size, seed=SEED + 1)
            return module, (first, second), {"num_flow_updates": 2}
        module = tv.models.get_model(
            name, num_classes=10 if model.task != "detection" else 3, **options
        )
        if model.task == "video":
            batch, frames, size = INPUTS.get(name, (2, 4, 32))
            rng = np.random.default_rng(SEED)
            clip = rng.standard_normal((batch, 3, frames, size, size)).astype(np.float32)
            return module, (clip,), {}
        batch, size = INPUTS.get(name, (VISION_BATCH, 64))
        return module, (_images(batch, size),), {}

    return build


def _timm_build(model: GardenModel, size: int | None = 64):
    name = model.name.split(":", 1)[1]

    def build(timm):
        config = timm.models.get_pretrained_cfg(name)
        default = tuple(getattr(config, "input_size", (3, 224, 224)) or (3, 224, 224))
        side = default[-1] if size is None else size
        options = {}
        if size is not None and getattr(config, "fixed_input_size", False):
            options["img_size"] = side
        module = timm.create_model(name, pretrained=False, num_classes=10, **options)
        # at its configuration's own size (224 and up) the deepest maps hold 7x7 and more
        # values a channel: 2 images keep BatchNorm well conditioned at a quarter the cost
        batch = VISION_BATCH if side <= 64 else 2
        return module, (_images(batch, side, default[0]),), {}

    return build


def _hf_inputs(kind: str, config) -> tuple[tuple, dict]:
    if kind in ("text", "decoder"):
        return (_tokens(),), {}
    if kind == "seq2seq":
        return (_tokens(),), {"decoder_input_ids": _tokens(2, 6, seed=SEED + 1)}
    if kind == "vision":
        return (_images(2, 32, getattr(config, "num_channels", 3)),), {}
    if kind == "vision_noise":
        patches = (config.image_size // config.patch_size) ** 2
        noise = np.random.default_rng(SEED + 1).uniform(size=(2, patches)).astype(np.float32)
        return (_images(2, 32, config.num_channels),), {"noise": noise}
    if kind == "audio":
        rng = np.random.default_rng(SEED)
        return (rng.standard_normal((2, 400)).astype(np.float32),), {}
    if kind == "whisper":
        rng = np.random.default_rng(SEED)
        features = rng.standard_normal(
            (2, config.num_mel_bins, 2 * config.max_source_positions)
        ).astype(np.float32)
        return (features,), {"decoder_input_ids": _tokens(2, 4, seed=SEED + 1)}
    if kind == "spectrogram":
        rng = np.random.default_rng(SEED)
        return (
            rng.standard_normal((2, config.max_length, config.num_mel_bins)).astype(np.float32),
        ), {}
    raise ValueError(f"unknown input kind {kind!r}")


def _hf_build(model: GardenModel):
    model_class, config_class, kind, options = HF_BY_NAME[model.name]

    def build(transformers):
        config = getattr(transformers, config_class)(**options)
        module = getattr(transformers, model_class)(config)
        args, kwargs = _hf_inputs(kind, config)
        return module, args, kwargs

    return build


def _describe_inputs(args, kwargs) -> str:
    def one(value):
        if isinstance(value, np.ndarray):
            return f"{value.dtype}{list(value.shape)}"
        return repr(value)

    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def zoo_entry(model: GardenModel, *, size: int | None = 64, dynamic_shapes: str = "auto"):
    """``model`` as a ``_zoo_models.ZooModel`` (what ``parity_checks._zoo.run_model``
    takes); ``size``: timm's image side (None: the model's configured input size). A
    model the zoo holds keeps the zoo's ``dynamic_shapes`` (each with its measured
    reason there)."""
    builders = {"torchvision": _tv_build, "transformers": _hf_build}
    build = _timm_build(model, size) if model.library == "timm" else builders[model.library](model)
    known = zoo_models.BY_NAME.get(model.name)
    return zoo_models.ZooModel(
        model.name,
        model.library,
        build,
        notes="",
        dynamic_shapes=known.dynamic_shapes
        if known is not None
        else shapes_for(model, dynamic_shapes),
    )


# the tasks whose inputs are images (or clips, or image pairs)
IMAGE_TASKS = (
    "classification",
    "segmentation",
    "video",
    "optical_flow",
    "detection",
    "image",
    "vision",
)


def shapes_for(model: GardenModel, dynamic_shapes: str) -> str:
    """``from_torch``'s ``dynamic_shapes`` for ``model``: ``"auto"`` becomes ``"batch"``
    for image inputs. With the image sides symbolic, torch.export reasons about every
    window, padding and pooling size of the model: Hugging Face's tiny Swin took 524 s
    to capture, 8.5 s with only the batch dynamic (torchvision's swin_t ran 39 minutes
    without finishing, ``_zoo_models``); the sweep skips the other-shapes column, so
    symbolic sides would cost time and test nothing."""
    if dynamic_shapes == "auto" and model.task in IMAGE_TASKS:
        return "batch"
    return dynamic_shapes


# --------------------------------------------------------------- classification
def refusal_cause(message: str) -> str:
    """The op or construct a ``from_torch`` refusal names, short enough to count by:
    ``"unmapped op aten.histc.default"``, ``"torch.export: GuardOnDataDependentSymNode"``,
    ``".item() in the forward (aten._local_scalar_dense)"``, ...; else the message's
    first clause."""
    first = message.strip().split("\n")[0]
    match = re.search(r"unmapped op (\S+?)[;,]? at ", first)
    if match:
        return f"unmapped op {match.group(1)}"
    match = re.search(r"torch\.export cannot capture .*? in (\w+) mode \((\w+): (.*)", first)
    if match:
        mode, kind, rest = match.groups()
        detail = ""
        expression = re.search(r"data-dependent expression (.+?)(?:\s+\(unhinted|\s*$)", rest)
        if expression:  # the symbols renumbered away, so that one construct counts once
            symbolic = re.sub(r"\b(u|zuf|s)\d+\b", r"\1", expression.group(1))
            detail = f" (data-dependent: {symbolic})"
        elif kind in ("GuardOnDataDependentSymNode", "UserError") or "data-dependent" in rest:
            detail = " (data-dependent)"
        elif kind in ("AssertionError", "RuntimeError", "TypeError", "Unsupported"):
            text = re.sub(r"\s+", " ", rest.split(". ")[0])[:80]
            detail = f" ({text})"
        return f"torch.export: {kind}{detail}"
    rules = [
        (
            r"reads a tensor's value as a Python number",
            ".item() in the forward (aten._local_scalar_dense)",
        ),
        (r"unsupported container (\w+)", "unsupported output container {0}"),
        (r"custom autograd\.Function (\S+)", "custom autograd.Function {0}"),
        (
            r"\(call_function ([^)]+)\): an in-place op survived",
            "in-place op after functionalisation: {0}",
        ),
        (r"through strides", "as_strided of a non-contiguous tensor"),
        (
            r"only ATen calls \(got (\w+)\)",
            "higher-order op or submodule call in the program ({0})",
        ),
        (r"writes the non-persistent buffer", "forward writes a non-persistent buffer"),
        (r"writes its input in place", "forward writes its input in place"),
        (r"writes a parameter in place", "forward writes a parameter in place"),
        (r"unsupported argument .*?\((\w+)\)", "unsupported argument ({0})"),
        (r"freeze|frozen into the program|NumPy", "random draw outside torch frozen by export"),
        (r"cannot trace .*? with torch\.fx", "torch.fx cannot trace (no example)"),
    ]
    for pattern, cause in rules:
        match = re.search(pattern, first)
        if match:
            return cause.format(*match.groups())
    text = re.sub(r"^from_torch: ", "", first)
    text = re.sub(r"node '[^']*' \([^)]*\) in \S+ (at \S+ )?", "", text)
    return re.split(r"[;(]", text)[0].strip()[:100]


def _package_dir(module) -> str:
    return os.path.dirname(os.path.abspath(module.__file__)) + os.sep


# the zoo harness's functions that run torch alone: an exception whose innermost frame
# is one of these (torch's C++ raised it) is torch's
TORCH_SIDE = {
    "torch_eval",
    "torch_step",
    "_torch_grads",
    "_torch_state",
    "_output_shapes",
    "torch_draws_in_training",
    "torch_noise_step",
    "_torch_runs",
}


def _library_frame(frame) -> bool:
    return any(
        f"{os.sep}{name}{os.sep}" in frame.filename
        for name in ("torch", "torchvision", "timm", "transformers")
    )


def _out_of_memory(error: BaseException) -> bool:
    """The child's memory limit, however it surfaced: a ``MemoryError``, XLA's allocator
    (a ``JaxRuntimeError``), torch's (a ``RuntimeError``), or any of them as the cause
    of another exception (``from_torch`` reports torch.export's failure as a
    ``ValueError`` raised from it: timm's mobilenetv5_base)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, MemoryError) or any(
            text in str(error)
            for text in ("RESOURCE_EXHAUSTED: Out of memory", "DefaultCPUAllocator: can't allocate")
        ):
            return True
        error = error.__cause__  # raised *from* it, not merely while handling it
    return False


def classify_exception(error: BaseException, *, stage: str) -> tuple[str, str, str]:
    """``(outcome, cause, detail)`` for an exception from one stage of a model's run
    (``"build"``, ``"torch"``: torch's own forward, ``"convert"``, ``"run"``: a column):

    - a ``MemoryError``, XLA's ``RESOURCE_EXHAUSTED: Out of memory`` or torch's
      ``DefaultCPUAllocator: can't allocate``, or an exception raised from one: CRASH
      (the child's memory limit);
    - ``"build"`` and ``"torch"``: ERROR (the library or torch failed);
    - an exception raised inside torch or a library (the innermost frame theirs, or one
      of the harness's torch-only functions, ``TORCH_SIDE``) with no jaxgrad or JAX
      frame: ERROR, whatever its type (a library's own ``ValueError`` included);
    - a ``ValueError`` otherwise (``from_torch``'s refusals, the checks' own messages):
      REFUSED, its cause from ``refusal_cause``;
    - anything else (through jaxgrad or JAX, or the harness itself, e.g. the artifact's
      reload): FAIL, a crash (the innermost frame named).
    """
    import jax

    import jaxgrad

    detail = f"{type(error).__name__}: {str(error).strip()}".split("\n")[0][:600]
    if _out_of_memory(error):
        return "CRASH", "out of memory (the child's --memory-limit)", detail
    if stage in ("build", "torch"):
        what = (
            "the library could not build it" if stage == "build" else "torch's own forward failed"
        )
        return "ERROR", f"{what}: {type(error).__name__}", detail
    frames = traceback.extract_tb(error.__traceback__)
    ours = (_package_dir(jaxgrad), _package_dir(jax))
    if frames and not any(f.filename.startswith(ours) for f in frames):
        last = frames[-1]
        if _library_frame(last) or last.name in TORCH_SIDE:
            return "ERROR", f"torch or the library raised {type(error).__name__}", detail
    if isinstance(error, ValueError):
        return "REFUSED", refusal_cause(str(error)), detail
    where = ""
    if frames:
        where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}"
    return "FAIL", f"crash: {type(error).__name__}{where}", detail


def _exception_recorder(zoo):
    """Every exception ``parity_checks._zoo`` formats (its ``_first_line``: the
    conversion's and each column's), by the text it formats to: the zoo keeps text,
    the garden classifies by the exception object. Returns ``(seen, restore)``."""
    seen = {}
    original = zoo._first_line

    def first_line(error):
        text = original(error)
        seen[text] = error
        return text

    zoo._first_line = first_line

    def restore():
        zoo._first_line = original

    return seen, restore


def _exception_for(seen: dict, text: str):
    for key in sorted(seen, key=len, reverse=True):
        if text == key or text.startswith(key):
            return seen[key]
    return None


def classify_result(result, seen: dict, verdict_columns) -> tuple[str, str, str | None]:
    """``(outcome, cause, detail)`` of a ``ZooResult`` (see the module docstring)."""
    if result.error:
        error = _exception_for(seen, result.error)
        if error is None:  # cannot happen: _run formats it with _first_line
            return "FAIL", "crash: unclassified conversion error", result.error
        return classify_exception(error, stage="convert")
    failing = [c for c in verdict_columns if result.columns[c].status == "fail"]
    if failing:
        lines = [line for line in result.failures() if line.split(":", 1)[0] in failing]
        return "FAIL", "numbers differ: " + ", ".join(failing), "; ".join(lines)[:600]
    outcomes = []
    for column in verdict_columns:
        cell = result.columns[column]
        if cell.status != "error":
            continue
        error = _exception_for(seen, cell.error or "")
        if error is None:
            outcomes.append(("FAIL", f"crash in {column}: unclassified", cell.error))
        else:
            outcome, cause, detail = classify_exception(error, stage="run")
            outcomes.append((outcome, f"{cause} [{column}]", detail))
    for wanted in ("FAIL", "ERROR", "REFUSED", "CRASH", "TIMEOUT"):
        for outcome in outcomes:
            if outcome[0] == wanted:
                return outcome
    unproven = [c for c in verdict_columns if result.columns[c].status != "pass"]
    if unproven:  # PASS only where every verdict column passed
        return "FAIL", f"harness: {', '.join(unproven)} not passed", None
    return "PASS", "", None


# ------------------------------------------------------------------ the child
def _torch_runs(module, args, kwargs) -> None:
    """torch's own forward in evaluation and training mode (float32, no gradient), the
    module's state put back after: a model torch cannot run is the library's problem."""
    import torch

    # copied back in place after: load_state_dict would need the state_dict's own
    # metadata (MNASNet's _load_from_state_dict refuses a dict without its version)
    saved = {
        k: v.detach().clone()
        for k, v in module.state_dict(keep_vars=True).items()
        if isinstance(v, torch.Tensor)
    }
    torch_args = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
    torch_kwargs = {
        k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()
    }
    try:
        with torch.no_grad():
            module.eval()
            module(*torch_args, **torch_kwargs)
            module.train()
            module(*torch_args, **torch_kwargs)
    finally:
        with torch.no_grad():
            for name, tensor in module.state_dict(keep_vars=True).items():
                if name in saved:
                    tensor.copy_(saved[name])
        module.eval()


def _build_and_run(model: GardenModel, entry_for) -> tuple:
    """``(entry, built, note)``: the zoo entry whose ``build`` returns the module built
    here (so run_model does not build it twice), after torch ran it; a timm model torch
    cannot build or run at 64x64 is tried again at its configured input size (the note
    says why). Raises ``_Stage`` with the stage that failed (the first attempt's)."""
    attempts = [64, None] if model.library == "timm" else [64]
    failures = []
    for size in attempts:
        entry = entry_for(model, size)
        try:
            built = zoo_models.build(entry)
        except Exception as error:  # noqa: BLE001 - classified by the caller
            failures.append(_Stage("build", error))
            continue
        try:
            _torch_runs(*built)
        except Exception as error:  # noqa: BLE001
            failures.append(_Stage("torch", error))
            continue
        note = (
            ADAPTED.get(model.name.split(":", 1)[1], "") if model.library == "torchvision" else ""
        )
        if failures:
            first = failures[0].error
            note = (
                f"at 64x64 torch raised {type(first).__name__}: "
                f"{str(first).strip().splitlines()[0][:120] if str(first).strip() else ''}; "
                "run at its configured input size"
            )
        return entry, built, note
    raise failures[0]


class _Stage(Exception):
    def __init__(self, stage, error):
        super().__init__(stage)
        self.stage, self.error = stage, error


def _columns_record(result, columns) -> dict:
    cells = {}
    for column, cell in result.columns.items():
        if column not in columns:
            continue
        cells[column] = {
            "status": cell.status,
            "max_abs_err": None if cell.report is None else _finite(cell.max_abs_err),
        }
        if cell.error:
            cells[column]["error"] = cell.error[:300]
        if cell.note:  # e.g. the zoo's torch-against-itself verdict on a failing step
            cells[column]["note"] = cell.note[:400]
    return cells


def _finite(value):
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return None
    return float(value)


def _probe_detection(model: GardenModel, record: dict) -> dict:
    """A detection model only as far as ``from_torch`` (torch cannot run it here, and it
    converts to nothing to compare): the example is one 64x64 image and its target (a
    box and a label), which both of torch's modes accept."""
    import torch

    import jaxgrad

    tv = zoo_models.import_torchvision()
    name = model.name.split(":", 1)[1]
    torch.manual_seed(SEED)
    try:
        module = tv.models.get_model(name, weights=None, weights_backbone=None, num_classes=3)
    except Exception as error:  # noqa: BLE001
        outcome, cause, detail = classify_exception(error, stage="build")
        return dict(record, outcome=outcome, cause=cause, detail=detail)
    module = module.double()
    record["parameters"] = sum(p.numel() for p in module.parameters())
    image = torch.from_numpy(_images(1, 64)[0].astype(np.float64))
    target = {
        "boxes": torch.tensor([[4.0, 4.0, 40.0, 40.0]], dtype=torch.float64),
        "labels": torch.tensor([1]),
    }
    if "keypoint" in name:
        target["keypoints"] = torch.rand(1, 17, 3, dtype=torch.float64) * 40
    if "mask" in name:
        target["masks"] = torch.zeros(1, 64, 64, dtype=torch.uint8)
    record["inputs"] = "images=[float64[3, 64, 64]], targets=[boxes, labels]"
    began = time.perf_counter()
    try:
        jaxgrad.nn.from_torch(module, example=([image], [target]), with_buffers=True)
    except Exception as error:  # noqa: BLE001
        outcome, cause, detail = classify_exception(error, stage="convert")
        note = _evaluation_mode_alone(module, image)
        where = re.search(r"at (\S+:\d+) in (\w*nms\w*)", note)
        if outcome == "REFUSED" and where and "data-dependent" in cause:
            # name the op the issue asks for: evaluation's nms keeps a data-dependent
            # number of boxes (training stops earlier, at the transform's random resize)
            cause = (
                f"data-dependent output size: {where.group(2)} ({where.group(1)}, "
                f"evaluation); training: {cause.removeprefix('torch.export: ')}"
            )
        return dict(
            record,
            outcome=outcome,
            cause=cause,
            detail=detail,
            convert_seconds=round(time.perf_counter() - began, 2),
            note=note,
        )
    return dict(
        record,
        outcome="ERROR",
        cause="converted, but torch cannot run it here (torchvision's C++ nms is missing)",
        detail=None,
    )


def _evaluation_mode_alone(module, image) -> str:
    """Where ``torch.export`` stops on a detection model's evaluation mode alone (the
    refusal above names the training mode's first data-dependent step): the file, line
    and function torch's message names, or the torchvision ops in the exported graph."""
    import torch

    try:
        exported = torch.export.export(module.eval(), ([image],), strict=False)
    except Exception as error:  # noqa: BLE001 - its message is the finding
        where = re.search(r"Caused by: \(([^)]*)\)", str(error))
        found = where.group(1) if where else str(error).strip().split("\n")[0][:160]
        return f"evaluation mode alone: torch.export raises {type(error).__name__} at {found}"
    ops = sorted(
        {
            str(node.target)
            for node in exported.graph.nodes
            if node.op == "call_function" and "torchvision" in str(node.target)
        }
    )
    return "evaluation mode alone exports" + (f", calling {', '.join(ops)}" if ops else "")


def run_one(model: GardenModel, columns, *, dynamic_shapes="auto", entry_for=None) -> dict:
    """The garden's record of one model: build it, run it in torch, then the zoo's
    ``run_model`` with ``columns``; classified as the module docstring says.

    ``entry_for(model, size) -> ZooModel`` replaces ``zoo_entry`` (tests build their
    own modules through it)."""
    import jax
    import torch

    torch.set_num_threads(1)
    from parity_checks import _zoo

    assert tuple(_zoo.COLUMNS) == COLUMNS, (_zoo.COLUMNS, COLUMNS)
    began = time.perf_counter()
    verdict = [c for c in _zoo.VERDICT if c in columns]
    record = dict(
        model.to_dict(),
        outcome=None,
        cause="",
        detail=None,
        inputs=None,
        front_end=None,
        convert_seconds=None,
        first_call_seconds=None,
        columns={},
        columns_skipped=[c for c in _zoo.COLUMNS if c not in columns],
        note="",
        versions=dict(zoo_models.versions(), torch=torch.__version__, jax=jax.__version__),
    )
    if model.task == "detection":
        record = _probe_detection(model, record)
        record["seconds"] = round(time.perf_counter() - began, 2)
        return record
    entry_for = entry_for or (
        lambda m, size: zoo_entry(m, size=size, dynamic_shapes=dynamic_shapes)
    )
    try:
        entry, built, note = _build_and_run(model, entry_for)
    except _Stage as failed:
        outcome, cause, detail = classify_exception(failed.error, stage=failed.stage)
        record.update(outcome=outcome, cause=cause, detail=detail)
        record["seconds"] = round(time.perf_counter() - began, 2)
        return record
    record["note"] = note
    record["dynamic_shapes"] = entry.dynamic_shapes
    record["parameters"] = sum(p.numel() for p in built[0].parameters())
    record["inputs"] = _describe_inputs(built[1], built[2])
    # run_model builds exactly once: it gets the module torch just ran (state restored)
    prebuilt = dataclasses.replace(entry, build=lambda library, built=built: built)
    seen, restore = _exception_recorder(_zoo)
    try:
        result = _zoo.run_model(prebuilt, columns=tuple(columns))
    except Exception as error:  # noqa: BLE001 - a torch-side or harness failure
        outcome, cause, detail = classify_exception(error, stage="run")
        record.update(outcome=outcome, cause=cause, detail=detail)
        record["seconds"] = round(time.perf_counter() - began, 2)
        return record
    finally:
        restore()
    outcome, cause, detail = classify_result(result, seen, verdict)
    record.update(
        outcome=outcome,
        cause=cause,
        detail=detail,
        front_end=result.front_end,
        convert_seconds=_round(result.convert_seconds),
        first_call_seconds=_round(result.compile_seconds),
        columns=_columns_record(result, columns),
        seconds=round(time.perf_counter() - began, 2),
    )
    return record


def _round(value):
    return None if value is None else round(value, 2)


def peak_memory_gb() -> float:
    """This process's peak resident memory (Linux reports kilobytes), in GB: how much a
    model's run needed, for the page and for choosing ``--memory-limit``."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


def child_main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="one garden model (the sweep's child)")
    parser.add_argument("--child", required=True, help="the GardenModel as JSON")
    parser.add_argument("--out", required=True, help="where to write the record (JSON)")
    parser.add_argument("--columns", required=True, help="comma-separated zoo columns")
    parser.add_argument("--dynamic-shapes", default="auto")
    parser.add_argument("--memory-limit", type=float, help="GB of address space")
    args = parser.parse_args(argv)
    limit_memory(args.memory_limit)
    model = GardenModel(**json.loads(args.child))
    record = run_one(
        model, tuple(c for c in args.columns.split(",") if c), dynamic_shapes=args.dynamic_shapes
    )
    record["peak_memory_gb"] = peak_memory_gb()
    if os.environ.get("XLA_FLAGS"):  # a run under XLA options says which, and why
        record["xla_flags"] = os.environ["XLA_FLAGS"]
        why = XLA_OPTIONS.get(model.name, ("", ""))[1]
        flags = f"run with XLA_FLAGS={os.environ['XLA_FLAGS']}" + (f": {why}" if why else "")
        record["note"] = f"{record['note']}; {flags}" if record.get("note") else flags
    with open(args.out + ".tmp", "w") as handle:
        json.dump(record, handle)
    os.replace(args.out + ".tmp", args.out)
    return 0


# ------------------------------------------------------------------ the sweep
def read_records(path: str) -> list[dict]:
    """The records of ``path`` (JSONL), in order; a last line cut short by a killed
    writer is ignored."""
    if not os.path.exists(path):
        return []
    records = []
    with open(path) as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def latest(records: list[dict]) -> list[dict]:
    """Each model's last record (a model run again, ``--rerun``, counts by its newest),
    in the order of those last records."""
    last = {record["name"]: index for index, record in enumerate(records)}
    return [record for index, record in enumerate(records) if last[record["name"]] == index]


def append_record(path: str, record: dict) -> None:
    """``record`` as one JSON line at the end of ``path``, on disk before returning (a
    line a killed writer left unfinished is closed first, so this one stays whole)."""
    if os.path.exists(path) and os.path.getsize(path):
        with open(path, "rb") as handle:
            handle.seek(-1, os.SEEK_END)
            unfinished = handle.read(1) != b"\n"
        if unfinished:
            with open(path, "a") as handle:
                handle.write("\n")
    with open(path, "a") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def limit_memory(gigabytes: float | None) -> None:
    """Cap this process's address space (``RLIMIT_AS``) at ``gigabytes``: the child calls
    it first, so a model too large for the machine fails alone (``MemoryError``: CRASH)
    rather than wake the kernel's out-of-memory killer among other people's processes."""
    if gigabytes:
        import resource

        size = int(gigabytes * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (size, size))


def run_child(
    model: GardenModel, columns, *, timeout: float, dynamic_shapes="auto", memory_limit=None
) -> dict:
    """One model in a child process (its own session, so a timeout kills its children
    too: the artifact column starts one); returns its record, or the parent's TIMEOUT
    or CRASH record. An interrupt of the parent (SIGINT, or SIGTERM: see ``cli``) kills
    the child's session before it propagates."""
    with tempfile.TemporaryDirectory(prefix="jaxgrad-garden-") as folder:
        out = os.path.join(folder, "record.json")
        errors = os.path.join(folder, "stderr.txt")
        command = [
            sys.executable,
            os.path.join(HERE, "_garden.py"),
            "--child",
            json.dumps(model.to_dict()),
            "--out",
            out,
            "--columns",
            ",".join(columns),
            "--dynamic-shapes",
            dynamic_shapes,
        ]
        if memory_limit:
            command += ["--memory-limit", str(memory_limit)]
        environment = dict(os.environ)
        if model.name in XLA_OPTIONS:
            flags = f"{environment.get('XLA_FLAGS', '')} {XLA_OPTIONS[model.name][0]}"
            environment["XLA_FLAGS"] = flags.strip()
        began = time.perf_counter()
        with open(errors, "w") as stderr:
            process = subprocess.Popen(
                command,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
                env=environment,
            )
            try:
                status = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # the child's session: it and its children
                process.wait()
                status = None
            except BaseException:  # the parent interrupted: the child must not outlive it
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise
        seconds = round(time.perf_counter() - began, 2)
        base = dict(model.to_dict(), columns={}, seconds=seconds)
        if status is None:
            return dict(
                base,
                outcome="TIMEOUT",
                cause=f"over {timeout:g} s",
                detail=f"killed after {timeout:g} s",
            )
        if os.path.exists(out):
            with open(out) as handle:
                record = json.load(handle)
            record["seconds"] = seconds  # the child's whole life, imports included
            return record
        with open(errors) as handle:
            lines = [line.strip() for line in handle if line.strip()]
        how = f"signal {-status}" if status < 0 else f"exit status {status}"
        return dict(
            base,
            outcome="CRASH",
            cause=f"the child died without a record ({how})",
            detail=lines[-1][:600] if lines else None,
        )


def sweep(
    models,
    records_path: str,
    *,
    columns,
    timeout: float = TIMEOUT,
    resume: bool = False,
    rerun: tuple = (),
    dynamic_shapes: str = "auto",
    memory_limit: float | None = None,
    enumerated: dict | None = None,
    log=None,
    runner=None,
) -> list[dict]:
    """Run ``models`` one child each, appending each record to ``records_path`` as it
    comes; with ``resume`` the models already recorded there are skipped, except those
    whose last record's outcome is in ``rerun`` (run again after a fix: the new record
    is appended, and ``latest`` counts it). Returns the records written by this call.

    Raises:
      ValueError: ``records_path`` has records and ``resume`` is False, or ``rerun``
        names something other than an outcome.
    """
    unknown = [o for o in rerun if o not in OUTCOMES]
    if unknown:
        raise ValueError(
            f"--rerun: {', '.join(unknown)} is no outcome (one of {', '.join(OUTCOMES)})"
        )
    log = log or (lambda line: print(line, flush=True))  # stdout, live through a pipe
    runner = runner or run_child
    existing = read_records(records_path)
    if existing and not resume:
        raise ValueError(
            f"{records_path} already has {len(existing)} records; pass --resume to "
            "continue that sweep, or another --records path."
        )
    done = {r["name"] for r in latest(existing) if r["outcome"] not in rerun}
    todo = [m for m in models if m.name not in done]
    if existing:
        again = sum(1 for m in todo if any(r["name"] == m.name for r in existing))
        log(
            f"garden: {len(models) - len(todo)} of {len(models)} already recorded; {len(todo)} to run"
            + (f" ({again} again: --rerun {','.join(rerun)})" if again else "")
        )
    written = []
    for index, model in enumerate(todo, 1):
        log(f"[{index}/{len(todo)}] {model.name} ({model.task}, {model.family}) ...")
        record = runner(
            model,
            columns,
            timeout=timeout,
            dynamic_shapes=dynamic_shapes,
            memory_limit=memory_limit,
        )
        record["enumerated"] = enumerated or {}
        append_record(records_path, record)
        written.append(record)
        cause = f": {record['cause']}" if record.get("cause") else ""
        log(
            f"[{index}/{len(todo)}] {model.name}: {record['outcome']}{cause} ({record['seconds']:.0f} s)"
        )
    return written


# ------------------------------------------------------------------ the report
def _err(cell) -> str:
    if not cell:
        return "-"
    status = cell.get("status", "skip")
    if status in ("pass", "fail"):
        value = cell.get("max_abs_err")
        return f"{status.upper()} {value:.1e}" if value is not None else status.upper()
    return {"error": "ERROR", "skip": "-"}.get(status, status)


def _params(count) -> str:
    if count is None:
        return "-"
    if count >= 1e6:
        return f"{count / 1e6:.1f}M"
    return f"{count / 1e3:.0f}k" if count >= 1e3 else str(count)


def _cell(text) -> str:
    """``text`` as Markdown prose in one table cell or list item: the characters
    Markdown would read as markup (a reference link in ``['grads']['w']``, emphasis,
    HTML, a column break) escaped."""
    text = str(text).replace("\n", " ").replace("\\", "\\\\")
    for char in "`*_[]<>|":
        text = text.replace(char, "\\" + char)
    return text


def _code(text) -> str:
    """``text`` as a code span in a table cell (no escapes inside: only the column
    break and the backtick are replaced)."""
    return "`" + str(text).replace("|", "/").replace("`", "'") + "`"


def coverage_line(records: list[dict]) -> str:
    """The README's one-line coverage statement, from the records alone (each model's
    last)."""
    records = latest(records)
    counts = collections.Counter(r["outcome"] for r in records)
    enumerated = _enumerated(records)
    total = _total(enumerated) if enumerated else None
    ran = f"{len(records)} of {total} enumerated models" if total else f"{len(records)} models"
    by_outcome = ", ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts[o])
    return (
        f"The garden sweep ({ran}: every torchvision builder, the smallest model of every "
        f"timm family, {len(HF_MODELS)} Hugging Face architectures): {by_outcome} "
        "([docs/garden.md](docs/garden.md))."
    )


def _total(enumerated: dict) -> int:
    """The models enumerated, over the libraries (the task counts are not added)."""
    return sum(count for key, count in enumerated.items() if ":" not in key)


def _enumerated(records) -> dict:
    for record in reversed(records):
        if record.get("enumerated"):
            return record["enumerated"]
    return {}


# issue 42's bars: PASS over the enumerated models of each group
BARS = (
    ("torchvision classification, segmentation, video, optical flow", "torchvision", 0.95),
    ("timm families", "timm", 0.90),
    ("Hugging Face architectures", "transformers", 0.90),
)


def bars(records: list[dict]) -> list[str]:
    """The page's "Against the bars" section (Markdown lines): for each group of
    ``BARS``, PASS over the models enumerated (not only those run: a model not yet run
    is not a PASS), and the silent wrong answers (``numbers differ``: a conversion that
    ran and answered wrong), whose bar is 0."""
    records = latest(records)
    enumerated = _enumerated(records)
    lines = [
        "## Against the bars",
        "",
        "| group | PASS | of enumerated | share | bar | met |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for title, library, bar in BARS:
        chosen = [r for r in records if r["library"] == library and r["task"] != "detection"]
        listed = enumerated.get(library)
        if listed is not None and library == "torchvision":
            detection = enumerated.get("torchvision:detection")
            if detection is None:  # records written before the count was kept
                detection = sum(1 for r in records if r.get("task") == "detection")
            listed -= detection
        passed = sum(1 for r in chosen if r["outcome"] == "PASS")
        if not listed:
            lines.append(f"| {title} | {passed} | ? | ? | {bar:.0%} | ? |")
            continue
        share = passed / listed
        lines.append(
            f"| {title} | {passed} | {listed} | {share:.0%} | {bar:.0%} | "
            f"{'yes' if share >= bar else 'no'} |"
        )
    wrong = [r["name"] for r in records if str(r.get("cause", "")).startswith("numbers differ")]
    lines += [
        "",
        f"Silent wrong answers (a model that converted and ran, and whose numbers differ "
        f"from torch's: FAIL, `numbers differ`): **{len(wrong)}** (the bar is 0)"
        + (f": {_cell(', '.join(wrong))}." if wrong else "."),
    ]
    return lines


def report(records: list[dict], *, source: str = "RECORDS") -> str:
    """The garden's docs page (Markdown) from ``records`` alone (each model's last)."""
    records = latest(records)
    lines = []
    enumerated = _enumerated(records)
    libraries = [
        lib
        for lib in zoo_models.LIBRARIES
        if lib in enumerated or any(r["library"] == lib for r in records)
    ]
    versions = next((r["versions"] for r in reversed(records) if r.get("versions")), {})
    skipped = [c for c in COLUMNS if any(c in r.get("columns_skipped", []) for r in records)]
    total = _total(enumerated)
    lines += [
        "# The garden: every model the libraries list",
        "",
        "<!-- generated by `.venv/bin/python scripts/zoo.py --garden-report "
        f"{source} --out docs/garden.md`: edit the generator (scripts/_garden.py), not this page -->",
        "",
        "The [zoo](zoo.md) holds 20 models chosen by hand. The garden's list is enumerated "
        "from the libraries: every torchvision builder (classification, segmentation, video, "
        "optical flow; detection as far as `from_torch`), the smallest model of every timm "
        f"family, and {len(HF_MODELS)} Hugging Face architectures from tiny configurations. "
        "Each model runs in its own process, with a time limit, through the zoo's own checks "
        "(`parity_checks._zoo.run_model`: float64 forward and every gradient, float32, three "
        "float64 training steps on torch's random draws"
        + (f"; the columns {', '.join(skipped)} were skipped in this sweep" if skipped else "")
        + "), and gets one outcome:",
        "",
        "| outcome | meaning |",
        "|---|---|",
        "| PASS | every column of the zoo's verdict passed |",
        "| FAIL | numbers differ from torch's (a leaf outside its tier), or jaxgrad crashed: a defect |",
        "| REFUSED | `from_torch` raised a `ValueError` naming an op or construct it does not reproduce |",
        "| TIMEOUT | the model ran past the time limit |",
        "| ERROR | the library could not build or run the model in torch: not jaxgrad's |",
        "| CRASH | the model's process ran out of its memory limit, or died without a record |",
        "",
        "```bash",
        "nice -n 19 .venv/bin/python scripts/zoo.py --garden --records docs/garden_records.jsonl --resume \\",
        "    --skip-columns shapes,artifact,float32_grads --timeout 300 --memory-limit 14",
        "# what ran out of memory beside another sweep, again with the machine to itself",
        ".venv/bin/python scripts/zoo.py --garden --records docs/garden_records.jsonl --rerun CRASH \\",
        "    --skip-columns shapes,artifact,float32_grads --timeout 1500 --memory-limit 21",
        f".venv/bin/python scripts/zoo.py --garden-report {source} --out docs/garden.md",
        "```",
        "",
        "A model's check holds several float64 copies of its parameters at once (torch's "
        "model and its momentum, the training step's start, jaxgrad's result; the `peak` "
        "column): a model of 300M parameters needs about 20 GB, and the largest "
        "torchvision builders (600M and more) more than a 24 GB machine has.",
        "",
        f"**{len(records)} of {total or '?'} enumerated models have run** "
        + (
            "("
            + ", ".join(
                f"{lib} {sum(r['library'] == lib for r in records)} of {enumerated.get(lib, '?')}"
                for lib in libraries
            )
            + ")"
            if enumerated
            else ""
        )
        + "; `--resume` continues the sweep from the records, and `--rerun FAIL,TIMEOUT` "
        "runs those outcomes again after a fix (each model counts by its last record)."
        + (
            " Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items()) if v) + "."
            if versions
            else ""
        ),
        "",
        "## Counts",
        "",
        "| library | " + " | ".join(OUTCOMES) + " | run | enumerated |",
        "|---|" + "---:|" * (len(OUTCOMES) + 2),
    ]
    for library in libraries + ["all"]:
        chosen = [r for r in records if library == "all" or r["library"] == library]
        counts = collections.Counter(r["outcome"] for r in chosen)
        listed = total if library == "all" else enumerated.get(library, "?")
        lines.append(
            f"| {library} | "
            + " | ".join(str(counts[o]) for o in OUTCOMES)
            + f" | {len(chosen)} | {listed or '?'} |"
        )
    lines += ["", *bars(records)]
    for outcome in ("FAIL", "REFUSED", "ERROR", "TIMEOUT", "CRASH"):
        chosen = [r for r in records if r["outcome"] == outcome]
        if not chosen:
            continue
        by_cause = collections.defaultdict(list)
        for record in chosen:
            by_cause[record.get("cause") or "-"].append(record["name"])
        lines += [
            "",
            f"## {outcome} by cause",
            "",
            "| cause | models | count |",
            "|---|---|---:|",
        ]
        for cause, names in sorted(by_cause.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            lines.append(f"| {_code(cause)} | {_cell(', '.join(names))} | {len(names)} |")
    lines += [
        "",
        "## Every model",
        "",
        "Columns as in the [zoo](zoo.md#what-each-column-holds): the verdict and the largest "
        "absolute error of each comparison; `convert`: `from_torch` on the float64 model; "
        "`1st call`: the jitted float64 training step's first call (compilation and one step); "
        "`time`: the model's whole process; `peak`: its peak resident memory (recorded "
        "since the sweep's later models).",
        "",
        "| model | task / family | params | inputs | outcome | cause | front | f64 fwd+grads "
        "| f32 fwd | train f64 x3 | shapes | artifact | convert | 1st call | time | peak |",
        "|---|---|---:|---|---|---|---|---|---|---|---|---|---:|---:|---:|---:|",
    ]
    for record in records:
        cells = record.get("columns") or {}
        seconds = lambda v: "-" if v is None else f"{v:.1f} s"  # noqa: E731
        lines.append(
            "| "
            + " | ".join(
                _cell(v)
                for v in (
                    record["name"],
                    f"{record.get('task', '-')} / {record.get('family', '-')}",
                    _params(record.get("parameters")),
                    record.get("inputs") or "-",
                    record["outcome"],
                    record.get("cause") or "",
                    record.get("front_end") or "-",
                    _err(cells.get("float64")),
                    _err(cells.get("float32")),
                    _err(cells.get("train")),
                    _err(cells.get("shapes")),
                    _err(cells.get("artifact")),
                    seconds(record.get("convert_seconds")),
                    seconds(record.get("first_call_seconds")),
                    seconds(record.get("seconds")),
                    "-"
                    if record.get("peak_memory_gb") is None
                    else f"{record['peak_memory_gb']:.1f} GB",
                )
            )
            + " |"
        )
    details = [r for r in records if r["outcome"] != "PASS" and r.get("detail")]
    if details:
        lines += ["", "## The exact errors", ""]
        for record in details:
            lines.append(f"- `{record['name']}` ({record['outcome']}): {_cell(record['detail'])}")
            for column, cell in (record.get("columns") or {}).items():
                if cell.get("status") in ("fail", "error") and cell.get("note"):
                    lines.append(f"  - {column}: {_cell(cell['note'])}")
    notes = [r for r in records if r.get("note")]
    if notes:
        lines += ["", "## Notes", ""]
        for record in notes:
            lines.append(f"- `{record['name']}`: {_cell(record['note'])}")
    lines += [
        "",
        "The README's coverage line, from the same records (the generator prints it):",
        "",
        "```text",
        coverage_line(records),
        "```",
        "",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------ the command line
def startup_line(seconds: float, timings: dict, cached: bool) -> str:
    """``startup: 1.2 s (...)``: the time before the first model, and where it went."""
    if cached:
        where = "the list from the cache, no library imported"
    else:
        where = "enumerating: " + ", ".join(
            f"{library} {spent:.1f} s" for library, spent in timings.items()
        )
        where += " (each with its import); cached for the next run"
    return f"startup: {seconds:.1f} s ({where})"


def cli(parser, args, *, started: float | None = None) -> int:
    """``scripts/zoo.py --garden`` / ``--garden-report`` (arguments checked by zoo.py).

    The sweep prints each model's line on stdout as it starts and as it finishes, flushed
    (``| tee log`` shows them live), after a ``startup:`` line: the seconds since
    ``started`` (``time.perf_counter()`` when zoo.py began) to the first model.

    Exit status 0 when the sweep or the report completed: the outcomes are its data
    (FAILs included), not the command's failure."""
    started = time.perf_counter() if started is None else started
    if args.garden_report:
        records = read_records(args.garden_report)
        if not records:
            parser.error(f"--garden-report {args.garden_report}: no records there")
        with open(args.out, "w") as handle:
            handle.write(report(records, source=args.garden_report))
        print(f"wrote {args.out} ({len(latest(records))} models)")
        print(coverage_line(records))
        return 0
    if args.records:
        from _cli import output_file

        output_file(parser, "--records", args.records)
    print("garden: enumerating the libraries' models ...", file=sys.stderr, flush=True)
    timings: dict = {}
    models, cached = enumerate_cached(timings=timings)
    try:
        chosen = select(models, args.only)
    except ValueError as error:
        parser.error(f"--only: {error}")
    if args.list:
        for model in chosen:
            count = _params(model.parameters) if model.parameters else ""
            print(f"{model.name:<52} {model.task:<15} {model.family:<28} {count}")
        print(f"{len(chosen)} models", file=sys.stderr)
        print(startup_line(time.perf_counter() - started, timings, cached), file=sys.stderr)
        return 0
    skip = set(filter(None, args.skip_columns.split(",")))
    columns = tuple(c for c in COLUMNS if c not in skip)
    enumerated = dict(collections.Counter(m.library for m in models))
    enumerated["torchvision:detection"] = sum(
        1 for m in models if m.library == "torchvision" and m.task == "detection"
    )

    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)  # `timeout` and kill end the child too
    print(startup_line(time.perf_counter() - started, timings, cached), flush=True)
    try:
        written = sweep(
            chosen,
            args.records,
            columns=columns,
            timeout=args.timeout,
            resume=args.resume or bool(args.rerun),
            rerun=tuple(filter(None, (args.rerun or "").split(","))),
            memory_limit=args.memory_limit,
            enumerated=enumerated,
        )
    except ValueError as error:
        parser.error(str(error))
    except KeyboardInterrupt:
        print("garden: interrupted; --resume continues from the records", file=sys.stderr)
        return 130
    counts = collections.Counter(r["outcome"] for r in written)
    print(
        f"garden: {len(written)} models run this time ("
        + ", ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts[o])
        + f"); records in {args.records}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(child_main())
