/*
 * test_prom.c — the Prometheus text writer (server/prom.c): family lines,
 * sample lines with and without labels, label escaping, histograms, and
 * the first failure kept (a body over its bound).
 */
#include "check.h"
#include "prom.h"

static const char *text(sio_wbuf *b)
{
    CHECK(sio_wbuf_append(b, "", 1) == SIO_OK);
    b->len--;
    return (const char *)b->data;
}

static void test_lines(void)
{
    sio_wbuf b;
    sc_prom p;
    sio_wbuf_init(&b, 1u << 20);
    sc_prom_init(&p, &b);
    sc_prom_family(&p, "x_total", "counter", "Things counted.");
    sc_prom_u64(&p, "x_total", SC_PROM_NOLABELS, 18446744073709551615ull);
    sc_prom_u64(&p, "x_total", SC_PROM_LABELS({"route", "job"}, {"code", "200"}),
                7);
    sc_prom_i64(&p, "g", SC_PROM_LABELS({"k", "v"}), -3);
    sc_prom_f64(&p, "f", SC_PROM_NOLABELS, 0.5, 6);
    sc_prom_f64(&p, "f", SC_PROM_NOLABELS, 1.255, 2);
    CHECK(sc_prom_done(&p) == SIO_OK);
    CHECK_STR(text(&b), "# HELP x_total Things counted.\n"
                        "# TYPE x_total counter\n"
                        "x_total 18446744073709551615\n"
                        "x_total{route=\"job\",code=\"200\"} 7\n"
                        "g{k=\"v\"} -3\n"
                        "f 0.500000\n"
                        "f 1.25\n");
    sio_wbuf_free(&b);
}

static void test_escaping(void)
{
    char lab[64];
    CHECK(sc_prom_format_labels(lab, sizeof lab,
                                SC_PROM_LABELS({"a", "q\"b\\s\nn"},
                                               {"b", ""})) == 0);
    CHECK_STR(lab, "a=\"q\\\"b\\\\s\\nn\",b=\"\"");
    /* Too long for the buffer: refused, never cut. */
    CHECK(sc_prom_format_labels(lab, 8, SC_PROM_LABELS({"a", "0123456789"})) ==
          -1);
    CHECK(sc_prom_format_labels(lab, sizeof lab, NULL, 0) == 0);
    CHECK_STR(lab, "");
}

static void test_hist(void)
{
    sio_wbuf b;
    sc_prom p;
    sio_hist h;
    sio_hist_snap s;
    memset(&h, 0, sizeof h);
    sio_hist_observe(&h, &sio_hist_latency, 3000000); /* 3 ms */
    sio_hist_snapshot(&h, &s);
    sio_wbuf_init(&b, 1u << 20);
    sc_prom_init(&p, &b);
    sc_prom_hist(&p, "lat_seconds", SC_PROM_LABELS({"job", "a\"b"}),
                 &sio_hist_latency, &s);
    CHECK(sc_prom_done(&p) == SIO_OK);
    const char *t = text(&b);
    CHECK(strstr(t, "lat_seconds_bucket{job=\"a\\\"b\",le=\"+Inf\"} 1\n") !=
          NULL);
    CHECK(strstr(t, "lat_seconds_count{job=\"a\\\"b\"} 1\n") != NULL);
    sio_wbuf_free(&b);
}

/* The first failure stays; later calls write nothing. */
static void test_bound(void)
{
    sio_wbuf b;
    sc_prom p;
    sio_wbuf_init(&b, 40);
    sc_prom_init(&p, &b);
    sc_prom_u64(&p, "short", SC_PROM_NOLABELS, 1);
    size_t len = b.len;
    CHECK(sc_prom_done(&p) == SIO_OK);
    sc_prom_family(&p, "a_metric_with_a_long_name", "gauge",
                   "Help longer than the bound.");
    CHECK(sc_prom_done(&p) != SIO_OK);
    sc_prom_u64(&p, "x", SC_PROM_NOLABELS, 2);
    CHECK_EQ_U64(b.len, len);
    sio_wbuf_free(&b);
}

int main(void)
{
    test_lines();
    test_escaping();
    test_hist();
    test_bound();
    CHECK_MAIN_END();
}
