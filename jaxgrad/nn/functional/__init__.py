"""``jaxgrad.nn.functional``: ``torch.nn.functional`` as pure JAX functions.

Same names, signatures and defaults as torch; layers in ``jaxgrad.nn`` are thin over
these, and ``from_torch``'s ``torch.fx`` table maps ``torch.nn.functional.X`` to
``jaxgrad.nn.functional.X``. One private module per family (``_conv``, ``_pool``,
``_norm``, ``_dropout``, ``_activation``, ``_attention``, ``_embedding``…),
re-exported here one name per line.
"""

from jaxgrad.nn.functional._activation import (
    celu,
    elu,
    gelu,
    glu,
    hardshrink,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    log_softmax,
    logsigmoid,
    mish,
    prelu,
    relu,
    relu6,
    selu,
    sigmoid,
    silu,
    softmax,
    softmin,
    softplus,
    softshrink,
    softsign,
    tanh,
    tanhshrink,
    threshold,
)
from jaxgrad.nn.functional._attention import scaled_dot_product_attention
from jaxgrad.nn.functional._conv import (
    conv1d,
    conv2d,
    conv3d,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
    transposed_output_size,
)
from jaxgrad.nn.functional._dropout import dropout, dropout1d, dropout2d
from jaxgrad.nn.functional._embedding import embedding, embedding_renorm
from jaxgrad.nn.functional._fractional import fractional_max_pool2d, fractional_max_pool3d
from jaxgrad.nn.functional._layernorm import layer_norm, rms_norm
from jaxgrad.nn.functional._multihead import multi_head_attention_forward
from jaxgrad.nn.functional._norm import (
    batch_norm,
    batch_norm_with_stats,
    group_norm,
    instance_norm,
    instance_norm_with_stats,
    local_response_norm,
)
from jaxgrad.nn.functional._padding import pad
from jaxgrad.nn.functional._pool import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    adaptive_max_pool3d,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    lp_pool1d,
    lp_pool2d,
    lp_pool3d,
    max_pool1d,
    max_pool2d,
    max_pool3d,
)
from jaxgrad.nn.functional._recurrent import (
    gru_cell,
    lstm_cell,
    recurrent,
    rnn_relu_cell,
    rnn_tanh_cell,
)
from jaxgrad.nn.functional._upsample import interpolate
