/* qmoe C ABI (libqmoe_c.so): load checkpoints, build prepared MoE layers, route, align and run
 * the fused MoE forward on raw pointers, for engines and language bindings (python/ uses it).
 * Plain C99. Tensors are described by qmoe_tensor_t: a pointer + dtype + shape + device, dense
 * row-major. Every function returns a qmoe_status_t; on failure the one-line message (naming the
 * argument / tensor / layer and what was expected) is in qmoe_last_error(), per thread. No C++
 * exception ever crosses this boundary. CUDA tensors run on the caller's stream (a cudaStream_t
 * passed as void*, NULL = the legacy default stream).
 * Compatibility: QMOE_C_API_VERSION changes whenever a struct layout or an enum value changes. */
#ifndef QMOE_C_API_H_
#define QMOE_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define QMOE_API __declspec(dllexport)
#else
#define QMOE_API __attribute__((visibility("default")))
#endif

#define QMOE_C_API_VERSION 1

/* The API version the library was built with (compare with QMOE_C_API_VERSION at run time). */
QMOE_API int32_t qmoe_c_api_version(void);
/* The library version, "0.1.0". Static storage. */
QMOE_API const char* qmoe_version(void);

/* ---- status and errors ---------------------------------------------------------------------- */

typedef enum qmoe_status {
  QMOE_OK = 0,
  QMOE_ERR_BAD_INPUT = 1,     /* malformed file, wrong shape / dtype / device, bad argument */
  QMOE_ERR_UNSUPPORTED = 2,   /* valid request that qmoe (or the chosen backend) does not run */
  QMOE_ERR_VERIFY_FAILED = 3, /* a numeric check failed */
  QMOE_ERR_INTERNAL = 4,      /* a bug in qmoe, out of memory, or a CUDA runtime failure */
} qmoe_status_t;

/* Message of the last failed call on this thread ("" when the last call succeeded). Valid until
 * the next qmoe call on the same thread. */
QMOE_API const char* qmoe_last_error(void);
/* Copies that message into buf (always NUL-terminated when cap > 0); returns its full length. */
QMOE_API size_t qmoe_last_error_copy(char* buf, size_t cap);
/* "ok", "bad input", "unsupported", "verify failed", "internal". */
QMOE_API const char* qmoe_status_name(qmoe_status_t s);

/* ---- tensors -------------------------------------------------------------------------------- */

/* Element types; the same values as qmoe::DType. Sub-byte data (int4, e2m1) is QMOE_DTYPE_U8. */
typedef enum qmoe_dtype {
  QMOE_DTYPE_F64 = 0,
  QMOE_DTYPE_F32 = 1,
  QMOE_DTYPE_F16 = 2,
  QMOE_DTYPE_BF16 = 3,
  QMOE_DTYPE_F8E4M3 = 4,
  QMOE_DTYPE_F8E5M2 = 5,
  QMOE_DTYPE_E8M0 = 6,
  QMOE_DTYPE_I8 = 7,
  QMOE_DTYPE_U8 = 8,
  QMOE_DTYPE_I16 = 9,
  QMOE_DTYPE_U16 = 10,
  QMOE_DTYPE_I32 = 11,
  QMOE_DTYPE_U32 = 12,
  QMOE_DTYPE_I64 = 13,
  QMOE_DTYPE_U64 = 14,
  QMOE_DTYPE_BOOL = 15,
} qmoe_dtype_t;

/* Device kinds; the same values as DLPack's DLDeviceType. */
typedef enum qmoe_device {
  QMOE_DEVICE_CPU = 1,
  QMOE_DEVICE_CUDA = 2,
} qmoe_device_t;

#define QMOE_MAX_DIMS 8

/* A dense row-major tensor the caller owns. data == NULL means "absent" (optional arguments).
 * Output tensors are written in place and must already have the documented shape and dtype. */
typedef struct qmoe_tensor {
  void* data;
  int32_t dtype;     /* qmoe_dtype_t */
  int32_t ndim;      /* 0 .. QMOE_MAX_DIMS */
  int64_t shape[QMOE_MAX_DIMS];
  int32_t device;    /* qmoe_device_t; 0 is read as QMOE_DEVICE_CPU */
  int32_t device_id; /* CUDA ordinal */
} qmoe_tensor_t;

/* Fills *t: host tensor of `ndim` dims. Convenience for C callers. */
QMOE_API void qmoe_tensor_init(qmoe_tensor_t* t, void* data, qmoe_dtype_t dtype, int32_t ndim,
                               const int64_t* shape);

/* ---- routing ------------------------------------------------------------------------------ */

typedef enum qmoe_router_kind {
  QMOE_ROUTER_SOFTMAX_TOPK = 0, /* softmax over E, top-k, optional renormalize (Mixtral, Qwen3) */
  QMOE_ROUTER_SIGMOID_TOPK = 1, /* sigmoid per expert, top-k, optional renormalize */
  QMOE_ROUTER_TOPK_SOFTMAX = 2, /* top-k on logits, softmax over the chosen k (gpt-oss) */
  QMOE_ROUTER_LLAMA4 = 3,       /* top-1, sigmoid(logit), weight applied to the expert input */
  QMOE_ROUTER_GROUPED = 4,      /* DeepSeek-V3 noaux_tc grouped top-k */
} qmoe_router_kind_t;

typedef struct qmoe_router_config {
  int32_t kind; /* qmoe_router_kind_t */
  int32_t top_k;
  int32_t renormalize;      /* bool */
  int32_t grouped_sigmoid;  /* bool, QMOE_ROUTER_GROUPED: sigmoid (1) or softmax (0) scores */
  int32_t num_groups;       /* QMOE_ROUTER_GROUPED: n_group */
  int32_t topk_group;       /* QMOE_ROUTER_GROUPED: topk_group */
  float routed_scaling_factor;
  int32_t apply_router_weight_on_input; /* bool (Llama 4) */
} qmoe_router_config_t;

/* Defaults: softmax top-1, no renormalize, sigmoid groups 1/1, scaling 1, weight on output. */
QMOE_API void qmoe_router_config_init(qmoe_router_config_t* cfg);

/* logits [M, E] F32/BF16/F16; bias [E] F32 or absent (QMOE_ROUTER_GROUPED);
 * topk_weights [M, k] F32 and topk_ids [M, k] I32 are written. All on one device; CUDA tensors
 * are routed on the host through copies ordered on `stream` (the call synchronizes it). */
QMOE_API qmoe_status_t qmoe_route(const qmoe_tensor_t* logits, const qmoe_router_config_t* cfg,
                                  const qmoe_tensor_t* bias, const qmoe_tensor_t* topk_weights,
                                  const qmoe_tensor_t* topk_ids, void* stream);

/* Output sizes of qmoe_align_block_size for `numel` = M * top_k ids:
 * sorted_token_ids capacity = round_up(numel + E * (B - 1), B), num_blocks = capacity / B. */
QMOE_API qmoe_status_t qmoe_align_block_size_sizes(int64_t numel, int32_t num_experts, int32_t block_size,
                                                   int64_t* sorted_capacity, int64_t* num_blocks);

/* moe_align_block_size (design.md): topk_ids I32 (any shape, numel ids in [0, num_experts));
 * expert_map I32 [num_experts] (global -> local id or -1) or absent;
 * sorted_token_ids I32 [sorted_capacity] (padding = the sentinel numel), expert_ids I32
 * [num_blocks] (local id, -1 = not on this rank or unused), num_tokens_post_padded I32 [1].
 * CUDA tensors are handled like qmoe_route's. */
QMOE_API qmoe_status_t qmoe_align_block_size(const qmoe_tensor_t* topk_ids, int32_t num_experts,
                                             int32_t block_size, const qmoe_tensor_t* expert_map,
                                             const qmoe_tensor_t* sorted_token_ids,
                                             const qmoe_tensor_t* expert_ids,
                                             const qmoe_tensor_t* num_tokens_post_padded, void* stream);

/* ---- expert weights and layers ------------------------------------------------------------ */

/* Same values as qmoe::SchemeKind. */
typedef enum qmoe_scheme_kind {
  QMOE_SCHEME_UNQUANTIZED = 0,
  QMOE_SCHEME_WNA16 = 1,
  QMOE_SCHEME_FP8_W8A8 = 2,
  QMOE_SCHEME_FP8_A16 = 3,
  QMOE_SCHEME_INT8_W8A8 = 4,
  QMOE_SCHEME_W4A8_FP8 = 5,
  QMOE_SCHEME_W4A8_INT8 = 6,
  QMOE_SCHEME_NVFP4 = 7,
  QMOE_SCHEME_NVFP4_A16 = 8,
  QMOE_SCHEME_MXFP4_A16 = 9,
} qmoe_scheme_kind_t;

/* Same values as qmoe::ActQuant; QMOE_ACT_INFER picks the scheme's usual one (below). */
typedef enum qmoe_act_quant {
  QMOE_ACT_INFER = -1,
  QMOE_ACT_NONE = 0,
  QMOE_ACT_FP8_TENSOR = 1,
  QMOE_ACT_FP8_TOKEN = 2,
  QMOE_ACT_FP8_GROUP128 = 3,
  QMOE_ACT_INT8_TOKEN = 4,
  QMOE_ACT_NVFP4 = 5,
} qmoe_act_quant_t;

/* Same values as qmoe::Strategy; QMOE_STRATEGY_INFER reads it from the scale shapes. */
typedef enum qmoe_strategy {
  QMOE_STRATEGY_INFER = -1,
  QMOE_STRATEGY_TENSOR = 0,
  QMOE_STRATEGY_CHANNEL = 1,
  QMOE_STRATEGY_GROUP = 2,
  QMOE_STRATEGY_BLOCK = 3,
} qmoe_strategy_t;

typedef enum qmoe_activation {
  QMOE_ACTIVATION_SILU_MUL = 0,
  QMOE_ACTIVATION_GELU_MUL = 1,
  QMOE_ACTIVATION_SWIGLU_OAI = 2,
} qmoe_activation_t;

typedef enum qmoe_backend {
  QMOE_BACKEND_REFERENCE = 0, /* exact CPU reference (slow; the test oracle) */
  QMOE_BACKEND_CPU = 1,       /* multithreaded SIMD CPU kernels */
  QMOE_BACKEND_CUDA = 2,      /* CUDA kernels */
} qmoe_backend_t;

/* One projection's tensors in the canonical encoding of include/qmoe/moe.h (absent = data NULL). */
typedef struct qmoe_proj_tensors {
  qmoe_tensor_t weight;       /* w13: [E, 2I, H(/2)]   w2: [E, H, I(/2)] */
  qmoe_tensor_t scale;        /* group [E, N, ceil(K/G)], channel [E, N, 1], tensor [E, S], block */
  qmoe_tensor_t zero_point;   /* U8 [E, N, K/G] (asym int) */
  qmoe_tensor_t g_idx;        /* I32 [E, K] (act-order) */
  qmoe_tensor_t global_scale; /* F32 [E, S] NVFP4 weight multiplier */
  qmoe_tensor_t input_scale;  /* F32 [E, S] static activation scale / NVFP4 input multiplier */
  qmoe_tensor_t bias;         /* F32/BF16 [E, N] */
} qmoe_proj_tensors_t;

/* Routed (or shared) expert weights. The fields set to -1 / 0 below are inferred:
 *   weight_bits 0: 16 unquantized, 8 fp8 / int8, 4 fp4 / W4A8, WNA16 from the weight width
 *                  (K/2 columns -> 4, K -> 8);
 *   weight_strategy -1: block when block_n > 0, group when group_size > 0, channel when the
 *                  scale is [E, N, 1], tensor when it is [E, S];
 *   weight_symmetric -1: asymmetric iff a zero point is given;
 *   act_quant -1: FP8_W8A8 -> FP8_TENSOR with input_scale, FP8_GROUP128 with block weights, else
 *                  FP8_TOKEN; INT8_W8A8, W4A8_INT8 -> INT8_TOKEN; W4A8_FP8 -> FP8_TOKEN;
 *                  NVFP4 -> NVFP4; others NONE. */
typedef struct qmoe_expert_weights {
  int32_t scheme;           /* qmoe_scheme_kind_t */
  int32_t act_quant;        /* qmoe_act_quant_t */
  int32_t weight_bits;
  int32_t weight_strategy;  /* qmoe_strategy_t */
  int32_t weight_symmetric; /* 1, 0, or -1 */
  int32_t num_experts;      /* E of these tensors (local experts) */
  int32_t hidden;           /* H */
  int32_t intermediate;     /* I */
  int32_t group_size;       /* weight group along K, 0 = none */
  int32_t block_n, block_k; /* fp8 block, 0 = none */
  int32_t act_dtype;        /* qmoe_dtype_t of x and y: BF16, F16 or F32 */
  qmoe_proj_tensors_t w13;
  qmoe_proj_tensors_t w2;
} qmoe_expert_weights_t;

/* Zeroes *w and sets the inferred fields to "infer", scheme UNQUANTIZED, act_dtype BF16. */
QMOE_API void qmoe_expert_weights_init(qmoe_expert_weights_t* w);

typedef struct qmoe_layer_desc {
  qmoe_expert_weights_t experts;
  int32_t num_experts_global;    /* router width E; 0 = experts.num_experts */
  qmoe_router_config_t router;
  int32_t activation;            /* qmoe_activation_t */
  const int32_t* expert_map;     /* [num_experts_global] global -> local or -1; NULL = identity */
  const qmoe_expert_weights_t* shared_expert; /* E = 1, or NULL */
  qmoe_tensor_t router_bias;     /* [E] F32 or absent */
  int32_t backend;               /* qmoe_backend_t */
  /* 0: the layer copies every weight tensor (the caller may free its buffers after the call);
   * 1: the layer borrows them, and the caller keeps them alive and unchanged until
   *    qmoe_layer_free. Weights must be host tensors in either case for this version. */
  int32_t borrow_weights;
} qmoe_layer_desc_t;

/* Zeroes *d, with qmoe_expert_weights_init / qmoe_router_config_init defaults, backend CPU. */
QMOE_API void qmoe_layer_desc_init(qmoe_layer_desc_t* d);

/* A prepared MoE layer for one backend. Calls on one layer are serialized by the layer; distinct
 * layers may run concurrently. */
typedef struct qmoe_layer qmoe_layer_t;

/* Validates the weights (ExpertWeights::validate), asks the backend whether it runs this scheme
 * (QMOE_ERR_UNSUPPORTED with the reason otherwise) and prepares it. */
QMOE_API qmoe_status_t qmoe_layer_create(const qmoe_layer_desc_t* desc, qmoe_layer_t** out);
QMOE_API void qmoe_layer_free(qmoe_layer_t* layer); /* NULL is a no-op */

typedef struct qmoe_layer_props {
  int32_t backend;            /* qmoe_backend_t */
  int32_t num_experts;        /* local E */
  int32_t num_experts_global; /* router width */
  int32_t hidden;
  int32_t intermediate;
  int32_t top_k;
  int32_t act_dtype;          /* qmoe_dtype_t of x and y */
  int32_t scheme;             /* qmoe_scheme_kind_t */
  const char* scheme_key;     /* "wna16/int4/g128/sym", ...; valid while the layer lives */
  const char* method_name;    /* kernel family key; valid while the layer lives */
} qmoe_layer_props_t;

QMOE_API qmoe_status_t qmoe_layer_get_props(const qmoe_layer_t* layer, qmoe_layer_props_t* out);

/* x [M, H] act_dtype, router_logits [M, E_global] F32 -> y [M, H] act_dtype (written).
 * Host tensors for the reference and CPU backends; for CUDA, device tensors of one device, run
 * on `stream`. */
QMOE_API qmoe_status_t qmoe_layer_forward(qmoe_layer_t* layer, const qmoe_tensor_t* x,
                                          const qmoe_tensor_t* router_logits, const qmoe_tensor_t* y,
                                          void* stream);
/* The same with routing given: topk_weights F32 [M, k], topk_ids I32 [M, k] (global ids in
 * [0, E_global); host ids are checked, ids in device memory are not: that would cost a sync. An
 * out-of-range id in device memory is undefined behaviour: on an H200 it faulted the CUDA context
 * (Xid 13 in align's shared-memory counters). */
QMOE_API qmoe_status_t qmoe_layer_forward_routed(qmoe_layer_t* layer, const qmoe_tensor_t* x,
                                                 const qmoe_tensor_t* topk_weights,
                                                 const qmoe_tensor_t* topk_ids, const qmoe_tensor_t* y,
                                                 void* stream);

/* vLLM fused_experts as one call: builds a layer from desc (weights borrowed for the call),
 * runs forward_routed, frees it. Pays the backend's prepare on every call: engines that call it
 * per step should create the layer once with qmoe_layer_create. */
QMOE_API qmoe_status_t qmoe_fused_experts(const qmoe_layer_desc_t* desc, const qmoe_tensor_t* x,
                                          const qmoe_tensor_t* topk_weights, const qmoe_tensor_t* topk_ids,
                                          const qmoe_tensor_t* y, void* stream);

/* ---- checkpoints ---------------------------------------------------------------------------- */

typedef struct qmoe_load_options {
  int32_t tp_rank, tp_size; /* splits I */
  int32_t ep_rank, ep_size; /* splits E */
  const int32_t* only_layers; /* decoder layer indices to load, or NULL = every MoE layer */
  int32_t num_only_layers;
} qmoe_load_options_t;

QMOE_API void qmoe_load_options_init(qmoe_load_options_t* o); /* rank 0 of 1 / 1, all layers */

/* A loaded model directory: its MoE layers in canonical form (weights stay mmap'ed). */
typedef struct qmoe_checkpoint qmoe_checkpoint_t;

/* opts may be NULL (defaults). Nothing is half-loaded: on error *out stays NULL. */
QMOE_API qmoe_status_t qmoe_checkpoint_load(const char* dir, const qmoe_load_options_t* opts,
                                            qmoe_checkpoint_t** out);
QMOE_API void qmoe_checkpoint_free(qmoe_checkpoint_t* ckpt); /* NULL is a no-op */

QMOE_API qmoe_status_t qmoe_checkpoint_num_layers(const qmoe_checkpoint_t* ckpt, int32_t* out);

/* What `qmoe inspect` reports, as a JSON object: {"dir", "arch", "quant_method", "layers": [{"layer",
 * "prefix", "scheme", "scheme_kind", "act_quant", "format_source", "global_scale_convention",
 * "num_experts", "num_experts_global", "hidden", "intermediate", "group_size", "block",
 * "act_dtype", "activation", "router": {...}, "shared_expert", "tensors": {name: {"dtype",
 * "shape"}}}]}. The string is owned by the checkpoint and valid until it is freed. */
QMOE_API qmoe_status_t qmoe_checkpoint_info_json(const qmoe_checkpoint_t* ckpt, const char** out);

/* A read-only host view of one tensor of MoE layer `index` (0-based position in "layers"):
 * name is "router_weight", "router_bias", "w13.<field>", "w2.<field>", "shared.w13.<field>" or
 * "shared.w2.<field>", with <field> one of weight, scale, zero_point, g_idx, global_scale,
 * input_scale, bias. The data stays valid while the checkpoint lives. An absent tensor is
 * QMOE_ERR_BAD_INPUT naming what the layer has. */
QMOE_API qmoe_status_t qmoe_checkpoint_tensor(const qmoe_checkpoint_t* ckpt, int32_t index, const char* name,
                                              qmoe_tensor_t* out);

/* Builds the prepared layer of MoE layer `index` for a backend. The layer shares the mapped weights
 * and stays valid after qmoe_checkpoint_free. */
QMOE_API qmoe_status_t qmoe_checkpoint_layer_create(const qmoe_checkpoint_t* ckpt, int32_t index,
                                                    qmoe_backend_t backend, qmoe_layer_t** out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* QMOE_C_API_H_ */
