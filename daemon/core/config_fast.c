/* --fast-op-bytes: per-op thresholds of the shared-memory fast path
 * ("all_to_all=1048576,all_reduce=2097152"). An op not named takes
 * fast_bytes; the segment's staging is sized for the largest of them. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

static int op_by_name(const char *name, size_t len) {
  for (int k = 0; k < SPK_OP_COUNT; k++) {
    const char *n = spk_op_name((spk_op_kind)k);
    if (n != NULL && strlen(n) == len && strncmp(n, name, len) == 0)
      return k;
  }
  return -1;
}

static int one_entry(spd_config *cfg, const char *e, size_t len,
                     spk_err *err) {
  const char *eq = memchr(e, '=', len);
  if (eq == NULL)
    return spk_err_set(err, SPK_EINVAL, "--fast-op-bytes: '%.*s' is not "
                       "OP=BYTES", (int)len, e);
  int k = op_by_name(e, (size_t)(eq - e));
  if (k < 0)
    return spk_err_set(err, SPK_EINVAL, "--fast-op-bytes: '%.*s' is not an "
                       "op name (all_reduce, all_gather, ...)",
                       (int)(eq - e), e);
  char num[32];
  size_t nlen = len - (size_t)(eq + 1 - e);
  if (nlen == 0 || nlen >= sizeof(num))
    return spk_err_set(err, SPK_EINVAL, "--fast-op-bytes: %s: '%.*s' is not "
                       "a byte count", spk_op_name((spk_op_kind)k), (int)nlen,
                       eq + 1);
  memcpy(num, eq + 1, nlen);
  num[nlen] = '\0';
  char *end;
  errno = 0;
  long long v = strtoll(num, &end, 10);
  if (*end != '\0' || errno != 0 || v < 0 || v > SPD_FAST_BYTES_MAX)
    return spk_err_set(err, SPK_EINVAL, "--fast-op-bytes: %s: '%s' is not "
                       "an integer in 0..%lld", spk_op_name((spk_op_kind)k),
                       num, (long long)SPD_FAST_BYTES_MAX);
  cfg->fast_op_bytes[k] = v;
  return SPK_OK;
}

int spd_config_fast_ops(spd_config *cfg, const char *arg, spk_err *err) {
  long long saved[SPK_OP_COUNT];
  memcpy(saved, cfg->fast_op_bytes, sizeof(saved));
  for (int k = 0; k < SPK_OP_COUNT; k++)
    cfg->fast_op_bytes[k] = -1;
  if (strcmp(arg, "-") == 0)
    return SPK_OK;
  for (const char *p = arg; *p != '\0';) {
    size_t len = strcspn(p, ",");
    int rc = one_entry(cfg, p, len, err);
    if (rc < 0) {
      memcpy(cfg->fast_op_bytes, saved, sizeof(saved));
      return rc;
    }
    p += len + (p[len] == ',');
  }
  return SPK_OK;
}

void spd_config_fast_dump(const spd_config *cfg, FILE *out) {
  int any = 0;
  fprintf(out, "fast_op_bytes ");
  for (int k = 0; k < SPK_OP_COUNT; k++)
    if (cfg->fast_op_bytes[k] >= 0)
      fprintf(out, "%s%s=%lld", any++ ? "," : "", spk_op_name((spk_op_kind)k),
              cfg->fast_op_bytes[k]);
  fprintf(out, "%s\n", any ? "" : "-");
}
