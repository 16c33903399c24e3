/* Checks of one tensor or one name that the client and the daemon both
 * make, with the same code and so the same words. */
#ifndef SPK_TENSOR_CHECK_H
#define SPK_TENSOR_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "types.h"

/* A tensor's first element must lie at an address that is a multiple of
 * its element size: the movers read and write whole elements (reductions,
 * scaled copies, CUDA kernels), and a misaligned element is undefined
 * behaviour in C and a fault on a GPU. `addr` is the address whose
 * alignment counts (buffer base + offset; bases are page-aligned on the
 * host and allocation-aligned on a GPU, so only the offset matters in
 * practice), `offset` the byte offset named in the message. SPK_EINVAL
 * naming what, the offset, the element size and the dtype. */
int spk_tensor_align_check(const char *what, uint64_t offset, uint64_t addr,
                           spk_dtype dtype, spk_err *err);

/* A tensor of `shape` and dtype at byte `offset` of a buffer of
 * buf_size bytes must lie inside it: its bytes (the dims' product times
 * the element size, computed with overflow checks) from offset on. An op
 * is refused on this before it waits for any other rank (a send that
 * waited for its receive would meet the op timeout instead). SPK_EINVAL
 * naming what, the shape, the dtype, the offset and the buffer's size;
 * *bytes_p (may be NULL) is set on success only. */
int spk_tensor_extent_check(const char *what, const spk_shape *shape,
                            spk_dtype dtype, uint64_t offset,
                            uint64_t buf_size, uint64_t *bytes_p,
                            spk_err *err);

/* Group names: 1..SPK_NAME_MAX bytes of [A-Za-z0-9._:/@-]. Names appear in
 * logs, stats lines and metric labels and are matched byte for byte, so
 * anything that could be cut (a NUL), read two ways (spaces, quotes,
 * escapes, control bytes, non-ASCII look-alikes) or spoof a line is
 * refused. len is the name's length as received (it may hold a NUL). */
#define SPK_NAME_MAX 127
#define SPK_NAME_CHARS "A-Za-z0-9 and . _ : / @ -"
int spk_name_check(const char *name, size_t len, spk_err *err);

#endif
