/*
 * prom.h — the Prometheus text exposition writer (format 0.0.4) behind
 * every family of /metrics: the server's (http.c, metrics.c) and the jobs'
 * (status.c). One place writes the # HELP / # TYPE lines, the sample lines
 * and escapes label values (backslash, double quote and newline).
 *
 * A writer remembers its first failure (the body bound of the sio_wbuf, or
 * out of memory): every later call does nothing and sc_prom_done returns
 * it, so callers write a whole exposition and check once.
 *
 * Threading: a writer belongs to one thread; no global state.
 */
#ifndef SC_PROM_H
#define SC_PROM_H

#include <stddef.h>
#include <stdint.h>

#include "shardio.h"
#include "shardio_wire.h"

typedef struct sc_prom {
    sio_wbuf *out;
    sio_code rc; /* the first failure */
} sc_prom;

/* One label: name (a Prometheus label name, written as is) and value
 * (escaped). */
typedef struct sc_prom_label {
    const char *name;
    const char *value;
} sc_prom_label;

/* The labels argument pair (array, count) of the calls below:
 * SC_PROM_LABELS({"route", "job"}, {"code", "200"}). */
#define SC_PROM_LABELS(...)                                                \
    ((const sc_prom_label[]){__VA_ARGS__}),                                \
        (sizeof((const sc_prom_label[]){__VA_ARGS__}) /                    \
         sizeof(sc_prom_label))
/* No labels. */
#define SC_PROM_NOLABELS NULL, 0

void sc_prom_init(sc_prom *p, sio_wbuf *out);

/* "# HELP name help" and "# TYPE name type" (type: counter, gauge,
 * histogram). */
void sc_prom_family(sc_prom *p, const char *name, const char *type,
                    const char *help);

/* One sample line "name{labels} value". */
void sc_prom_u64(sc_prom *p, const char *name, const sc_prom_label *labels,
                 size_t nlabels, uint64_t v);
void sc_prom_i64(sc_prom *p, const char *name, const sc_prom_label *labels,
                 size_t nlabels, int64_t v);
/* v with `decimals` digits after the point. */
void sc_prom_f64(sc_prom *p, const char *name, const sc_prom_label *labels,
                 size_t nlabels, double v, int decimals);

/* One histogram series (name_bucket, name_sum, name_count). */
void sc_prom_hist(sc_prom *p, const char *name, const sc_prom_label *labels,
                  size_t nlabels, const sio_hist_layout *layout,
                  const sio_hist_snap *s);

/* The first failure, SIO_OK when everything was written. */
sio_code sc_prom_done(const sc_prom *p);

/* Write `name="value",...` (values escaped) into dst[cap], NUL-terminated.
 * Returns 0, or -1 when it does not fit. */
int sc_prom_format_labels(char *dst, size_t cap, const sc_prom_label *labels,
                          size_t nlabels);

#endif /* SC_PROM_H */
