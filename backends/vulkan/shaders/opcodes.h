/* opcodes.h — operation codes shared by the host code and the GLSL shaders
 * (included by both, so plain #defines only). Each code is the value of a
 * shader's specialization constant 0, so one SPIR-V module serves many ops
 * and the driver folds the switch away when it builds the pipeline. */
#ifndef STRATA_VULKAN_OPCODES_H
#define STRATA_VULKAN_OPCODES_H

/* Element kinds: how a dtype is stored and computed in the shaders. */
#define KIND_F32 0
#define KIND_F16 1
#define KIND_I32 2
#define KIND_I64 3
#define KIND_BOOL 4

/* eltwise.comp, one input: unary ops (OP_COPY is also every cast). */
#define OP_COPY 0
#define OP_NEG 1
#define OP_ABS 2
#define OP_SIGN 3
#define OP_EXP 4
#define OP_LOG 5
#define OP_LOG1P 6
#define OP_EXPM1 7
#define OP_SQRT 8
#define OP_RSQRT 9
#define OP_SIN 10
#define OP_COS 11
#define OP_TANH 12
#define OP_SIGMOID 13
#define OP_RELU 14
#define OP_ERF 15
#define OP_FLOOR 16
#define OP_CEIL 17
#define OP_ROUND 18
#define OP_RECIPROCAL 19
#define OP_GELU 20
#define OP_SILU 21
#define OP_LOGICAL_NOT 22

/* eltwise.comp, two inputs. */
#define OP_ADD 30
#define OP_SUB 31
#define OP_MUL 32
#define OP_DIV 33
#define OP_POW 34
#define OP_MAXIMUM 35
#define OP_MINIMUM 36
#define OP_LOGICAL_AND 37
#define OP_LOGICAL_OR 38
#define OP_EQ 39
#define OP_NE 40
#define OP_LT 41
#define OP_LE 42
#define OP_GT 43
#define OP_GE 44
#define OP_RELU_BACKWARD 45
#define OP_SIGMOID_BACKWARD 46
#define OP_TANH_BACKWARD 47
#define OP_GELU_BACKWARD 48

/* eltwise.comp, three inputs / none. */
#define OP_WHERE 60
#define OP_FILL 61

/* reduce.comp */
#define RED_SUM 0
#define RED_PROD 1
#define RED_MAX 2
#define RED_MIN 3
#define RED_ARGMAX 4
#define RED_ARGMIN 5

/* softmax.comp */
#define SM_SOFTMAX 0
#define SM_LOG_SOFTMAX 1
#define SM_SOFTMAX_BACKWARD 2
#define SM_LOG_SOFTMAX_BACKWARD 3

/* index.comp */
#define IX_INDEX_SELECT 0
#define IX_GATHER 1
#define IX_SCATTER_ADD 2

/* random.comp */
#define RNG_UNIFORM 0
#define RNG_NORMAL 1
#define RNG_BERNOULLI 2

/* Deferred failures a shader records (common.glsl, record_failure): the
 * kernel returns OK and the next synchronisation point reports
 * STRATA_ERROR_DEFERRED (README.md, "Deferred errors"). */
#define ERR_INDEX_RANGE 1
#define ERR_DIV_ZERO 2

/* Work-group sizes the host dispatches with. */
#define ELTWISE_GROUP 256
#define REDUCE_GROUP 256
#define SOFTMAX_GROUP 128
#define INDEX_GROUP 256
#define RANDOM_GROUP 256
#define MATMUL_TILE 64
#define MATMUL_TILE_K 16

#define MAX_RANK 8

#endif
