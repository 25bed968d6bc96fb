// float_ops.glsl — the floating-point unary and binary ops, one definition
// for eltwise.comp (where `op` is its specialization constant, folded by the
// driver) and fused.comp (where it is a statement's opcode, read at run
// time), so that a fused program computes what the ops compute one by one.
// Results are `precise`: no contraction into fused multiply-adds that one
// shader might do and the other not.
#ifndef STRATA_FLOAT_OPS_GLSL
#define STRATA_FLOAT_OPS_GLSL

float unary_float(int op, float x) {
  precise float r;
  switch (op) {
    case OP_NEG: r = -x; break;
    case OP_ABS: r = abs(x); break;
    case OP_SIGN: r = x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0); break;
    case OP_EXP: r = exp(x); break;
    case OP_LOG: r = log(x); break;
    case OP_LOG1P: r = log1p_f(x); break;
    case OP_EXPM1: r = expm1_f(x); break;
    case OP_SQRT: r = sqrt(x); break;
    case OP_RSQRT: r = 1.0 / sqrt(x); break;
    case OP_SIN: r = sin(x); break;
    case OP_COS: r = cos(x); break;
    case OP_ATAN: r = atan(x); break;
    case OP_TANH: r = tanh_f(x); break;
    case OP_SIGMOID: r = sigmoid_f(x); break;
    case OP_RELU: r = x > 0.0 ? x : 0.0; break;
    case OP_ERF: r = erf_f(x); break;
    case OP_FLOOR: r = floor(x); break;
    case OP_CEIL: r = ceil(x); break;
    case OP_ROUND: r = roundEven(x); break;
    case OP_RECIPROCAL: r = 1.0 / x; break;
    case OP_GELU: r = x * normal_cdf(x); break;
    case OP_SILU: r = x * sigmoid_f(x); break;
    default: r = x; break;
  }
  return r;
}

float binary_float(int op, float a, float b) {
  precise float r;
  switch (op) {
    case OP_ADD: r = a + b; break;
    case OP_SUB: r = a - b; break;
    case OP_MUL: r = a * b; break;
    case OP_DIV: r = a / b; break;
    case OP_POW: r = pow_f(a, b); break;
    case OP_MAXIMUM: r = isnan(a) || isnan(b) ? nan_value() : max(a, b); break;
    case OP_MINIMUM: r = isnan(a) || isnan(b) ? nan_value() : min(a, b); break;
    case OP_RELU_BACKWARD: r = b > 0.0 ? a : 0.0; break;
    case OP_SIGMOID_BACKWARD: r = a * b * (1.0 - b); break;
    case OP_TANH_BACKWARD: r = a * (1.0 - b * b); break;
    case OP_GELU_BACKWARD: r = a * (normal_cdf(b) + b * normal_pdf(b)); break;
    default: r = a; break;
  }
  return r;
}

#endif
