/* What authenticating a peer control message costs on this CPU: the
 * session's keyed MAC (daemon/peer/peer_auth.c, what spcolld runs per
 * message, sending and receiving) beside a one-shot MAC that keys
 * itself each time, for control messages of a few sizes. Part of
 * make bench-multinode. Prints numbers; asserts nothing. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "peer_auth.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void) {
  static uint8_t body[4096];
  uint8_t key[32], head[24] = {0}, mac[SPD_AUTH_MSG_MAC];
  memset(key, 0x5a, sizeof(key));
  spd_auth_mac *m = NULL;
  if (spd_auth_mac_open(key, &m) != SPK_OK) {
    fprintf(stderr, "auth-bench: the keyed MAC could not be made\n");
    return 1;
  }
  const size_t sizes[] = {64, 256, 4096};
  const int n = 100000;
  printf("# HMAC-SHA256 of a control message (24-byte header + body), "
         "us per message\n%-10s %12s %12s\n", "body_B", "keyed_us",
         "one_shot_us");
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
    double t0 = now_s();
    for (int i = 0; i < n; i++)
      spd_auth_mac_sign(m, head, sizeof(head), body, sizes[s], mac);
    double t1 = now_s();
    for (int i = 0; i < n / 10; i++)
      spd_auth_msg_mac(key, head, sizeof(head), body, sizes[s], mac);
    double t2 = now_s();
    printf("%-10zu %12.3f %12.3f\n", sizes[s], (t1 - t0) / n * 1e6,
           (t2 - t1) / (n / 10) * 1e6);
  }
  spd_auth_mac_close(m);
  return 0;
}
