/*
 * test_server_settings.c — the settings table (server/settings.c):
 * defaults, environment, config file, command line, precedence, token
 * files, and rejection of bad values at start-up with a message that names
 * the setting and its source; the job spec parser of PUT /v1/jobs/{job};
 * the redaction of secrets in /v1/settings.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    CHECK_STR(cfg.cli_job.name, "j1");
    CHECK_STR(cfg.cli_job.source, "/data");
    CHECK_EQ_U64(cfg.cli_job.seed, 0);
    CHECK_EQ_U64(cfg.cli_job.shuffle_buffer, 1000);
    CHECK_EQ_U64(cfg.cli_job.buffer_bytes, 256ull << 20);
    CHECK_EQ_U64(cfg.cli_job.interleave, 4);
    CHECK(cfg.cli_job.partition == SIO_PARTITION_EVEN_DROP);
    CHECK(cfg.cli_job.on_error == SIO_ON_ERROR_SKIP);
    CHECK_STR(cfg.listen, "127.0.0.1");
    CHECK_EQ_U64(cfg.port, 8080);
    CHECK(cfg.log_level == SIO_LOG_INFO);
    CHECK_EQ_U64(cfg.window_samples, 65536);
    CHECK_EQ_U64(cfg.max_epochs, 2);
    CHECK(cfg.prefetch == 1);
    CHECK(cfg.token == NULL && cfg.admin_token == NULL);
    CHECK(cfg.cli_job.fields == NULL);
    sc_settings_free(&cfg);

    CHECK(LOAD("--job=j2", "--source=a::b", "--seed", "18446744073709551615",
               "--shuffle-buffer=1", "--shuffle-buffer-bytes", "1g",
               "--interleave=16", "--partition", "even-pad", "--on-error=fail",
               "--listen", "::1", "--port=0", "--log-level", "debug",
               "--window-bytes=64KiB", "--fields", "JPG,cls",
               "--prefetch=false") == SC_SETTINGS_OK);
    CHECK_STR(cfg.cli_job.name, "j2");
    CHECK_STR(cfg.cli_job.source, "a::b");
    CHECK_EQ_U64(cfg.cli_job.seed, UINT64_MAX);
    CHECK_EQ_U64(cfg.cli_job.shuffle_buffer, 1);
    CHECK_EQ_U64(cfg.cli_job.buffer_bytes, 1ull << 30);
    CHECK_EQ_U64(cfg.cli_job.interleave, 16);
    CHECK(cfg.cli_job.partition == SIO_PARTITION_EVEN_PAD);
    CHECK(cfg.cli_job.on_error == SIO_ON_ERROR_FAIL);
    CHECK_STR(cfg.listen, "::1");
    CHECK_EQ_U64(cfg.port, 0);
    CHECK(cfg.log_level == SIO_LOG_DEBUG);
    CHECK_EQ_U64(cfg.window_bytes, 64u << 10);
    CHECK_STR(cfg.cli_job.fields, "jpg,cls");
    CHECK(cfg.prefetch == 0);
    sc_settings_free(&cfg);
}

/* Durations take units (bare numbers keep their unit), sizes take
 * Kubernetes binary quantities. */
static void test_units(void)
{
    CHECK(LOAD("--job", "u", "--source", "/d", "--lag-grace-ms", "3s",
               "--rejoin-grace-ms", "90000", "--join-timeout-ms", "2m",
               "--feed-idle-ms", "250ms", "--drain-grace", "1m",
               "--idle-timeout", "120", "--header-timeout", "2000ms",
               "--window-bytes", "64Mi", "--shuffle-buffer-bytes", "2Gi") ==
          SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.lag_grace_ms, 3000);
    CHECK_EQ_U64(cfg.rejoin_grace_ms, 90000);
    CHECK_EQ_U64(cfg.join_timeout_ms, 120000);
    CHECK_EQ_U64(cfg.feed_idle_ms, 250);
    CHECK_EQ_U64(cfg.drain_grace, 60);
    CHECK_EQ_U64(cfg.idle_timeout, 120);
    CHECK_EQ_U64(cfg.header_timeout, 2);
    CHECK_EQ_U64(cfg.window_bytes, 64ull << 20);
    CHECK_EQ_U64(cfg.cli_job.buffer_bytes, 2ull << 30);
    sc_settings_free(&cfg);
    /* seconds are whole; unknown units and sizes on durations refused */
    CHECK(LOAD("--job", "u", "--source", "/d", "--drain-grace", "1500ms") ==
          SC_SETTINGS_ERROR);
    sc_settings_free(&cfg);
    CHECK(LOAD("--job", "u", "--source", "/d", "--lag-grace-ms", "3d") ==
          SC_SETTINGS_ERROR);
    sc_settings_free(&cfg);
    CHECK(LOAD("--job", "u", "--source", "/d", "--lag-grace-ms", "3Mi") ==
          SC_SETTINGS_ERROR);
    sc_settings_free(&cfg);
    CHECK(LOAD("--job", "u", "--source", "/d", "--window-bytes", "5h") ==
          SC_SETTINGS_ERROR);
    sc_settings_free(&cfg);
}

/* Every setting has one name: flag, environment variable and key agree
 * (the job's name, --job / "name", is the one exception). Read from the
 * help text, which prints each job setting as "--flag [key]". */
static void test_names_match(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f != NULL);
    if (!f)
        return;
    sc_settings_usage(f, "shardcastd");
    fclose(f);
    size_t jobs = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char flag[80], key[80];
        if (sscanf(line, " --%79[a-z0-9-] [%79[a-z0-9_]]", flag, key) != 2)
            continue;
        jobs++;
        for (char *p = flag; *p; p++)
            if (*p == '-')
                *p = '_';
        if (strcmp(flag, "job") == 0) {
            CHECK_STR(key, "name");
            continue;
        }
        CHECK_STR(flag, key);
    }
    CHECK_EQ_U64(jobs, 12);
    free(text);
}

/* Old spellings still work, mean the same setting, lose to the canonical
 * spelling in the environment, are listed in --help and are remembered
 * for the deprecation line of the log. */
static void test_deprecated_aliases(void)
{
    CHECK(LOAD("--job", "a", "--source", "/d", "--buffer-bytes", "3Mi") ==
          SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.cli_job.buffer_bytes, 3ull << 20);
    CHECK(cfg.deprecated_used == 1);
    sc_settings_free(&cfg);
    CHECK(LOAD("--job", "a", "--source", "/d", "--buffer_bytes=5Mi") ==
          SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.cli_job.buffer_bytes, 5ull << 20);
    sc_settings_free(&cfg);
    CHECK(LOAD("--job", "a", "--source", "/d", "--shuffle-buffer-bytes",
               "7Mi") == SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.cli_job.buffer_bytes, 7ull << 20);
    CHECK(cfg.deprecated_used == 0);
    sc_settings_free(&cfg);

    setenv("SHARDCAST_BUFFER_BYTES", "1Mi", 1);
    CHECK(LOAD("--job", "a", "--source", "/d") == SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.cli_job.buffer_bytes, 1ull << 20);
    CHECK(cfg.deprecated_used == 1);
    sc_settings_free(&cfg);
    setenv("SHARDCAST_SHUFFLE_BUFFER_BYTES", "2Mi", 1);
    CHECK(LOAD("--job", "a", "--source", "/d") == SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.cli_job.buffer_bytes, 2ull << 20); /* canonical wins */
    sc_settings_free(&cfg);
    /* ... and the command line wins over both */
    CHECK(LOAD("--job", "a", "--source", "/d", "--buffer-bytes", "4Mi") ==
          SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.cli_job.buffer_bytes, 4ull << 20);
    sc_settings_free(&cfg);
    setenv("SHARDCAST_BUFFER_BYTES", "lots", 1);
    CHECK(LOAD("--job", "a", "--source", "/d") == SC_SETTINGS_ERROR);
    CHECK(strstr(msg, "SHARDCAST_BUFFER_BYTES") != NULL);
    sc_settings_free(&cfg);
    unsetenv("SHARDCAST_BUFFER_BYTES");
    unsetenv("SHARDCAST_SHUFFLE_BUFFER_BYTES");

    /* --plan-max-samples capped planned epochs once; it now means what a
     * plan keeps in memory (--plan-keep-samples), and says so. */
    CHECK(LOAD("--job", "a", "--source", "/d") == SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.plan_keep_samples, 16777216);
    sc_settings_free(&cfg);
    CHECK(LOAD("--job", "a", "--source", "/d", "--plan-max-samples",
               "100000") == SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.plan_keep_samples, 100000);
    CHECK(cfg.deprecated_used == 2);
    sc_settings_free(&cfg);
    CHECK(LOAD("--job", "a", "--source", "/d", "--plan-keep-samples",
               "200000") == SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.plan_keep_samples, 200000);
    CHECK(cfg.deprecated_used == 0);
    sc_settings_free(&cfg);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f != NULL);
    if (!f)
        return;
    sc_settings_usage(f, "shardcastd");
    fclose(f);
    CHECK(strstr(text, "--shuffle-buffer-bytes [shuffle_buffer_bytes]") != NULL);
    CHECK(strstr(text, "env SHARDCAST_SHUFFLE_BUFFER_BYTES") != NULL);
    CHECK(strstr(text, "--buffer-bytes, SHARDCAST_BUFFER_BYTES: use "
                       "--shuffle-buffer-bytes") != NULL);
    free(text);
}

static void test_env(void)
{
    setenv("SHARDCAST_JOB", "from-env", 1);
    setenv("SHARDCAST_SOURCE", "/env", 1);
    setenv("SHARDCAST_SHUFFLE_BUFFER", "77", 1);
    setenv("SHARDCAST_PORT", "9000", 1);
    CHECK(LOAD("--port", "9001") == SC_SETTINGS_OK);
    CHECK_STR(cfg.cli_job.name, "from-env");
    CHECK_EQ_U64(cfg.cli_job.shuffle_buffer, 77);
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
        {"--shuffle-buffer-bytes", "12q", "--shuffle-buffer-bytes"},
        {"--shuffle-buffer-bytes", "99999999999999999999",
         "--shuffle-buffer-bytes"},
        {"--shuffle-buffer-bytes", "20000000T", "--shuffle-buffer-bytes"},
        /* the deprecated spelling is checked as the setting it means */
        {"--buffer-bytes", "12q", "--shuffle-buffer-bytes"},
        {"--partition", "random", "--partition"},
        {"--on-error", "retry", "--on-error"},
        {"--log-level", "trace", "--log-level"},
        {"--listen", "localhost", "--listen"},
        {"--job", "a/b", "--job"},
        {"--window-samples", "0", "--window-samples"},
        {"--fields", "a,,b", "--fields"},
        {"--fields", "a,a", "--fields"},
        {"--prefetch", "maybe", "--prefetch"},
        {"--token", "has space", "--token"},
        {"--max-epochs", "17", "--max-epochs"},
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

/* Files write_tmp made, removed at exit (a failed CHECK exits too). */
#define TMP_FILES 16
static char tmp_paths[TMP_FILES][256];
static int tmp_count;

static void remove_tmp(void)
{
    for (int i = 0; i < tmp_count; i++)
        unlink(tmp_paths[i]);
}

static char *write_tmp(const char *name, const char *text)
{
    char path[256];
    char *p = NULL;
    snprintf(path, sizeof path, "%s/sc-settings-%d-%s",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid(), name);
    for (int i = 0; i < tmp_count && !p; i++)
        if (strcmp(tmp_paths[i], path) == 0)
            p = tmp_paths[i];
    if (!p) {
        if (tmp_count == 0)
            atexit(remove_tmp);
        if (tmp_count >= TMP_FILES) {
            fprintf(stderr, "write_tmp: more than %d files\n", TMP_FILES);
            exit(1);
        }
        p = tmp_paths[tmp_count++];
        memcpy(p, path, sizeof path);
    }
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    return p;
}

static void test_config_file(void)
{
    char *p = write_tmp(
        "ok.json",
        "{\"port\": 9100, \"max_epochs\": 3, \"window-bytes\": \"1MiB\","
        " \"prefetch\": false, \"jobs\": ["
        "{\"name\": \"a\", \"source\": \"/d/a\", \"seed\": 7,"
        " \"shuffle_buffer_bytes\": \"2MiB\", \"fields\": [\"JPG\", \"cls\"],"
        " \"partition\": \"even-pad\", \"read_threads\": 0},"
        "{\"name\": \"b\", \"source\": \"s3://bucket/x-{0..9}.tar\"}]}");
    CHECK(LOAD("--config", p, "--port", "9101") == SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.port, 9101); /* the command line wins */
    CHECK_EQ_U64(cfg.max_epochs, 3);
    CHECK_EQ_U64(cfg.window_bytes, 1u << 20);
    CHECK(cfg.prefetch == 0);
    CHECK_EQ_U64(cfg.njobs, 2);
    CHECK(cfg.cli_job.name == NULL);
    CHECK_STR(cfg.jobs[0].name, "a");
    CHECK_EQ_U64(cfg.jobs[0].seed, 7);
    CHECK_EQ_U64(cfg.jobs[0].buffer_bytes, 2u << 20);
    CHECK_STR(cfg.jobs[0].fields, "jpg,cls");
    CHECK(cfg.jobs[0].partition == SIO_PARTITION_EVEN_PAD);
    CHECK_EQ_U64(cfg.jobs[0].read_threads, 0);
    /* Job defaults: the table's. */
    CHECK_EQ_U64(cfg.jobs[1].shuffle_buffer, 1000);
    CHECK_EQ_U64(cfg.jobs[1].interleave, 4);
    CHECK(cfg.jobs[1].fields == NULL);
    sc_settings_free(&cfg);

    /* The environment sits above the file. */
    setenv("SHARDCAST_PORT", "9200", 1);
    CHECK(LOAD("--config", p) == SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.port, 9200);
    sc_settings_free(&cfg);
    unsetenv("SHARDCAST_PORT");

    struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"jobs\": [{\"name\": \"a\"}]}", "missing \"source\""},
        {"{\"jobs\": [{\"source\": \"/x\"}]}", "missing \"name\""},
        {"{\"jobs\": [{\"name\": \"a/b\", \"source\": \"/x\"}]}",
         "\"name\""},
        {"{\"jobs\": [{\"name\": \"a\", \"source\": \"/x\", \"sed\": 1}]}",
         "unknown key \"sed\""},
        {"{\"jobs\": [{\"name\": \"a\", \"source\": \"/x\", \"seed\": -1}]}",
         "\"seed\""},
        {"{\"jobs\": [{\"name\": \"a\", \"source\": \"/x\", \"seed\": 1.5}]}",
         "wrong type for \"seed\""},
        {"{\"jobs\": [{\"name\": \"a\", \"source\": \"/x\"},"
         " {\"name\": \"a\", \"source\": \"/y\"}]}",
         "defined twice"},
        {"{\"seed\": 3}", "is a job key"},
        {"{\"prot\": 3}", "unknown setting \"prot\""},
        {"{\"port\": 70000}", "--port"},
        {"{\"jobs\": {}}", "must be an array"},
        {"[1]", "expected a JSON object"},
        {"{\"port\": 1, \"port\": 2}", "invalid JSON"},
        {"{", "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *q = write_tmp("bad.json", bad[i].json);
        CHECK(LOAD("--config", q) == SC_SETTINGS_ERROR);
        if (!strstr(msg, bad[i].needle))
            fprintf(stderr, "case %zu: %s\n", i, msg);
        CHECK(strstr(msg, bad[i].needle) != NULL);
        sc_settings_free(&cfg);
    }
    CHECK(LOAD("--config", "/nonexistent/shardcast.json") ==
          SC_SETTINGS_ERROR);
    CHECK(strstr(msg, "cannot open config file") != NULL);
    sc_settings_free(&cfg);
}

static void test_tokens_and_rules(void)
{
    char *tf = write_tmp("token", "s3cr3t-consumer\n");
    CHECK(LOAD("--job", "j", "--source", "s", "--token-file", tf,
               "--admin-token", "adm1n") == SC_SETTINGS_OK);
    CHECK_STR(cfg.token, "s3cr3t-consumer");
    CHECK_STR(cfg.admin_token, "adm1n");
    /* /v1/settings never shows a secret. */
    char *js = sc_settings_json(&cfg);
    CHECK(js && !strstr(js, "s3cr3t") && !strstr(js, "adm1n"));
    CHECK(js && strstr(js, "<redacted>"));
    free(js);
    sc_settings_free(&cfg);

    CHECK(LOAD("--job", "j", "--source", "s", "--token", "same",
               "--admin-token", "same") == SC_SETTINGS_ERROR);
    CHECK(strstr(msg, "must differ") != NULL);
    sc_settings_free(&cfg);
    CHECK(LOAD("--job", "j", "--source", "s", "--token", "a",
               "--token-file", tf) == SC_SETTINGS_ERROR);
    sc_settings_free(&cfg);
    char *empty = write_tmp("empty", "\n");
    CHECK(LOAD("--job", "j", "--source", "s", "--admin-token-file", empty) ==
          SC_SETTINGS_ERROR);
    CHECK(strstr(msg, "--admin-token-file") != NULL);
    sc_settings_free(&cfg);
    CHECK(LOAD("--job", "j", "--source", "s", "--replica", "2", "--replicas",
               "2") == SC_SETTINGS_ERROR);
    CHECK(strstr(msg, "--replica") != NULL);
    sc_settings_free(&cfg);
    CHECK(LOAD("--job", "j", "--source", "s", "--replica", "1", "--replicas",
               "2") == SC_SETTINGS_OK);
    sc_settings_free(&cfg);
    /* No job at all is fine only when jobs can be created by the API. */
    CHECK(LOAD("--port", "1") == SC_SETTINGS_ERROR);
    sc_settings_free(&cfg);
    CHECK(LOAD("--admin-token", "x") == SC_SETTINGS_OK);
    CHECK(cfg.cli_job.name == NULL && cfg.njobs == 0);
    sc_settings_free(&cfg);
    CHECK(LOAD("--job", "j") == SC_SETTINGS_ERROR);
    CHECK(strstr(msg, "--source") != NULL);
    sc_settings_free(&cfg);
}

static void test_jobspec(void)
{
    sc_jobspec a, b;
    char why[256];
    const char *ok = "{\"source\": \"/d\", \"seed\": 18446744073709551615,"
                     " \"on_error\": \"fail\", \"fields\": \"a,B\"}";
    /* JSON integers are signed 64-bit: the largest seed comes as text. */
    CHECK(sc_jobspec_parse(ok, strlen(ok), "x", &a, why, sizeof why) != 0);
    ok = "{\"source\": \"/d\", \"seed\": \"18446744073709551615\","
         " \"on_error\": \"fail\", \"fields\": \"a,B\"}";
    CHECK(sc_jobspec_parse(ok, strlen(ok), "x", &a, why, sizeof why) == 0);
    CHECK_STR(a.name, "x");
    CHECK_EQ_U64(a.seed, UINT64_MAX);
    CHECK(a.on_error == SIO_ON_ERROR_FAIL);
    CHECK_STR(a.fields, "a,b");
    CHECK(sc_jobspec_copy(&b, &a) == 0);
    CHECK(sc_jobspec_equal(&a, &b));
    b.seed = 1;
    CHECK(!sc_jobspec_equal(&a, &b));
    sc_jobspec_free(&b);
    sc_jobspec_free(&a);

    const char *named = "{\"name\": \"y\", \"source\": \"/d\"}";
    CHECK(sc_jobspec_parse(named, strlen(named), "x", &a, why, sizeof why) != 0);
    CHECK(strstr(why, "differs from the job in the URL") != NULL);
    CHECK(sc_jobspec_parse("{\"source\": \"\"}", 14, "x", &a, why,
                           sizeof why) != 0);
    CHECK(sc_jobspec_parse("nul\0", 4, "x", &a, why, sizeof why) != 0);
    CHECK(strstr(why, "invalid JSON") != NULL);
    const char *nul = "{\"source\": \"/d\\u0000x\"}";
    CHECK(sc_jobspec_parse(nul, strlen(nul), "x", &a, why, sizeof why) != 0);
    const char *fa = "{\"source\": \"/d\", \"fields\": []}";
    CHECK(sc_jobspec_parse(fa, strlen(fa), "x", &a, why, sizeof why) != 0);
    const char *fn = "{\"source\": \"/d\", \"fields\": null}";
    CHECK(sc_jobspec_parse(fn, strlen(fn), "x", &a, why, sizeof why) == 0);
    CHECK(a.fields == NULL);
    sc_jobspec_free(&a);
    /* A source with credentials never shows them. */
    char red[128];
    sc_redact_source("http://user:pw@host/x.tar::https://h2/y", red, sizeof red);
    CHECK_STR(red, "http://***@host/x.tar::https://h2/y");
}

/* The object-store (io) settings: their defaults are libshardio's, and
 * the flag, the environment and the config file reach sc_config.io, the
 * sio_io_config the server creates its io with; bounds refuse bad values
 * (the library's limits). */
static void test_io_settings(void)
{
    CHECK(LOAD("--job", "io", "--source", "/d") == SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.io.fetch.max_inflight, SIO_FETCH_DEFAULT_INFLIGHT);
    CHECK_EQ_U64(cfg.io.fetch.max_per_host, SIO_FETCH_DEFAULT_PER_HOST);
    CHECK_EQ_U64(cfg.io.fetch.part_size, SIO_FETCH_DEFAULT_PART_SIZE);
    CHECK_EQ_U64(cfg.io.fetch.parts_per_stream, SIO_FETCH_DEFAULT_PARTS);
    CHECK_EQ_U64(cfg.io.fetch.max_retries, SIO_FETCH_DEFAULT_RETRIES);
    CHECK_EQ_U64(cfg.io.fetch.retry_base_ms, SIO_FETCH_DEFAULT_RETRY_BASE_MS);
    CHECK_EQ_U64(cfg.io.fetch.retry_max_ms, SIO_FETCH_DEFAULT_RETRY_MAX_MS);
    CHECK_EQ_U64(cfg.io.fetch.connect_timeout_ms,
                 SIO_FETCH_DEFAULT_CONNECT_MS);
    CHECK_EQ_U64(cfg.io.fetch.stall_timeout_ms, SIO_FETCH_DEFAULT_STALL_MS);
    CHECK(cfg.io.fetch.ca_file == NULL);
    CHECK_EQ_U64(cfg.io.s3_list_workers, SIO_S3_LIST_WORKERS_DEFAULT);
    CHECK(cfg.io.s3_list_split == SIO_S3_LIST_SPLIT_ON);
    CHECK(cfg.io.allow_link_local == 0);
    sc_settings_free(&cfg);

    CHECK(LOAD("--job", "io", "--source", "/d", "--fetch-inflight",
               "16", "--fetch-per-host=4",
               "--fetch-part-size", "1MiB", "--fetch-parts-per-stream", "3",
               "--fetch-retries", "2", "--fetch-retry-base-ms", "1s",
               "--fetch-retry-max-ms", "5s", "--fetch-connect-timeout-ms",
               "250ms", "--fetch-stall-timeout-ms", "5s", "--ca-file",
               "/etc/ssl/ca.pem", "--s3-list-workers", "4",
               "--s3-list-split", "false", "--allow-link-local-sources",
               "true") == SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.io.fetch.max_inflight, 16);
    CHECK_EQ_U64(cfg.io.fetch.max_per_host, 4);
    CHECK_EQ_U64(cfg.io.fetch.part_size, 1u << 20);
    CHECK_EQ_U64(cfg.io.fetch.parts_per_stream, 3);
    CHECK_EQ_U64(cfg.io.fetch.max_retries, 2);
    CHECK_EQ_U64(cfg.io.fetch.retry_base_ms, 1000);
    CHECK_EQ_U64(cfg.io.fetch.retry_max_ms, 5000);
    CHECK_EQ_U64(cfg.io.fetch.connect_timeout_ms, 250);
    CHECK_EQ_U64(cfg.io.fetch.stall_timeout_ms, 5000);
    CHECK_STR(cfg.io.fetch.ca_file, "/etc/ssl/ca.pem");
    CHECK_EQ_U64(cfg.io.s3_list_workers, 4);
    CHECK(cfg.io.s3_list_split == SIO_S3_LIST_SPLIT_OFF);
    CHECK(cfg.io.allow_link_local == 1);
    {
        char *j = sc_settings_json(&cfg);
        CHECK(j && strstr(j, "\"fetch-part-size\": 1048576") &&
              strstr(j, "\"s3-list-split\": false"));
        free(j);
    }
    sc_settings_free(&cfg);

    /* The environment names the listing knobs libshardio read before. */
    setenv("SHARDCAST_S3_LIST_WORKERS", "2", 1);
    setenv("SHARDCAST_S3_LIST_SPLIT", "0", 1);
    setenv("SHARDCAST_FETCH_INFLIGHT", "7", 1);
    setenv("SHARDCAST_FETCH_STALL_TIMEOUT_MS", "2m", 1);
    CHECK(LOAD("--job", "io", "--source", "/d", "--fetch-inflight", "9") ==
          SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.io.s3_list_workers, 2);
    CHECK(cfg.io.s3_list_split == SIO_S3_LIST_SPLIT_OFF);
    CHECK_EQ_U64(cfg.io.fetch.max_inflight, 9); /* the command line wins */
    CHECK_EQ_U64(cfg.io.fetch.stall_timeout_ms, 120000);
    sc_settings_free(&cfg);
    setenv("SHARDCAST_S3_LIST_WORKERS", "65", 1);
    CHECK(LOAD("--port", "1") == SC_SETTINGS_ERROR);
    CHECK(strstr(msg, "--s3-list-workers") &&
          strstr(msg, "SHARDCAST_S3_LIST_WORKERS"));
    sc_settings_free(&cfg);
    unsetenv("SHARDCAST_S3_LIST_WORKERS");
    unsetenv("SHARDCAST_S3_LIST_SPLIT");
    unsetenv("SHARDCAST_FETCH_INFLIGHT");
    unsetenv("SHARDCAST_FETCH_STALL_TIMEOUT_MS");

    /* The config file, below the environment and the command line. */
    char *p = write_tmp("io.json",
                        "{\"fetch_part_size\": \"16MiB\", "
                        "\"fetch-retries\": 5, \"s3_list_split\": false, "
                        "\"ca_file\": \"/ca.pem\", \"s3_list_workers\": 12}");
    setenv("SHARDCAST_FETCH_RETRIES", "6", 1);
    CHECK(LOAD("--job", "io", "--source", "/d", "--config", p,
               "--s3-list-workers", "3") == SC_SETTINGS_OK);
    CHECK_EQ_U64(cfg.io.fetch.part_size, 16u << 20);
    CHECK_EQ_U64(cfg.io.fetch.max_retries, 6); /* the environment wins */
    CHECK(cfg.io.s3_list_split == SIO_S3_LIST_SPLIT_OFF);
    CHECK_STR(cfg.io.fetch.ca_file, "/ca.pem");
    CHECK_EQ_U64(cfg.io.s3_list_workers, 3);
    sc_settings_free(&cfg);
    unsetenv("SHARDCAST_FETCH_RETRIES");
    p = write_tmp("io-bad.json", "{\"fetch_parts_per_stream\": 65}");
    CHECK(LOAD("--config", p) == SC_SETTINGS_ERROR);
    CHECK(strstr(msg, "--fetch-parts-per-stream") != NULL);
    sc_settings_free(&cfg);
    unlink(p);

    /* Bounds: what libshardio would refuse (or take as "default") is
     * refused here, naming the setting. */
    static char *const bad[][2] = {
        {"--fetch-inflight", "0"},
        {"--fetch-inflight", "1025"},
        {"--fetch-per-host", "0"},
        {"--fetch-part-size", "1k"},
        {"--fetch-part-size", "512MiB"},
        {"--fetch-parts-per-stream", "65"},
        {"--fetch-retries", "0"},
        {"--fetch-retries", "101"},
        {"--fetch-stall-timeout-ms", "10ms"},
        {"--ca-file", ""},
        {"--s3-list-workers", "0"},
        {"--s3-list-workers", "65"},
        {"--s3-list-split", "sometimes"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(LOAD(bad[i][0], bad[i][1]) == SC_SETTINGS_ERROR);
        CHECK(strstr(msg, bad[i][0]) != NULL);
        sc_settings_free(&cfg);
    }
}

int main(void)
{
    test_units();
    unsetenv("SHARDCAST_PORT");
    test_defaults_and_cli();
    test_env();
    test_names_match();
    test_deprecated_aliases();
    test_rejections();
    test_config_file();
    test_tokens_and_rules();
    test_jobspec();
    test_io_settings();
    CHECK_MAIN_END();
}
