#include "status.h"

#include <stdarg.h>
#include <stdio.h>

const char *spk_strerror(int status) {
  switch (status) {
  case SPK_OK:
    return "success";
#define SPK_STATUS_CASE(name, pub, wire, val, msg) \
  case -(val):                          \
    return msg;
    SPK_STATUS_MAP(SPK_STATUS_CASE)
#undef SPK_STATUS_CASE
  }
  return "unknown status";
}

int spk_error_or(int status, int fallback) {
  switch (status) {
#define SPK_STATUS_KNOWN(name, pub, wire, val, msg) case -(val):
    SPK_STATUS_MAP(SPK_STATUS_KNOWN)
#undef SPK_STATUS_KNOWN
    return status;
  default:
    return fallback;
  }
}

/* Record the message of a failure and return its status, so the detecting
 * site can write `return spk_err_set(err, SPK_EINVAL, "...", v);`. */
int spk_err_set(spk_err *err, int status, const char *fmt, ...) {
  if (err != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
  }
  return status;
}
