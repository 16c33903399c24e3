/* Zigzag (load-balanced causal) sequence split and its inverse. The full
 * sequence along d is cut into 2w chunks of c; rank r holds chunk r then
 * chunk 2w-1-r, so every rank gets one early and one late chunk. Chunk
 * positions are int64 and w is any world size. */
#include "planner_internal.h"

static int one_dim(const spk_op_args *a, int *d, spk_err *err) {
  if (a->ndims != 1)
    return spk_err_set(err, SPK_EINVAL, "%s takes 1 dim, got %d",
                       spk_op_name(a->op), a->ndims);
  return spk_dim_normalize(a->dims[0], a->in.ndim, "zigzag dim", d, err);
}

int spk_check_zigzag_split(const spk_op_args *a, int world, int rank,
                           spk_err *err) {
  int d;
  int rc = one_dim(a, &d, err);
  if (rc < 0)
    return rc;
  int64_t len = a->in.dim[d];
  if (len % (2 * (int64_t)world) != 0)
    return spk_err_set(err, SPK_EINVAL,
                       "zigzag length %lld along dim %d is not divisible by "
                       "2*cp = %lld",
                       (long long)len, d, 2 * (long long)world);
  return spk__out_resized(a, rank, d, len / world, err);
}

int spk_check_zigzag_gather(const spk_op_args *a, int world, int rank,
                            spk_err *err) {
  int d;
  int rc = one_dim(a, &d, err);
  if (rc < 0)
    return rc;
  int64_t len = a->in.dim[d];
  if (len % 2 != 0)
    return spk_err_set(err, SPK_EINVAL,
                       "zigzag_gather input length %lld along dim %d is odd: "
                       "it must hold two chunks",
                       (long long)len, d);
  if (len > INT64_MAX / world) /* so the output length below is exact */
    return spk_err_set(err, SPK_EINVAL,
                       "zigzag_gather output length %lld * %d overflows",
                       (long long)len, world);
  return spk__out_resized(a, rank, d, len * world, err);
}

/* What every chunk copy of one plan shares: chunks are c long along d. */
typedef struct {
  const spk_op_args *const *args;
  int d;
  int64_t c;
  size_t esize;
} zz_ctx;

/* Copy chunk `from` of rank k's input to chunk `to` of rank r's output. */
static int copy_chunk(const zz_ctx *z, int k, int64_t from, int r, int64_t to,
                      spk_plan *plan, spk_err *err) {
  const spk_op_args *ak = z->args[k], *ar = z->args[r];
  int64_t so[SPK_MAX_DIMS] = {0}, dor[SPK_MAX_DIMS] = {0};
  int64_t ext[SPK_MAX_DIMS];
  for (int i = 0; i < ak->in.ndim; i++)
    ext[i] = ak->in.dim[i];
  so[z->d] = from * z->c, dor[z->d] = to * z->c, ext[z->d] = z->c;
  spk_block_end src = {(uint32_t)k, SPK_T_IN, &ak->in, so};
  spk_block_end dst = {(uint32_t)r, SPK_T_OUT, &ar->out, dor};
  return spk_plan_add_block(plan, &src, &dst, ext, z->esize, err);
}

static int zz_begin(const spk_op_args *const *args, int world, zz_ctx *z,
                    spk_err *err) {
  int rc = spk__agree_dim(args, world, 0, "zigzag dim", &z->d, err);
  if (rc == SPK_OK)
    rc = spk__same_in_shape(args, world, err);
  z->args = args;
  z->esize = spk_dtype_size(args[0]->dtype);
  return rc;
}

int spk_plan_zigzag_split(const spk_op_args *const *args, int world,
                          spk_plan *plan, spk_err *err) {
  zz_ctx z;
  int rc = zz_begin(args, world, &z, err);
  if (rc < 0)
    return rc;
  z.c = args[0]->in.dim[z.d] / (2 * (int64_t)world);
  int64_t last = 2 * (int64_t)world - 1;
  for (int r = 0; rc == SPK_OK && r < world; r++) {
    rc = copy_chunk(&z, r, r, r, 0, plan, err);
    if (rc == SPK_OK)
      rc = copy_chunk(&z, r, last - r, r, 1, plan, err);
  }
  return rc;
}

/* Every rank's output gets every rank's two chunks. */
int spk_plan_zigzag_gather(const spk_op_args *const *args, int world,
                           spk_plan *plan, spk_err *err) {
  zz_ctx z;
  int rc = zz_begin(args, world, &z, err);
  if (rc < 0)
    return rc;
  z.c = args[0]->in.dim[z.d] / 2;
  int64_t last = 2 * (int64_t)world - 1;
  for (int k = 0; rc == SPK_OK && k < world; k++) {
    const uint32_t *list;
    uint32_t n = spk_plan_partners(plan, (uint32_t)k, &list);
    for (uint32_t i = 0; rc == SPK_OK && i < n; i++) {
      int r = (int)SPK_PARTNER(list, i);
      rc = copy_chunk(&z, k, 0, r, k, plan, err);
      if (rc == SPK_OK)
        rc = copy_chunk(&z, k, 1, r, last - k, plan, err);
    }
  }
  return rc;
}
