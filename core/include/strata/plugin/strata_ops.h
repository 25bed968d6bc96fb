/* strata_ops.h — the core's op names as constants, for plugin kernel tables,
 * with each op's arity, tags and attribute names.
 *
 * Generated from the core's op registry by `strata ops --c-header`; do not
 * edit. The test ops_header_current fails when it is out of date. Contracts
 * (operands, attributes, semantics) are in docs/ops.md. */
#ifndef STRATA_OPS_H
#define STRATA_OPS_H

#define STRATA_OP_ABS "strata::abs"
#define STRATA_OP_ADAM_STEP "strata::adam_step"
#define STRATA_OP_ADD "strata::add"
#define STRATA_OP_AMP_UNSCALE "strata::amp_unscale"
#define STRATA_OP_ANGLE "strata::angle"
#define STRATA_OP_ARGMAX "strata::argmax"
#define STRATA_OP_ARGMIN "strata::argmin"
#define STRATA_OP_ATAN "strata::atan"
#define STRATA_OP_BERNOULLI "strata::bernoulli"
#define STRATA_OP_CAST "strata::cast"
#define STRATA_OP_CEIL "strata::ceil"
#define STRATA_OP_COMPLEX "strata::complex"
#define STRATA_OP_CONJ "strata::conj"
#define STRATA_OP_COPY "strata::copy"
#define STRATA_OP_COS "strata::cos"
#define STRATA_OP_DIV "strata::div"
#define STRATA_OP_EQ "strata::eq"
#define STRATA_OP_ERF "strata::erf"
#define STRATA_OP_EXP "strata::exp"
#define STRATA_OP_EXPM1 "strata::expm1"
#define STRATA_OP_FILL "strata::fill"
#define STRATA_OP_FLOOR "strata::floor"
#define STRATA_OP_FUSED_ELEMENTWISE "strata::fused_elementwise"
#define STRATA_OP_GATHER "strata::gather"
#define STRATA_OP_GE "strata::ge"
#define STRATA_OP_GELU "strata::gelu"
#define STRATA_OP_GELU_BACKWARD "strata::gelu_backward"
#define STRATA_OP_GT "strata::gt"
#define STRATA_OP_IMAG "strata::imag"
#define STRATA_OP_INDEX_SELECT "strata::index_select"
#define STRATA_OP_LE "strata::le"
#define STRATA_OP_LINEAR "strata::linear"
#define STRATA_OP_LOG "strata::log"
#define STRATA_OP_LOG1P "strata::log1p"
#define STRATA_OP_LOG_SOFTMAX "strata::log_softmax"
#define STRATA_OP_LOG_SOFTMAX_BACKWARD "strata::log_softmax_backward"
#define STRATA_OP_LOGICAL_AND "strata::logical_and"
#define STRATA_OP_LOGICAL_NOT "strata::logical_not"
#define STRATA_OP_LOGICAL_OR "strata::logical_or"
#define STRATA_OP_LT "strata::lt"
#define STRATA_OP_MATMUL "strata::matmul"
#define STRATA_OP_MAX "strata::max"
#define STRATA_OP_MAXIMUM "strata::maximum"
#define STRATA_OP_MEAN "strata::mean"
#define STRATA_OP_MIN "strata::min"
#define STRATA_OP_MINIMUM "strata::minimum"
#define STRATA_OP_MUL "strata::mul"
#define STRATA_OP_NE "strata::ne"
#define STRATA_OP_NEG "strata::neg"
#define STRATA_OP_POLAR "strata::polar"
#define STRATA_OP_POW "strata::pow"
#define STRATA_OP_PROD "strata::prod"
#define STRATA_OP_RANDOM_NORMAL "strata::random_normal"
#define STRATA_OP_RANDOM_UNIFORM "strata::random_uniform"
#define STRATA_OP_REAL "strata::real"
#define STRATA_OP_RECIPROCAL "strata::reciprocal"
#define STRATA_OP_RELU "strata::relu"
#define STRATA_OP_RELU_BACKWARD "strata::relu_backward"
#define STRATA_OP_ROUND "strata::round"
#define STRATA_OP_RSQRT "strata::rsqrt"
#define STRATA_OP_SCATTER_ADD "strata::scatter_add"
#define STRATA_OP_SGD_MOMENTUM_STEP "strata::sgd_momentum_step"
#define STRATA_OP_SGD_STEP "strata::sgd_step"
#define STRATA_OP_SIGMOID "strata::sigmoid"
#define STRATA_OP_SIGMOID_BACKWARD "strata::sigmoid_backward"
#define STRATA_OP_SIGN "strata::sign"
#define STRATA_OP_SILU "strata::silu"
#define STRATA_OP_SIN "strata::sin"
#define STRATA_OP_SOFTMAX "strata::softmax"
#define STRATA_OP_SOFTMAX_BACKWARD "strata::softmax_backward"
#define STRATA_OP_SQRT "strata::sqrt"
#define STRATA_OP_SUB "strata::sub"
#define STRATA_OP_SUM "strata::sum"
#define STRATA_OP_TANH "strata::tanh"
#define STRATA_OP_TANH_BACKWARD "strata::tanh_backward"
#define STRATA_OP_WHERE "strata::where"

/* Every op above is at contract version 1. */
#define STRATA_OP_VERSION 1

/* What an op is (docs/ops.md, "Tags and attributes"): bits of the tags
 * column of STRATA_OP_LIST. */
#define STRATA_OP_TAG_POINTWISE (1u << 0)
#define STRATA_OP_TAG_BROADCASTING (1u << 1)
#define STRATA_OP_TAG_REDUCTION (1u << 2)
#define STRATA_OP_TAG_VIEW (1u << 3)
#define STRATA_OP_TAG_DATA_MOVEMENT (1u << 4)
#define STRATA_OP_TAG_LINALG (1u << 5)
#define STRATA_OP_TAG_INDEXING (1u << 6)
#define STRATA_OP_TAG_RANDOM (1u << 7)
#define STRATA_OP_TAG_CREATION (1u << 8)
#define STRATA_OP_TAG_OPTIMIZER (1u << 9)
#define STRATA_OP_TAG_ALONG_DIM (1u << 10)
#define STRATA_OP_TAG_BACKWARD (1u << 11)
#define STRATA_OP_TAG_PREDICATE (1u << 12)
#define STRATA_OP_TAG_COMPLEX (1u << 13)
#define STRATA_OP_TAG_AUTOGRAD (1u << 14)

/* Every op above as X(MACRO_SUFFIX, name, inputs, outputs, tags); -1 is
 * any number (the op's rule checks it). A backend's tables and tests
 * can iterate it:
 *   #define X(id, name, n_in, n_out, tags) ...
 *   STRATA_OP_LIST(X)
 *   #undef X */
#define STRATA_OP_LIST(X) \
  X(ABS, "strata::abs", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(ADAM_STEP, "strata::adam_step", 4, 3, STRATA_OP_TAG_OPTIMIZER) \
  X(ADD, "strata::add", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING) \
  X(AMP_UNSCALE, "strata::amp_unscale", 2, 2, STRATA_OP_TAG_OPTIMIZER) \
  X(ANGLE, "strata::angle", 1, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_COMPLEX) \
  X(ARGMAX, "strata::argmax", 1, 1, STRATA_OP_TAG_REDUCTION) \
  X(ARGMIN, "strata::argmin", 1, 1, STRATA_OP_TAG_REDUCTION) \
  X(ATAN, "strata::atan", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(BERNOULLI, "strata::bernoulli", 0, 1, STRATA_OP_TAG_RANDOM | STRATA_OP_TAG_CREATION) \
  X(CAST, "strata::cast", 1, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_DATA_MOVEMENT) \
  X(CEIL, "strata::ceil", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(COMPLEX, "strata::complex", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING | STRATA_OP_TAG_COMPLEX) \
  X(CONJ, "strata::conj", 1, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_COMPLEX) \
  X(COPY, "strata::copy", 1, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_DATA_MOVEMENT) \
  X(COS, "strata::cos", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(DIV, "strata::div", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING) \
  X(EQ, "strata::eq", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING | STRATA_OP_TAG_PREDICATE) \
  X(ERF, "strata::erf", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(EXP, "strata::exp", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(EXPM1, "strata::expm1", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(FILL, "strata::fill", 0, 1, STRATA_OP_TAG_CREATION) \
  X(FLOOR, "strata::floor", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(FUSED_ELEMENTWISE, "strata::fused_elementwise", -1, -1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING) \
  X(GATHER, "strata::gather", 2, 1, STRATA_OP_TAG_INDEXING | STRATA_OP_TAG_ALONG_DIM) \
  X(GE, "strata::ge", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING | STRATA_OP_TAG_PREDICATE) \
  X(GELU, "strata::gelu", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(GELU_BACKWARD, "strata::gelu_backward", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BACKWARD) \
  X(GT, "strata::gt", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING | STRATA_OP_TAG_PREDICATE) \
  X(IMAG, "strata::imag", 1, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_COMPLEX) \
  X(INDEX_SELECT, "strata::index_select", 2, 1, STRATA_OP_TAG_INDEXING | STRATA_OP_TAG_ALONG_DIM) \
  X(LE, "strata::le", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING | STRATA_OP_TAG_PREDICATE) \
  X(LINEAR, "strata::linear", 3, 1, STRATA_OP_TAG_LINALG) \
  X(LOG, "strata::log", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(LOG1P, "strata::log1p", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(LOG_SOFTMAX, "strata::log_softmax", 1, 1, STRATA_OP_TAG_ALONG_DIM) \
  X(LOG_SOFTMAX_BACKWARD, "strata::log_softmax_backward", 2, 1, STRATA_OP_TAG_ALONG_DIM | STRATA_OP_TAG_BACKWARD) \
  X(LOGICAL_AND, "strata::logical_and", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING | STRATA_OP_TAG_PREDICATE) \
  X(LOGICAL_NOT, "strata::logical_not", 1, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_PREDICATE) \
  X(LOGICAL_OR, "strata::logical_or", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING | STRATA_OP_TAG_PREDICATE) \
  X(LT, "strata::lt", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING | STRATA_OP_TAG_PREDICATE) \
  X(MATMUL, "strata::matmul", 2, 1, STRATA_OP_TAG_LINALG) \
  X(MAX, "strata::max", 1, 1, STRATA_OP_TAG_REDUCTION) \
  X(MAXIMUM, "strata::maximum", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING) \
  X(MEAN, "strata::mean", 1, 1, STRATA_OP_TAG_REDUCTION) \
  X(MIN, "strata::min", 1, 1, STRATA_OP_TAG_REDUCTION) \
  X(MINIMUM, "strata::minimum", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING) \
  X(MUL, "strata::mul", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING) \
  X(NE, "strata::ne", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING | STRATA_OP_TAG_PREDICATE) \
  X(NEG, "strata::neg", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(POLAR, "strata::polar", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING | STRATA_OP_TAG_COMPLEX) \
  X(POW, "strata::pow", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING) \
  X(PROD, "strata::prod", 1, 1, STRATA_OP_TAG_REDUCTION) \
  X(RANDOM_NORMAL, "strata::random_normal", 0, 1, STRATA_OP_TAG_RANDOM | STRATA_OP_TAG_CREATION) \
  X(RANDOM_UNIFORM, "strata::random_uniform", 0, 1, STRATA_OP_TAG_RANDOM | STRATA_OP_TAG_CREATION) \
  X(REAL, "strata::real", 1, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_COMPLEX) \
  X(RECIPROCAL, "strata::reciprocal", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(RELU, "strata::relu", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(RELU_BACKWARD, "strata::relu_backward", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BACKWARD) \
  X(ROUND, "strata::round", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(RSQRT, "strata::rsqrt", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(SCATTER_ADD, "strata::scatter_add", 3, 1, STRATA_OP_TAG_INDEXING | STRATA_OP_TAG_ALONG_DIM) \
  X(SGD_MOMENTUM_STEP, "strata::sgd_momentum_step", 3, 2, STRATA_OP_TAG_OPTIMIZER) \
  X(SGD_STEP, "strata::sgd_step", 2, 1, STRATA_OP_TAG_OPTIMIZER) \
  X(SIGMOID, "strata::sigmoid", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(SIGMOID_BACKWARD, "strata::sigmoid_backward", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BACKWARD) \
  X(SIGN, "strata::sign", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(SILU, "strata::silu", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(SIN, "strata::sin", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(SOFTMAX, "strata::softmax", 1, 1, STRATA_OP_TAG_ALONG_DIM) \
  X(SOFTMAX_BACKWARD, "strata::softmax_backward", 2, 1, STRATA_OP_TAG_ALONG_DIM | STRATA_OP_TAG_BACKWARD) \
  X(SQRT, "strata::sqrt", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(SUB, "strata::sub", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING) \
  X(SUM, "strata::sum", 1, 1, STRATA_OP_TAG_REDUCTION) \
  X(TANH, "strata::tanh", 1, 1, STRATA_OP_TAG_POINTWISE) \
  X(TANH_BACKWARD, "strata::tanh_backward", 2, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BACKWARD) \
  X(WHERE, "strata::where", 3, 1, STRATA_OP_TAG_POINTWISE | STRATA_OP_TAG_BROADCASTING)

/* The attribute names the ops above take, each once; which op takes
 * which, of which kind, is in docs/ops.md and `strata ops`. */
#define STRATA_ATTR_NAME_ACTIVATION "activation"
#define STRATA_ATTR_NAME_BETA1 "beta1"
#define STRATA_ATTR_NAME_BETA2 "beta2"
#define STRATA_ATTR_NAME_DAMPENING "dampening"
#define STRATA_ATTR_NAME_DECAY "decay"
#define STRATA_ATTR_NAME_DECAY_MODE "decay_mode"
#define STRATA_ATTR_NAME_DIM "dim"
#define STRATA_ATTR_NAME_DIMS "dims"
#define STRATA_ATTR_NAME_DTYPE "dtype"
#define STRATA_ATTR_NAME_EPS "eps"
#define STRATA_ATTR_NAME_FIRST "first"
#define STRATA_ATTR_NAME_INV_SQRT_BIAS2 "inv_sqrt_bias2"
#define STRATA_ATTR_NAME_LR "lr"
#define STRATA_ATTR_NAME_MOMENTUM "momentum"
#define STRATA_ATTR_NAME_NESTEROV "nesterov"
#define STRATA_ATTR_NAME_OFFSET "offset"
#define STRATA_ATTR_NAME_P "p"
#define STRATA_ATTR_NAME_PROGRAM "program"
#define STRATA_ATTR_NAME_SEED "seed"
#define STRATA_ATTR_NAME_STEP_SIZE "step_size"
#define STRATA_ATTR_NAME_VALUE "value"
#define STRATA_ATTR_NAME_WEIGHT_DECAY "weight_decay"

#endif /* STRATA_OPS_H */
