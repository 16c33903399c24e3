/* What the op suites (test_ops_copy.c, test_ops_reduce.c) share: the split
 * rule, 16-bit float conversions, test data, row copies and the element
 * comparison their naive references are built from, and one rank's client,
 * group and buffer. Nothing here comes from kernels/. */
#ifndef OPR_OPS_REF_H
#define OPR_OPS_REF_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "harness.h"

enum { OPR_SEED = 42, OPR_SEED_GRAD = 77, OPR_SEED_GRAD2 = 91 };
#define OPR_BUF_BYTES (16u << 20) /* each rank's buffer */
#define OPR_MAXW 128              /* most ranks of a run (the scale suite) */

/* The daemon, started around every test, and the group name of the run
 * in progress (case + world). */
extern spt_daemon opr_daemon;
/* Set (SPT_NODES=n in the environment): the suite runs across n daemons
 * peering over UCX, rank r on node r % n, worlds n and 2n. */
extern spt_nodes opr_nodes;
extern char opr_gname[64];

/* ---- references: sizes, 16-bit floats, row copies ------------------- */

size_t opr_numel(const int64_t *s, int nd);
/* The split rule: piece r of n over w ranks, and where it starts. */
int64_t opr_rule(int64_t n, int w, int r);
int64_t opr_rule_off(int64_t n, int w, int r);
/* How n is cut over w ranks: the rule, the rule reversed (small pieces
 * first), or with rank 1 holding nothing. */
enum { OPR_P_RULE, OPR_P_REV, OPR_P_HOLE };
void opr_pieces(int pat, int64_t n, int w, int64_t *sz);
int64_t opr_sum_before(const int64_t *sz, int r);

float opr_f16_to_f(uint16_t h);
uint16_t opr_f_to_f16(float f); /* round to nearest even */
float opr_bf16_to_f(uint16_t h);
uint16_t opr_f_to_bf16(float f); /* round to nearest even */

/* Test data: spt_fill's; 16-bit floats get its float values (multiples of
 * 1/64 in [-32, 32), exact in f16, rounded once in bf16), not raw bits, so
 * scaled copies stay finite. */
void opr_fill(void *p, spc_dtype dt, size_t n, uint64_t seed, int rank);
/* A fresh malloc'd copy of opr_fill's data (one byte spare). */
void *opr_fresh(spc_dtype dt, size_t n, uint64_t seed, int rank);
/* Grad scale of n elements in place: one IEEE x * w or x / w in float
 * (16-bit floats: convert, operate, round back). */
void opr_scale_ref(spc_dtype dt, void *p, size_t n, int scale, int w);
/* A tensor of shape s seen as [outer, s[d], inner]. */
void opr_around(const int64_t *s, int nd, int d, int64_t *outer,
                int64_t *inner);
/* Rows [so, so + len) of src ([outer, sD, inner]) to rows [dof, ...) of
 * dst ([outer, dD, inner]). */
void opr_rows_copy(void *dst, int64_t dD, int64_t dof, const void *src,
                   int64_t sD, int64_t so, int64_t len, int64_t outer,
                   int64_t inner, size_t es);
/* Bitwise comparison of n elements; prints the first difference and the
 * count. 1 when they differ. */
int opr_expect_same(int rank, const char *what, spc_dtype dt, const void *got,
                    const void *want, size_t n);
/* A dim counted from the end (< 0) as one from the start. */
int opr_norm(int d, int nd);

/* ---- one rank's connection, group and shared buffer ----------------- */

typedef struct {
  spc_client *c;
  spc_group *g;
  spc_buffer *buf;
  size_t used;
  int rank, world;
} opr_rk;

/* The node rank runs on: r % n across n nodes (SPT_NODES), else 0. */
int opr_node_of(int rank);

/* Connect to opr_daemon, join group opr_gname, allocate the buffer. */
int opr_rk_open(opr_rk *k, int rank, int world);
/* Carve a tensor out of the buffer, filled with garbage (0xEE bytes). */
void *opr_rk_tensor(opr_rk *k, spc_tensor *t, spc_dtype dt, int nd,
                    const int64_t *shape);
/* Free, leave, disconnect; returns bad. */
int opr_rk_close(opr_rk *k, int bad);
/* Report a failed op; returns 1. */
int opr_op_failed(opr_rk *k, const char *op, int rc);

/* ---- running cases -------------------------------------------------- */

/* Run fn on `world` ranks for world = 2, 3, 4 (across n nodes: n and 2n;
 * SPT_WORLD=w in the environment: w only); a failed world is counted and
 * named, the remaining ones still run. */
int opr_run_worlds(const char *name, spt_rank_fn fn, void *arg);

/* Every case of table (a struct with a `name`) for world = 2, 3, 4. */
#define OPR_RUN_TABLE(table, fn)                                               \
  do {                                                                         \
    int failed_ = 0;                                                           \
    for (size_t i_ = 0; i_ < sizeof(table) / sizeof(table[0]); i_++)           \
      failed_ += opr_run_worlds(table[i_].name, fn, &table[i_]);               \
    ck_assert_msg(failed_ == 0, "%d case runs failed (see stderr)", failed_);  \
  } while (0)

/* Run tests[0..n) as suite `name` (one test case of the same name, a
 * daemon started and stopped around each test); main's exit status. */
int opr_run_suite(const char *name, const TTest *const *tests, size_t n);

#endif
