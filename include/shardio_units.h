/*
 * shardio_units.h — the one parser of the numbers people type into
 * shardcast's options: counts, byte sizes and durations. shardcastd's
 * settings (flags, SHARDCAST_* variables, the config file, job specs) and
 * the `shardcast` command read every number through it, so an option
 * spelled the same in both accepts the same units.
 *
 *   count     a non-negative decimal integer, no suffix
 *   bytes     an integer with an optional binary suffix, case-insensitive:
 *             B, K/KB/KiB/Ki, M/MB/MiB/Mi, G/GB/GiB/Gi, T/TB/TiB/Ti
 *             (all powers of 1024: "256Mi" = "256MiB" = "256M"), so
 *             Kubernetes quantities read as Kubernetes means them
 *   duration  an integer with an optional unit: ms, s, m, h (lower case);
 *             a bare number is in the option's own unit — milliseconds for
 *             options named "*-ms", seconds otherwise (SIO_UNIT_MS and
 *             SIO_UNIT_SECS)
 * No sign, no fraction, no space; overflow of 64 bits is an error.
 *
 * Threading: pure functions, no state.
 */
#ifndef SHARDIO_UNITS_H
#define SHARDIO_UNITS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sio_unit_kind {
    SIO_UNIT_COUNT = 0, /* plain integer */
    SIO_UNIT_BYTES = 1, /* result in bytes */
    SIO_UNIT_MS = 2,    /* duration, result in ms; a bare number is ms */
    SIO_UNIT_SECS = 3   /* duration, result in s; a bare number is s; a
                           value with a unit must be whole seconds
                           ("2000ms" is 2, "1500ms" is an error) */
} sio_unit_kind;

/*
 * Parse text (NUL-terminated) as `kind`. Returns 0 and stores the value in
 * *out, or -1 (and leaves *out alone) when the text is not such a number.
 * *had_unit, when not NULL, is set to whether a suffix was given (callers
 * that kept an older bare-number meaning use it to warn).
 */
int sio_parse_units(const char *text, sio_unit_kind kind, uint64_t *out,
                    int *had_unit);

/* What `kind` accepts, for messages ("a byte count (suffix K/M/G/T or
 * Ki/Mi/Gi/Ti)", ...); a static string. */
const char *sio_units_describe(sio_unit_kind kind);

#ifdef __cplusplus
}
#endif

#endif /* SHARDIO_UNITS_H */
