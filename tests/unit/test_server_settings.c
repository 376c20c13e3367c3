/*
 * test_server_settings.c — the settings table (server/settings.c):
 * defaults, environment, command line, precedence, and rejection of bad
 * values at start-up with a message that names the setting and its source.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "settings.h"
#include "shardio.h"

static sc_config cfg;
static char msg[512];

#define ARGV(...) ((char *const[]){"shardcastd", __VA_ARGS__})
#define LOAD(...)                                                          \
    sc_settings_load(&cfg, (int)(sizeof ARGV(__VA_ARGS__) /                \
                                 sizeof(char *)),                          \
                     ARGV(__VA_ARGS__), stdout, msg, sizeof msg)

static void test_defaults_and_cli(void)
{
    CHECK(LOAD("--job", "j1", "--source", "/data") == SC_SETTINGS_OK);
    CHECK_STR(cfg.job, "j1");
    CHECK_STR(cfg.source, "/data");
    CHECK_EQ_U64(cfg.seed, 0);
    CHECK_EQ_U64(cfg.shuffle_buffer, 1000);
    CHECK_EQ_U64(cfg.buffer_bytes, 256ull << 20);
    CHECK_EQ_U64(cfg.interleave, 4);
    CHECK(cfg.partition == SIO_PARTITION_EVEN_DROP);
    CHECK(cfg.on_error == SIO_ON_ERROR_SKIP);
    CHECK_STR(cfg.listen, "127.0.0.1");
    CHECK_EQ_U64(cfg.port, 8080);
    CHECK(cfg.log_level == SIO_LOG_INFO);
    CHECK_EQ_U64(cfg.queue_bytes, 4u << 20);
    sc_settings_free(&cfg);

    CHECK(LOAD("--job=j2", "--source=a::b", "--seed", "18446744073709551615",
               "--shuffle-buffer=1", "--buffer-bytes", "1g",
               "--interleave=16", "--partition", "even-pad", "--on-error=fail",
               "--listen", "::1", "--port=0", "--log-level", "debug",
               "--queue-bytes=64KiB") == SC_SETTINGS_OK);
    CHECK_STR(cfg.job, "j2");
    CHECK_STR(cfg.source, "a::b");
    CHECK_EQ_U64(cfg.seed, UINT64_MAX);
    CHECK_EQ_U64(cfg.shuffle_buffer, 1);
    CHECK_EQ_U64(cfg.buffer_bytes, 1ull << 30);
    CHECK_EQ_U64(cfg.interleave, 16);
    CHECK(cfg.partition == SIO_PARTITION_EVEN_PAD);
    CHECK(cfg.on_error == SIO_ON_ERROR_FAIL);
    CHECK_STR(cfg.listen, "::1");
    CHECK_EQ_U64(cfg.port, 0);
    CHECK(cfg.log_level == SIO_LOG_DEBUG);
    CHECK_EQ_U64(cfg.queue_bytes, 64u << 10);
    sc_settings_free(&cfg);
}

static void test_env(void)
{
    setenv("SHARDCAST_JOB", "from-env", 1);
    setenv("SHARDCAST_SOURCE", "/env", 1);
    setenv("SHARDCAST_SHUFFLE_BUFFER", "77", 1);
    setenv("SHARDCAST_PORT", "9000", 1);
    CHECK(LOAD("--port", "9001") == SC_SETTINGS_OK);
    CHECK_STR(cfg.job, "from-env");
    CHECK_EQ_U64(cfg.shuffle_buffer, 77);
    CHECK_EQ_U64(cfg.port, 9001); /* the command line wins */
    sc_settings_free(&cfg);

    setenv("SHARDCAST_PORT", "abc", 1);
    CHECK(LOAD("--port", "9001") == SC_SETTINGS_ERROR);
    CHECK(strstr(msg, "--port") && strstr(msg, "SHARDCAST_PORT"));
    sc_settings_free(&cfg);
    unsetenv("SHARDCAST_PORT");
    unsetenv("SHARDCAST_SHUFFLE_BUFFER");
    unsetenv("SHARDCAST_JOB");
    unsetenv("SHARDCAST_SOURCE");
}

static void test_rejections(void)
{
    struct {
        char *opt, *val, *needle; /* literals: argv is char *const[] */
    } bad[] = {
        {"--port", "65536", "--port"},
        {"--port", "-1", "--port"},
        {"--port", "80x", "--port"},
        {"--seed", "18446744073709551616", "--seed"},
        {"--shuffle-buffer", "0", "--shuffle-buffer"},
        {"--interleave", "", "--interleave"},
        {"--buffer-bytes", "12q", "--buffer-bytes"},
        {"--buffer-bytes", "99999999999999999999", "--buffer-bytes"},
        {"--buffer-bytes", "20000000T", "--buffer-bytes"},
        {"--partition", "random", "--partition"},
        {"--on-error", "retry", "--on-error"},
        {"--log-level", "trace", "--log-level"},
        {"--listen", "localhost", "--listen"},
        {"--job", "a/b", "--job"},
        {"--queue-bytes", "1k", "--queue-bytes"},
        {"--max-url", "10", "--max-url"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(LOAD("--job", "j", "--source", "s", bad[i].opt, bad[i].val) ==
              SC_SETTINGS_ERROR);
        CHECK(strstr(msg, bad[i].needle) != NULL);
        CHECK(strstr(msg, "command line") != NULL);
        sc_settings_free(&cfg);
    }
    CHECK(LOAD("--source", "s") == SC_SETTINGS_ERROR);
    CHECK(strstr(msg, "missing required setting --job") != NULL);
    sc_settings_free(&cfg);
    CHECK(LOAD("--job", "j", "--source") == SC_SETTINGS_ERROR);
    CHECK(strstr(msg, "missing value for --source") != NULL);
    sc_settings_free(&cfg);
    CHECK(LOAD("--job", "j", "--source", "s", "--nope", "1") ==
          SC_SETTINGS_ERROR);
    CHECK(strstr(msg, "unknown option") != NULL);
    sc_settings_free(&cfg);
    CHECK(LOAD("--job", "j", "--source", "s", "stray") == SC_SETTINGS_ERROR);
    sc_settings_free(&cfg);
}

int main(void)
{
    unsetenv("SHARDCAST_PORT");
    test_defaults_and_cli();
    test_env();
    test_rejections();
    CHECK_MAIN_END();
}
