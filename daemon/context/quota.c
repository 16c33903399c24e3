#include "quota.h"

#include <stdio.h>
#include <stdlib.h>

static const struct {
  const char *what, *uid_key, *key;
  size_t uid_off, off;
} quota_defs[SPD_Q_COUNT] = {
#define SPD_QUOTA_ROW(kind, w, uid_limit, limit)                             \
  [SPD_Q_##kind] = {w, #uid_limit, #limit, offsetof(spd_config, uid_limit),  \
                    offsetof(spd_config, limit)},
    SPD_QUOTAS(SPD_QUOTA_ROW)
#undef SPD_QUOTA_ROW
};

static long long limit_at(const spd_config *cfg, size_t off) {
  return *(const long long *)((const char *)cfg + off);
}

static spd_uid_use *quota_find(const spd_quotas *q, uid_t uid) {
  for (int i = 0; i < q->n; i++)
    if (q->uids[i].uid == uid)
      return &q->uids[i];
  return NULL;
}

static spd_uid_use *quota_add(spd_quotas *q, uid_t uid) {
  if (q->n == q->cap) {
    int cap = q->cap ? q->cap * 2 : 8;
    spd_uid_use *u = realloc(q->uids, (size_t)cap * sizeof(*u));
    if (u == NULL)
      return NULL;
    q->uids = u, q->cap = cap;
  }
  spd_uid_use *u = &q->uids[q->n++];
  *u = (spd_uid_use){.uid = uid};
  return u;
}

int spd_quota_take(spd_quotas *q, const spd_config *cfg, uid_t uid,
                   spd_quota_kind kind, long long n, char *msg, size_t len) {
  spd_uid_use *u = quota_find(q, uid);
  long long held = u ? u->use[kind] : 0;
  long long uid_max = limit_at(cfg, quota_defs[kind].uid_off);
  long long max = limit_at(cfg, quota_defs[kind].off);
  if (n > uid_max - held) {
    snprintf(msg, len, "uid %d holds %lld %s, %lld more asked; limit %lld "
             "per uid (%s)", (int)uid, held, quota_defs[kind].what, n,
             uid_max, quota_defs[kind].uid_key);
    return SPK_ENO_MEMORY;
  }
  if (n > max - q->total[kind]) {
    snprintf(msg, len, "the daemon holds %lld %s for all users, %lld more "
             "asked; limit %lld (%s)", q->total[kind], quota_defs[kind].what,
             n, max, quota_defs[kind].key);
    return SPK_ENO_MEMORY;
  }
  if (u == NULL && (u = quota_add(q, uid)) == NULL) {
    snprintf(msg, len, "out of memory for the accounts of uid %d", (int)uid);
    return SPK_ENO_MEMORY;
  }
  u->use[kind] += n;
  q->total[kind] += n;
  return SPK_OK;
}

void spd_quota_give(spd_quotas *q, uid_t uid, spd_quota_kind kind,
                    long long n) {
  spd_uid_use *u = quota_find(q, uid);
  if (u == NULL)
    return;
  u->use[kind] -= n;
  q->total[kind] -= n;
  for (int k = 0; k < SPD_Q_COUNT; k++)
    if (u->use[k] != 0)
      return;
  *u = q->uids[--q->n]; /* holds nothing: its slot goes */
}

long long spd_quota_use(const spd_quotas *q, uid_t uid, spd_quota_kind kind) {
  const spd_uid_use *u = quota_find(q, uid);
  return u ? u->use[kind] : 0;
}

void spd_quotas_free(spd_quotas *q) {
  free(q->uids);
  *q = (spd_quotas){0};
}
