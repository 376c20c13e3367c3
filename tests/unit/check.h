/*
 * check.h — the assertion macros of the C unit tests.
 * A failed CHECK prints file:line and the expression, counts the failure and
 * goes on; CHECK_MAIN_END returns non-zero when anything failed.
 */
#ifndef SHARDCAST_CHECK_H
#define SHARDCAST_CHECK_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Atomic: some tests check from several threads. */
static _Atomic int check_failures;
static _Atomic int check_count;

#define CHECK(cond)                                                        \
    do {                                                                   \
        check_count++;                                                     \
        if (!(cond)) {                                                     \
            check_failures++;                                              \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__,         \
                    __LINE__, #cond);                                      \
        }                                                                  \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                 \
    do {                                                                   \
        uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                   \
        check_count++;                                                     \
        if (a_ != b_) {                                                    \
            check_failures++;                                              \
            fprintf(stderr, "%s:%d: %s == %s failed: %" PRIu64             \
                    " != %" PRIu64 "\n", __FILE__, __LINE__, #a, #b, a_, b_); \
        }                                                                  \
    } while (0)

#define CHECK_STR(a, b)                                                    \
    do {                                                                   \
        const char *a_ = (a), *b_ = (b);                                   \
        check_count++;                                                     \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                           \
            check_failures++;                                              \
            fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n",  \
                    __FILE__, __LINE__, #a, #b, a_ ? a_ : "(null)",        \
                    b_ ? b_ : "(null)");                                   \
        }                                                                  \
    } while (0)

/* Path of a file under ../shared/ (env SHARED_DIR set by ctest): the
 * upstream corpora of the conformance layer. */
static inline const char *shared_path(char *buf, size_t len, const char *rel)
{
    const char *d = getenv("SHARED_DIR");
    snprintf(buf, len, "%s/%s", d ? d : "../shared", rel);
    return buf;
}

/* Path of a generated fixture (env SHARDCAST_FIXTURES set by ctest, whose
 * fixtures_* setup tests write them with tests/tools/mkfixtures.py and
 * mksigv4.py); exits when they are not there. */
static inline const char *fixture_path(char *buf, size_t len, const char *rel)
{
    const char *d = getenv("SHARDCAST_FIXTURES");
    if (!d || !*d) {
        fprintf(stderr, "SHARDCAST_FIXTURES is not set: run this test through "
                        "ctest, which generates the fixtures first\n");
        exit(1);
    }
    snprintf(buf, len, "%s/%s", d, rel);
    return buf;
}

/* Is this run the conformance test (`--upstream`) of a program that also
 * has one? Exits with a usage message on any other argument. */
static inline int check_upstream_arg(int argc, char **argv)
{
    if (argc == 1)
        return 0;
    if (argc == 2 && strcmp(argv[1], "--upstream") == 0)
        return 1;
    fprintf(stderr, "usage: %s [--upstream]\n", argv[0]);
    exit(2);
}

/* The exit status that makes ctest report a test as skipped
 * (SKIP_RETURN_CODE). */
#define CHECK_SKIPPED 77

/*
 * The upstream corpora under ../shared/testdata are an optional
 * conformance layer on top of the generated fixtures. When `path` (one of
 * them) is missing, a conformance test reports it and returns
 * CHECK_SKIPPED, or 1 when SHARDCAST_CONFORMANCE=require (scripts/test.sh
 * sets it when the corpora are present, so they cannot silently vanish).
 * Returns 0 when the path exists.
 */
static inline int conformance_missing(const char *path)
{
    const char *req = getenv("SHARDCAST_CONFORMANCE");
    if (access(path, R_OK) == 0)
        return 0;
    if (req && strcmp(req, "require") == 0) {
        fprintf(stderr, "upstream corpus not found at %s "
                        "(SHARDCAST_CONFORMANCE=require)\n", path);
        return 1;
    }
    printf("upstream corpus not found at %s (set SHARED_DIR): "
           "conformance test not run\n", path);
    return CHECK_SKIPPED;
}

#define CHECK_MAIN_END()                                                   \
    do {                                                                   \
        printf("%d checks, %d failed\n", atomic_load(&check_count),      \
               atomic_load(&check_failures));                              \
        return atomic_load(&check_failures) ? 1 : 0;                       \
    } while (0)

/* Append printf-style text to a growing NUL-terminated string (*s of
 * *len bytes in *cap): the tests' accounts of what a reader produced. A
 * line longer than 2 KiB is cut there. */
static inline void text_vappend(char **s, size_t *len, size_t *cap,
                                const char *fmt, va_list ap)
{
    char line[2048];
    int n = vsnprintf(line, sizeof line, fmt, ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line)
        n = sizeof line - 1;
    if (*len + (size_t)n + 1 > *cap) {
        *cap = (*len + (size_t)n + 1) * 2;
        *s = realloc(*s, *cap);
        if (!*s)
            abort();
    }
    memcpy(*s + *len, line, (size_t)n + 1);
    *len += (size_t)n;
}

#endif
