/* all_to_all (Ulysses): scatter along dim s, gather along dim g. Rank r's
 * output is the concatenation along g, in rank order, of piece r (by the
 * split rule) along s of every rank's input. Every rank holds the same size
 * S along s; along g rank j holds piece j of the gather size G, so ranks may
 * differ there when G does not divide evenly (the seeds then demand
 * gather_size). Aligned and unaligned cases are one code path.
 *
 * Each byte is copied once, from the source rank's input straight to its
 * place in the destination rank's output: the block (piece r along s) x
 * (all of rank j's g) is a strided block on both sides, so the seeds'
 * permute / contiguous / permute staging has no counterpart here. */
#include <string.h>

#include "planner_internal.h"
#include "split_rule.h"

/* What the whole world must share, normalized. */
typedef struct {
  int s, g;     /* scatter and gather dims */
  int64_t S, G; /* sizes along s (every input) and g (every output) */
} a2a_geom;

static int a2a_dims(const spk_op_args *a, int *s_p, int *g_p, spk_err *err) {
  if (a->ndims != 2)
    return spk_err_set(err, SPK_EINVAL,
                       "all_to_all takes 2 dims (scatter, gather), got %d",
                       a->ndims);
  int rc = spk_dim_normalize(a->dims[0], a->in.ndim, "scatter dim", s_p, err);
  if (rc == SPK_OK)
    rc = spk_dim_normalize(a->dims[1], a->in.ndim, "gather dim", g_p, err);
  if (rc == SPK_OK && *s_p == *g_p)
    rc = spk_err_set(err, SPK_EINVAL,
                     "scatter dim %d and gather dim %d are the same dim (%d) "
                     "of a %d-d tensor",
                     a->dims[0], a->dims[1], *s_p, a->in.ndim);
  return rc;
}

/* G is gather_size, or when that is 0 this rank's gather size times w (the
 * seeds' default, right only when every rank holds the same size). */
static int gather_total(const spk_op_args *a, int world, int g, int64_t *G_p,
                        spk_err *err) {
  if (a->scalar < 0)
    return spk_err_set(err, SPK_EINVAL, "gather_size %lld is negative",
                       (long long)a->scalar);
  if (a->scalar > 0) {
    *G_p = a->scalar;
    return SPK_OK;
  }
  if (a->in.dim[g] > INT64_MAX / world)
    return spk_err_set(err, SPK_EINVAL,
                       "gather dim %d size %lld times world size %d "
                       "overflows int64",
                       g, (long long)a->in.dim[g], world);
  *G_p = a->in.dim[g] * world;
  return SPK_OK;
}

/* Rank j's size along g must be piece j of G: what lets every rank place
 * every other rank's block without being told its size. */
static int check_piece(const spk_op_args *a, int world, int rank,
                       const a2a_geom *ge, spk_err *err) {
  int64_t want = spk_split_size(ge->G, world, rank);
  if (a->in.dim[ge->g] == want)
    return SPK_OK;
  return spk_err_set(err, SPK_EINVAL,
                     "rank %d holds %lld along gather dim %d, expected %lld "
                     "(piece %d of gather_size %lld over %d ranks)%s",
                     rank, (long long)a->in.dim[ge->g], ge->g,
                     (long long)want, rank, (long long)ge->G, world,
                     a->scalar ? "" : "; unequal sizes need gather_size");
}

static int check_out(const spk_op_args *a, int world, int rank,
                     const a2a_geom *ge, spk_err *err) {
  spk_shape want = a->in;
  want.dim[ge->s] = spk_split_size(ge->S, world, rank);
  want.dim[ge->g] = ge->G;
  return spk__out_equals(a, rank, &want, err);
}

int spk_check_all_to_all(const spk_op_args *a, int world, int rank,
                         spk_err *err) {
  a2a_geom ge;
  int rc = a2a_dims(a, &ge.s, &ge.g, err);
  if (rc == SPK_OK)
    rc = gather_total(a, world, ge.g, &ge.G, err);
  if (rc < 0)
    return rc;
  ge.S = a->in.dim[ge.s];
  rc = check_piece(a, world, rank, &ge, err);
  if (rc < 0)
    return rc;
  return check_out(a, world, rank, &ge, err);
}

/* Every dim but g is the same on every rank (s included: S is shared). */
static int agree_shape(const spk_op_args *const *args, int r,
                       const a2a_geom *ge, spk_err *err) {
  const spk_shape *i0 = &args[0]->in, *ir = &args[r]->in;
  for (int i = 0; i < i0->ndim; i++)
    if (i != ge->g && ir->dim[i] != i0->dim[i])
      return spk_err_set(err, SPK_EMISMATCH,
                         "ranks disagree on input dim %d%s: rank 0 has %lld, "
                         "rank %d has %lld",
                         i, i == ge->s ? " (the scatter dim)" : "",
                         (long long)i0->dim[i], r, (long long)ir->dim[i]);
  return SPK_OK;
}

/* One block per (source j, destination r): piece r along s of x_j, all of
 * x_j along g, landing at piece j of G along g of out_r (rank j holds
 * exactly that piece, checked). */
static int add_moves(const spk_op_args *const *args, int world,
                     const a2a_geom *ge, spk_plan *plan, spk_err *err) {
  size_t esize = spk_dtype_size(args[0]->dtype);
  int64_t src_at[SPK_MAX_DIMS] = {0}, dst_at[SPK_MAX_DIMS] = {0};
  int64_t ext[SPK_MAX_DIMS];
  for (int r = 0; r < world; r++) {
    src_at[ge->s] = spk_split_offset(ge->S, world, r);
    spk_block_end dst = {(uint32_t)r, SPK_T_OUT, &args[r]->out, dst_at};
    const uint32_t *list;
    uint32_t n = spk_plan_partners(plan, (uint32_t)r, &list);
    for (uint32_t i = 0; i < n; i++) {
      uint32_t j = SPK_PARTNER(list, i);
      spk_block_end src = {j, SPK_T_IN, &args[j]->in, src_at};
      memcpy(ext, args[j]->in.dim, sizeof(ext));
      ext[ge->s] = spk_split_size(ge->S, world, r);
      dst_at[ge->g] = spk_split_offset(ge->G, world, (int)j);
      int rc = spk_plan_add_block(plan, &src, &dst, ext, esize, err);
      if (rc < 0)
        return rc;
    }
  }
  return SPK_OK;
}

int spk_plan_all_to_all(const spk_op_args *const *args, int world,
                        spk_plan *plan, spk_err *err) {
  a2a_geom ge;
  int rc = spk__agree_dim(args, world, 0, "scatter dim", &ge.s, err);
  if (rc == SPK_OK)
    rc = spk__agree_dim(args, world, 1, "gather dim", &ge.g, err);
  /* Rank 0's G: with gather_size 0 a rank of another size is then named by
   * check_piece instead of planning a G that differs per rank. */
  if (rc == SPK_OK)
    rc = gather_total(args[0], world, ge.g, &ge.G, err);
  if (rc < 0)
    return rc;
  ge.S = args[0]->in.dim[ge.s];
  for (int r = 0; r < world; r++) {
    rc = agree_shape(args, r, &ge, err);
    if (rc == SPK_OK)
      rc = check_piece(args[r], world, r, &ge, err);
    /* Each rank checked its output against its own S and G; checked again
     * now that they are known to be the world's, as the moves rely on it. */
    if (rc == SPK_OK)
      rc = check_out(args[r], world, r, &ge, err);
    if (rc < 0)
      return rc;
  }
  return add_moves(args, world, &ge, plan, err);
}

/* Output: piece r of S along the scatter dim, G along the gather dim. */
int spk_out_all_to_all(const spk_op_args *a, int world, int rank,
                       spk_shape *out, spk_err *err) {
  int s, g;
  int rc = spk_dim_normalize(a->dims[0], a->in.ndim, "scatter dim", &s, err);
  if (rc == SPK_OK)
    rc = spk_dim_normalize(a->dims[1], a->in.ndim, "gather dim", &g, err);
  if (rc < 0)
    return rc;
  out->dim[s] = spk_split_size(a->in.dim[s], world, rank);
  out->dim[g] = a->scalar ? a->scalar : spk__times_world(a->in.dim[g], world);
  return SPK_OK;
}
