/* Scaffolding shared by the planner suites (tests/unit/unit_plan_*.c): a
 * seeded random generator, shape index arithmetic, per-rank buffers, plan
 * executors that check every move before it runs, and expectations on
 * error statuses and messages. What makes a reference op-specific (where
 * each output element comes from) stays in each suite. */
#ifndef PTL_PLAN_TESTLIB_H
#define PTL_PLAN_TESTLIB_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "planner.h"

#define PTL_MAXW 100 /* most ranks of any suite (zigzag's world of 100) */
#define PTL_IN(r) ((r)*SPK_T_COUNT + SPK_T_IN)
#define PTL_OUT(r) ((r)*SPK_T_COUNT + SPK_T_OUT)
#define PTL_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- seeded random numbers (splitmix64) ------------------------------- */

void ptl_rng_seed(uint64_t seed);
uint64_t ptl_rng_next(void);
int64_t ptl_rng_range(int64_t lo, int64_t hi); /* inclusive */
void ptl_fill_random(uint8_t *p, size_t n);
/* n sizes: 0 one time in empty_odds, else 1..maxd. */
void ptl_random_dims(int64_t *dim, int n, int64_t empty_odds, int64_t maxd);
/* Every rank spells dims[k] (d of an nd-d tensor) from the end, d - nd,
 * half the time. */
void ptl_respell_dim(spk_op_args *args, int world, int k, int d, int nd);

/* Name of random case `it` of a seed, for failure messages: op (NULL for
 * none), world, ndim and the op's dim. */
#define PTL_TAG 128
void ptl_tag(char *tag, uint64_t seed, int it, const char *op, int w, int nd,
             int d);

/* One dtype of each size and kind; random cases cycle through them. */
extern const spk_dtype ptl_dtypes[8];

/* ---- shapes and elements -------------------------------------------- */

size_t ptl_numel(const spk_shape *s);
/* C-order index of element o of shape s, and back. */
void ptl_unravel(size_t o, const spk_shape *s, int64_t *idx);
size_t ptl_ravel(const int64_t *idx, const spk_shape *s);
/* Elements i of [0, n) with i % w == r: the split rule's piece r, found
 * by dealing the elements out one by one. */
int64_t ptl_dealt(int64_t n, int w, int r);
/* Grad scale flags that alternate: down for an even k, up for an odd. */
uint32_t ptl_scale_flags(int k);
/* Copy one element, scaled as the grad scale in flags says (float32 only,
 * one IEEE multiplication or division by world). */
void ptl_put(uint8_t *dst, const uint8_t *src, spk_dtype dt, uint32_t flags,
             int world);

/* ---- moves ------------------------------------------------------------ */

/* Highest byte + 1 a move touches on one side. */
uint64_t ptl_move_end(const spk_move *m, int dst_side);
/* Move i of a plan over `world` ranks must read an input and write an
 * output (on its own rank when own_rank), inside their sizes sz[PTL_IN(r)]
 * and sz[PTL_OUT(r)]. */
void ptl_check_move(const spk_move *m, size_t i, int world, const size_t *sz,
                    int own_rank, const char *tag);

/* ---- per-rank buffers ------------------------------------------------- */

/* b[PTL_IN(r)], b[PTL_OUT(r)]: rank r's tensors, sz[]: their bytes. */
typedef struct {
  int world;
  uint8_t *b[PTL_MAXW * SPK_T_COUNT];
  size_t sz[PTL_MAXW * SPK_T_COUNT];
} ptl_bufs;

/* Tensors of argp (one byte spare each). With fill, inputs get random
 * bytes in rank order; when argp[0] has flags, every 4th byte is masked
 * so that scaled float32 values stay finite (|x| < 2). */
void ptl_bufs_alloc(ptl_bufs *b, const spk_op_args *const *argp, int world,
                    int fill);
void ptl_bufs_free(ptl_bufs *b);
/* Every rank's input becomes a copy of rank 0's. */
void ptl_bufs_replicate_in(ptl_bufs *b);
/* The next op of argp takes prev's outputs as its inputs (borrowed); its
 * outputs are fresh and filled with 0xa5. ptl_bufs_chain_free frees them. */
void ptl_bufs_chain(ptl_bufs *next, const ptl_bufs *prev,
                    const spk_op_args *const *argp);
void ptl_bufs_chain_free(ptl_bufs *next);

/* ---- executors -------------------------------------------------------- */

/* Build the plan of argp and run it with spk_plan_exec on bases; every
 * move must pass ptl_check_move and the plan must write exactly the
 * outputs' bytes. */
void ptl_exec(const spk_op_args *const *argp, int world, uint8_t **bases,
              const size_t *sz, int own_rank, const char *tag);

/* Where element idx (a C-order index, changed in place) of rank r's
 * output comes from in case c: the source rank, with idx turned into an
 * index of that rank's input. */
typedef int (*ptl_source_fn)(const void *c, int r, int64_t *idx);
/* The naive reference: want[r] gets every output element of rank r, one
 * by one, from the inputs in[] where src says, scaled as argp[0]'s flags
 * say (ptl_put). */
void ptl_naive(const spk_op_args *const *argp, int world, ptl_source_fn src,
               const void *c, uint8_t *const *in, uint8_t **want);
/* Random inputs; run the plan twice (outputs prefilled 0x00, then 0xff,
 * so an unwritten byte shows) and compare every output byte with
 * ptl_naive's. */
void ptl_run_case(const spk_op_args *const *argp, int world, ptl_source_fn src,
                  const void *c, int own_rank, const char *tag);

/* One copy per byte: every move passes ptl_check_move and every output
 * byte is written exactly once. */
void ptl_check_moves(const spk_plan *p, const ptl_bufs *b, const char *tag);
/* Build the plan of argp, ptl_check_moves it, run it with outputs
 * prefilled with two patterns (a byte never written shows up) and compare
 * each output with want[r]. Outputs keep the last run's bytes. */
void ptl_run_plan(const spk_op_args *const *argp, ptl_bufs *b,
                  uint8_t *const *want, const char *tag);

/* ---- expected errors -------------------------------------------------- */

/* got must be rc, with msg holding both needles (NULL: any). */
void ptl_expect(int got, const char *msg, int rc, const char *n1,
                const char *n2);
/* spk_plan_build of argp must give rc, its message n1 and n2. */
void ptl_expect_build(const spk_op_args *const *argp, int world, int rc,
                      const char *n1, const char *n2);
/* spk_args_check of one rank alone must give rc, its message needle. */
void ptl_expect_check(const spk_op_args *a, int world, int rank, int rc,
                      const char *needle);

/* ---- suite ------------------------------------------------------------ */

/* Run tests[0..n) as suite `name` (one test case "core" with the given
 * timeout); the exit status of main. */
int ptl_run_suite(const char *name, double timeout, const TTest *const *tests,
                  size_t n);

#endif
