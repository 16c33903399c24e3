/* Conformance against the seed libraries, collectives: golden vectors made
 * by running the seeds' own code (imported by scripts/conformance_import.py
 * into $SPC_TEST_DATA/conformance/ws2/cases.txt) are replayed through a
 * private spcolld by the runner of conformance_cases.c. For each case every
 * rank joins a group named after it, loads its input, runs the forward
 * "program" (one or more of our ops, below), compares the output bytes
 * exactly, then runs the backward on the recorded gradout and compares
 * gradin. Batch preparation cases are test_conformance_batch.c's.
 *
 * One line per failing case, then "conformance: N passed, N failed, N
 * skipped"; skipped cases are not passes. The suite fails if any case
 * fails. */
#include <check.h>
#include <string.h>

#include "check_run.h"
#include "conformance_cases.h"
#include "harness.h"



/* The seeds' functions in our API, one entry per op of cases.txt. */
static int op_copy(spc_group *g, conf_t *s, conf_t *d, const conf_args *a) {
  (void)g, (void)a; /* identity forward (Megatron copy_to): local */
  if (s == NULL || d == NULL || conf_numel(s) != conf_numel(d))
    return CONF_EBADSTEP;
  memcpy(spc_tensor_data(d), spc_tensor_data(s),
         conf_numel(s) * spc_dtype_size(s->dtype));
  return SPC_OK;
}
static int op_all_reduce(spc_group *g, conf_t *s, conf_t *d,
                         const conf_args *a) {
  (void)a; /* into a separate output: Megatron's in-place form is a bug */
  return spc_all_reduce(g, s, d, SPC_SUM);
}
static int op_split(spc_group *g, conf_t *s, conf_t *d, const conf_args *a) {
  return spc_split(g, s, d, a->dim, CONF_LIST(a));
}
static int op_split_bwd(spc_group *g, conf_t *s, conf_t *d,
                        const conf_args *a) {
  return spc_split_backward(g, s, d, a->dim, CONF_LIST(a), a->scale);
}
static int op_all_gather(spc_group *g, conf_t *s, conf_t *d,
                         const conf_args *a) {
  return spc_all_gather(g, s, d, a->dim, CONF_LIST(a));
}
static int op_ag_bwd_own(spc_group *g, conf_t *s, conf_t *d,
                         const conf_args *a) {
  return spc_all_gather_backward_own(g, s, d, a->dim, CONF_LIST(a), a->scale);
}
static int op_ag_bwd_sum(spc_group *g, conf_t *s, conf_t *d,
                         const conf_args *a) {
  return spc_all_gather_backward_sum(g, s, d, a->dim, CONF_LIST(a));
}
static int op_reduce_scatter(spc_group *g, conf_t *s, conf_t *d,
                             const conf_args *a) {
  return spc_reduce_scatter(g, s, d, a->dim, CONF_LIST(a));
}
static int op_a2a(spc_group *g, conf_t *s, conf_t *d, const conf_args *a) {
  return spc_all_to_all(g, s, d, a->s, a->g, a->n);
}
static int op_a2a_bwd(spc_group *g, conf_t *s, conf_t *d, const conf_args *a) {
  return spc_all_to_all_backward(g, s, d, a->s, a->g, a->n);
}
static int op_a2av(spc_group *g, conf_t *s, conf_t *d, const conf_args *a) {
  return spc_all_to_all_v(g, s, d, a->list, a->list2);
}
static int op_sp2hp(spc_group *g, conf_t *s, conf_t *d, const conf_args *a) {
  (void)a;
  return spc_sp2hp(g, s, d);
}
static int op_hp2sp(spc_group *g, conf_t *s, conf_t *d, const conf_args *a) {
  (void)a;
  return spc_hp2sp(g, s, d);
}
static int op_zz_split(spc_group *g, conf_t *s, conf_t *d, const conf_args *a) {
  return spc_zigzag_split(g, s, d, a->dim);
}
static int op_zz_split_bwd(spc_group *g, conf_t *s, conf_t *d,
                           const conf_args *a) {
  return spc_zigzag_split_backward(g, s, d, a->dim);
}
static int op_zz_gather(spc_group *g, conf_t *s, conf_t *d,
                        const conf_args *a) {
  return spc_zigzag_gather(g, s, d, a->dim);
}
static int op_zz_gather_bwd(spc_group *g, conf_t *s, conf_t *d,
                            const conf_args *a) {
  return spc_zigzag_gather_backward(g, s, d, a->dim);
}
static int op_pk_split(spc_group *g, conf_t *s, conf_t *d, const conf_args *a) {
  return spc_packed_split(g, s, d, a->dim, a->list, a->nlist);
}
static int op_pk_split_bwd(spc_group *g, conf_t *s, conf_t *d,
                           const conf_args *a) {
  return spc_packed_split_backward(g, s, d, a->dim, a->list, a->nlist);
}
static int op_pk_gather(spc_group *g, conf_t *s, conf_t *d,
                        const conf_args *a) {
  return spc_packed_gather(g, s, d, a->dim, a->list, a->nlist);
}
static int op_pk_gather_bwd(spc_group *g, conf_t *s, conf_t *d,
                            const conf_args *a) {
  return spc_packed_gather_backward(g, s, d, a->dim, a->list, a->nlist);
}

/* Op names of cases.txt: op_NAME above. */
static const conf_op op_table[] = {
    CONF_OP(copy), CONF_OP(all_reduce), CONF_OP(reduce_scatter),
    CONF_OP(split), CONF_OP(split_bwd), CONF_OP(all_gather),
    CONF_OP(ag_bwd_own), CONF_OP(ag_bwd_sum),
    CONF_OP(a2a), CONF_OP(a2a_bwd), CONF_OP(a2av), CONF_OP(sp2hp),
    CONF_OP(hp2sp),
    CONF_OP(zz_split), CONF_OP(zz_split_bwd), CONF_OP(zz_gather),
    CONF_OP(zz_gather_bwd),
    CONF_OP(pk_split), CONF_OP(pk_split_bwd), CONF_OP(pk_gather),
    CONF_OP(pk_gather_bwd),
};

int main(void) {
  return conf_main("conformance", "cases.txt", "conformance", op_table,
                   sizeof(op_table) / sizeof(op_table[0]), 900);
}
