/*
 * prom.c — the Prometheus text exposition writer (contract in prom.h).
 *
 * Threading: no state beyond the caller's writer.
 */
#include "prom.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Longest label set of one series (every label value we write is a
 * route, code, job or source name, a version, a backend or an operation). */
#define LABELS_MAX 1024u

void sc_prom_init(sc_prom *p, sio_wbuf *out)
{
    p->out = out;
    p->rc = SIO_OK;
}

sio_code sc_prom_done(const sc_prom *p)
{
    return p->rc;
}

void sc_prom_family(sc_prom *p, const char *name, const char *type,
                    const char *help)
{
    if (p->rc == SIO_OK)
        p->rc = sio_wbuf_printf(p->out, "# HELP %s %s\n# TYPE %s %s\n", name,
                                help, name, type);
}

int sc_prom_format_labels(char *dst, size_t cap, const sc_prom_label *labels,
                          size_t nlabels)
{
    size_t o = 0;
    if (cap == 0)
        return -1;
    for (size_t i = 0; i < nlabels; i++) {
        int n = snprintf(dst + o, cap - o, "%s%s=\"", i ? "," : "",
                         labels[i].name);
        if (n < 0 || (size_t)n >= cap - o)
            return -1;
        o += (size_t)n;
        for (const char *v = labels[i].value; *v; v++) {
            const char *esc = *v == '\\' ? "\\\\"
                              : *v == '"' ? "\\\""
                              : *v == '\n' ? "\\n"
                                           : NULL;
            size_t len = esc ? 2 : 1;
            if (o + len >= cap)
                return -1;
            if (esc)
                memcpy(dst + o, esc, 2);
            else
                dst[o] = *v;
            o += len;
        }
        if (o + 1 >= cap)
            return -1;
        dst[o++] = '"';
    }
    dst[o] = '\0';
    return 0;
}

/* "name{labels} " or "name " into the output. */
static void series(sc_prom *p, const char *name, const sc_prom_label *labels,
                   size_t nlabels)
{
    char lab[LABELS_MAX];
    if (p->rc != SIO_OK)
        return;
    if (!nlabels) {
        p->rc = sio_wbuf_printf(p->out, "%s ", name);
        return;
    }
    if (sc_prom_format_labels(lab, sizeof lab, labels, nlabels) != 0) {
        p->rc = SIO_ERR_LIMIT;
        return;
    }
    p->rc = sio_wbuf_printf(p->out, "%s{%s} ", name, lab);
}

void sc_prom_u64(sc_prom *p, const char *name, const sc_prom_label *labels,
                 size_t nlabels, uint64_t v)
{
    series(p, name, labels, nlabels);
    if (p->rc == SIO_OK)
        p->rc = sio_wbuf_printf(p->out, "%" PRIu64 "\n", v);
}

void sc_prom_i64(sc_prom *p, const char *name, const sc_prom_label *labels,
                 size_t nlabels, int64_t v)
{
    series(p, name, labels, nlabels);
    if (p->rc == SIO_OK)
        p->rc = sio_wbuf_printf(p->out, "%" PRId64 "\n", v);
}

void sc_prom_f64(sc_prom *p, const char *name, const sc_prom_label *labels,
                 size_t nlabels, double v, int decimals)
{
    series(p, name, labels, nlabels);
    if (p->rc == SIO_OK)
        p->rc = sio_wbuf_printf(p->out, "%.*f\n", decimals, v);
}

void sc_prom_hist(sc_prom *p, const char *name, const sc_prom_label *labels,
                  size_t nlabels, const sio_hist_layout *layout,
                  const sio_hist_snap *s)
{
    char lab[LABELS_MAX];
    if (p->rc != SIO_OK)
        return;
    if (sc_prom_format_labels(lab, sizeof lab, labels, nlabels) != 0) {
        p->rc = SIO_ERR_LIMIT;
        return;
    }
    p->rc = (sio_code)sio_hist_write(p->out, name, lab, layout, s);
}
