"""Losses with ``torch.nn.functional``'s names, arguments and reduction semantics.

Every loss takes ``reduction="mean" | "sum" | "none"`` (``kl_div`` also
``"batchmean"``): ``"none"`` returns the per-element losses, ``"sum"`` their sum,
``"mean"`` torch's mean — for ``nll_loss`` / ``cross_entropy`` with class indices the
*weighted mean over non-ignored targets*, ``sum w[y]·l / sum w[y]``.

Bad input raises ``ValueError`` / ``TypeError`` naming the argument. Shapes must match
exactly where torch would broadcast with a warning (broadcasting a `(N,)` target
against `(N, 1)` predictions is a classic silent bug). Values torch rejects — class
indices outside ``[0, C)``, probabilities outside [0, 1], negative variances — raise
``ValueError`` when concrete; under ``jit`` the affected elements are NaN, and
``checked(loss)`` turns them into ``checkify`` errors.

Loss modules mirroring ``torch.nn`` (``CrossEntropyLoss``, ``BCEWithLogitsLoss``…) are
frozen dataclasses over these functions; ``from_torch`` converts a torch loss module.
"""

from jaxgrad.losses._binary import binary_cross_entropy, binary_cross_entropy_with_logits
from jaxgrad.losses._checks import REDUCTIONS, checked
from jaxgrad.losses._classification import cross_entropy, nll_loss
from jaxgrad.losses._ctc import ctc_loss
from jaxgrad.losses._linear import linear_cross_entropy
from jaxgrad.losses._margin import (
    hinge_embedding_loss,
    multi_margin_loss,
    multilabel_margin_loss,
    multilabel_soft_margin_loss,
    soft_margin_loss,
)
from jaxgrad.losses._pairwise import cosine_embedding_loss, kl_div, margin_ranking_loss
from jaxgrad.losses._regression import (
    gaussian_nll_loss,
    huber_loss,
    l1_loss,
    mse_loss,
    poisson_nll_loss,
    smooth_l1_loss,
)
from jaxgrad.losses.modules import (
    LOSS_MODULES,
    BCELoss,
    BCEWithLogitsLoss,
    CosineEmbeddingLoss,
    CrossEntropyLoss,
    CTCLoss,
    GaussianNLLLoss,
    HingeEmbeddingLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    LinearCrossEntropyLoss,
    MarginRankingLoss,
    MSELoss,
    MultiLabelMarginLoss,
    MultiLabelSoftMarginLoss,
    MultiMarginLoss,
    NLLLoss,
    PoissonNLLLoss,
    SmoothL1Loss,
    SoftMarginLoss,
    from_torch,
)

__all__ = [
    "BCELoss",
    "BCEWithLogitsLoss",
    "CTCLoss",
    "CosineEmbeddingLoss",
    "CrossEntropyLoss",
    "GaussianNLLLoss",
    "HingeEmbeddingLoss",
    "HuberLoss",
    "KLDivLoss",
    "L1Loss",
    "LOSS_MODULES",
    "LinearCrossEntropyLoss",
    "MSELoss",
    "MarginRankingLoss",
    "MultiLabelMarginLoss",
    "MultiLabelSoftMarginLoss",
    "MultiMarginLoss",
    "NLLLoss",
    "PoissonNLLLoss",
    "REDUCTIONS",
    "SmoothL1Loss",
    "SoftMarginLoss",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "checked",
    "cosine_embedding_loss",
    "cross_entropy",
    "ctc_loss",
    "from_torch",
    "gaussian_nll_loss",
    "hinge_embedding_loss",
    "huber_loss",
    "kl_div",
    "l1_loss",
    "linear_cross_entropy",
    "margin_ranking_loss",
    "mse_loss",
    "multi_margin_loss",
    "multilabel_margin_loss",
    "multilabel_soft_margin_loss",
    "nll_loss",
    "poisson_nll_loss",
    "smooth_l1_loss",
    "soft_margin_loss",
]
