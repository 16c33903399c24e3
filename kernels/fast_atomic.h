/* The fast path's accesses to words that several processes share
 * (kernels/fast_protocol.h): the __atomic builtins, or, where
 * SPK_FAST_MODEL is defined (the protocol checker,
 * tests/unit/unit_fast_model.c), the checker's model of them, so that
 * the protocol's code as written runs under its scheduler. Orders are
 * the __ATOMIC_* constants. SPK_COPY_IN/OUT are the plain copies into
 * and out of shared memory that a later release publishes (the ring
 * slot's body). */
#ifndef SPK_FAST_ATOMIC_H
#define SPK_FAST_ATOMIC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef SPK_FAST_MODEL

#define SPK_LOAD(p, mo) __atomic_load_n((p), (mo))
#define SPK_STORE(p, v, mo) __atomic_store_n((p), (v), (mo))
#define SPK_ADD(p, v, mo) __atomic_add_fetch((p), (v), (mo))
#define SPK_SUB(p, v, mo) __atomic_sub_fetch((p), (v), (mo))
#define SPK_FENCE(mo) __atomic_thread_fence(mo)
#define SPK_COPY_IN(dst, src, n) memcpy((dst), (src), (n))
#define SPK_COPY_OUT(dst, src, n) memcpy((dst), (src), (n))

#else

/* The checker's model (each call is a step its scheduler may put
 * another thread's steps, or the flush of a buffered store, before). */
uint64_t spk_model_load(const void *p, size_t size, int mo);
void spk_model_store(void *p, size_t size, uint64_t v, int mo);
uint64_t spk_model_add(void *p, size_t size, uint64_t v, int mo);
void spk_model_fence(int mo);
void spk_model_copy_in(void *dst, const void *src, size_t n);
void spk_model_copy_out(void *dst, const void *src, size_t n);

#define SPK_LOAD(p, mo)                                                        \
  ((__typeof__(*(p)))spk_model_load((p), sizeof(*(p)), (mo)))
#define SPK_STORE(p, v, mo)                                                    \
  spk_model_store((p), sizeof(*(p)), (uint64_t)(v), (mo))
#define SPK_ADD(p, v, mo)                                                      \
  __extension__({                                                              \
    __typeof__(*(p)) r_ =                                                      \
        (__typeof__(*(p)))spk_model_add((p), sizeof(*(p)), (uint64_t)(v),     \
                                        (mo));                                \
    r_;                                                                        \
  })
#define SPK_SUB(p, v, mo) SPK_ADD((p), (uint64_t)0 - (uint64_t)(v), (mo))
#define SPK_FENCE(mo) spk_model_fence(mo)
#define SPK_COPY_IN(dst, src, n) spk_model_copy_in((dst), (src), (n))
#define SPK_COPY_OUT(dst, src, n) spk_model_copy_out((dst), (src), (n))

#endif

#endif
