/*
 * brace.c — brace-pattern expansion for shard names.
 *
 * Grammar: text with any number of non-nested braces. "{A..B}" with A and B
 * decimal integers (either order, up to 18 digits) is a numeric range; when
 * either bound is written with a leading zero, every number is zero padded
 * to the width of the wider bound. "{x,y,z}" lists alternatives (empty ones
 * allowed). Braces holding neither ',' nor '..' are literal text, as in the
 * shell. Several braces give the cartesian product, the leftmost varying
 * slowest, so names come out in written order.
 *
 * Stateless. sio_brace_each hands the names to a callback one at a time,
 * so a caller that packs them (the shard list) never holds one malloc'd
 * string per name; sio_brace_expand's array is owned by the caller.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"

/* At most this many braces in one pattern. */
#define BRACE_GROUPS_MAX 32
/* Longest pattern accepted (longer than any URL we would fetch). */
#define BRACE_PATTERN_MAX 8192
/* Range bounds are kept below 10^18 so arithmetic cannot overflow. */
#define BRACE_DIGITS_MAX 18

typedef struct seg {
    const char *lit; /* literal text (not NUL terminated) */
    size_t litlen;
    int kind;        /* 0 literal, 1 range, 2 alternatives */
    long long lo, hi;
    int width;       /* zero padding width for ranges, 0 for none */
    const char *alt; /* alternatives text between braces */
    size_t altlen;
    size_t count;    /* number of choices */
} seg;

void sio_strv_free(char **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Parse a decimal of 1..BRACE_DIGITS_MAX digits with an optional '-'. */
static int parse_num(const char *s, size_t len, long long *v, int *zpad)
{
    size_t i = 0;
    int neg = 0;
    long long x = 0;
    if (len && s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i == len || len - i > BRACE_DIGITS_MAX)
        return -1;
    *zpad = (len - i > 1 && s[i] == '0');
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        x = x * 10 + (s[i] - '0');
    }
    *v = neg ? -x : x;
    return 0;
}

/* Classify the body of one brace. */
static void parse_group(seg *g, const char *body, size_t len)
{
    const char *dots = NULL;
    for (size_t i = 0; i + 1 < len; i++)
        if (body[i] == '.' && body[i + 1] == '.') {
            dots = body + i;
            break;
        }
    if (dots) {
        long long a, b;
        int za, zb;
        size_t la = (size_t)(dots - body), lb = len - la - 2;
        if (parse_num(body, la, &a, &za) == 0 &&
            parse_num(dots + 2, lb, &b, &zb) == 0) {
            g->kind = 1;
            g->lo = a;
            g->hi = b;
            g->width = (za || zb) ? (int)(la > lb ? la : lb) : 0;
            g->count = (size_t)(a <= b ? b - a : a - b) + 1;
            return;
        }
    }
    if (memchr(body, ',', len)) {
        g->kind = 2;
        g->alt = body;
        g->altlen = len;
        g->count = 1;
        for (size_t i = 0; i < len; i++)
            g->count += body[i] == ',';
        return;
    }
    g->kind = 0; /* literal "{...}" */
}

/* Append the choice k of group g to buf at *o. */
static int emit_choice(const seg *g, size_t k, char *buf, size_t cap,
                       size_t *o)
{
    if (g->kind == 1) {
        long long v = g->lo <= g->hi ? g->lo + (long long)k
                                     : g->lo - (long long)k;
        int n = snprintf(buf + *o, cap - *o, "%0*lld", g->width, v);
        if (n < 0 || (size_t)n >= cap - *o)
            return -1;
        *o += (size_t)n;
        return 0;
    }
    /* alternatives: the k-th comma-separated piece */
    const char *p = g->alt, *end = g->alt + g->altlen;
    for (size_t i = 0; i < k; i++)
        p = memchr(p, ',', (size_t)(end - p)) + 1;
    const char *q = memchr(p, ',', (size_t)(end - p));
    size_t l = (size_t)((q ? q : end) - p);
    if (*o + l >= cap)
        return -1;
    memcpy(buf + *o, p, l);
    *o += l;
    return 0;
}

sio_code sio_brace_each(const char *pattern, size_t max_items,
                        sio_brace_emit emit, void *arg, sio_error *err)
{
    seg segs[2 * BRACE_GROUPS_MAX + 1];
    size_t nseg = 0, ngroups = 0, total = 1, plen, i;
    char *buf = NULL;
    size_t done = 0, bufcap;
    sio_code rc = SIO_OK;
    const char *p, *lit;

    if (!max_items)
        max_items = SIO_BRACE_MAX_DEFAULT;
    plen = strlen(pattern);
    if (plen > BRACE_PATTERN_MAX)
        return sio_seterr(err, SIO_ERR_LIMIT, "pattern longer than %d bytes",
                          BRACE_PATTERN_MAX);
    /* Split into literal text and groups. */
    p = lit = pattern;
    memset(segs, 0, sizeof segs);
    while (*p) {
        if (*p == '}')
            return sio_seterr(err, SIO_ERR_INVALID,
                              "unbalanced '}' in pattern %s", pattern);
        if (*p != '{') {
            p++;
            continue;
        }
        const char *close = strpbrk(p + 1, "{}");
        if (!close || *close == '{')
            return sio_seterr(err, SIO_ERR_INVALID,
                              "unbalanced or nested '{' in pattern %s",
                              pattern);
        seg g;
        memset(&g, 0, sizeof g);
        parse_group(&g, p + 1, (size_t)(close - p - 1));
        if (g.kind == 0) { /* literal braces stay in the text */
            p = close + 1;
            continue;
        }
        if (ngroups == BRACE_GROUPS_MAX)
            return sio_seterr(err, SIO_ERR_LIMIT, "more than %d braces",
                              BRACE_GROUPS_MAX);
        segs[nseg].kind = 0;
        segs[nseg].lit = lit;
        segs[nseg].litlen = (size_t)(p - lit);
        nseg++;
        segs[nseg++] = g;
        ngroups++;
        if (g.count > max_items || total > max_items / g.count)
            return sio_seterr(err, SIO_ERR_LIMIT,
                              "pattern expands to more than %zu names",
                              max_items);
        total *= g.count;
        p = lit = close + 1;
    }
    segs[nseg].kind = 0;
    segs[nseg].lit = lit;
    segs[nseg].litlen = (size_t)(p - lit);
    nseg++;

    /* Each name is at most the pattern plus the widest numbers. */
    bufcap = plen + (size_t)ngroups * (BRACE_DIGITS_MAX + 2) + 1;
    buf = malloc(bufcap);
    if (!buf) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (done = 0; done < total; done++) {
        /* Mixed-radix digits of `done`, leftmost group most significant. */
        size_t rem = done, o = 0, k[2 * BRACE_GROUPS_MAX + 1];
        for (i = nseg; i-- > 0;) {
            if (segs[i].kind == 0)
                continue;
            k[i] = rem % segs[i].count;
            rem /= segs[i].count;
        }
        for (i = 0; i < nseg; i++) {
            if (segs[i].kind == 0) {
                memcpy(buf + o, segs[i].lit, segs[i].litlen);
                o += segs[i].litlen;
            } else if (emit_choice(&segs[i], k[i], buf, bufcap, &o) != 0) {
                rc = sio_seterr(err, SIO_ERR_LIMIT, "name too long");
                goto out;
            }
        }
        buf[o] = '\0';
        rc = emit(arg, buf, err);
        if (rc)
            goto out;
    }
out:
    free(buf);
    return rc;
}

/* sio_brace_expand's sink: the names as an array of malloc'd strings. */
typedef struct strv {
    char **v;
    size_t n, cap;
} strv;

static sio_code strv_emit(void *arg, const char *name, sio_error *err)
{
    strv *sv = arg;
    if (sv->n == sv->cap) {
        size_t ncap = sv->cap ? sv->cap * 2 : 64;
        char **nv = realloc(sv->v, ncap * sizeof *nv);
        if (!nv)
            return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        sv->v = nv;
        sv->cap = ncap;
    }
    sv->v[sv->n] = strdup(name);
    if (!sv->v[sv->n])
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    sv->n++;
    return SIO_OK;
}

sio_code sio_brace_expand(const char *pattern, size_t max_items, char ***out,
                          size_t *n, sio_error *err)
{
    strv sv = {NULL, 0, 0};
    sio_code rc = sio_brace_each(pattern, max_items, strv_emit, &sv, err);
    *out = NULL;
    *n = 0;
    if (rc) {
        sio_strv_free(sv.v, sv.n);
        return rc;
    }
    *out = sv.v;
    *n = sv.n;
    return SIO_OK;
}
