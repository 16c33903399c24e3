/* spcolld settings: defaults, every flag, and each bad value rejected with
 * the flag named. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "config.h"

/* The effective config as text, malloc'd. */
static char *dump_of(const spd_config *cfg) {
  char *dump = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&dump, &len);
  ck_assert_ptr_nonnull(out);
  spd_config_dump(cfg, out);
  fclose(out);
  return dump;
}

static int parse(spd_config *cfg, spk_err *err, int argc, char **argv) {
  spd_config_defaults(cfg);
  return spd_config_parse_args(cfg, argc, argv, err);
}

START_TEST(defaults) {
  spd_config cfg;
  spd_config_defaults(&cfg);
  ck_assert_int_ge(cfg.workers, 1);
  ck_assert_int_eq(cfg.socket_mode, 0660);
  ck_assert_int_eq(cfg.log_level, SPD_LOG_INFO);
  ck_assert_ptr_nonnull(strstr(cfg.socket_path, "spcolld.sock"));
  /* The last-level cache's size, from the machine, but no more than a
   * VM's share of a host's L3 is likely to be (sysfs may say the host's
   * whole 480 MiB). */
  ck_assert_int_ge(cfg.stream_bytes, 1 << 20);
  ck_assert_int_le(cfg.stream_bytes, 64LL << 20);
}
END_TEST

START_TEST(defaults_follow_xdg_for_non_root) {
  spd_config cfg;
  setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
  spd_config_defaults(&cfg);
  if (geteuid() == 0)
    ck_assert_str_eq(cfg.socket_path, "/run/spcolld/spcolld.sock");
  else
    ck_assert_str_eq(cfg.socket_path, "/run/user/1000/spcolld.sock");
}
END_TEST

START_TEST(every_flag) {
  spd_config cfg;
  spk_err err;
  char *argv[] = {"spcolld", "--socket", "/tmp/x.sock", "--socket-mode",
                  "0600", "--workers", "3", "--log-level", "debug", NULL};
  ck_assert_int_eq(parse(&cfg, &err, 9, argv), SPK_OK);
  ck_assert_str_eq(cfg.socket_path, "/tmp/x.sock");
  ck_assert_int_eq(cfg.socket_mode, 0600);
  ck_assert_int_eq(cfg.workers, 3);
  ck_assert_int_eq(cfg.log_level, SPD_LOG_DEBUG);
}
END_TEST

static void expect_bad(int argc, char **argv, const char *needle) {
  spd_config cfg;
  spk_err err;
  ck_assert_int_eq(parse(&cfg, &err, argc, argv), SPK_EINVAL);
  ck_assert_msg(strstr(err.msg, needle) != NULL, "'%s' lacks '%s'", err.msg,
                needle);
}

START_TEST(bad_values_name_the_flag) {
  char *a1[] = {"spcolld", "--workers", "0", NULL};
  expect_bad(3, a1, "--workers: '0' is not an integer in 1..1024");
  char *a2[] = {"spcolld", "--workers", "3x", NULL};
  expect_bad(3, a2, "--workers: '3x'");
  char *a3[] = {"spcolld", "--socket-mode", "0999", NULL};
  expect_bad(3, a3, "--socket-mode: '0999'");
  char *a4[] = {"spcolld", "--log-level", "loud", NULL};
  expect_bad(3, a4, "--log-level: 'loud'");
  char *a5[] = {"spcolld", "--bogus", NULL};
  expect_bad(2, a5, "unknown option '--bogus'");
  char *a6[] = {"spcolld", "--workers", NULL};
  expect_bad(2, a6, "missing value for option '--workers'");
  char *a7[] = {"spcolld", "stray", NULL};
  expect_bad(2, a7, "unexpected argument 'stray'");
  char longp[200];
  memset(longp, 'a', sizeof(longp) - 1);
  longp[sizeof(longp) - 1] = '\0';
  char *a8[] = {"spcolld", "--socket", longp, NULL};
  expect_bad(3, a8, "--socket: path of 199 bytes");
}
END_TEST

/* Write text to a temporary file; returns its path (static buffer). */
static const char *conf_file(const char *text) {
  static char path[64];
  snprintf(path, sizeof(path), "/tmp/spcolld-conf-XXXXXX");
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  return path;
}

/* Per-op fast-path thresholds: named ops take theirs, the rest
 * fast_bytes; the segment stages the largest; bad entries are named. */
START_TEST(fast_op_bytes) {
  spd_config cfg;
  spk_err err;
  char *argv[] = {"spcolld", "--fast-bytes", "1000", "--fast-op-bytes",
                  "all_to_all=5000,all_reduce=0", NULL};
  ck_assert_int_eq(parse(&cfg, &err, 5, argv), SPK_OK);
  ck_assert_int_eq(spd_config_fast_limit(&cfg, SPK_OP_ALL_TO_ALL), 5000);
  ck_assert_int_eq(spd_config_fast_limit(&cfg, SPK_OP_ALL_REDUCE), 0);
  ck_assert_int_eq(spd_config_fast_limit(&cfg, SPK_OP_ALL_GATHER), 1000);
  ck_assert_int_eq(spd_config_fast_stage(&cfg), 5000);
  char *dump = dump_of(&cfg);
  ck_assert_ptr_nonnull(strstr(dump, "fast_op_bytes all_to_all=5000,"
                                     "all_reduce=0\n"));
  free(dump);
  char *b1[] = {"spcolld", "--fast-op-bytes", "all_reduc=5", NULL};
  expect_bad(3, b1, "--fast-op-bytes: 'all_reduc' is not an op name");
  char *b2[] = {"spcolld", "--fast-op-bytes", "all_reduce=-1", NULL};
  expect_bad(3, b2, "all_reduce: '-1' is not an integer in 0..67108864");
  char *b3[] = {"spcolld", "--fast-op-bytes", "all_reduce", NULL};
  expect_bad(3, b3, "'all_reduce' is not OP=BYTES");
}
END_TEST

/* The fast path's tunables are settings rows: a flag sets one, the
 * effective config shows it, a value out of its range is refused naming
 * the flag; a rank clamps a scribbled header's values into the ranges. */
START_TEST(fast_tunables) {
  spd_config cfg;
  spk_err err;
  char *argv[] = {"spcolld", "--fast-spin-max-ns", "5000",
                  "--fast-replicate-bytes", "0", NULL};
  ck_assert_int_eq(parse(&cfg, &err, 5, argv), SPK_OK);
  ck_assert_int_eq(cfg.fast_spin_max_ns, 5000);
  ck_assert_int_eq(cfg.fast_replicate_bytes, 0);
  ck_assert_int_eq(cfg.fast_map_min_bytes, 1024);
  char *dump = dump_of(&cfg);
  ck_assert_ptr_nonnull(strstr(dump, "fast_spin_max_ns 5000\n"));
  ck_assert_ptr_nonnull(strstr(dump, "fast_sleep_ns 200000000\n"));
  free(dump);
  char *b1[] = {"spcolld", "--fast-sleep-ns", "1000000000", NULL};
  expect_bad(3, b1, "--fast-sleep-ns");
  char *b2[] = {"spcolld", "--fast-freed-every", "0", NULL};
  expect_bad(3, b2, "--fast-freed-every");
  spk_fast_tune t;
  memset(&t, 0xff, sizeof(t));
  spk_fast_tune_clamp(&t);
  ck_assert_uint_eq(t.fast_sleep_ns, 999999999);
  ck_assert_uint_eq(t.fast_piece_bytes, 1u << 30);
  memset(&t, 0, sizeof(t));
  spk_fast_tune_clamp(&t);
  ck_assert_uint_eq(t.fast_freed_every, 1);
  ck_assert_uint_eq(t.fast_sleep_ns, 1000);
  ck_assert_uint_eq(t.fast_spin_min_ns, 0);
}
END_TEST

START_TEST(config_file_then_flags) {
  spd_config cfg;
  spk_err err;
  const char *path = conf_file("# comment\n\n  workers = 5 \n"
                               "log_level=warn\nstuck_seconds = 9\n"
                               "socket = /tmp/from-file.sock\n");
  char *argv[] = {"spcolld", "--config", (char *)path, "--workers", "7",
                  NULL};
  ck_assert_int_eq(parse(&cfg, &err, 5, argv), SPK_OK);
  ck_assert_int_eq(cfg.workers, 7); /* the flag wins */
  ck_assert_int_eq(cfg.log_level, SPD_LOG_WARN);
  ck_assert_int_eq(cfg.stuck_seconds, 9);
  ck_assert_str_eq(cfg.socket_path, "/tmp/from-file.sock");
  ck_assert_str_eq(cfg.stats_socket_path, "/tmp/spcolld.stats.sock");
  unlink(path);
}
END_TEST

START_TEST(config_file_errors_name_the_key) {
  spd_config cfg;
  spk_err err;
  const char *path = conf_file("workers = 2\nwrokers = 3\n");
  char *argv[] = {"spcolld", "--config", (char *)path, NULL};
  ck_assert_int_eq(parse(&cfg, &err, 3, argv), SPK_EINVAL);
  ck_assert_msg(strstr(err.msg, ":2: unknown key 'wrokers'"), "%s", err.msg);
  unlink(path);
  path = conf_file("workers = many\n");
  argv[2] = (char *)path;
  ck_assert_int_eq(parse(&cfg, &err, 3, argv), SPK_EINVAL);
  ck_assert_msg(strstr(err.msg, ":1: key workers: --workers: 'many'"), "%s",
                err.msg);
  unlink(path);
  path = conf_file("just words\n");
  argv[2] = (char *)path;
  ck_assert_int_eq(parse(&cfg, &err, 3, argv), SPK_EINVAL);
  ck_assert_msg(strstr(err.msg, "expected 'key = value'"), "%s", err.msg);
  unlink(path);
  argv[2] = "/nonexistent/spcolld.conf"; /* named: must exist */
  ck_assert_int_eq(parse(&cfg, &err, 3, argv), SPK_EINVAL);
  ck_assert_msg(strstr(err.msg, "cannot read config"), "%s", err.msg);
}
END_TEST

/* Peer daemons: the list, this node's entry, the listen address that
 * defaults to it, and every malformed address named. */
START_TEST(peer_flags) {
  spd_config cfg;
  spk_err err;
  char *ok[] = {"spcolld", "--peers", "a:1,10.0.0.2:7410,[::1]:9",
                "--node-index", "1", "--peer-timeout", "5",
                "--peer-key-file", "/etc/spcoll/peer.key", NULL};
  ck_assert_int_eq(parse(&cfg, &err, 9, ok), SPK_OK);
  ck_assert_str_eq(cfg.peer_key_file, "/etc/spcoll/peer.key");
  ck_assert_int_eq(cfg.npeers, 3);
  ck_assert_str_eq(cfg.peers[0].host, "a");
  ck_assert_int_eq(cfg.peers[2].port, 9);
  ck_assert_str_eq(cfg.ucx_listen.host, "10.0.0.2");
  ck_assert_int_eq(cfg.ucx_listen.port, 7410);
  ck_assert_int_eq(cfg.peer_timeout, 5);
  char *listen[] = {"spcolld", "--peers", "a:1,b:2", "--ucx-listen",
                    "0.0.0.0:3", "--peer-key-file", "k", NULL};
  ck_assert_int_eq(parse(&cfg, &err, 7, listen), SPK_OK);
  ck_assert_str_eq(cfg.ucx_listen.host, "0.0.0.0");
  unsetenv("CREDENTIALS_DIRECTORY");
  char *nokey[] = {"spcolld", "--peers", "a:1,b:2", NULL};
  expect_bad(3, nokey, "--peers needs --peer-key-file (or the systemd "
                       "credential peer-key)");
  char *b1[] = {"spcolld", "--peers", "a:1,b", NULL};
  expect_bad(3, b1, "--peers: 'b' is not host:port");
  char *b2[] = {"spcolld", "--peers", "a:0", NULL};
  expect_bad(3, b2, "--peers: port of 'a:0' is not in 1..65535");
  char *b3[] = {"spcolld", "--peers", "a:1,,b:2", NULL};
  expect_bad(3, b3, "--peers: entry 1 of 'a:1,,b:2' is empty");
  char *b4[] = {"spcolld", "--peers", "a:1,b:2", "--node-index", "2", NULL};
  expect_bad(5, b4, "--node-index 2 is not an entry of --peers, which lists "
                    "2 nodes");
  char *b5[] = {"spcolld", "--ucx-listen", "x:y", NULL};
  expect_bad(3, b5, "--ucx-listen: port of 'x:y'");
  char *b6[] = {"spcolld", "--op-timeout", "0", NULL};
  expect_bad(3, b6, "--op-timeout: '0' is not an integer in 1..604800");
  char *b7[] = {"spcolld", "--operator-gid", "no-such-group-here", NULL};
  expect_bad(3, b7, "--operator-gid: no group named 'no-such-group-here'");
  char *b8[] = {"spcolld", "--uid-max-bytes", "12x", NULL};
  expect_bad(3, b8, "--uid-max-bytes: '12x' is not an integer");
}
END_TEST

/* Without --peer-key-file, the key is the systemd credential peer-key
 * (LoadCredential=) when $CREDENTIALS_DIRECTORY holds one; a directory
 * without it is no key. */
START_TEST(peer_key_from_credential) {
  char dir[] = "/tmp/spt-cred.XXXXXX", key[64];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(key, sizeof(key), "%s/peer-key", dir);
  setenv("CREDENTIALS_DIRECTORY", dir, 1);
  spd_config cfg;
  spk_err err;
  char *argv[] = {"spcolld", "--peers", "a:1,b:2", NULL};
  expect_bad(3, argv, "--peers needs --peer-key-file");
  FILE *f = fopen(key, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  ck_assert_int_eq(parse(&cfg, &err, 3, argv), SPK_OK);
  ck_assert_str_eq(cfg.peer_key_file, key);
  unlink(key);
  rmdir(dir);
  unsetenv("CREDENTIALS_DIRECTORY");
}
END_TEST

/* The shipped example documents every key with its default: with every
 * "# key = value" line uncommented it must load, and keys it sets must be
 * every key the daemon knows. */
START_TEST(shipped_example_is_valid) {
  FILE *in = fopen("systemd/spcolld.conf.example", "r");
  ck_assert_ptr_nonnull(in);
  char line[512], text[8192] = "";
  int keys = 0;
  while (fgets(line, sizeof(line), in))
    if (strncmp(line, "# ", 2) == 0 && strstr(line, " = ") &&
        strchr(line + 2, ' ') == strstr(line, " = ")) {
      strncat(text, line + 2, sizeof(text) - strlen(text) - 1);
      keys++;
    }
  fclose(in);
  ck_assert_int_eq(keys, 45);
  spd_config cfg;
  spk_err err;
  spd_config_defaults(&cfg);
  const char *path = conf_file(text);
  ck_assert_msg(spd_config_load(&cfg, path, 1, &err) == SPK_OK, "%s",
                err.msg);
  ck_assert_int_eq(cfg.socket_mode, 0660);
  ck_assert_int_eq(cfg.stuck_seconds, 60);
  ck_assert_int_eq(cfg.npeers, 2);
  ck_assert_int_eq(cfg.peers[1].port, 7410);
  ck_assert_int_eq(cfg.peer_timeout, 30);
  ck_assert_int_eq(cfg.op_timeout, 1800);
  ck_assert_int_eq(cfg.noperator_gid, 1);
  ck_assert_int_eq(cfg.max_queued, 512LL << 20);
  ck_assert_int_eq(cfg.fast_replicate_bytes, 65536);
  unlink(path);
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_config");
  TCase *tc = tcase_create("config");
  tcase_add_test(tc, defaults);
  tcase_add_test(tc, defaults_follow_xdg_for_non_root);
  tcase_add_test(tc, every_flag);
  tcase_add_test(tc, bad_values_name_the_flag);
  tcase_add_test(tc, fast_op_bytes);
  tcase_add_test(tc, fast_tunables);
  tcase_add_test(tc, config_file_then_flags);
  tcase_add_test(tc, config_file_errors_name_the_key);
  tcase_add_test(tc, shipped_example_is_valid);
  tcase_add_test(tc, peer_key_from_credential);
  tcase_add_test(tc, peer_flags);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
