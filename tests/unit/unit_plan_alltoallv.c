/* The all-to-all-v planner (kernels/plan_alltoallv.c), and Megatron's
 * sp2hp / hp2sp as all-to-all plans (kernels/plan_alltoall.c) against
 * their own formulas. Plans run on per-rank byte arrays and are compared
 * with naive references written with per-element index loops that share
 * no code with the planners; every plan must copy each output byte exactly
 * once, straight from an input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_testlib.h"

#define MAXW 8

/* One all_to_all_v: m[i][j] rows go from rank i to rank j; each rank has
 * its own copies of its lists, as on the wire. */
typedef struct {
  int world, nd;
  int64_t m[MAXW][MAXW];
  int64_t sizes[MAXW][MAXW], sizes2[MAXW][MAXW];
  spk_op_args args[MAXW];
  const spk_op_args *argp[MAXW];
} vcase;

/* rest[]: dims 1.. of every tensor. */
static void mk(vcase *c, int world, int nd, const int64_t *rest,
               const int64_t (*m)[MAXW], spk_dtype dt) {
  memset(c, 0, sizeof(*c));
  c->world = world, c->nd = nd;
  for (int i = 0; i < world; i++)
    for (int j = 0; j < world; j++)
      c->m[i][j] = m[i][j];
  for (int r = 0; r < world; r++) {
    spk_op_args *a = &c->args[r];
    a->op = SPK_OP_ALL_TO_ALL_V, a->dtype = dt;
    a->in.ndim = a->out.ndim = nd;
    for (int i = 1; i < nd; i++)
      a->in.dim[i] = a->out.dim[i] = rest[i - 1];
    for (int k = 0; k < world; k++) {
      c->sizes[r][k] = m[r][k], a->in.dim[0] += m[r][k];
      c->sizes2[r][k] = m[k][r], a->out.dim[0] += m[k][r];
    }
    a->nsizes = a->nsizes2 = world;
    a->sizes = c->sizes[r], a->sizes2 = c->sizes2[r];
    c->argp[r] = a;
  }
}

/* Output row q of rank j: find the source i whose block holds it, then the
 * row within i's input; a row is the same `row` bytes everywhere, copied
 * byte by byte. */
static void naive_v(const vcase *c, uint8_t *const *in, int j, uint8_t *out) {
  size_t row = spk_dtype_size(c->args[0].dtype);
  for (int i = 1; i < c->nd; i++)
    row *= (size_t)c->args[0].in.dim[i];
  for (int64_t q = 0; q < c->args[j].out.dim[0]; q++) {
    int i = 0;
    int64_t at = 0;
    while (q >= at + c->m[i][j])
      at += c->m[i][j], i++;
    int64_t src_row = q - at;
    for (int k = 0; k < j; k++)
      src_row += c->m[i][k];
    for (size_t b = 0; b < row; b++)
      out[(size_t)q * row + b] = in[i][(size_t)src_row * row + b];
  }
}

/* ---- all_to_all_v ------------------------------------------------------ */

static void run_vcase(const vcase *c, const char *tag) {
  ptl_bufs b;
  ptl_bufs_alloc(&b, c->argp, c->world, 1);
  uint8_t *in[MAXW], *want[MAXW];
  for (int r = 0; r < c->world; r++)
    in[r] = b.b[PTL_IN(r)];
  for (int r = 0; r < c->world; r++) {
    want[r] = malloc(b.sz[PTL_OUT(r)] + 1);
    naive_v(c, in, r, want[r]);
  }
  ptl_run_plan(c->argp, &b, want, tag);
  for (int r = 0; r < c->world; r++)
    free(want[r]);
  ptl_bufs_free(&b);
}

START_TEST(test_random) {
  const uint64_t seed = 0xa2a7eedull;
  ptl_rng_seed(seed);
  for (int it = 0; it < 600; it++) {
    int world = (int)ptl_rng_range(1, MAXW), nd = (int)ptl_rng_range(1, 5);
    if (it % 20 == 19)
      nd = (int)ptl_rng_range(6, 8);
    int64_t rest[SPK_MAX_DIMS], m[MAXW][MAXW];
    /* now and then an empty row */
    ptl_random_dims(rest, nd - 1, 40, nd > 5 ? 2 : 3);
    for (int i = 0; i < world; i++) /* many empty blocks */
      ptl_random_dims(m[i], world, 3, 4);
    vcase c;
    mk(&c, world, nd, rest, (const int64_t(*)[MAXW])m, ptl_dtypes[it % 8]);
    int ndims = (int)ptl_rng_range(0, 1); /* the same on every rank */
    for (int r = 0; r < world; r++) { /* dim 0 spelled from either end */
      c.args[r].ndims = ndims;
      c.args[r].dims[0] = ndims && ptl_rng_range(0, 1) ? -nd : 0;
    }
    char tag[96];
    snprintf(tag, sizeof(tag), "seed %#llx case %d (w %d nd %d)",
             (unsigned long long)seed, it, world, nd);
    run_vcase(&c, tag);
  }
}
END_TEST

/* Worked by hand: w 2, rows of 2 bytes. Rank 0 sends 1 row to itself and 2
 * to rank 1; rank 1 sends 3 to rank 0 and none to itself. */
START_TEST(test_by_hand) {
  static const int64_t m[MAXW][MAXW] = {{1, 2}, {3, 0}};
  vcase c;
  mk(&c, 2, 2, (const int64_t[]){2}, m, SPK_U8);
  ptl_bufs b;
  ptl_bufs_alloc(&b, c.argp, 2, 1);
  memcpy(b.b[PTL_IN(0)], (const uint8_t[]){0, 1, 2, 3, 4, 5}, 6);
  memcpy(b.b[PTL_IN(1)], (const uint8_t[]){6, 7, 8, 9, 10, 11}, 6);
  uint8_t w0[] = {0, 1, 6, 7, 8, 9, 10, 11}, w1[] = {2, 3, 4, 5};
  uint8_t *want[2] = {w0, w1}, got[8];
  uint8_t *in[2] = {b.b[PTL_IN(0)], b.b[PTL_IN(1)]};
  naive_v(&c, in, 0, got);
  ck_assert(memcmp(got, w0, 8) == 0);
  ptl_run_plan(c.argp, &b, want, "a2av by hand");
  ptl_bufs_free(&b);
  /* Nothing moves at all. */
  static const int64_t z[MAXW][MAXW] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
  mk(&c, 3, 3, (const int64_t[]){2, 3}, z, SPK_F64);
  run_vcase(&c, "all empty");
}
END_TEST

/* spk_plan_build must give rc, with a message holding both needles. */
static void expect_build(vcase *c, int rc, const char *n1, const char *n2) {
  ptl_expect_build(c->argp, c->world, rc, n1, n2);
}

static const int64_t M3[MAXW][MAXW] = {{1, 2, 0}, {0, 1, 3}, {2, 2, 2}};
static const int64_t R4[] = {4};

START_TEST(test_bad_dims) {
  vcase c;
  mk(&c, 3, 2, R4, M3, SPK_F32);
  c.args[1].ndims = 1, c.args[1].dims[0] = 1;
  expect_build(&c, SPK_EINVAL, "dim 0, got dim 1", NULL);
  mk(&c, 3, 2, R4, M3, SPK_F32);
  c.args[2].ndims = 1, c.args[2].dims[0] = -1; /* dim 1 of a 2-d tensor */
  expect_build(&c, SPK_EINVAL, "got dim -1", NULL);
  mk(&c, 3, 2, R4, M3, SPK_F32);
  c.args[0].ndims = 1, c.args[0].dims[0] = 2;
  expect_build(&c, SPK_EINVAL, "all_to_all_v dim 2", NULL);
  mk(&c, 3, 2, R4, M3, SPK_F32);
  for (int r = 0; r < 3; r++)
    c.args[r].ndims = 2;
  expect_build(&c, SPK_EINVAL, "at most 1 dim", "got 2");
}
END_TEST

START_TEST(test_bad_lists) {
  vcase c;
  mk(&c, 3, 2, R4, M3, SPK_F32);
  c.args[1].nsizes = 2;
  expect_build(&c, SPK_EINVAL, "rank 1: sizes", "2 entries, world size is 3");
  mk(&c, 3, 2, R4, M3, SPK_F32);
  c.args[2].nsizes2 = 0, c.args[2].sizes2 = NULL;
  expect_build(&c, SPK_EINVAL, "rank 2: sizes2", "0 entries");
  mk(&c, 3, 2, R4, M3, SPK_F32);
  c.args[0].in.dim[0] = 4;
  expect_build(&c, SPK_EINVAL, "rank 0: sizes", "sums to 3 but its input "
               "has 4 rows");
  mk(&c, 3, 2, R4, M3, SPK_F32);
  c.args[1].out.dim[0] = 9;
  expect_build(&c, SPK_EINVAL, "rank 1: sizes2", "sums to 5 but its output "
               "has 9 rows");
  mk(&c, 3, 2, R4, M3, SPK_F32);
  c.sizes[2][0] = -1;
  expect_build(&c, SPK_EINVAL, "negative", NULL);
}
END_TEST

START_TEST(test_mismatch) {
  vcase c;
  /* Rank 0 sends 1 row to rank 2, which expects none (rank 0's input grows
   * by 1, so each rank is consistent alone). */
  mk(&c, 3, 2, R4, M3, SPK_F32);
  c.sizes[0][2] = 1, c.args[0].in.dim[0] += 1;
  expect_build(&c, SPK_EMISMATCH, "rank 0 sends 1 rows to rank 2",
               "rank 2 expects 0 rows from rank 0");
  mk(&c, 3, 2, R4, M3, SPK_F32);
  c.sizes2[1][2] = 3, c.args[1].out.dim[0] += 1;
  expect_build(&c, SPK_EMISMATCH, "rank 2 sends 2 rows to rank 1 (its "
               "sizes[1])", "rank 1 expects 3 rows from rank 2 (its "
               "sizes2[2])");
  mk(&c, 3, 3, (const int64_t[]){4, 2}, M3, SPK_F32);
  c.args[2].in.dim[2] = c.args[2].out.dim[2] = 3;
  expect_build(&c, SPK_EMISMATCH, "input dim 2", "rank 2 has 3");
  mk(&c, 3, 2, R4, M3, SPK_F32);
  c.args[1].dtype = SPK_I32;
  expect_build(&c, SPK_EMISMATCH, "dtype", "rank 1");
}
END_TEST

START_TEST(test_bad_output) {
  vcase c;
  mk(&c, 3, 3, (const int64_t[]){4, 2}, M3, SPK_F32);
  c.args[1].out.dim[1] = 5;
  expect_build(&c, SPK_EINVAL, "rank 1: output shape [5, 5, 2]",
               "should be [5, 4, 2]");
  mk(&c, 3, 2, R4, M3, SPK_F32);
  c.args[0].out.ndim = 3, c.args[0].out.dim[2] = 1;
  expect_build(&c, SPK_EINVAL, "rank 0: output shape", "should be [3, 4]");
}
END_TEST

/* ---- Megatron's sp2hp / hp2sp as all_to_all plans ---------------------- */

static void mk_a2a(spk_op_args *a, const spk_op_args **argp, int world,
                   int s, int g, const int64_t *in, const int64_t *out) {
  for (int r = 0; r < world; r++) {
    memset(&a[r], 0, sizeof(a[r]));
    a[r].op = SPK_OP_ALL_TO_ALL, a[r].dtype = SPK_F32;
    a[r].ndims = 2, a[r].dims[0] = s, a[r].dims[1] = g;
    a[r].in.ndim = a[r].out.ndim = 2;
    a[r].in.dim[0] = in[0], a[r].in.dim[1] = in[1];
    a[r].out.dim[0] = out[0], a[r].out.dim[1] = out[1];
    argp[r] = &a[r];
  }
}

/* Megatron's formulas, element by element, with H = w*h and N = w*n.
 * sp2hp: [n, H] -> [N, h], out_r[j*n + a][b] = x_j[a][r*h + b];
 * hp2sp: [N, h] -> [n, H], out_r[a][j*h + b] = x_j[r*n + a][b]. */
static void megatron(int w, int sp2hp, int64_t n, int64_t h) {
  spk_op_args a[MAXW];
  const spk_op_args *argp[MAXW] = {0};
  int64_t sp[2] = {n, w * h}, hp[2] = {w * n, h};
  /* Sequence to heads scatters the hidden dim and gathers the sequence. */
  mk_a2a(a, argp, w, sp2hp ? 1 : 0, sp2hp ? 0 : 1, sp2hp ? sp : hp,
         sp2hp ? hp : sp);
  ptl_bufs b;
  ptl_bufs_alloc(&b, argp, w, 1);
  uint8_t *want[MAXW];
  int64_t cols = a[0].out.dim[1];
  for (int r = 0; r < w; r++) {
    want[r] = malloc(b.sz[PTL_OUT(r)] + 1);
    for (int64_t q = 0; q < a[0].out.dim[0]; q++)
      for (int64_t k = 0; k < cols; k++) {
        int j = (int)(sp2hp ? q / n : k / h);
        int64_t src = sp2hp ? (q % n) * w * h + r * h + k
                            : (r * n + q) * h + k % h;
        memcpy(want[r] + 4 * (q * cols + k), b.b[PTL_IN(j)] + 4 * src, 4);
      }
  }
  ptl_run_plan(argp, &b, want, sp2hp ? "sp2hp" : "hp2sp");
  for (int r = 0; r < w; r++)
    free(want[r]);
  ptl_bufs_free(&b);
}

START_TEST(test_megatron) {
  ptl_rng_seed(7);
  for (int w = 1; w <= MAXW; w++)
    for (int64_t n = 1; n <= 3; n++)
      for (int64_t h = 1; h <= 3; h++) {
        megatron(w, 1, n, h);
        megatron(w, 0, n, h);
      }
}
END_TEST

int main(void) {
  const TTest *tests[] = {test_random,    test_by_hand,  test_bad_dims,
                          test_bad_lists, test_mismatch, test_bad_output,
                          test_megatron};
  return ptl_run_suite("plan_alltoallv", 600, tests, PTL_LEN(tests));
}
