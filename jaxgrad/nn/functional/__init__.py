"""``jaxgrad.nn.functional``: ``torch.nn.functional`` as pure JAX functions.

Same names, signatures and defaults as torch; layers in ``jaxgrad.nn`` are thin over
these, and ``from_torch``'s ``torch.fx`` table maps ``torch.nn.functional.X`` to
``jaxgrad.nn.functional.X``. One private module per family (``_conv``, ``_pool``,
``_norm``, ``_dropout``, ``_activation``, ``_attention``, ``_embedding``…),
re-exported here one name per line.
"""

from jaxgrad.nn.functional._activation import celu
from jaxgrad.nn.functional._activation import elu
from jaxgrad.nn.functional._activation import gelu
from jaxgrad.nn.functional._activation import glu
from jaxgrad.nn.functional._activation import hardshrink
from jaxgrad.nn.functional._activation import hardsigmoid
from jaxgrad.nn.functional._activation import hardswish
from jaxgrad.nn.functional._activation import hardtanh
from jaxgrad.nn.functional._activation import leaky_relu
from jaxgrad.nn.functional._activation import log_softmax
from jaxgrad.nn.functional._activation import logsigmoid
from jaxgrad.nn.functional._activation import mish
from jaxgrad.nn.functional._activation import prelu
from jaxgrad.nn.functional._activation import relu
from jaxgrad.nn.functional._activation import relu6
from jaxgrad.nn.functional._activation import selu
from jaxgrad.nn.functional._activation import sigmoid
from jaxgrad.nn.functional._activation import silu
from jaxgrad.nn.functional._activation import softmax
from jaxgrad.nn.functional._activation import softmin
from jaxgrad.nn.functional._activation import softplus
from jaxgrad.nn.functional._activation import softshrink
from jaxgrad.nn.functional._activation import softsign
from jaxgrad.nn.functional._activation import tanh
from jaxgrad.nn.functional._activation import tanhshrink
from jaxgrad.nn.functional._activation import threshold
from jaxgrad.nn.functional._conv import conv1d
from jaxgrad.nn.functional._conv import conv2d
from jaxgrad.nn.functional._conv import conv3d
from jaxgrad.nn.functional._conv import conv_transpose1d
from jaxgrad.nn.functional._conv import conv_transpose2d
from jaxgrad.nn.functional._conv import conv_transpose3d
from jaxgrad.nn.functional._conv import transposed_output_size
from jaxgrad.nn.functional._attention import scaled_dot_product_attention
from jaxgrad.nn.functional._embedding import embedding
from jaxgrad.nn.functional._embedding import embedding_renorm
from jaxgrad.nn.functional._layernorm import layer_norm
from jaxgrad.nn.functional._layernorm import rms_norm
from jaxgrad.nn.functional._multihead import multi_head_attention_forward
from jaxgrad.nn.functional._recurrent import gru_cell
from jaxgrad.nn.functional._recurrent import lstm_cell
from jaxgrad.nn.functional._recurrent import recurrent
from jaxgrad.nn.functional._recurrent import rnn_relu_cell
from jaxgrad.nn.functional._recurrent import rnn_tanh_cell
from jaxgrad.nn.functional._dropout import dropout
from jaxgrad.nn.functional._dropout import dropout1d
from jaxgrad.nn.functional._dropout import dropout2d
from jaxgrad.nn.functional._fractional import fractional_max_pool2d
from jaxgrad.nn.functional._fractional import fractional_max_pool3d
from jaxgrad.nn.functional._norm import batch_norm
from jaxgrad.nn.functional._norm import batch_norm_with_stats
from jaxgrad.nn.functional._norm import group_norm
from jaxgrad.nn.functional._norm import instance_norm
from jaxgrad.nn.functional._norm import instance_norm_with_stats
from jaxgrad.nn.functional._norm import local_response_norm
from jaxgrad.nn.functional._padding import pad
from jaxgrad.nn.functional._pool import adaptive_avg_pool1d
from jaxgrad.nn.functional._pool import adaptive_avg_pool2d
from jaxgrad.nn.functional._pool import adaptive_avg_pool3d
from jaxgrad.nn.functional._pool import adaptive_max_pool1d
from jaxgrad.nn.functional._pool import adaptive_max_pool2d
from jaxgrad.nn.functional._pool import adaptive_max_pool3d
from jaxgrad.nn.functional._pool import avg_pool1d
from jaxgrad.nn.functional._pool import avg_pool2d
from jaxgrad.nn.functional._pool import avg_pool3d
from jaxgrad.nn.functional._pool import lp_pool1d
from jaxgrad.nn.functional._pool import lp_pool2d
from jaxgrad.nn.functional._pool import lp_pool3d
from jaxgrad.nn.functional._pool import max_pool1d
from jaxgrad.nn.functional._pool import max_pool2d
from jaxgrad.nn.functional._pool import max_pool3d
from jaxgrad.nn.functional._upsample import interpolate
