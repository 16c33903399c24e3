/* spc_abi: the library's version and the layout of the structs a binding
 * fills by hand (ctypes, cffi), so that a binding built for another
 * spcoll.h can refuse this library instead of corrupting memory. */
#include <stddef.h>

#include "spcoll.h"

#define F(type, field) " " #field " %zu"
#define L(type, field) , offsetof(type, field)

/* One line, built once: "spcoll VERSION abi N; spc_tensor SIZE buf OFF
 * ...; spc_op SIZE ...; spc_timing SIZE ...; SPC_MAX_DIMS N". */
#define SPC_ABI_FORMAT                                                     \
  "spcoll " SPC_VERSION " abi %d; spc_tensor %zu" F(spc_tensor, buf)       \
  F(spc_tensor, offset) F(spc_tensor, dtype) F(spc_tensor, ndim)           \
  F(spc_tensor, shape) "; spc_op %zu" F(spc_op, kind) F(spc_op, ndims)     \
  F(spc_op, dims) F(spc_op, sizes) F(spc_op, nsizes) F(spc_op, sizes2)     \
  F(spc_op, nsizes2) F(spc_op, scalar) F(spc_op, flags)                    \
  "; spc_timing %zu; SPC_MAX_DIMS %d"

#include <pthread.h>
#include <stdio.h>

static char abi_line[512];
static pthread_once_t abi_once = PTHREAD_ONCE_INIT;

static void abi_build(void) {
  char *line = abi_line;
  {
    int n = snprintf(
        line, sizeof(abi_line), SPC_ABI_FORMAT, SPC_ABI_VERSION,
        sizeof(spc_tensor) L(spc_tensor, buf) L(spc_tensor, offset)
            L(spc_tensor, dtype) L(spc_tensor, ndim) L(spc_tensor, shape),
        sizeof(spc_op) L(spc_op, kind) L(spc_op, ndims) L(spc_op, dims)
            L(spc_op, sizes) L(spc_op, nsizes) L(spc_op, sizes2)
                L(spc_op, nsizes2) L(spc_op, scalar) L(spc_op, flags),
        sizeof(spc_timing), SPC_MAX_DIMS);
    /* 512 bytes hold the line with room to spare; a cut line would only
     * make bindings refuse the library, never accept a wrong one. */
    if (n < 0 || (size_t)n >= sizeof(abi_line))
      line[sizeof(abi_line) - 1] = '\0';
  }
}

const char *spc_abi(void) {
  /* pthread_once: two threads asking first must not write it together */
  if (pthread_once(&abi_once, abi_build) != 0)
    return "spcoll abi unknown: pthread_once failed";
  return abi_line;
}
