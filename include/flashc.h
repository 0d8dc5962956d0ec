/*
 * flashc — exact attention (FlashAttention forward and backward) in C.
 *
 * One public header. Every name is prefixed `flashc_` / `FLASHC_`.
 *
 * Conventions (they follow flash_attn 2.x):
 *   batched:  q (b, sq, h, d)   k (b, sk, hk, d)   v (b, sk, hk, dv)
 *             out (b, sq, h, dv)   lse (b, h, sq)
 *   varlen:   q (total_q, h, d)   k (total_k, hk, d)   v (total_k, hk, dv)
 *             out (total_q, h, dv)   lse (h, total_q)
 *             cu_seqlens_q / cu_seqlens_k: int32 (b + 1), non-decreasing
 *   s_dmask:  (b, h, round128(sq), round128(sk)) in the input dtype
 *             (varlen: round128(max_seqlen_q), round128(max_seqlen_k))
 *   paged KV: k (num_blocks, block_size, hk, d)   v (num_blocks, block_size, hk, dv)
 *             block_table: int32 (b, max_blocks); key j of sequence i is
 *             row j % block_size of block block_table[i][j / block_size]
 *   KV cache: flashc_attention_kvcache below
 *
 * Tensors are descriptors over caller-owned memory: shape and strides in
 * elements, so views (three slices of a packed qkv) need no copies. Only the
 * head dimension (the last one) of q, k, v, out, dout, dq, dk, dv must be
 * contiguous. The library never allocates on the hot path: the backward
 * workspace is provided by the caller, sized by
 * flashc_attention_backward_workspace_size().
 *
 * Every entry point returns a flashc_status. On error nothing is written and
 * flashc_last_error_message() (thread-local) names the offending argument.
 * The library keeps no global mutable state beyond facts about the machine
 * that it learns once (the CPU's SIMD variant, CUDA devices' capabilities),
 * and never exits or aborts.
 */
#ifndef FLASHC_H
#define FLASHC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#  define FLASHC_API __declspec(dllexport)
#elif defined(__GNUC__)
#  define FLASHC_API __attribute__((visibility("default")))
#else
#  define FLASHC_API
#endif

#define FLASHC_VERSION_MAJOR 0
#define FLASHC_VERSION_MINOR 1
#define FLASHC_VERSION_PATCH 0

/* Largest head dimension (q/k and v) accepted. */
#define FLASHC_MAX_HEAD_DIM 256
/* Largest tensor rank a descriptor holds. */
#define FLASHC_MAX_RANK 4
/* S_dmask rows and columns are rounded up to a multiple of this. */
#define FLASHC_SDMASK_ROUND 128

/* ------------------------------------------------------------------------ */
/* Status                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum flashc_status {
    FLASHC_SUCCESS = 0,
    FLASHC_ERROR_NULL_POINTER,      /* a required pointer is NULL */
    FLASHC_ERROR_DTYPE,             /* unsupported or mismatched dtype */
    FLASHC_ERROR_DEVICE,            /* tensors on different devices */
    FLASHC_ERROR_RANK,              /* wrong tensor rank */
    FLASHC_ERROR_SHAPE,             /* shape mismatch or out-of-range extent */
    FLASHC_ERROR_STRIDE,            /* non-contiguous head dim, negative or
                                       overlapping output strides */
    FLASHC_ERROR_HEAD_DIM,          /* head dim outside [1, 256] */
    FLASHC_ERROR_HEAD_GROUPS,       /* nheads % nheads_k != 0 */
    FLASHC_ERROR_CU_SEQLENS,        /* bad cu_seqlens / seqused_k / max_seqlen */
    FLASHC_ERROR_DROPOUT,           /* dropout_p outside [0, 1) */
    FLASHC_ERROR_WINDOW,            /* window size below -1 */
    FLASHC_ERROR_SOFTCAP,           /* softcap negative or not finite */
    FLASHC_ERROR_SCALE,             /* softmax_scale NaN or infinite */
    FLASHC_ERROR_WORKSPACE,         /* workspace missing or too small */
    FLASHC_ERROR_ARGUMENT,          /* any other invalid argument value */
    FLASHC_ERROR_UNSUPPORTED,       /* valid, but not available in this build
                                       or on this device */
    FLASHC_ERROR_BACKEND            /* the device runtime reported a failure */
} flashc_status;

/* A static string for a status ("FLASHC_ERROR_SHAPE: shape mismatch"). */
FLASHC_API const char *flashc_status_string(flashc_status status);

/* The message of the last failed call on this thread (naming the argument),
 * or "" when the last call succeeded. Valid until the next call on this
 * thread. */
FLASHC_API const char *flashc_last_error_message(void);

/* "MAJOR.MINOR.PATCH". */
FLASHC_API const char *flashc_version(void);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                  */
/* ------------------------------------------------------------------------ */

typedef enum flashc_dtype {
    FLASHC_DTYPE_FLOAT32 = 0,
    FLASHC_DTYPE_FLOAT16,
    FLASHC_DTYPE_BFLOAT16,
    FLASHC_DTYPE_FLOAT64,  /* CPU only: exact gradient checks */
    FLASHC_DTYPE_INT32     /* cu_seqlens, seqused_k */
} flashc_dtype;

typedef enum flashc_device_type {
    FLASHC_DEVICE_CPU = 0,
    FLASHC_DEVICE_CUDA
} flashc_device_type;

typedef struct flashc_device {
    flashc_device_type type;
    int index;             /* CUDA ordinal; 0 for the CPU */
} flashc_device;

typedef struct flashc_tensor {
    void *data;
    flashc_dtype dtype;
    flashc_device device;
    int rank;                          /* 1..FLASHC_MAX_RANK */
    int64_t shape[FLASHC_MAX_RANK];
    int64_t stride[FLASHC_MAX_RANK];   /* in elements, >= 0 */
} flashc_tensor;

/* Size in bytes of one element of `dtype` (0 for an unknown dtype). */
FLASHC_API size_t flashc_dtype_size(flashc_dtype dtype);

/* "float32", "float16", "bfloat16", "float64", "int32"; "unknown" for any
 * other value. For messages. */
FLASHC_API const char *flashc_dtype_name(flashc_dtype dtype);

/* Fill a descriptor of a contiguous (row-major) tensor. Returns the
 * descriptor; rank must be 1..FLASHC_MAX_RANK and the element count must
 * fit in int64 (otherwise rank is set to 0, which every entry point
 * rejects). */
FLASHC_API flashc_tensor flashc_tensor_contiguous(void *data, flashc_dtype dtype,
                                                  flashc_device device, int rank,
                                                  const int64_t *shape);

/* ------------------------------------------------------------------------ */
/* Attention options shared by forward and backward                         */
/* ------------------------------------------------------------------------ */

typedef struct flashc_attention_options {
    /* Scale applied to q·k. 0 selects 1/sqrt(d), d the q/k head dim.
     * Must be finite. */
    double softmax_scale;
    /* Causal mask aligned to the bottom-right corner: it sets window_right
     * to 0 (whatever was given) and keeps window_left, so plain causal is
     * window (-1, 0). */
    int causal;
    /* Sliding window (left, right); -1 is unbounded on that side. */
    int64_t window_left;
    int64_t window_right;
    /* softcap > 0: s = softcap * tanh(s / softcap); 0 disables. */
    double softcap;
    /* Optional ALiBi slopes, float32, shape (h) or (b, h); NULL disables. */
    const flashc_tensor *alibi_slopes;
    /* Dropout probability in [0, 1); the keep mask is a pure function of
     * (seed, offset, batch, head, row, col). */
    double dropout_p;
    uint64_t dropout_seed;
    uint64_t dropout_offset;
    /* Backward: a fixed accumulation order (bit-identical results run to
     * run). The CPU backend is always deterministic. */
    int deterministic;
    /* CPU: OpenMP thread count, 0 = the OpenMP default. */
    int num_threads;
    /* CUDA: the stream (cudaStream_t) to launch on; NULL = default stream. */
    void *stream;
} flashc_attention_options;

/* Defaults: scale 1/sqrt(d), no mask, window (-1, -1), no softcap, no ALiBi,
 * no dropout, non-deterministic, default threads, default stream. */
FLASHC_API flashc_attention_options flashc_attention_options_default(void);

/* Variable-length (packed) batches. All pointers NULL selects batched mode.
 * Sequence i holds packed rows [cu_seqlens[i], cu_seqlens[i + 1]); packed
 * rows outside every sequence are written as rows that see no key (out 0,
 * LSE +inf, zero gradients). With seqused_k, sequence i uses its first
 * seqused_k[i] keys only; the rest get zero dK/dV. cu_seqlens and
 * seqused_k are contiguous; on the CPU their contents are checked. */
typedef struct flashc_varlen {
    const flashc_tensor *cu_seqlens_q;  /* int32 (b + 1), non-decreasing */
    const flashc_tensor *cu_seqlens_k;  /* int32 (b + 1), non-decreasing */
    const flashc_tensor *seqused_k;     /* optional int32 (b): keys used */
    int64_t max_seqlen_q;               /* >= every query length, <= INT32_MAX */
    int64_t max_seqlen_k;               /* >= every key length, <= INT32_MAX */
    /* Optional, forward only: paged K/V (see the top of this file). k and v
     * are then (num_blocks, block_size, hk, d); cu_seqlens_k gives only the
     * key lengths (cu_seqlens_k[i + 1] - cu_seqlens_k[i], or seqused_k),
     * each at most max_blocks * block_size. */
    const flashc_tensor *block_table;
} flashc_varlen;

/* ------------------------------------------------------------------------ */
/* Forward                                                                  */
/* ------------------------------------------------------------------------ */

/* Memory for a workspace (the backward's) or scratch (the forward's) from
 * the caller's allocator: `bytes` bytes (any alignment) on `device`,
 * usable by work queued on the call's stream, or NULL when it cannot
 * provide them. */
typedef void *(*flashc_workspace_allocator)(void *context, size_t bytes, flashc_device device);

typedef struct flashc_forward_args {
    const flashc_tensor *q;
    const flashc_tensor *k;
    const flashc_tensor *v;
    flashc_tensor *out;
    /* Optional: log-sum-exp of the (pre-dropout) scores, natural log.
     * float32 (float64 when the inputs are float64). +inf for a row that
     * sees no key. */
    flashc_tensor *lse;
    /* Optional: S_dmask (see the top of this file). exp(s - rowmax) where
     * visible, 0 where hidden or padding, negated where dropout dropped. */
    flashc_tensor *s_dmask;
    flashc_varlen varlen;
    flashc_attention_options options;
} flashc_forward_args;

FLASHC_API flashc_status flashc_attention_forward(const flashc_forward_args *args);

/* The forward with scratch memory from the caller's allocator, for the
 * CUDA portable kernels (compute capability 8.x, or FLASHC_CUDA_FORWARD=
 * portable): where every tile of query rows costs the same (no mask or
 * window, not varlen) and the last wave of tiles would leave SMs idle,
 * the kernel shares that wave's key blocks over every SM and combines the
 * partial results in a fixed order (bitwise reproducible), which needs
 * float32 scratch of about one output tile per SM. allocate(context,
 * bytes, device) is then called once, from the calling thread, after
 * every argument check has passed; the memory stays the caller's (release
 * it after the call returns, in stream order: the kernels that use it are
 * queued, not finished). Where allocate is NULL or returns NULL, and for
 * every other problem, this is flashc_attention_forward(): the scratch
 * only speeds the call up, and the output differs from the unshared
 * schedule's by float32 rounding only. */
FLASHC_API flashc_status flashc_attention_forward_allocating(const flashc_forward_args *args,
                                                             flashc_workspace_allocator allocate,
                                                             void *context);

/* ------------------------------------------------------------------------ */
/* Backward                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct flashc_backward_args {
    const flashc_tensor *dout;   /* like out */
    const flashc_tensor *q;
    const flashc_tensor *k;
    const flashc_tensor *v;
    const flashc_tensor *out;
    const flashc_tensor *lse;    /* as written by the forward */
    const flashc_tensor *dlse;   /* optional: gradient w.r.t. lse, like lse */
    flashc_tensor *dq;           /* like q */
    flashc_tensor *dk;           /* like k (summed over each query-head group) */
    flashc_tensor *dv;           /* like v */
    void *workspace;             /* on the tensors' device */
    size_t workspace_bytes;
    flashc_varlen varlen;
    flashc_attention_options options;   /* the forward's options */
} flashc_backward_args;

/* Bytes of workspace the backward needs for these arguments (the workspace
 * fields themselves are ignored). The arguments are validated as for
 * flashc_attention_backward(). */
FLASHC_API flashc_status flashc_attention_backward_workspace_size(
    const flashc_backward_args *args, size_t *bytes);

FLASHC_API flashc_status flashc_attention_backward(const flashc_backward_args *args);

/* The backward in one call, with its workspace obtained during the call:
 * the arguments are validated once, where the workspace-size query followed
 * by flashc_attention_backward() validates them twice. args->workspace must
 * be NULL and args->workspace_bytes 0. When the backward needs a workspace,
 * allocate(context, bytes, device) is called once, from the calling thread,
 * after every argument check has passed; if it returns NULL the call fails
 * with FLASHC_ERROR_WORKSPACE and writes nothing. The memory stays the
 * caller's: release it after the call returns (on CUDA in stream order,
 * since the kernels that use it are queued, not finished).
 * With allocate NULL, CPU tensors get a workspace that the library
 * allocates and frees within the call; CUDA tensors need an allocator
 * (stream-ordered memory comes from the caller, PyTorch's caching allocator
 * for example) and get FLASHC_ERROR_WORKSPACE without one. */
FLASHC_API flashc_status flashc_attention_backward_allocating(const flashc_backward_args *args,
                                                              flashc_workspace_allocator allocate,
                                                              void *context);

/* ------------------------------------------------------------------------ */
/* Attention over a KV cache (inference)                                    */
/* ------------------------------------------------------------------------ */

/* flash_attn_with_kvcache: q (b, sq, h, d) attends to the keys of a cache,
 * after k_new / v_new (if given) are written into it in place.
 *
 *   contiguous cache: k_cache (b_cache, s_cache, hk, d), v_cache (.., hk, dv);
 *                     sequence i uses cache batch cache_batch_idx[i] (or i)
 *   paged cache:      k_cache (num_blocks, block_size, hk, d), block_table
 *                     int32 (b, max_blocks); cache index c of sequence i is
 *                     row c % block_size of block block_table[i][c / block_size]
 *   capacity:         s_cache, or max_blocks * block_size
 *
 * Sequence i holds the cache indices [cache_leftpad[i], cache_seqlens[i])
 * (leftpad 0 and seqlens the capacity when absent). k_new / v_new rows
 * (b, s_new, hk, .) are written at cache indices cache_seqlens[i] + r,
 * after rotary (if given) is applied to k_new at those positions; then q
 * attends to the sk = cache_seqlens[i] + s_new - cache_leftpad[i] keys
 * from cache_leftpad[i] on. Masks and ALiBi are measured over those keys
 * exactly as in the forward (causal aligned bottom-right: query row r sits
 * at key r + sk - sq).
 *
 * Rotary (rotary_cos / rotary_sin (seqlen_ro, rotary_dim / 2), q's dtype,
 * rotary_dim even and <= d, seqlen_ro >= the capacity; needs k_new):
 * interleaved rotates the pairs (0, 1), (2, 3), ...; otherwise (x, x +
 * rotary_dim / 2) as in GPT-NeoX. k_new row r is rotated at position
 * cache_seqlens[i] + r; q row r at cache_seqlens[i] + r under a causal mask
 * or a window, at cache_seqlens[i] for every row otherwise (flash_attn's
 * positions). The rotated values are rounded to the input dtype.
 *
 * On the CPU the index tensors' contents are checked (0 <= leftpad <=
 * seqlens, seqlens + s_new <= capacity, cache_batch_idx < b_cache, the
 * block_table entries a sequence uses < num_blocks) and any violation is an
 * error before anything is written. CUDA tensors' contents are not read on
 * the host: an out-of-range entry makes the kernels skip what it names
 * (no out-of-bounds access, that sequence's output undefined). */
typedef struct flashc_kvcache_args {
    const flashc_tensor *q;
    flashc_tensor *k_cache;
    flashc_tensor *v_cache;
    const flashc_tensor *k_new;            /* optional (b, s_new, hk, d) */
    const flashc_tensor *v_new;            /* with k_new: (b, s_new, hk, dv) */
    const flashc_tensor *cache_seqlens;    /* optional int32 (b); needed with k_new */
    const flashc_tensor *cache_batch_idx;  /* optional int32 (b); not with block_table */
    const flashc_tensor *cache_leftpad;    /* optional int32 (b) */
    const flashc_tensor *block_table;      /* optional int32 (b, max_blocks) */
    const flashc_tensor *rotary_cos;       /* optional, with rotary_sin and k_new */
    const flashc_tensor *rotary_sin;
    int rotary_interleaved;
    /* Key splits combined exactly through the LSE: 0 = chosen from the
     * shape and the device, 1 = none. The CPU backend splits as told too;
     * its own choice depends on the shape alone, not on the thread count,
     * so its results do not either. */
    int num_splits;
    flashc_tensor *out;                    /* (b, sq, h, dv) */
    flashc_tensor *lse;                    /* optional float32 (b, h, sq) */
    /* Scratch on the tensors' device, sized by
     * flashc_attention_kvcache_workspace_size(). On the CPU it may be NULL
     * (the call then allocates it); on CUDA it must be given whenever the
     * size is not 0, so a call allocates nothing (CUDA-graph capturable). */
    void *workspace;
    size_t workspace_bytes;
    /* softmax_scale, causal, window, softcap, alibi_slopes, num_threads,
     * stream as in the forward; dropout_p must be 0. */
    flashc_attention_options options;
} flashc_kvcache_args;

/* Bytes of workspace flashc_attention_kvcache() needs for these arguments
 * (validated as for the call; the workspace fields are ignored). */
FLASHC_API flashc_status flashc_attention_kvcache_workspace_size(const flashc_kvcache_args *args,
                                                                 size_t *bytes);

FLASHC_API flashc_status flashc_attention_kvcache(const flashc_kvcache_args *args);

/* ------------------------------------------------------------------------ */
/* Devices                                                                  */
/* ------------------------------------------------------------------------ */

/* Non-zero when this library was built with the CUDA backend and a CUDA
 * device is present. */
FLASHC_API int flashc_cuda_available(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHC_H */
