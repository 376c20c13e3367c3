/*
 * check.h — the assertion macros of the C unit tests.
 * A failed CHECK prints file:line and the expression, counts the failure and
 * goes on; CHECK_MAIN_END returns non-zero when anything failed.
 */
#ifndef SHARDCAST_CHECK_H
#define SHARDCAST_CHECK_H

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Path of a file under ../shared/ (env SHARED_DIR set by ctest). */
static inline const char *shared_path(char *buf, size_t len, const char *rel)
{
    const char *d = getenv("SHARED_DIR");
    snprintf(buf, len, "%s/%s", d ? d : "../shared", rel);
    return buf;
}

#define CHECK_MAIN_END()                                                   \
    do {                                                                   \
        printf("%d checks, %d failed\n", atomic_load(&check_count),      \
               atomic_load(&check_failures));                              \
        return atomic_load(&check_failures) ? 1 : 0;                       \
    } while (0)

#endif
