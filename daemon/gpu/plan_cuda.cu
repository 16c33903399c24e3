/* The CUDA mover's kernel: one launch executes every step of a descriptor
 * list (kernels/plan_cuda.h). Blocks take chunks grid-stride; a chunk is
 * rows x bytes of one step. Plain copies move 16-byte vectors where every
 * address and length of the step allows (8, 4, 2, 1 otherwise); grad
 * scales and reductions go element by element with the arithmetic of
 * kernels/plan_exec.c (16-bit floats through fp32, bit-exact conversions),
 * so a device result equals the host mover's. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "half_bits.h"
#include "plan_cuda.h"

#define THREADS SPK_CU_THREADS
#define UNROLL 4

/* ---- 16-bit floats: kernels/half_bits.h, the host mover's conversions
 * bit for bit (NaN payloads included), rather than the hardware's, whose
 * NaNs differ */

__device__ __forceinline__ float f16_to_f32(uint16_t h) {
  return __uint_as_float(spk_f16_to_f32_bits(h));
}

__device__ __forceinline__ uint16_t f32_to_f16(float f) {
  return spk_f32_bits_to_f16(__float_as_uint(f));
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h) {
  return __uint_as_float(spk_bf16_to_f32_bits(h));
}

__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  return spk_f32_bits_to_bf16(__float_as_uint(f));
}

/* Element traits: a dtype's storage T, its accumulator A, and the
 * conversions between them. */
struct F32 {
  typedef float T;
  typedef float A;
  __device__ static A in(T v) { return v; }
  __device__ static T out(A v) { return v; }
};
struct F64 {
  typedef double T;
  typedef double A;
  __device__ static A in(T v) { return v; }
  __device__ static T out(A v) { return v; }
};
struct F16 {
  typedef uint16_t T;
  typedef float A;
  __device__ static A in(T v) { return f16_to_f32(v); }
  __device__ static T out(A v) { return f32_to_f16(v); }
};
struct BF16 {
  typedef uint16_t T;
  typedef float A;
  __device__ static A in(T v) { return bf16_to_f32(v); }
  __device__ static T out(A v) { return f32_to_bf16(v); }
};

/* What a block needs of its chunk, in shared memory. */
struct chunk_t {
  spk_cdesc d;
  uint64_t r0, b0;
  uint32_t nrows, bytes;     /* rows and bytes per row in this chunk */
};

/* ---- plain copies ----------------------------------------------------- */

template <typename V>
__device__ void copy_chunk(const chunk_t &c, const uint64_t *soff,
                           const uint64_t *doff) {
  const uint8_t *src = (const uint8_t *)c.d.src + c.b0;
  uint8_t *dst = (uint8_t *)c.d.dst + c.b0;
  const uint32_t nv = c.bytes / (uint32_t)sizeof(V);
  if (c.nrows == 1) {
    /* One long run: UNROLL loads in flight per thread before the stores. */
    const V *s = (const V *)(src + soff[0]);
    V *t = (V *)(dst + doff[0]);
    for (uint32_t i = threadIdx.x; i < nv; i += blockDim.x * UNROLL) {
      V tmp[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; u++) {
        uint32_t j = i + u * blockDim.x;
        if (j < nv)
          tmp[u] = s[j];
      }
#pragma unroll
      for (int u = 0; u < UNROLL; u++) {
        uint32_t j = i + u * blockDim.x;
        if (j < nv)
          t[j] = tmp[u];
      }
    }
    return;
  }
  /* Many short rows: (row, vector) pairs spread over the threads. */
  const uint32_t total = c.nrows * nv;
  for (uint32_t i = threadIdx.x; i < total; i += blockDim.x) {
    uint32_t r = i / nv, v = i - r * nv;
    *(V *)(dst + doff[r] + (uint64_t)v * sizeof(V)) =
        *(const V *)(src + soff[r] + (uint64_t)v * sizeof(V));
  }
}

/* ---- grad-scaled copies ---------------------------------------------- */

template <typename E>
__device__ __forceinline__ typename E::T scale_one(typename E::T v, int up,
                                                   int world) {
  typename E::A x = E::in(v);
  typename E::A w = (typename E::A)world;
  return E::out(up ? x * w : x / w); /* one IEEE operation, as on the host */
}

template <typename S, typename U>
__device__ __forceinline__ S scale_int(S v, int up, int world) {
  return up ? (S)(U)((U)v * (U)world) : (S)(v / (S)world);
}

template <typename T, typename F>
__device__ void scale_chunk(const chunk_t &c, const uint64_t *soff,
                            const uint64_t *doff, F f) {
  const uint8_t *src = (const uint8_t *)c.d.src + c.b0;
  uint8_t *dst = (uint8_t *)c.d.dst + c.b0;
  const uint32_t ne = c.bytes / (uint32_t)sizeof(T), total = c.nrows * ne;
  for (uint32_t i = threadIdx.x; i < total; i += blockDim.x) {
    uint32_t r = i / ne, k = i - r * ne;
    const T *s = (const T *)(src + soff[r]) + k;
    T *t = (T *)(dst + doff[r]) + k;
    *t = f(*s);
  }
}

template <typename E> struct scale_fn {
  int up, world;
  __device__ typename E::T operator()(typename E::T v) const {
    return scale_one<E>(v, up, world);
  }
};
template <typename S, typename U> struct scale_int_fn {
  int up, world;
  __device__ S operator()(S v) const { return scale_int<S, U>(v, up, world); }
};

/* ---- reductions ------------------------------------------------------ */

/* NaN wins in max/min, as in torch and plan_exec.c. */
template <typename A>
__device__ __forceinline__ A combine(int op, A a, A v) {
  if (op == SPK_RED_SUM)
    return a + v;
  if (op == SPK_RED_MAX)
    return (v > a || v != v) ? v : a;
  return (v < a || v != v) ? v : a;
}

template <typename T, typename A, typename LOAD, typename STORE>
__device__ void reduce_chunk(const chunk_t &c, const spk_csrc *srcs, int op,
                             const uint64_t *soff, const uint64_t *doff,
                             LOAD load, STORE store) {
  uint8_t *dst = (uint8_t *)c.d.dst + c.b0;
  const uint32_t ne = c.bytes / (uint32_t)sizeof(T), total = c.nrows * ne;
  const spk_csrc *sv = srcs + c.d.rsrc0;
  for (uint32_t i = threadIdx.x; i < total; i += blockDim.x) {
    uint32_t r = i / ne, k = i - r * ne;
    uint64_t in_row = c.b0 + (uint64_t)k * sizeof(T);
    uint64_t contig_off = (c.r0 + r) * c.d.run + in_row;
    uint64_t strided_off = soff[r] + in_row;
    A acc = 0;
    for (uint32_t j = 0; j < c.d.nsrc; j++) {
      spk_csrc s = sv[j];
      const T *p = (const T *)(s.addr + (s.contig ? contig_off : strided_off));
      A v = load(*p);
      acc = j == 0 ? v : combine<A>(op, acc, v);
    }
    *((T *)(dst + doff[r]) + k) = store(acc);
  }
}

template <typename E> struct ld {
  __device__ typename E::A operator()(typename E::T v) const {
    return E::in(v);
  }
};
template <typename E> struct st {
  __device__ typename E::T operator()(typename E::A v) const {
    return E::out(v);
  }
};
template <typename T> struct ident {
  __device__ T operator()(T v) const { return v; }
};

template <typename S, typename U> struct to_u {
  __device__ U operator()(S v) const { return (U)v; }
};
template <typename S, typename U> struct to_s {
  __device__ S operator()(U v) const { return (S)v; }
};

template <typename S, typename U>
__device__ void reduce_int(const chunk_t &c, const spk_csrc *srcs, int op,
                           const uint64_t *soff, const uint64_t *doff) {
  /* Sums wrap, as torch's do: accumulate unsigned. */
  if (op == SPK_RED_SUM)
    reduce_chunk<S, U>(c, srcs, op, soff, doff, to_u<S, U>(), to_s<S, U>());
  else
    reduce_chunk<S, S>(c, srcs, op, soff, doff, ident<S>(), ident<S>());
}

/* ---- dispatch -------------------------------------------------------- */

__device__ void run_chunk(const spk_claunch &L, const chunk_t &c,
                          const uint64_t *soff, const uint64_t *doff) {
  if (c.d.kind == SPK_CU_COPY) {
    switch (c.d.vec) {
    case 16: copy_chunk<uint4>(c, soff, doff); break;
    case 8: copy_chunk<uint2>(c, soff, doff); break;
    case 4: copy_chunk<uint32_t>(c, soff, doff); break;
    case 2: copy_chunk<uint16_t>(c, soff, doff); break;
    default: copy_chunk<uint8_t>(c, soff, doff); break;
    }
    return;
  }
  int up = L.scale == SPK_SCALE_UP, w = L.world;
  if (c.d.kind == SPK_CU_SCALE) {
    switch ((spk_dtype)L.dtype) {
    case SPK_F32:
      scale_chunk<float>(c, soff, doff, scale_fn<F32>{up, w});
      break;
    case SPK_F64:
      scale_chunk<double>(c, soff, doff, scale_fn<F64>{up, w});
      break;
    case SPK_F16:
      scale_chunk<uint16_t>(c, soff, doff, scale_fn<F16>{up, w});
      break;
    case SPK_BF16:
      scale_chunk<uint16_t>(c, soff, doff, scale_fn<BF16>{up, w});
      break;
    case SPK_I8:
      scale_chunk<int8_t>(c, soff, doff, scale_int_fn<int8_t, uint8_t>{up, w});
      break;
    case SPK_U8:
      scale_chunk<uint8_t>(c, soff, doff,
                           scale_int_fn<uint8_t, uint8_t>{up, w});
      break;
    case SPK_I32:
      scale_chunk<int32_t>(c, soff, doff,
                           scale_int_fn<int32_t, uint32_t>{up, w});
      break;
    case SPK_I64:
      scale_chunk<int64_t>(c, soff, doff,
                           scale_int_fn<int64_t, uint64_t>{up, w});
      break;
    default: break;
    }
    return;
  }
  int op = L.red_op;
  const spk_csrc *s = L.srcs;
  switch ((spk_dtype)L.dtype) {
  case SPK_F32:
    reduce_chunk<float, float>(c, s, op, soff, doff, ident<float>(),
                               ident<float>());
    break;
  case SPK_F64:
    reduce_chunk<double, double>(c, s, op, soff, doff, ident<double>(),
                                 ident<double>());
    break;
  case SPK_F16:
    reduce_chunk<uint16_t, float>(c, s, op, soff, doff, ld<F16>(), st<F16>());
    break;
  case SPK_BF16:
    reduce_chunk<uint16_t, float>(c, s, op, soff, doff, ld<BF16>(),
                                  st<BF16>());
    break;
  case SPK_I8: reduce_int<int8_t, uint8_t>(c, s, op, soff, doff); break;
  case SPK_U8: reduce_int<uint8_t, uint8_t>(c, s, op, soff, doff); break;
  case SPK_I32: reduce_int<int32_t, uint32_t>(c, s, op, soff, doff); break;
  case SPK_I64: reduce_int<int64_t, uint64_t>(c, s, op, soff, doff); break;
  default: break;
  }
}

__global__ void __launch_bounds__(THREADS) plan_kernel(spk_claunch L) {
  __shared__ chunk_t c;
  __shared__ uint64_t soff[SPK_CU_MAX_ROWS], doff[SPK_CU_MAX_ROWS];
  __shared__ uint64_t step;
  __shared__ int reload;
  int loaded = 0;
  for (uint64_t k = blockIdx.x; k < L.nchunks; k += gridDim.x) {
    /* A block's chunks only grow: the step it holds often still covers k,
     * else the next one is found from there. */
    if (threadIdx.x == 0) {
      reload = !loaded || k - c.d.chunk0 >= c.d.nchunks;
      if (reload)
        step = spk_cdesc_find_from(L.descs, loaded ? step : 0, L.ndesc, k);
    }
    __syncthreads();
    /* The step's descriptor, copied once into shared memory: every thread
     * reads it, and the compiler could not keep it in registers across
     * stores it cannot prove do not alias it. */
    if (reload) {
      const uint64_t *from = (const uint64_t *)&L.descs[step];
      for (uint32_t i = threadIdx.x; i < sizeof(spk_cdesc) / 8;
           i += blockDim.x)
        ((uint64_t *)&c.d)[i] = from[i];
      __syncthreads();
    }
    loaded = 1;
    if (threadIdx.x == 0) {
      uint64_t r0, r1, b0, b1;
      spk_cdesc_chunk(&c.d, k - c.d.chunk0, &r0, &r1, &b0, &b1);
      c.r0 = r0, c.b0 = b0;
      c.nrows = (uint32_t)(r1 - r0), c.bytes = (uint32_t)(b1 - b0);
    }
    __syncthreads();
    for (uint32_t j = threadIdx.x; j < c.nrows; j += blockDim.x)
      spk_cdesc_row(&c.d, c.r0 + j, &soff[j], &doff[j]);
    __syncthreads();
    run_chunk(L, c, soff, doff);
    __syncthreads(); /* shared state is rewritten for the next chunk */
  }
}

static_assert(sizeof(spk_cdesc) % 8 == 0,
              "the descriptor is copied in 8-byte words");
static_assert(SPK_CU_CHUNK_MAX <= 0xffffffffu, "chunk bytes fit in 32 bits");

extern "C" int spk_cuda_launch(const spk_claunch *l, int blocks, void *stream,
                               char *msg, size_t len) {
  if (l->nchunks == 0)
    return 0;
  if (blocks < 1)
    blocks = 1;
  if ((uint64_t)blocks > l->nchunks)
    blocks = (int)l->nchunks;
  /* The launch's own status, not cudaGetLastError: that reports the
   * last failure of any earlier call on this thread too (a tolerated
   * one, say a client's bad IPC handle), which is not this launch's. */
  spk_claunch arg = *l;
  void *args[] = {&arg};
  cudaError_t e = cudaLaunchKernel((const void *)plan_kernel, dim3(blocks),
                                   dim3(THREADS), args, 0,
                                   (cudaStream_t)stream);
  if (e != cudaSuccess) {
    snprintf(msg, len, "launch of the plan kernel (%d blocks of %d threads, "
             "%llu chunks): %s", blocks, THREADS,
             (unsigned long long)l->nchunks, cudaGetErrorString(e));
    return -1;
  }
  return 0;
}
