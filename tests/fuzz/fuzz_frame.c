/* libFuzzer target: the frame decoder fed arbitrary bytes in arbitrary
 * chunks, and every decoded op request validated as the daemon does before
 * planning (tensor shapes, dims, size lists, output shape). */
#include <stdint.h>
#include <string.h>

#include "frame.h"
#include "planner.h"

static void tensor_shape(const Spcoll__Tensor *t, spk_shape *s) {
  s->ndim = 0;
  if (t == NULL || t->n_shape == 0 || t->n_shape > SPK_MAX_DIMS)
    return;
  s->ndim = (int)t->n_shape;
  memcpy(s->dim, t->shape, t->n_shape * sizeof(int64_t));
}

static void validate(const Spcoll__OpRequest *rq) {
  spk_op_args a = {.op = (spk_op_kind)rq->op, .scalar = rq->scalar,
                   .flags = rq->flags};
  if (rq->n_dims > 4 || rq->n_sizes > 65536 || rq->n_sizes2 > 65536)
    return; /* the daemon refuses these before planning */
  a.ndims = (int)rq->n_dims;
  for (size_t i = 0; i < rq->n_dims; i++)
    a.dims[i] = rq->dims[i];
  a.dtype = rq->input ? (spk_dtype)rq->input->dtype : SPK_F32;
  tensor_shape(rq->input, &a.in);
  tensor_shape(rq->output, &a.out);
  a.sizes = rq->sizes, a.nsizes = (int)rq->n_sizes;
  a.sizes2 = rq->sizes2, a.nsizes2 = (int)rq->n_sizes2;
  int world = 1 + (int)(rq->group_id % 8);
  spk_err err;
  spk_args_check(&a, world, 0, &err);
  spk_shape out;
  spk_out_shape(&a, world, 0, &out, &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  size_t chunk = 1 + data[0] % 64;
  data++, size--;
  spf_reader r;
  spf_reader_init(&r);
  spk_err err;
  for (size_t off = 0; off < size; off += chunk) {
    size_t n = size - off < chunk ? size - off : chunk, avail;
    uint8_t *space;
    if (spf_reader_space(&r, n, &space, &avail, &err) < 0)
      break;
    memcpy(space, data + off, n);
    spf_reader_commit(&r, n);
    Spcoll__Frame *f;
    int rc;
    while ((rc = spf_reader_next(&r, &f, &err)) > 0) {
      if (f->body_case == SPCOLL__FRAME__BODY_OP)
        validate(f->op);
      spcoll__frame__free_unpacked(f, NULL);
    }
    if (rc < 0)
      break;
  }
  spf_reader_free(&r);
  return 0;
}
