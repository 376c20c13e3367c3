/*
 * test_server_request.c — request-target parsing (server/request.c):
 * routes, parameters, and hostile inputs (missing and duplicated
 * parameters, rank >= world, integer overflow, percent-encoding, limits),
 * the job, status, settings and topology routes and their methods.
 */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "request.h"

#define JOB "train-1"
#define MAXT 4096

static sc_request req;
static char reason[256];

/* The server's job table, as the parser sees it: only JOB exists. */
static int job_exists(void *ud, const char *name)
{
    (void)ud;
    return strcmp(name, JOB) == 0;
}

static unsigned parse_m(const char *method, const char *target)
{
    return sc_request_parse(method, target, strlen(target), MAXT, job_exists, NULL, &req,
                            reason, sizeof reason);
}

static unsigned parse(const char *target)
{
    return parse_m("GET", target);
}

#define S "/v1/jobs/train-1/epochs/3/stream"

static void test_valid(void)
{
    CHECK_EQ_U64(parse(S "?rank=1&world=4"), 200);
    CHECK(req.route == SC_ROUTE_STREAM);
    CHECK_STR(req.job, JOB);
    CHECK_EQ_U64(req.epoch, 3);
    CHECK_EQ_U64(req.rank, 1);
    CHECK_EQ_U64(req.world, 4);
    CHECK_EQ_U64(req.start, 0);
    CHECK(req.format == SC_FORMAT_TAR);
    CHECK_EQ_U64(req.nfields, 0);

    /* The largest start whose sample index stays within SIO_POSITION_MAX
     * (2^62): every index a request reaches is bounded (partition.c). */
    CHECK_EQ_U64(parse(S "?world=65536&rank=65535&start=70368744177663"
                         "&format=tar&fields=JPG,cls,txt.gz"),
                 200);
    CHECK_EQ_U64(req.rank, 65535);
    CHECK_EQ_U64(req.world, 65536);
    CHECK_EQ_U64(req.start, 70368744177663ull);
    CHECK(req.has_fields);
    CHECK_EQ_U64(req.nfields, 3);
    CHECK_STR(req.fields[0], "jpg"); /* lowercased like the library's */
    CHECK_STR(req.fields[1], "cls");
    CHECK_STR(req.fields[2], "txt.gz");

    /* Percent-encoding anywhere, '+' in the query, empty parameters
     * ignored. */
    CHECK_EQ_U64(parse("/v1/jobs/train%2D1/epochs/%31%38/stream?%72ank=%30"
                       "&world=2&&fields=a%2Cb"),
                 200);
    CHECK_EQ_U64(req.epoch, 18);
    CHECK_EQ_U64(req.rank, 0);
    CHECK_EQ_U64(req.nfields, 2);
    CHECK_STR(req.fields[1], "b");
    /* Issue 12: an unknown parameter is a 400 that names it (it used to be
     * ignored, so "globalstart=" streamed from the start). */
    CHECK_EQ_U64(parse(S "?rank=0&world=1&epoch=99999999999999999999999"), 400);
    CHECK_STR(reason, "unknown parameter epoch");
    CHECK_EQ_U64(parse(S "?rank=0&world=1&globalstart=5"), 400);
    CHECK_STR(reason, "unknown parameter globalstart");
    CHECK_EQ_U64(parse(S "?rank=0&world=1&fl%0Aag"), 400);
    CHECK_STR(reason, "unknown parameter fl?ag");
    /* Issue 12: epoch, start and global_start above 2^63-1 are 400 for
     * every format (frames refused them, tar accepted them). */
    CHECK_EQ_U64(parse("/v1/jobs/train-1/epochs/18446744073709551615/stream"
                       "?rank=0&world=1"),
                 400);
    CHECK_EQ_U64(parse("/v1/jobs/train-1/epochs/9223372036854775808/stream"
                       "?rank=0&world=1&format=tar"),
                 400);
    CHECK_EQ_U64(parse("/v1/jobs/train-1/epochs/9223372036854775807/stream"
                       "?rank=0&world=1&format=tar"),
                 200);
    CHECK_EQ_U64(req.epoch, INT64_MAX);
    CHECK_EQ_U64(parse(S "?rank=0&world=1&format=tar&start=9223372036854775808"),
                 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=1&format=tar"
                         "&global_start=9223372036854775808"),
                 400);
    CHECK_EQ_U64(parse("/v1/jobs/train-1/epochs/007/stream?rank=0&world=1"),
                 200);
    CHECK_EQ_U64(req.epoch, 7);

    CHECK_EQ_U64(parse("/healthz"), 200);
    CHECK(req.route == SC_ROUTE_HEALTHZ);
    CHECK_EQ_U64(parse_m("HEAD", "/healthz?x=1"), 200);
}

static void test_bad_params(void)
{
    CHECK_EQ_U64(parse(S), 400);
    CHECK_STR(reason, "missing parameter rank");
    CHECK_EQ_U64(parse(S "?rank=0"), 400);
    CHECK_STR(reason, "missing parameter world");
    CHECK_EQ_U64(parse(S "?world=2"), 400);
    CHECK(req.route == SC_ROUTE_NONE);

    CHECK_EQ_U64(parse(S "?rank=2&world=2"), 400);
    CHECK_STR(reason, "rank must be less than world");
    CHECK_EQ_U64(parse(S "?rank=0&world=0"), 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=65537"), 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=4294967296"), 400);
    CHECK_EQ_U64(parse(S "?rank=-1&world=2"), 400);
    CHECK_EQ_U64(parse(S "?rank=+1&world=2"), 400);
    CHECK_EQ_U64(parse(S "?rank=1.0&world=2"), 400);
    CHECK_EQ_U64(parse(S "?rank=0x1&world=2"), 400);
    CHECK_EQ_U64(parse(S "?rank=&world=2"), 400);
    CHECK_EQ_U64(parse(S "?rank&world=2"), 400);
    CHECK_EQ_U64(parse(S "?rank=%201&world=2"), 400);
    CHECK_EQ_U64(parse(S "?rank=4294967296&world=2"), 400);
    /* Overflow: one past UINT64_MAX, and many digits. */
    CHECK_EQ_U64(parse(S "?rank=0&world=1&start=18446744073709551616"), 400);
    CHECK_STR(reason, "start must be an integer in 0..2^63-1");
    CHECK_EQ_U64(parse(S "?rank=0&world=1&start=000000000000000000001"), 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=1&start=-0"), 400);

    CHECK_EQ_U64(parse("/v1/jobs/train-1/epochs/-1/stream?rank=0&world=1"), 400);
    CHECK_STR(reason, "epoch must be an integer in 0..2^63-1");
    CHECK_EQ_U64(parse("/v1/jobs/train-1/epochs//stream?rank=0&world=1"), 400);
    CHECK_EQ_U64(parse("/v1/jobs/train-1/epochs/18446744073709551616/stream"
                       "?rank=0&world=1"),
                 400);

    CHECK_EQ_U64(parse(S "?rank=0&world=1&format=json"), 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=1&format="), 400);

    CHECK_EQ_U64(parse(S "?rank=0&world=1&fields="), 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=1&fields=a,,b"), 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=1&fields=a,"), 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=1&fields=a,A"), 400); /* duplicate */
    CHECK_EQ_U64(parse(S "?rank=0&world=1&fields=a/b"), 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=1&fields=a%00b"), 400);
    char big[1024];
    snprintf(big, sizeof big, S "?rank=0&world=1&fields=%065d", 0);
    CHECK_EQ_U64(parse(big), 400); /* one name of 65 characters */
    char many[2048] = S "?rank=0&world=1&fields=f0";
    for (int i = 1; i <= 64; i++) /* 65 names */
        snprintf(many + strlen(many), sizeof many - strlen(many), ",f%d", i);
    CHECK_EQ_U64(parse(many), 400);
    many[strlen(many) - 4] = '\0'; /* drop ",f64": 64 names */
    CHECK_EQ_U64(parse(many), 200);
    CHECK_EQ_U64(req.nfields, 64);

    /* Duplicated parameters are refused, whatever the values. */
    CHECK_EQ_U64(parse(S "?rank=0&world=2&rank=0"), 400);
    CHECK_STR(reason, "duplicated parameter rank");
    CHECK_EQ_U64(parse(S "?rank=0&world=2&world=3"), 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=2&%72ank=1"), 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=2&start=1&start=1"), 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=2&fields=a&fields=b"), 400);

    /* Bad percent-encoding. */
    CHECK_EQ_U64(parse(S "?rank=%zz&world=1"), 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=1%"), 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=1%4"), 400);
    CHECK_EQ_U64(parse(S "?unknown=%g0&rank=0&world=1"), 400);
    CHECK_EQ_U64(parse("/v1/jobs/train%zz/epochs/0/stream?rank=0&world=1"),
                 400);
    /* A decoded NUL never reaches a C string. */
    CHECK_EQ_U64(parse(S "?rank=0%00&world=1"), 400);

    /* Too many parameters. */
    char lots[4096] = S "?rank=0&world=1";
    for (int i = 0; i < 70; i++)
        strcat(lots, "&x=1");
    CHECK_EQ_U64(parse(lots), 400);
}

static void test_routes(void)
{
    CHECK_EQ_U64(parse("/v1/jobs/other/epochs/0/stream?rank=0&world=1"), 404);
    CHECK_STR(reason, "unknown job");
    /* The job check comes before parameter checks. */
    CHECK_EQ_U64(parse("/v1/jobs/other/epochs/x/stream"), 404);
    CHECK_EQ_U64(parse("/v1/jobs/train-1%00/epochs/0/stream?rank=0&world=1"),
                 404);
    char longjob[512] = "/v1/jobs/";
    memset(longjob + 9, 'j', 300);
    strcpy(longjob + 309, "/epochs/0/stream?rank=0&world=1");
    CHECK_EQ_U64(parse(longjob), 404);

    CHECK_EQ_U64(parse("/"), 404);
    CHECK_EQ_U64(parse("/healthz/"), 404);
    CHECK_EQ_U64(parse("/v1/jobs/train-1/epochs/0/stream/"), 404);
    CHECK_EQ_U64(parse("/v1/jobs/train-1/epochs/0"), 404);
    CHECK_EQ_U64(parse("/v2/jobs/train-1/epochs/0/stream?rank=0&world=1"), 404);
    CHECK_EQ_U64(parse("/a/b/c/d/e/f/g/h/i/j/k"), 404);
    CHECK_EQ_U64(parse("//////////////////////////"), 404);
    CHECK_EQ_U64(parse("*"), 400);
    CHECK_EQ_U64(parse("http://h/healthz"), 400);
    CHECK_EQ_U64(sc_request_parse("GET", "", 0, MAXT, job_exists, NULL, &req, reason,
                                  sizeof reason),
                 400);

    CHECK_EQ_U64(parse_m("POST", S "?rank=0&world=1"), 405);
    CHECK_EQ_U64(parse_m("HEAD", S "?rank=0&world=1"), 405);
    CHECK_EQ_U64(parse_m("DELETE", "/healthz"), 405);
    /* Unknown paths are 404 whatever the method. */
    CHECK_EQ_U64(parse_m("POST", "/nothing"), 404);

    /* Length limit: the caller's and the parser's own. */
    char t[200];
    memset(t, 'a', sizeof t);
    t[0] = '/';
    CHECK_EQ_U64(sc_request_parse("GET", t, sizeof t, 100, job_exists, NULL, &req, reason,
                                  sizeof reason),
                 414);
    CHECK_EQ_U64(sc_request_parse("GET", t, sizeof t, 200, job_exists, NULL, &req, reason,
                                  sizeof reason),
                 404);
    /* Not NUL-terminated: only target_len bytes are read. */
    const char *pre = "/healthzXXXX";
    CHECK_EQ_U64(sc_request_parse("GET", pre, 8, MAXT, job_exists, NULL, &req, reason,
                                  sizeof reason),
                 200);
}

static void test_v1_params(void)
{
    CHECK_EQ_U64(parse(S "?rank=0&world=2&global_start=1000&start=5"
                         "&format=frames"),
                 200);
    CHECK_EQ_U64(req.global_start, 1000);
    CHECK_EQ_U64(req.start, 5);
    CHECK(req.format == SC_FORMAT_FRAMES);
    CHECK(!req.has_fields);
    CHECK_EQ_U64(parse(S "?rank=0&world=2&global_start=x"), 400);
    CHECK_STR(reason, "global_start must be an integer in 0..2^63-1");
    CHECK_EQ_U64(parse(S "?rank=0&world=2&global_start=1&global_start=1"),
                 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=2&format=frames&format=tar"), 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=2&format=FRAMES"), 400);
    /* Y[global_start + rank + start * world] must fit 64 bits. */
    CHECK_EQ_U64(parse(S "?world=65536&rank=65535&start=18446744073709551615"),
                 400);
    CHECK_EQ_U64(parse(S "?rank=1&world=2&start=1&global_start="
                         "18446744073709551615"),
                 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=1&global_start=18446744073709551615"),
                 400);
    CHECK_EQ_U64(parse(S "?world=65536&rank=65535&start=70368744177664"),
                 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=1&global_start=4611686018427387904"),
                 200);
    /* Regression: these passed the checks and made the feed's partition
     * arithmetic wrap (reads of window slots never written or freed). */
    CHECK_EQ_U64(parse(S "?rank=0&world=2&global_start=18446744073709551615"),
                 400);
    CHECK_EQ_U64(parse(S "?rank=0&world=3&start=6148914691236517205"), 400);
    /* Regression (found by fuzz_request): global_start at the bound with a
     * rank > 0 underflowed the check of start and let any start pass. */
    CHECK_EQ_U64(parse(S "?rank=1&world=2&start=1&global_start="
                         "4611686018427387904"), 400);
    CHECK_EQ_U64(parse(S "?rank=1&world=2&global_start=4611686018427387903"),
                 200);
}

static void test_v1_routes(void)
{
    CHECK_EQ_U64(parse("/readyz"), 200);
    CHECK(req.route == SC_ROUTE_READYZ);
    CHECK_EQ_U64(parse_m("HEAD", "/metrics"), 200);
    CHECK(req.route == SC_ROUTE_METRICS);
    CHECK_EQ_U64(parse("/v1/jobs"), 200);
    CHECK(req.route == SC_ROUTE_JOBS);
    CHECK_EQ_U64(parse_m("POST", "/v1/jobs"), 405);
    CHECK_EQ_U64(parse("/v1/jobs/train-1"), 200);
    CHECK(req.route == SC_ROUTE_JOB);
    CHECK_STR(req.job, JOB);
    CHECK_EQ_U64(parse_m("DELETE", "/v1/jobs/train-1"), 200);
    CHECK_EQ_U64(parse_m("DELETE", "/v1/jobs/nope"), 404);
    CHECK_EQ_U64(parse("/v1/jobs/nope"), 404);
    /* PUT may create a job; its name must be one a job can have. */
    CHECK_EQ_U64(parse_m("PUT", "/v1/jobs/new.job_2"), 200);
    CHECK_STR(req.job, "new.job_2");
    CHECK_EQ_U64(parse_m("PUT", "/v1/jobs/a%2Fb"), 400);
    CHECK_EQ_U64(parse_m("PUT", "/v1/jobs/a%20b"), 400);
    CHECK_EQ_U64(parse_m("PUT", "/v1/jobs/%zz"), 400);
    CHECK_EQ_U64(parse_m("POST", "/v1/jobs/train-1"), 405);
    CHECK_STR(sc_route_allow(SC_ROUTE_JOB), "GET, PUT, DELETE");
    CHECK_EQ_U64(parse_m("PUT", S "?rank=0&world=1"), 405);
    CHECK_EQ_U64(parse("/v1/settings"), 200);
    CHECK(req.route == SC_ROUTE_SETTINGS);
    CHECK_EQ_U64(parse_m("PUT", "/v1/settings"), 405);
    CHECK_EQ_U64(parse("/v1/topology"), 200);
    CHECK(req.route == SC_ROUTE_TOPOLOGY);
    CHECK_EQ_U64(req.world, 0);
    CHECK_EQ_U64(parse("/v1/topology?world=8"), 200);
    CHECK_EQ_U64(req.world, 8);
    CHECK_EQ_U64(parse("/v1/topology?world=0"), 400);
    /* A parameter of another route is unknown on topology. */
    CHECK_EQ_U64(parse("/v1/topology?rank=zz"), 400);
    CHECK_STR(reason, "unknown parameter rank");
    CHECK_EQ_U64(parse("/v1/jobs?world=zz"), 200);
    CHECK_EQ_U64(parse("/v1/jobs/"), 404);
    CHECK_EQ_U64(parse("/v1"), 404);
}

static void test_helpers(void)
{
    char out[8];
    CHECK_EQ_U64(sc_pct_decode("a%41+b", 6, 1, out, sizeof out), 4);
    CHECK_STR(out, "aA b");
    CHECK_EQ_U64(sc_pct_decode("a+b", 3, 0, out, sizeof out), 3);
    CHECK_STR(out, "a+b");
    CHECK(sc_pct_decode("%4", 2, 0, out, sizeof out) < 0);
    CHECK(sc_pct_decode("%", 1, 0, out, sizeof out) < 0);
    CHECK(sc_pct_decode("%00", 3, 0, out, sizeof out) < 0);
    CHECK(sc_pct_decode("12345678", 8, 0, out, sizeof out) < 0); /* no room */
    CHECK_EQ_U64(sc_pct_decode("1234567", 7, 0, out, sizeof out), 7);

    uint64_t v = 0;
    CHECK(sc_parse_u64("0", 10, &v) == 0 && v == 0);
    CHECK(sc_parse_u64("10", 10, &v) == 0 && v == 10);
    CHECK(sc_parse_u64("11", 10, &v) < 0);
    CHECK(sc_parse_u64("18446744073709551615", UINT64_MAX, &v) == 0 &&
          v == UINT64_MAX);
    CHECK(sc_parse_u64("18446744073709551616", UINT64_MAX, &v) < 0);
    CHECK(sc_parse_u64("99999999999999999999", UINT64_MAX, &v) < 0);
    CHECK(sc_parse_u64("", UINT64_MAX, &v) < 0);
    CHECK(sc_parse_u64(" 1", UINT64_MAX, &v) < 0);
    CHECK(sc_parse_u64("1 ", UINT64_MAX, &v) < 0);
}

int main(void)
{
    test_valid();
    test_bad_params();
    test_routes();
    test_v1_params();
    test_v1_routes();
    test_helpers();
    CHECK_MAIN_END();
}
