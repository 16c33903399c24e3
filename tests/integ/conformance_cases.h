/* conformance_cases.h — the shared runner of the seed conformance suites.
 *
 * scripts/conformance_import.py turns the seeds' golden vectors into case
 * files under $SPC_TEST_DATA/conformance/ws<W>/ (the format is in its
 * docstring). conf_run_file() reads one and replays every case through a
 * private spcolld: each rank of a case is a process that joins a group
 * named after the case, loads its inputs, runs the forward program (steps
 * looked up in the suite's op table, each calling our API), compares every
 * expected output and scalar result exactly, then runs the backward program
 * on the recorded gradout and compares the gradients.
 *
 * The suites are test_conformance.c (collectives) and
 * test_conformance_batch.c (batch preparation around them). The Makefile
 * links an integration suite from test_<name>.o and harness.o only, so each
 * suite compiles conformance_cases.c into itself (#include). */
#ifndef CONFORMANCE_CASES_H
#define CONFORMANCE_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "spcoll.h"

#define CONF_MAX_WORLD 8
#define CONF_MAX_LIST 64
#define CONF_KEY_LEN 48

/* A tensor of one rank: "t.RANK.KEY=FILE SHAPE [DTYPE]". KEY is ROLE or
 * ROLE.NAME; roles in and gradout are loaded, out and gradin are
 * expectations, any other role is scratch. */
typedef struct {
  int rank;
  char key[CONF_KEY_LEN];
  char file[96];                /* "" for a scratch tensor */
  spc_dtype dtype;              /* bool is SPC_UINT8 */
  int ndim;
  int64_t shape[SPC_MAX_DIMS];
} conf_tensor;

/* An expected scalar result of the forward: "r.RANK.NAME=VALUE". */
typedef struct {
  int rank;
  char key[CONF_KEY_LEN];
  int64_t value;
} conf_result;

typedef struct {
  char name[128];
  char op[96];
  int world;
  int ulysses, ring;            /* 0, 0 unless a *_with_cp case */
  spc_dtype dtype;              /* of the tensors that name none */
  int expect_einval;            /* the forward must fail with SPC_EINVAL */
  conf_tensor *t;               /* every rank's tensors */
  int nt;
  conf_result *res;
  int nres;
  char *fwd, *bwd;              /* steps separated by ';'; bwd may be NULL */
  char skip[128];               /* reason, or "" */
} conf_case;

/* Read every case of path into *cases_p. Returns the count, or -1 after
 * printing the bad line. Free with conf_free_cases. */
int conf_load_cases(const char *path, conf_case **cases_p);
void conf_free_cases(conf_case *cases, int n);

/* The arguments of a step "OP GROUP SRC>DST key=value...". */
typedef struct {
  int dim, s, g;
  int64_t n;
  spc_grad_scale scale;
  int64_t list[CONF_MAX_LIST], list2[CONF_MAX_LIST]; /* sizes|seqs|ins, outs */
  int nlist, nlist2;            /* -1: "-" (NULL) */
  int64_t fill, value, seq, keep, times;
  int64_t *res;                 /* DST "#NAME": where the result goes */
} conf_args;

typedef const spc_tensor conf_t;
/* One op of a suite: src and dst are NULL where the step names none. It
 * returns the API's status, or CONF_EBADSTEP when the case's tensors do
 * not fit the step (the importer's fault, reported as the runner's). */
typedef int (*conf_op_fn)(spc_group *g, conf_t *src, conf_t *dst,
                          const conf_args *a);
typedef struct {
  const char *name;
  conf_op_fn fn;
} conf_op;
#define CONF_EBADSTEP 1
#define CONF_OP(name) {#name, op_##name}
#define CONF_LIST(a) ((a)->nlist < 0 ? NULL : (a)->list)

size_t conf_numel(conf_t *t);
/* 1 when t has exactly the shape (ndim, shape). */
int conf_shape_is(conf_t *t, int ndim, const int64_t *shape);

/* Run every case of $SPC_TEST_DATA/conformance/<set>/<file> against the
 * daemon listening on socket, with the suite's ops. Prints a line per
 * failing or skipped case, then "<label>: N passed, N failed, N skipped".
 * Returns the number of failed cases, or -1 when the file is missing,
 * unreadable or empty. */
int conf_run_file(const char *socket, const char *set, const char *file,
                  const char *label, const conf_op *ops, size_t nops);

/* The whole test program of a case file: a private daemon, one Check test
 * running every case of `file`, the exit status. */
int conf_main(const char *suite, const char *file, const char *label,
              const conf_op *table, size_t ntable, int timeout_s);

#endif
