/* The named ops: each is spc_run of one constructor. Backward ops run the
 * op list's gradient of their forward op (spc__op_grad: its kind and the
 * seeds' scale); all_to_all's swaps its dims, all_gather's sum flavour is a
 * reduce_scatter. */
#include <string.h>

#include "client_internal.h"

int spc_split(spc_group *g, const spc_tensor *in, const spc_tensor *out,
              int dim, const int64_t *sizes) {
  spc_op op = spc_op_split(dim, sizes);
  return spc_run(g, &op, in, out);
}

int spc_all_gather(spc_group *g, const spc_tensor *in, const spc_tensor *out,
                   int dim, const int64_t *sizes) {
  spc_op op = spc_op_all_gather(dim, sizes);
  return spc_run(g, &op, in, out);
}

int spc_all_gather_async(spc_group *g, const spc_tensor *in,
                         const spc_tensor *out, int dim, const int64_t *sizes,
                         spc_request **req_p) {
  spc_op op = spc_op_all_gather(dim, sizes);
  return spc_start(g, &op, in, out, req_p);
}

int spc_all_to_all(spc_group *g, const spc_tensor *in, const spc_tensor *out,
                   int scatter_dim, int gather_dim, int64_t gather_size) {
  spc_op op = spc_op_all_to_all(scatter_dim, gather_dim, gather_size);
  return spc_run(g, &op, in, out);
}

int spc_all_to_all_v(spc_group *g, const spc_tensor *in, const spc_tensor *out,
                     const int64_t *in_splits, const int64_t *out_splits) {
  spc_op op = spc_op_all_to_all_v(in_splits, out_splits);
  return spc_run(g, &op, in, out);
}

/* [..., H] seen as [rows, H]: the same bytes, two dims. */
static int view_2d(const spc_tensor *t, spc_tensor *v) {
  if (t == NULL || t->buf == NULL || t->ndim < 1)
    return SPC_EINVAL;
  *v = *t;
  int64_t last = t->shape[t->ndim - 1], n = 1;
  for (int i = 0; i < t->ndim; i++)
    n *= t->shape[i];
  v->ndim = 2;
  v->shape[0] = last ? n / last : 0;
  v->shape[1] = last;
  return SPC_OK;
}

static int a2a_2d(spc_group *g, const spc_tensor *in, const spc_tensor *out,
                  int scatter_dim, int gather_dim) {
  spc_tensor vi, vo;
  if (view_2d(in, &vi) < 0 || view_2d(out, &vo) < 0)
    return g ? spc__fail(g->client, SPC_EINVAL, "tensor is NULL or has no "
                         "dims") : SPC_EINVAL;
  return spc_all_to_all(g, &vi, &vo, scatter_dim, gather_dim, 0);
}

int spc_sp2hp(spc_group *g, const spc_tensor *in, const spc_tensor *out) {
  return a2a_2d(g, in, out, 1, 0);
}

int spc_hp2sp(spc_group *g, const spc_tensor *in, const spc_tensor *out) {
  return a2a_2d(g, in, out, 0, 1);
}

int spc_all_reduce(spc_group *g, const spc_tensor *in, const spc_tensor *out,
                   spc_reduce_op red) {
  spc_op op = spc_op_all_reduce(red);
  return spc_run(g, &op, in, out);
}

int spc_reduce_scatter(spc_group *g, const spc_tensor *in,
                       const spc_tensor *out, int dim, const int64_t *sizes) {
  spc_op op = spc_op_reduce_scatter(dim, sizes);
  return spc_run(g, &op, in, out);
}

int spc_zigzag_split(spc_group *g, const spc_tensor *in, const spc_tensor *out,
                     int dim) {
  spc_op op = spc_op_zigzag_split(dim);
  return spc_run(g, &op, in, out);
}

int spc_zigzag_gather(spc_group *g, const spc_tensor *in,
                      const spc_tensor *out, int dim) {
  spc_op op = spc_op_zigzag_gather(dim);
  return spc_run(g, &op, in, out);
}

int spc_packed_split(spc_group *g, const spc_tensor *in, const spc_tensor *out,
                     int dim, const int64_t *seq_lens, int nseq) {
  spc_op op = spc_op_packed_split(dim, seq_lens, nseq);
  return spc_run(g, &op, in, out);
}

int spc_packed_gather(spc_group *g, const spc_tensor *in,
                      const spc_tensor *out, int dim, const int64_t *seq_lens,
                      int nseq) {
  spc_op op = spc_op_packed_gather(dim, seq_lens, nseq);
  return spc_run(g, &op, in, out);
}

/* ---- backward ---- */

int spc_split_backward(spc_group *g, const spc_tensor *grad_out,
                       const spc_tensor *grad_in, int dim,
                       const int64_t *sizes, spc_grad_scale scale) {
  spc_op op = spc_op_scaled(spc__op_grad(spc_op_split(dim, sizes)), scale);
  return spc_run(g, &op, grad_out, grad_in);
}

int spc_all_gather_backward_own(spc_group *g, const spc_tensor *grad_out,
                                const spc_tensor *grad_in, int dim,
                                const int64_t *sizes, spc_grad_scale scale) {
  spc_op op =
      spc_op_scaled(spc__op_grad(spc_op_all_gather(dim, sizes)), scale);
  return spc_run(g, &op, grad_out, grad_in);
}

int spc_all_gather_backward_sum(spc_group *g, const spc_tensor *grad_out,
                                const spc_tensor *grad_in, int dim,
                                const int64_t *sizes) {
  return spc_reduce_scatter(g, grad_out, grad_in, dim, sizes);
}

int spc_all_to_all_backward(spc_group *g, const spc_tensor *grad_out,
                            const spc_tensor *grad_in, int scatter_dim,
                            int gather_dim, int64_t scatter_size) {
  return spc_all_to_all(g, grad_out, grad_in, gather_dim, scatter_dim,
                        scatter_size);
}

int spc_zigzag_split_backward(spc_group *g, const spc_tensor *grad_out,
                              const spc_tensor *grad_in, int dim) {
  spc_op op = spc__op_grad(spc_op_zigzag_split(dim));
  return spc_run(g, &op, grad_out, grad_in);
}

int spc_zigzag_gather_backward(spc_group *g, const spc_tensor *grad_out,
                               const spc_tensor *grad_in, int dim) {
  spc_op op = spc__op_grad(spc_op_zigzag_gather(dim));
  return spc_run(g, &op, grad_out, grad_in);
}

int spc_packed_split_backward(spc_group *g, const spc_tensor *grad_out,
                              const spc_tensor *grad_in, int dim,
                              const int64_t *seq_lens, int nseq) {
  /* Input elements past the packed sequences got no output: their
   * gradient is zero, and the gather writes only the packed part. */
  if (grad_in != NULL && grad_in->buf != NULL) {
    size_t n = spc_dtype_size(grad_in->dtype);
    for (int i = 0; i < grad_in->ndim; i++)
      n *= (size_t)grad_in->shape[i];
    memset(spc_tensor_data(grad_in), 0, n);
  }
  spc_op op = spc__op_grad(spc_op_packed_split(dim, seq_lens, nseq));
  return spc_run(g, &op, grad_out, grad_in);
}

int spc_packed_gather_backward(spc_group *g, const spc_tensor *grad_out,
                               const spc_tensor *grad_in, int dim,
                               const int64_t *seq_lens, int nseq) {
  spc_op op = spc__op_grad(spc_op_packed_gather(dim, seq_lens, nseq));
  return spc_run(g, &op, grad_out, grad_in);
}
