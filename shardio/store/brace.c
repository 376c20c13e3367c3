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
 * The count is known before anything is allocated (sio_brace_count): a
 * server bounds a job spec by it without expanding.
 *
 * Stateless; the result is owned by the caller.
 */
#include <stdint.h>
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
    uint64_t count;  /* number of choices (>= 1) */
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
            g->count = (uint64_t)(a <= b ? b - a : a - b) + 1;
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

/* A pattern split into literal text and groups. total is the product of
 * the groups' counts, saturated at UINT64_MAX (never wrapped). */
typedef struct split {
    seg segs[2 * BRACE_GROUPS_MAX + 1];
    size_t nseg, ngroups, plen;
    uint64_t total;
} split;

/* Split pattern (syntax and the length and group limits; no count limit,
 * no allocation). */
static sio_code split_pattern(const char *pattern, split *sp, sio_error *err)
{
    const char *p, *lit;

    memset(sp, 0, sizeof *sp);
    sp->total = 1;
    sp->plen = strlen(pattern);
    if (sp->plen > BRACE_PATTERN_MAX)
        return sio_seterr(err, SIO_ERR_LIMIT, "pattern longer than %d bytes",
                          BRACE_PATTERN_MAX);
    p = lit = pattern;
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
        if (sp->ngroups == BRACE_GROUPS_MAX)
            return sio_seterr(err, SIO_ERR_LIMIT, "more than %d braces",
                              BRACE_GROUPS_MAX);
        sp->segs[sp->nseg].kind = 0;
        sp->segs[sp->nseg].lit = lit;
        sp->segs[sp->nseg].litlen = (size_t)(p - lit);
        sp->nseg++;
        sp->segs[sp->nseg++] = g;
        sp->ngroups++;
        /* g.count >= 1: the product only grows; saturate, never wrap */
        sp->total = sp->total > UINT64_MAX / g.count ? UINT64_MAX
                                                     : sp->total * g.count;
        p = lit = close + 1;
    }
    sp->segs[sp->nseg].kind = 0;
    sp->segs[sp->nseg].lit = lit;
    sp->segs[sp->nseg].litlen = (size_t)(p - lit);
    sp->nseg++;
    return SIO_OK;
}

sio_code sio_brace_count(const char *pattern, uint64_t *n, sio_error *err)
{
    split sp;
    sio_code rc = split_pattern(pattern, &sp, err);
    *n = rc ? 0 : sp.total;
    return rc;
}

/* Walking a pattern's names in order, one buffer for all of them. */
struct sio_brace_iter {
    split sp;
    uint64_t next; /* index of the next name */
    char *buf;
    size_t cap;
};

sio_code sio_brace_iter_open(const char *pattern, uint64_t max,
                             sio_brace_iter **out, uint64_t *count,
                             sio_error *err)
{
    sio_brace_iter *it;
    sio_code rc;

    *out = NULL;
    *count = 0;
    it = calloc(1, sizeof *it);
    if (!it)
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    /* Counted before anything else is allocated. */
    rc = split_pattern(pattern, &it->sp, err);
    if (rc == SIO_OK && it->sp.total > max)
        rc = sio_seterr(err, SIO_ERR_LIMIT,
                        "pattern expands to more than %llu names",
                        (unsigned long long)max);
    if (rc) {
        free(it);
        return rc;
    }
    /* Each name is at most the pattern plus the widest numbers. */
    it->cap = it->sp.plen + it->sp.ngroups * (BRACE_DIGITS_MAX + 2) + 1;
    it->buf = malloc(it->cap);
    if (!it->buf) {
        free(it);
        return sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
    }
    *count = it->sp.total;
    *out = it;
    return SIO_OK;
}

sio_code sio_brace_iter_next(sio_brace_iter *it, const char **name,
                             sio_error *err)
{
    const split *sp = &it->sp;
    size_t k[2 * BRACE_GROUPS_MAX + 1], o = 0, i;
    uint64_t rem = it->next;

    *name = NULL;
    if (it->next == sp->total)
        return SIO_OK;
    /* Mixed-radix digits of the index, leftmost group most significant. */
    for (i = sp->nseg; i-- > 0;) {
        if (sp->segs[i].kind == 0)
            continue;
        k[i] = (size_t)(rem % sp->segs[i].count);
        rem /= sp->segs[i].count;
    }
    for (i = 0; i < sp->nseg; i++) {
        if (sp->segs[i].kind == 0) {
            memcpy(it->buf + o, sp->segs[i].lit, sp->segs[i].litlen);
            o += sp->segs[i].litlen;
        } else if (emit_choice(&sp->segs[i], k[i], it->buf, it->cap, &o) !=
                   0) {
            return sio_seterr(err, SIO_ERR_LIMIT, "name too long");
        }
    }
    it->buf[o] = '\0';
    it->next++;
    *name = it->buf;
    return SIO_OK;
}

void sio_brace_iter_free(sio_brace_iter *it)
{
    if (!it)
        return;
    free(it->buf);
    free(it);
}

sio_code sio_brace_expand(const char *pattern, size_t max_items, char ***out,
                          size_t *n, sio_error *err)
{
    sio_brace_iter *it = NULL;
    char **v = NULL;
    const char *name;
    uint64_t total;
    size_t done = 0;
    sio_code rc;

    *out = NULL;
    *n = 0;
    if (!max_items)
        max_items = SIO_BRACE_MAX_DEFAULT;
    rc = sio_brace_iter_open(pattern, max_items, &it, &total, err);
    if (rc)
        return rc;
    v = calloc((size_t)total, sizeof *v);
    if (!v) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (done = 0; done < total; done++) {
        rc = sio_brace_iter_next(it, &name, err);
        if (rc)
            goto out;
        v[done] = strdup(name);
        if (!v[done]) {
            rc = sio_seterr(err, SIO_ERR_NOMEM, "out of memory");
            goto out;
        }
    }
    *out = v;
    *n = (size_t)total;
    v = NULL;
out:
    sio_brace_iter_free(it);
    if (v)
        sio_strv_free(v, done);
    return rc;
}
