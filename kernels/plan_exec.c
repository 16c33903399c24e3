/* The CPU executor of plans: plain copies, scaled copies (the seeds'
 * grad_scale) and reductions, for every dtype. Movers call it per task;
 * tests call spk_plan_exec for whole plans. */
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "half.h"
#include "plan.h"

#define RUN_BLOCK 256 /* elements converted per step of 16-bit work */

/* memcpy with non-temporal stores for the 64-byte-aligned body; the
 * caller fences (stream_fence) before anyone else reads dst. */
static void copy_stream(uint8_t *dst, const uint8_t *src, size_t n) {
#if defined(__SSE2__)
  size_t head = (64 - ((uintptr_t)dst & 63)) & 63;
  if (head > n)
    head = n;
  memcpy(dst, src, head);
  dst += head, src += head, n -= head;
  size_t body = n & ~(size_t)63;
  for (size_t i = 0; i < body; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
    _mm_stream_si128((__m128i *)(dst + i), a);
    _mm_stream_si128((__m128i *)(dst + i + 16), b);
    _mm_stream_si128((__m128i *)(dst + i + 32), c);
    _mm_stream_si128((__m128i *)(dst + i + 48), d);
  }
  memcpy(dst + body, src + body, n - body);
#else
  memcpy(dst, src, n);
#endif
}

/* Non-temporal stores are weakly ordered: drain them before the task is
 * reported done (the mover's unlock then publishes them). */
static void stream_fence(void) {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

/* ---- scaled copies --------------------------------------------------- */

#define SCALE_LOOP(T, CONV_IN, CONV_OUT)                                     \
  do {                                                                       \
    const T *s = src;                                                        \
    T *d = dst;                                                              \
    for (size_t i = 0; i < n; i++)                                           \
      d[i] = CONV_OUT(up ? CONV_IN(s[i]) * w : CONV_IN(s[i]) / w);           \
  } while (0)
#define ID(x) (x)

/* Integer grad scaling has no use in training; it is defined (wrapping
 * multiply, truncating divide) so no dtype is a special case. */
#define SCALE_INT(T, UT)                                                     \
  do {                                                                       \
    const T *s = src;                                                        \
    T *d = dst;                                                              \
    for (size_t i = 0; i < n; i++)                                           \
      d[i] = up ? (T)(UT)((UT)s[i] * (UT)iw) : (T)(s[i] / (T)iw);            \
  } while (0)

/* One IEEE operation per element: x * w or x / w, never a reciprocal. */
static void scale_run(spk_dtype dt, int up, int world, const void *src,
                      void *dst, size_t n) {
  float w = (float)world;
  double wd = (double)world;
  int64_t iw = world;
  switch (dt) {
  case SPK_F32: SCALE_LOOP(float, ID, ID); break;
  case SPK_F64: {
    const double *s = src;
    double *d = dst;
    for (size_t i = 0; i < n; i++)
      d[i] = up ? s[i] * wd : s[i] / wd;
    break;
  }
  case SPK_F16: SCALE_LOOP(uint16_t, spk_f16_to_f32, spk_f32_to_f16); break;
  case SPK_BF16: SCALE_LOOP(uint16_t, spk_bf16_to_f32, spk_f32_to_bf16); break;
  case SPK_I8: SCALE_INT(int8_t, uint8_t); break;
  case SPK_U8: SCALE_INT(uint8_t, uint8_t); break;
  case SPK_I32: SCALE_INT(int32_t, uint32_t); break;
  case SPK_I64: SCALE_INT(int64_t, uint64_t); break;
  default: break;
  }
}

/* The one strided-copy walk: plain copies and scaled ones share it. */
typedef struct {
  const spk_move *m;
  int scale;        /* SPK_SCALE_* */
  spk_dtype dtype;  /* needed only to scale */
  int world;
  size_t esize;
  int stream;       /* copy with non-temporal stores */
} move_ctx;

static void move_rows(const move_ctx *c, int d, const uint8_t *src,
                      uint8_t *dst, uint64_t r0, uint64_t r1) {
  const spk_move *m = c->m;
  if (d == m->nd - 1) {
    if (c->scale == SPK_SCALE_NONE && c->stream)
      copy_stream(dst + r0, src + r0, r1 - r0);
    else if (c->scale == SPK_SCALE_NONE)
      memcpy(dst + r0, src + r0, r1 - r0);
    else
      scale_run(c->dtype, c->scale == SPK_SCALE_UP, c->world, src + r0,
                dst + r0, (r1 - r0) / c->esize);
    return;
  }
  for (uint64_t r = r0; r < r1; r++)
    move_rows(c, d + 1, src + r * m->src_stride[d], dst + r * m->dst_stride[d],
              0, m->len[d + 1]);
}

void spk_move_run(const spk_move *m, const uint8_t *src, uint8_t *dst,
                  uint64_t u0, uint64_t u1) {
  move_ctx c = {m, SPK_SCALE_NONE, SPK_U8, 1, 1, 0};
  move_rows(&c, 0, src + m->src_off, dst + m->dst_off, u0, u1);
}

void spk_move_exec(const spk_plan *plan, const spk_move *m,
                   uint8_t *const *bases, uint64_t u0, uint64_t u1) {
  move_ctx c = {m, plan->scale, plan->dtype, plan->world,
                spk_dtype_size(plan->dtype), spk_plan_streams(plan)};
  const uint8_t *src = bases[m->src_rank * SPK_T_COUNT + m->src_t];
  uint8_t *dst = bases[m->dst_rank * SPK_T_COUNT + m->dst_t];
  move_rows(&c, 0, src + m->src_off, dst + m->dst_off, u0, u1);
  if (c.stream)
    stream_fence();
}

/* ---- reductions ------------------------------------------------------ */

typedef struct {
  const spk_plan *plan;
  const spk_reduce *r;
  uint8_t *const *bases;
  size_t esize;
} reduce_ctx;

static inline const uint8_t *rsrc_at(const reduce_ctx *c, uint32_t k,
                                     uint64_t rel) {
  const spk_rsrc *s = &c->plan->rsrcs[c->r->src0 + k];
  return c->bases[s->rank * SPK_T_COUNT + s->t] + s->off + rel;
}

/* NaN wins in max/min, as in torch. */
#define COMBINE_SUM(a, v) ((a) + (v))
#define COMBINE_MAX(a, v) ((((v) > (a)) || ((v) != (v))) ? (v) : (a))
#define COMBINE_MIN(a, v) ((((v) < (a)) || ((v) != (v))) ? (v) : (a))

/* Elements [b, b + m) accumulated in A (fp32 for 16-bit floats), reading
 * each source once and writing dst once. Source k of the run is
 * REDUCE_SRC(k), of REDUCE_NSRC: each function below that expands these
 * macros defines the two for its own kind of sources. */
#define REDUCE_BLOCK(T, A, LOAD, STORE, COMBINE, b, m)                       \
  do {                                                                       \
    A acc[RUN_BLOCK];                                                        \
    const T *s0 = (const T *)REDUCE_SRC(0) + (b);                            \
    for (size_t i = 0; i < (m); i++)                                         \
      acc[i] = LOAD(s0[i]);                                                  \
    for (uint32_t k = 1; k < REDUCE_NSRC; k++) {                             \
      const T *sk = (const T *)REDUCE_SRC(k) + (b);                          \
      for (size_t i = 0; i < (m); i++)                                       \
        acc[i] = COMBINE(acc[i], LOAD(sk[i]));                               \
    }                                                                        \
    T *d = (T *)dst + (b);                                                   \
    for (size_t i = 0; i < (m); i++)                                         \
      d[i] = STORE(acc[i]);                                                  \
  } while (0)

/* Whole blocks have a constant trip count, which -O2 vectorizes; so
 * do the short blocks of TAIL_BLOCK elements the rest is cut into (a
 * small op is all rest), and only the last few elements take a loop of
 * variable count. Every element is combined in the same order either
 * way, so the results are the same bits. */
#define TAIL_BLOCK 16
#define REDUCE_LOOP(T, A, LOAD, STORE, COMBINE)                              \
  do {                                                                       \
    size_t b = 0;                                                            \
    for (; b + RUN_BLOCK <= n; b += RUN_BLOCK)                               \
      REDUCE_BLOCK(T, A, LOAD, STORE, COMBINE, b, RUN_BLOCK);                \
    for (; b + TAIL_BLOCK <= n; b += TAIL_BLOCK)                             \
      REDUCE_BLOCK(T, A, LOAD, STORE, COMBINE, b, TAIL_BLOCK);               \
    if (b < n)                                                               \
      REDUCE_BLOCK(T, A, LOAD, STORE, COMBINE, b, n - b);                    \
  } while (0)

/* The op is chosen once per run, not per element: each loop is then
 * a plain add, max or min the compiler can vectorize. */
#define REDUCE_OPS(T, A, LOAD, STORE)                                        \
  do {                                                                       \
    if (op == SPK_RED_SUM)                                                   \
      REDUCE_LOOP(T, A, LOAD, STORE, COMBINE_SUM);                           \
    else if (op == SPK_RED_MAX)                                              \
      REDUCE_LOOP(T, A, LOAD, STORE, COMBINE_MAX);                           \
    else                                                                     \
      REDUCE_LOOP(T, A, LOAD, STORE, COMBINE_MIN);                           \
  } while (0)

/* Integer sums wrap as torch's do; computed unsigned to stay defined. */
#define REDUCE_INT(T, UT)                                                    \
  do {                                                                       \
    if (op == SPK_RED_SUM)                                                   \
      REDUCE_LOOP(T, UT, (UT), (T), COMBINE_SUM);                            \
    else if (op == SPK_RED_MAX)                                              \
      REDUCE_LOOP(T, T, ID, ID, COMBINE_MAX);                                \
    else                                                                     \
      REDUCE_LOOP(T, T, ID, ID, COMBINE_MIN);                                \
  } while (0)

#define REDUCE_DTYPES(dtype)                                                 \
  do {                                                                       \
    switch (dtype) {                                                         \
    case SPK_F32: REDUCE_OPS(float, float, ID, ID); break;                   \
    case SPK_F64: REDUCE_OPS(double, double, ID, ID); break;                 \
    case SPK_F16:                                                            \
      REDUCE_OPS(uint16_t, float, spk_f16_to_f32, spk_f32_to_f16);           \
      break;                                                                 \
    case SPK_BF16:                                                           \
      REDUCE_OPS(uint16_t, float, spk_bf16_to_f32, spk_f32_to_bf16);         \
      break;                                                                 \
    case SPK_I8: REDUCE_INT(int8_t, uint8_t); break;                         \
    case SPK_U8: REDUCE_INT(uint8_t, uint8_t); break;                        \
    case SPK_I32: REDUCE_INT(int32_t, uint32_t); break;                      \
    case SPK_I64: REDUCE_INT(int64_t, uint64_t); break;                      \
    default: break;                                                          \
    }                                                                        \
  } while (0)

/* A run of a plan's reduce step: its sources at rel bytes into its
 * geometry. */
static void reduce_run(const reduce_ctx *c, uint64_t rel, uint8_t *dst,
                       size_t n) {
  int op = c->plan->red_op;
#define REDUCE_SRC(k) rsrc_at(c, (k), rel)
#define REDUCE_NSRC (c->r->nsrc)
  REDUCE_DTYPES(c->plan->dtype);
#undef REDUCE_SRC
#undef REDUCE_NSRC
}

/* The same arithmetic on a list of flat sources. */
static void reduce_list(const spk_plan *plan, const uint8_t *const *srcs,
                        uint32_t nsrc, uint8_t *dst, size_t n) {
  int op = plan->red_op;
#define REDUCE_SRC(k) srcs[k]
#define REDUCE_NSRC nsrc
  REDUCE_DTYPES(plan->dtype);
#undef REDUCE_SRC
#undef REDUCE_NSRC
}

static void reduce_rows(const reduce_ctx *c, int d, uint64_t rel,
                        uint8_t *dst, uint64_t r0, uint64_t r1) {
  const spk_move *g = &c->r->geo;
  if (d == g->nd - 1) {
    reduce_run(c, rel + r0, dst + r0, (r1 - r0) / c->esize);
    return;
  }
  for (uint64_t r = r0; r < r1; r++)
    reduce_rows(c, d + 1, rel + r * g->src_stride[d],
                dst + r * g->dst_stride[d], 0, g->len[d + 1]);
}

void spk_reduce_exec(const spk_plan *plan, const spk_reduce *r,
                     uint8_t *const *bases, uint64_t u0, uint64_t u1) {
  reduce_ctx c = {plan, r, bases, spk_dtype_size(plan->dtype)};
  uint8_t *dst = bases[r->geo.dst_rank * SPK_T_COUNT + r->geo.dst_t];
  reduce_rows(&c, 0, 0, dst + r->geo.dst_off, u0, u1);
}

int spk_plan_flat(const spk_plan *plan, uint64_t bytes) {
  uint64_t at = 0;
  for (size_t i = 0; i < plan->nreduces; i++) {
    const spk_reduce *r = &plan->reduces[i];
    if (r->geo.nd != 1 || r->geo.dst_t != SPK_T_OUT || r->geo.dst_off != at ||
        r->nsrc != (uint32_t)plan->world)
      return 0;
    for (uint32_t k = 0; k < r->nsrc; k++) {
      const spk_rsrc *s = &plan->rsrcs[r->src0 + k];
      if (s->rank != k || s->t != SPK_T_IN || s->off != at)
        return 0;
    }
    at += r->geo.len[0];
  }
  return at == bytes;
}

void spk_reduce_flat(const spk_plan *plan, const uint8_t *const *srcs,
                     uint32_t nsrc, uint8_t *dst, uint64_t bytes) {
  reduce_list(plan, srcs, nsrc, dst, bytes / spk_dtype_size(plan->dtype));
}

void spk_plan_exec(const spk_plan *plan, uint8_t *const *bases) {
  for (size_t i = 0; i < plan->nreduces; i++)
    spk_reduce_exec(plan, &plan->reduces[i], bases, 0,
                    spk_move_units(&plan->reduces[i].geo));
  for (size_t i = 0; i < plan->nmoves; i++)
    spk_move_exec(plan, &plan->moves[i], bases, 0,
                  spk_move_units(&plan->moves[i]));
}
