"""The zoo's models: real torchvision, timm and Hugging Face models, built small.

Importing this module imports neither torch nor the zoo's libraries (``scripts/zoo.py``
checks ``--models`` against ``MODELS`` before anything heavy loads); ``build`` does.

Each entry of ``MODELS`` builds one model as a user would bring it: the library's own
constructor (``torchvision.models.resnet18``, ``timm.create_model``,
``transformers.BertModel(BertConfig(...))``), random weights drawn under a fixed torch
seed (nothing is downloaded), a tiny configuration where the library has one (the
transformers), and a small input drawn from a fixed NumPy seed. ``instance(entry,
dtype)`` gives the module in float64 or float32 (the same weights: built once in
float32, then cast) with its inputs as NumPy arrays.

The three libraries are the optional ``zoo`` extra (``pip install -c constraints.txt
-e ".[zoo]"``); ``missing(entry)`` says which one an entry lacks. ``import jaxgrad``
never imports them.

**torchvision on a CPU-only torch.** The torchvision wheel on some indexes (this
project's machine: 0.28.0+cu130) is a CUDA build whose C extension does not load
against the CPU torch; its ``import`` then fails while registering a fake kernel for
``torchvision::nms``. ``import_torchvision`` and ``import_library`` are jaxgrad's public
helpers (``jaxgrad.zoo_imports``, which says how they work), called here: the zoo
imports its libraries the way a user of the ``zoo`` extra can.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
from collections.abc import Callable

import numpy as np

SEED = 0
LIBRARIES = ("torchvision", "timm", "transformers")  # jaxgrad.zoo_imports.LIBRARIES
INSTALL = 'pip install -c constraints.txt -e ".[zoo]"'


# jaxgrad's public helpers, imported on the first call: importing jaxgrad imports jax,
# which this module must not (scripts check their arguments before anything heavy)
def import_torchvision():
    """``jaxgrad.zoo_imports.import_torchvision()``: torchvision, imported where its
    wheel's C extension does not load against the installed torch."""
    from jaxgrad.zoo_imports import import_torchvision as public

    return public()


def import_library(name: str):
    """``jaxgrad.zoo_imports.import_library(name)``: one of ``LIBRARIES``, imported
    (torchvision's import first when it is installed)."""
    from jaxgrad.zoo_imports import import_library as public

    return public(name)


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


# ------------------------------------------------------------------ the models
@dataclasses.dataclass(frozen=True)
class ZooModel:
    """One model of the zoo.

    Attributes:
      name: ``"library:model"``, e.g. ``"torchvision:resnet18"``.
      library: the library that defines it (one of ``LIBRARIES``).
      build: ``build(lib) -> (module, args, kwargs)``: the float32 module and its
        example inputs as NumPy arrays (``lib`` is the imported library).
      notes: what differs from the library's defaults, and why.
      capture: ``from_torch``'s front end for this model (``"auto"`` unless the entry
        exists to exercise one).
      dynamic_shapes: ``from_torch``'s ``dynamic_shapes`` (``"auto"``: every size
        dynamic; ``"batch"`` where that capture is too slow, the notes saying why).
    """

    name: str
    library: str
    build: Callable
    notes: str = ""
    capture: str = "auto"
    dynamic_shapes: str = "auto"


def _images(batch: int, size: int):
    """``((batch, 3, size, size) float32 images,), {}`` from the fixed seed."""
    rng = np.random.default_rng(SEED)
    return (rng.standard_normal((batch, 3, size, size)).astype(np.float32),), {}


def _tokens(batch: int = 2, length: int = 8, vocab: int = 100):
    rng = np.random.default_rng(SEED)
    return (rng.integers(0, vocab, size=(batch, length)).astype(np.int64),), {}


def _audio(batch: int = 2, samples: int = 400):
    rng = np.random.default_rng(SEED)
    return (rng.standard_normal((batch, samples)).astype(np.float32),), {}


def _tv(constructor: str, size: int = 64, batch: int = 8, **options):
    def build(tv):
        module = getattr(tv.models, constructor)(num_classes=10, **options)
        return (module, *_images(batch, size))

    return build


def _timm(name: str, size: int = 64, batch: int = 8, **options):
    def build(timm):
        module = timm.create_model(name, pretrained=False, num_classes=10, **options)
        return (module, *_images(batch, size))

    return build


def _hf(model: str, config: str, inputs: Callable, **config_options):
    def build(transformers):
        cfg = getattr(transformers, config)(**config_options)
        return (getattr(transformers, model)(cfg), *inputs())

    return build


def _chameleon_quantizer(transformers):
    """Chameleon's VQ-VAE codebook as the library builds it: nearest codes by argmin,
    the commitment loss with ``detach()`` on either side, and the straight-through
    estimator ``h + (quant - h).detach()`` (VQ-VAE)."""
    from transformers.models.chameleon import modeling_chameleon

    config = transformers.ChameleonVQVAEConfig(embed_dim=8, num_embeddings=16)
    rng = np.random.default_rng(SEED)
    return (
        modeling_chameleon.ChameleonVQVAEVectorQuantizer(config),
        (rng.standard_normal((2, 8, 4, 4)).astype(np.float32),),
        {},
    )


def _frozen_teacher(tv):
    """A user's BYOL-style pair of ``torchvision.ops.MLP``s: the online network and
    its target, run under ``torch.no_grad()`` in the forward (its BatchNorm still
    updates its running statistics in training mode); the output is the cosine
    similarity of their projections, BYOL's loss up to an affine map."""
    import torch

    class FrozenTeacher(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.online = tv.ops.MLP(16, [32, 8], norm_layer=torch.nn.BatchNorm1d)
            self.target = copy.deepcopy(self.online)
            for param in self.target.parameters():  # perturbed: not the online weights
                param.data.mul_(0.9)

        def forward(self, x):
            prediction = self.online(x)
            with torch.no_grad():
                target = self.target(x)
            return torch.nn.functional.cosine_similarity(prediction, target, dim=-1)

    rng = np.random.default_rng(SEED)
    return FrozenTeacher(), (rng.standard_normal((8, 16)).astype(np.float32),), {}


def _momentum_encoder(tv):
    """A user's MoCo (He et al., 2020): query and key encoders, each a
    ``torchvision.ops.MLP`` with BatchNorm1d, the key encoder's parameters frozen
    (``requires_grad=False``) and moved towards the query encoder's in the forward by
    ``pk.data = pk.data * m + pq.data * (1 - m)`` under ``torch.no_grad()``; the output
    is the logits of the queries against the keys (MoCo's contrastive logits within the
    batch)."""
    import torch

    class MomentumEncoder(torch.nn.Module):
        def __init__(self, momentum=0.99, temperature=0.2):
            super().__init__()
            self.momentum, self.temperature = momentum, temperature
            self.encoder_q = tv.ops.MLP(16, [32, 8], norm_layer=torch.nn.BatchNorm1d)
            self.encoder_k = copy.deepcopy(self.encoder_q)
            for param in self.encoder_k.parameters():
                param.requires_grad = False
                param.data.mul_(0.9)  # perturbed: not the query weights

        @torch.no_grad()
        def _momentum_update_key_encoder(self):
            for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
                param_k.data = param_k.data * self.momentum + param_q.data * (1.0 - self.momentum)

        def forward(self, x):
            q = torch.nn.functional.normalize(self.encoder_q(x), dim=1)
            self._momentum_update_key_encoder()
            with torch.no_grad():
                k = torch.nn.functional.normalize(self.encoder_k(x), dim=1)
            return q @ k.T / self.temperature

    rng = np.random.default_rng(SEED)
    return MomentumEncoder(), (rng.standard_normal((8, 16)).astype(np.float32),), {}


def _vq_ema_codebook(tv):
    """A user's VQ-VAE with an EMA codebook (van den Oord et al., 2017, appendix):
    ``torchvision.ops.MLP`` encoder and decoder, the codes in buffers moved in training
    mode to the Laplace-smoothed average of the encodings assigned to them by
    ``.data =`` under ``torch.no_grad()``, the straight-through estimator and the
    commitment loss."""

    from torchref.forward_state import VQEMACodebook

    class VQEMA(VQEMACodebook):  # the EMA update and quantiser of torchref's
        def __init__(self):
            super().__init__(features=16, dim=4, codes=16, decay=0.9)
            self.encoder = tv.ops.MLP(16, [32, 4])
            self.decoder = tv.ops.MLP(4, [32, 16])

    rng = np.random.default_rng(SEED)
    return VQEMA(), (rng.standard_normal((8, 16)).astype(np.float32),), {}


TINY_TEXT = dict(
    vocab_size=100,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)
TIMM_DROPS = dict(drop_rate=0.1, drop_path_rate=0.1)

MODELS = [
    ZooModel("torchvision:resnet18", "torchvision", _tv("resnet18"), "8 images of 64x64"),
    ZooModel(
        "torchvision:mobilenet_v3_small",
        "torchvision",
        _tv("mobilenet_v3_small"),
        "8 images of 64x64 (dropout 0.2: default)",
    ),
    ZooModel(
        "torchvision:efficientnet_b0",
        "torchvision",
        _tv("efficientnet_b0"),
        "8 images of 64x64 (stochastic depth 0.2, dropout 0.2: defaults)",
    ),
    ZooModel(
        "torchvision:shufflenet_v2_x0_5",
        "torchvision",
        _tv("shufflenet_v2_x0_5"),
        "8 images of 64x64",
    ),
    ZooModel(
        "torchvision:vit_b_16",
        "torchvision",
        _tv("vit_b_16", 32, batch=2, image_size=32),
        "image_size=32, 2 images (full width: 12 layers of 768, 86M parameters)",
    ),
    ZooModel(
        "torchvision:swin_t",
        "torchvision",
        _tv("swin_t"),
        "8 images of 64x64 (stochastic depth 0.2: default); dynamic_shapes='batch' "
        "(every batch size from one capture, 64x64 images: with the image sides "
        "symbolic too, torch.export's reasoning over Swin's window padding and "
        "reshapes ran for 39 minutes without finishing)",
        dynamic_shapes="batch",
    ),
    ZooModel(
        "timm:test_efficientnet",
        "timm",
        _timm("test_efficientnet", 32, batch=4, **TIMM_DROPS),
        "extra (the CI subset's CNN): timm's own test-size EfficientNet, 4 images of "
        "32x32, drop_rate=0.1, drop_path_rate=0.1; capture='export' (BatchNorm's "
        "running statistics as the program's buffer writes, stochastic depth and "
        "dropout as keyed random ops)",
        capture="export",
    ),
    ZooModel(
        "timm:test_coatnet",
        "timm",
        _timm("test_coatnet", 64, batch=4, img_size=64, **TIMM_DROPS),
        "extra: timm's own test-size CoAtNet, 4 images of 64x64, img_size=64, "
        "drop_rate=0.1, drop_path_rate=0.1 (BatchNorm, attention, relative-position "
        "indices as constants); dynamic_shapes='batch': with the image sides symbolic "
        "too, apply runs at other sides, but jax.export cannot lower the artifact: an add "
        "of two tensors whose size torch wrote as two different expressions of both "
        "sides (nested floor divisions, one multiplied out), which jax.export cannot "
        "prove equal",
        dynamic_shapes="batch",
    ),
    ZooModel(
        "timm:vit_tiny_patch16_224",
        "timm",
        _timm("vit_tiny_patch16_224", 32, img_size=32, **TIMM_DROPS),
        "img_size=32, 8 images, drop_rate=0.1, drop_path_rate=0.1",
    ),
    ZooModel(
        "timm:efficientnet_b0",
        "timm",
        _timm("efficientnet_b0", **TIMM_DROPS),
        "8 images of 64x64, drop_rate=0.1, drop_path_rate=0.1",
    ),
    ZooModel(
        "timm:mobilevitv2_050",
        "timm",
        _timm("mobilevitv2_050", **TIMM_DROPS),
        "8 images of 64x64, drop_rate=0.1, drop_path_rate=0.1; dynamic_shapes='batch' "
        "(with the image sides symbolic too the capture takes about 10 minutes here and "
        "runs at other sides, but jax.export fails to lower the artifact inside its own "
        "shape reasoning)",
        dynamic_shapes="batch",
    ),
    ZooModel(
        "transformers:BertModel",
        "transformers",
        _hf("BertModel", "BertConfig", _tokens, **TINY_TEXT),
        "2 layers of 32, vocab 100, 2 x 8 tokens (dropout 0.1: default)",
    ),
    ZooModel(
        "transformers:GPT2LMHeadModel",
        "transformers",
        _hf(
            "GPT2LMHeadModel",
            "GPT2Config",
            _tokens,
            vocab_size=100,
            n_embd=32,
            n_layer=2,
            n_head=2,
            n_positions=64,
            use_cache=False,
        ),
        "2 layers of 32, vocab 100; use_cache=False (a KV-cache output cannot be "
        "exported); tied lm_head",
    ),
    ZooModel(
        "transformers:LlamaForCausalLM",
        "transformers",
        _hf(
            "LlamaForCausalLM",
            "LlamaConfig",
            _tokens,
            num_key_value_heads=1,
            use_cache=False,
            **dict(TINY_TEXT, num_attention_heads=4),
        ),
        "2 layers of 32, 4 heads / 1 KV head, vocab 100; use_cache=False (a KV-cache "
        "output cannot be exported)",
    ),
    ZooModel(
        "transformers:T5EncoderModel",
        "transformers",
        _hf(
            "T5EncoderModel",
            "T5Config",
            _tokens,
            vocab_size=100,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
        ),
        "2 layers of 32, vocab 100 (dropout 0.1: default)",
    ),
    ZooModel(
        "transformers:ViTModel",
        "transformers",
        _hf(
            "ViTModel",
            "ViTConfig",
            lambda: _images(2, 32),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            image_size=32,
            patch_size=8,
            hidden_dropout_prob=0.1,
        ),
        "2 layers of 32, 32x32 images, patch 8, hidden_dropout_prob=0.1",
    ),
    ZooModel(
        "transformers:Wav2Vec2Model",
        "transformers",
        _hf(
            "Wav2Vec2Model",
            "Wav2Vec2Config",
            _audio,
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
        ),
        "2 layers of 32, 2 conv layers, 400 samples; layerdrop=0 (layer drop is Python "
        "control flow on a random draw), mask_time_prob=0 (SpecAugment draws its masks "
        "with NumPy during the forward, which export would freeze: from_torch refuses "
        "it, naming the constant)",
    ),
    ZooModel(
        "transformers:MixtralForCausalLM",
        "transformers",
        _hf(
            "MixtralForCausalLM",
            "MixtralConfig",
            _tokens,
            num_key_value_heads=2,
            num_local_experts=4,
            num_experts_per_tok=2,
            use_cache=False,
            experts_implementation="batched_mm",
            **dict(TINY_TEXT, num_attention_heads=4),
        ),
        "extra: a mixture-of-experts decoder, 2 layers of 32, 4 experts (2 per token), "
        "vocab 100; experts_implementation='batched_mm' (every expert computed densely, "
        "masked by the routing): the eager experts loop over the experts some token "
        "chose (nonzero), which torch.export cannot capture in either mode, and the "
        "default grouped_mm counts tokens with histc and calls transformers' own "
        "grouped_mm op, outside the table; use_cache=False",
    ),
    ZooModel(
        "transformers:ChameleonVQVAEVectorQuantizer",
        "transformers",
        _chameleon_quantizer,
        "extra: Chameleon's VQ-VAE codebook (16 codes of 8), 2 maps of 8x4x4: the "
        "straight-through estimator and the commitment loss's detach() on both sides",
    ),
    ZooModel(
        "torchvision:frozen_teacher",
        "torchvision",
        _frozen_teacher,
        "extra: a user's BYOL-style online/target pair of torchvision.ops.MLP(16, "
        "[32, 8], BatchNorm1d), the target under torch.no_grad() in the forward "
        "(no gradient; its BatchNorm statistics still update in training), 8 rows",
    ),
    ZooModel(
        "torchvision:momentum_encoder",
        "torchvision",
        _momentum_encoder,
        "extra: a user's MoCo pair of torchvision.ops.MLP(16, [32, 8], BatchNorm1d), the "
        "key encoder (requires_grad=False) moved towards the query encoder by `.data =` "
        "in the forward: its parameters are state, returned by apply; 8 rows",
    ),
    ZooModel(
        "torchvision:vq_ema_codebook",
        "torchvision",
        _vq_ema_codebook,
        "extra: a user's VQ-VAE of torchvision.ops.MLPs with an EMA codebook (16 codes of "
        "4) in buffers, written by `.data =` in training mode; straight-through estimator "
        "and commitment loss; 8 rows",
    ),
]
BY_NAME = {entry.name: entry for entry in MODELS}
# the CI subset (parity_tests/test_zoo.py, `scripts/zoo.py --quick`) and the comparisons
# it makes, the cheapest that cover the export front end's state on real models: a
# BatchNorm CNN with dropout and stochastic depth (training steps: buffers, random ops
# on torch's draws) and a transformer with dropout and constants (both modes), float64
# only (float32 runs the same program at another dtype; the full zoo runs it)
# (BERT also at three shapes from one capture, and its artifact reloaded without torch)
QUICK = {
    "timm:test_efficientnet": ("train",),
    "transformers:BertModel": ("float64", "train", "shapes", "artifact"),
}


def versions() -> dict:
    """``{library: version or None}`` for the zoo's libraries (read without importing
    them)."""
    from importlib import metadata

    found = {}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def missing(entry: ZooModel) -> str | None:
    """The library ``entry`` needs when it is not installed, else None."""
    return None if installed(entry.library) else entry.library


def select(spec: str | None) -> list[ZooModel]:
    """The entries named by ``spec``: comma-separated full names
    (``torchvision:resnet18``), a model name unique across libraries (``resnet18``), or
    a library (``timm``); None for all, in ``MODELS`` order.

    Raises:
      ValueError: a name that matches nothing, or more than one model.
    """
    if spec is None:
        return list(MODELS)
    chosen = []
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        if item in BY_NAME:
            matches = [BY_NAME[item]]
        elif item in LIBRARIES:
            matches = [e for e in MODELS if e.library == item]
        else:
            matches = [e for e in MODELS if e.name.split(":", 1)[1] == item]
            if len(matches) > 1:
                raise ValueError(
                    f"{item!r} names {len(matches)} models "
                    f"({', '.join(e.name for e in matches)}); give the full name."
                )
        if not matches:
            raise ValueError(
                f"unknown model {item!r}; the zoo has: "
                f"{', '.join(e.name for e in MODELS)} (or a library: "
                f"{', '.join(LIBRARIES)})."
            )
        chosen.extend(e for e in matches if e not in chosen)
    if not chosen:
        raise ValueError("no model named (an empty --models).")
    return chosen


def build(entry: ZooModel):
    """``(module, args, kwargs)``: the float32 module (seeded random weights) and its
    example inputs as NumPy arrays."""
    import torch

    library = import_library(entry.library)
    torch.manual_seed(SEED)
    module, args, kwargs = entry.build(library)
    return module.float(), args, kwargs


def instance(built, dtype: str):
    """``built`` (from ``build``) in ``dtype`` (``"float64"`` or ``"float32"``): a copy
    of the module cast to it and the floating inputs cast likewise."""
    import torch

    module, args, kwargs = built
    torch_dtype = {"float64": torch.float64, "float32": torch.float32}[dtype]
    cast = lambda a: a.astype(dtype) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a
    return (
        copy.deepcopy(module).to(torch_dtype),
        tuple(cast(a) for a in args),
        {k: cast(v) for k, v in kwargs.items()},
    )


__all__ = [
    "ZooModel",
    "MODELS",
    "BY_NAME",
    "QUICK",
    "versions",
    "LIBRARIES",
    "INSTALL",
    "build",
    "instance",
    "select",
    "missing",
    "installed",
    "import_library",
    "import_torchvision",
]
