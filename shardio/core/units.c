/*
 * units.c — counts, byte sizes and durations as typed by people (contract
 * in include/shardio_units.h).
 *
 * Threading: pure functions. Ownership: nothing is allocated.
 */
#include "shardio_units.h"

#include <ctype.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

typedef struct suffix {
    const char *s;
    uint64_t mult;
} suffix;

/* Binary sizes, compared case-insensitively. */
static const suffix size_suffixes[] = {
    {"b", 1},
    {"k", 1ull << 10}, {"kb", 1ull << 10}, {"kib", 1ull << 10}, {"ki", 1ull << 10},
    {"m", 1ull << 20}, {"mb", 1ull << 20}, {"mib", 1ull << 20}, {"mi", 1ull << 20},
    {"g", 1ull << 30}, {"gb", 1ull << 30}, {"gib", 1ull << 30}, {"gi", 1ull << 30},
    {"t", 1ull << 40}, {"tb", 1ull << 40}, {"tib", 1ull << 40}, {"ti", 1ull << 40}};

/* Duration units in ms, compared exactly ("M" is not minutes). */
static const suffix time_suffixes[] = {
    {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};

int sio_parse_units(const char *v, sio_unit_kind kind, uint64_t *out,
                    int *had_unit)
{
    uint64_t x = 0, mult = 0;
    size_t i = 0;

    if (!v || !isdigit((unsigned char)v[0]))
        return -1;
    for (; isdigit((unsigned char)v[i]); i++) {
        unsigned d = (unsigned)(v[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    const char *suf = v + i;
    if (!*suf) {
        if (had_unit)
            *had_unit = 0;
        *out = x;
        return 0;
    }
    switch (kind) {
    case SIO_UNIT_COUNT:
        return -1;
    case SIO_UNIT_BYTES:
        for (size_t k = 0; k < sizeof size_suffixes / sizeof *size_suffixes; k++)
            if (strcasecmp(suf, size_suffixes[k].s) == 0)
                mult = size_suffixes[k].mult;
        break;
    case SIO_UNIT_MS:
    case SIO_UNIT_SECS:
        for (size_t k = 0; k < sizeof time_suffixes / sizeof *time_suffixes; k++)
            if (strcmp(suf, time_suffixes[k].s) == 0)
                mult = time_suffixes[k].mult;
        break;
    }
    if (mult == 0 || x > UINT64_MAX / mult)
        return -1;
    x *= mult; /* bytes, or ms for durations */
    if (kind == SIO_UNIT_SECS) {
        if (x % 1000)
            return -1;
        x /= 1000;
    }
    if (had_unit)
        *had_unit = 1;
    *out = x;
    return 0;
}

const char *sio_units_describe(sio_unit_kind kind)
{
    switch (kind) {
    case SIO_UNIT_COUNT: return "an integer";
    case SIO_UNIT_BYTES:
        return "a byte count (suffix K/M/G/T or Ki/Mi/Gi/Ti)";
    case SIO_UNIT_MS:
        return "a duration in ms (or with a unit: 500ms, 30s, 5m, 1h)";
    case SIO_UNIT_SECS:
        return "a duration in s (or with a unit: 30s, 5m, 1h, 2000ms)";
    }
    return "a number";
}
