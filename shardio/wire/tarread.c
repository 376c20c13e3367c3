/*
 * tarread.c — the reader of shardcast's format=tar stream, sio_tarr_parse
 * (contract in include/shardio_wire.h; the C client's tar path): ustar
 * members with pax extended headers, grouped back into samples by their
 * "<G>/" name prefix and the SHARDCAST.* pax records, plus the end/error
 * trailer members.
 *
 * It is a pure function over a buffer that starts at a member boundary:
 * the caller buffers until the answer is not NEED and re-runs it on the
 * grown buffer, so the reader keeps no pointers between calls and every
 * view it returns points into the caller's buffer. Every size read from
 * the stream is checked against a limit before it is used.
 *
 * Threading: stateless; safe from any thread.
 */
#include "shardio_wire.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/core_int.h"

#define BLOCK SIO_TAR_BLOCK
#define OFF_NAME 0
#define LEN_NAME 100
#define OFF_SIZE 124
#define LEN_SIZE 12
#define OFF_CHKSUM 148
#define OFF_TYPEFLAG 156
#define OFF_PREFIX 345
#define LEN_PREFIX 155

/* Octal number of a header field: optional leading spaces, digits, then a
 * NUL or space. -1 when malformed or above UINT64_MAX. */
static int parse_octal(const unsigned char *f, size_t n, uint64_t *out)
{
    size_t i = 0;
    uint64_t v = 0;
    while (i < n && f[i] == ' ')
        i++;
    size_t digits = 0;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
        if (v > (UINT64_MAX >> 3))
            return -1;
        v = (v << 3) | (uint64_t)(f[i] - '0');
    }
    if (digits == 0 || (i < n && f[i] != '\0' && f[i] != ' '))
        return -1;
    *out = v;
    return 0;
}

static int parse_size(const unsigned char *h, uint64_t *out)
{
    const unsigned char *f = h + OFF_SIZE;
    if (f[0] & 0x80) {
        /* base-256: the rest of the first byte must be zero for sizes
         * that fit 64 bits (and far above any member limit anyway). */
        if (f[0] != 0x80 || f[1] || f[2] || f[3])
            return -1;
        uint64_t v = 0;
        for (size_t i = 4; i < LEN_SIZE; i++)
            v = (v << 8) | f[i];
        *out = v;
        return 0;
    }
    return parse_octal(f, LEN_SIZE, out);
}

static int checksum_ok(const unsigned char *h)
{
    uint64_t want;
    if (parse_octal(h + OFF_CHKSUM, 8, &want) != 0)
        return 0;
    uint64_t sum = 0;
    for (size_t i = 0; i < BLOCK; i++)
        sum += (i >= OFF_CHKSUM && i < OFF_CHKSUM + 8) ? ' ' : h[i];
    return sum == want;
}

static int is_zero_block(const unsigned char *h)
{
    for (size_t i = 0; i < BLOCK; i++)
        if (h[i])
            return 0;
    return 1;
}

static size_t field_len(const unsigned char *f, size_t n)
{
    const void *z = memchr(f, '\0', n);
    return z ? (size_t)((const unsigned char *)z - f) : n;
}

static int parse_dec(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 20)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* The pax records a sample's first member carries. Views into the input. */
typedef struct pax_info {
    const char *path, *key, *shard;
    size_t path_len, key_len, shard_len;
    int has_index, has_position;
    uint64_t index, position;
} pax_info;

/* One pax record "<len> <key>=<value>\n" at d[*off..n) (<len> counts
 * the whole record): its key and value as views, *off moved past it.
 * 0, or -1 when malformed. */
static int pax_next(const unsigned char *d, size_t n, size_t *off,
                    const char **k, size_t *klen, const char **v,
                    size_t *vlen)
{
    size_t o = *off, i = o, rl = 0;
    while (i < n && d[i] >= '0' && d[i] <= '9' && i - o < 8)
        rl = rl * 10 + (size_t)(d[i++] - '0');
    if (i == o || i >= n || d[i] != ' ' || rl <= i - o + 1 || rl > n - o ||
        d[o + rl - 1] != '\n')
        return -1;
    const char *kv = (const char *)d + i + 1;
    size_t kvlen = o + rl - 1 - (i + 1);
    const char *eq = memchr(kv, '=', kvlen);
    if (!eq)
        return -1;
    *k = kv;
    *klen = (size_t)(eq - kv);
    *v = eq + 1;
    *vlen = kvlen - *klen - 1;
    *off = o + rl;
    return 0;
}

static sio_code parse_pax(const unsigned char *d, size_t n, pax_info *pi,
                          sio_error *err)
{
    size_t off = 0;
    memset(pi, 0, sizeof *pi);
    while (off < n) {
        const char *kv, *v;
        size_t klen, vlen, at = off;
        if (pax_next(d, n, &off, &kv, &klen, &v, &vlen) != 0)
            return sio_seterr(err, SIO_ERR_FORMAT,
                              "tar: malformed pax record at byte %zu", at);
#define PAX_IS(name) (klen == strlen(name) && memcmp(kv, name, klen) == 0)
        if (PAX_IS("path")) {
            pi->path = v;
            pi->path_len = vlen;
        } else if (PAX_IS("SHARDCAST.key")) {
            pi->key = v;
            pi->key_len = vlen;
        } else if (PAX_IS("SHARDCAST.shard")) {
            pi->shard = v;
            pi->shard_len = vlen;
        } else if (PAX_IS("SHARDCAST.index")) {
            if (parse_dec(v, vlen, &pi->index) != 0)
                return sio_seterr(err, SIO_ERR_FORMAT,
                                  "tar: bad SHARDCAST.index");
            pi->has_index = 1;
        } else if (PAX_IS("SHARDCAST.position")) {
            if (parse_dec(v, vlen, &pi->position) != 0)
                return sio_seterr(err, SIO_ERR_FORMAT,
                                  "tar: bad SHARDCAST.position");
            pi->has_position = 1;
        }
#undef PAX_IS
    }
    return SIO_OK;
}

/* The records of the stream's pax global header into *id; 1 when it
 * carries a well-formed identity (SHARDCAST.fingerprint and the numbers),
 * 0 when it is some other global header, -1 when malformed. */
static int parse_ident(const unsigned char *d, size_t n, sio_stream_ident *id)
{
    size_t off = 0;
    int have_fp = 0, have_j = 0, have_r = 0, have_k = 0;
    uint64_t v;
    memset(id, 0, sizeof *id);
    while (off < n) {
        const char *kv, *val;
        size_t klen, vlen;
        if (pax_next(d, n, &off, &kv, &klen, &val, &vlen) != 0)
            return -1;
#define PAX_IS(name) (klen == strlen(name) && memcmp(kv, name, klen) == 0)
        if (PAX_IS("SHARDCAST.fingerprint")) {
            if (vlen != SIO_FINGERPRINT_LEN)
                return -1;
            for (size_t k = 0; k < vlen; k++)
                if (!strchr("0123456789abcdef", val[k]) || !val[k])
                    return -1;
            memcpy(id->fingerprint, val, vlen);
            id->fingerprint[vlen] = '\0';
            have_fp = 1;
        } else if (PAX_IS("SHARDCAST.job")) {
            if (vlen == 0 || vlen >= sizeof id->job || memchr(val, 0, vlen))
                return -1;
            memcpy(id->job, val, vlen);
            id->job[vlen] = '\0';
        } else if (PAX_IS("SHARDCAST.epoch")) {
            if (parse_dec(val, vlen, &id->epoch) != 0)
                return -1;
        } else if (PAX_IS("SHARDCAST.replica") ||
                   PAX_IS("SHARDCAST.replicas") ||
                   PAX_IS("SHARDCAST.served_by")) {
            if (parse_dec(val, vlen, &v) != 0 || v > UINT32_MAX)
                return -1;
            if (PAX_IS("SHARDCAST.replica")) {
                id->replica = (uint32_t)v;
                have_j = 1;
            } else if (PAX_IS("SHARDCAST.replicas")) {
                id->replicas = (uint32_t)v;
                have_r = 1;
            } else {
                id->served_by = (uint32_t)v;
                have_k = 1;
            }
        }
#undef PAX_IS
    }
    if (!have_fp)
        return 0;
    if (!have_j || !have_r || !have_k || id->replicas == 0 ||
        id->replica >= id->replicas || id->served_by >= id->replicas)
        return -1;
    return 1;
}

/* JSON of a trailer member into r (END summary or ERROR reason). */
static sio_code parse_trailer(const unsigned char *d, size_t n, int is_end,
                              sio_tarr_result *r, sio_error *err)
{
    sio_code rc = SIO_OK;
    json_error_t jerr;
    json_t *o = json_loadb((const char *)d, n, 0, &jerr);
    const char *status = json_string_value(json_object_get(o, "status"));

    if (!json_is_object(o) || !status) {
        rc = sio_seterr(err, SIO_ERR_FORMAT,
                        "tar: trailer member is not the expected JSON");
        goto out;
    }
    if (is_end) {
        json_t *v[6] = {json_object_get(o, "epoch"), json_object_get(o, "rank"),
                        json_object_get(o, "world"), json_object_get(o, "start"),
                        json_object_get(o, "samples"),
                        json_object_get(o, "position")};
        for (size_t i = 0; i < 6; i++)
            if (!json_is_integer(v[i]) || json_integer_value(v[i]) < 0) {
                rc = sio_seterr(err, SIO_ERR_FORMAT,
                                "tar: end summary lacks a field");
                goto out;
            }
        if (strcmp(status, "ok") != 0 ||
            json_integer_value(v[1]) > UINT32_MAX ||
            json_integer_value(v[2]) > UINT32_MAX) {
            rc = sio_seterr(err, SIO_ERR_FORMAT,
                            "tar: end summary is malformed");
            goto out;
        }
        r->summary.epoch = (uint64_t)json_integer_value(v[0]);
        r->summary.rank = (uint32_t)json_integer_value(v[1]);
        r->summary.world = (uint32_t)json_integer_value(v[2]);
        r->summary.start = (uint64_t)json_integer_value(v[3]);
        r->summary.samples = (uint64_t)json_integer_value(v[4]);
        r->summary.position = (uint64_t)json_integer_value(v[5]);
        r->kind = SIO_TARR_END;
    } else {
        /* The error trailer has one parser for both formats. */
        sio_wire_error we;
        sio_error e = {SIO_OK, ""};
        if (sio_wire_error_parse(d, n, &we, &e) != SIO_OK) {
            rc = sio_seterr(err, SIO_ERR_FORMAT, "tar: %s", e.msg);
            goto out;
        }
        if (!we.reason[0])
            snprintf(we.reason, sizeof we.reason, "(no reason given)");
        r->error = we;
        r->kind = SIO_TARR_ERROR;
    }
out:
    json_decref(o);
    return rc;
}

static int name_is(const char *n, size_t len, const char *want)
{
    return len == strlen(want) && memcmp(n, want, len) == 0;
}

sio_code sio_tarr_parse(const unsigned char *p, size_t len,
                        sio_frame_field *fields, size_t fields_max,
                        uint64_t member_max, sio_tarr_result *r,
                        sio_error *err)
{
    sio_code rc = SIO_OK;
    size_t off = 0;
    int in_sample = 0;
    pax_info pax;
    int have_pax = 0;
    sio_tarr_sample *smp = &r->sample;
    char gbuf[SIO_TARW_INDEX_DIGITS];

    memset(r, 0, sizeof *r);
    memset(&pax, 0, sizeof pax);
    smp->fields = fields;
    for (;;) {
        if (len - off < BLOCK) {
            r->kind = SIO_TARR_NEED;
            r->need = off + BLOCK;
            goto out;
        }
        const unsigned char *h = p + off;
        if (is_zero_block(h)) {
            rc = sio_seterr(err, SIO_ERR_FORMAT,
                            "tar: end of archive without the %s member",
                      SIO_TARW_END_NAME);
            goto out;
        }
        if (!checksum_ok(h)) {
            rc = sio_seterr(err, SIO_ERR_FORMAT,
                            "tar: bad header checksum at byte %zu", off);
            goto out;
        }
        uint64_t size;
        if (parse_size(h, &size) != 0) {
            rc = sio_seterr(err, SIO_ERR_FORMAT, "tar: bad member size");
            goto out;
        }
        char type = (char)h[OFF_TYPEFLAG];
        uint64_t limit = (type == 'x' || type == 'g') ? SIO_TARR_PAX_MAX : member_max;
        if (size > limit) {
            rc = sio_seterr(err, SIO_ERR_LIMIT,
                            "tar: member of %llu bytes above the limit %llu",
                      (unsigned long long)size, (unsigned long long)limit);
            goto out;
        }
        size_t total = BLOCK + (size_t)((size + BLOCK - 1) / BLOCK * BLOCK);
        if (len - off < total) {
            r->kind = SIO_TARR_NEED;
            r->need = off + total;
            goto out;
        }
        const unsigned char *data = h + BLOCK;

        if (type == 'x') {
            pax_info np;
            rc = parse_pax(data, (size_t)size, &np, err);
            if (rc != SIO_OK)
                goto out;
            if (np.has_index && in_sample) {
                r->kind = SIO_TARR_SAMPLE; /* this pax starts the next one */
                r->consumed = off;
                goto out;
            }
            pax = np;
            have_pax = 1;
            off += total;
            continue;
        }
        if (type == 'g' && !in_sample && size <= SIO_TARR_PAX_MAX) {
            int k = parse_ident(data, (size_t)size, &r->ident);
            if (k < 0) {
                rc = sio_seterr(err, SIO_ERR_FORMAT,
                                "tar: malformed SHARDCAST identity in the "
                                "global header");
                goto out;
            }
            if (k > 0) {
                r->kind = SIO_TARR_IDENT;
                r->consumed = off + total;
                goto out;
            }
        }
        if (type != '0' && type != '\0') {
            /* Global headers, directories, links: not part of the stream
             * format; skipped with their data. */
            have_pax = 0;
            off += total;
            continue;
        }

        /* The member's name: pax path, else prefix "/" name. */
        const char *name, *prefix = NULL;
        size_t nlen, plen = 0;
        if (have_pax && pax.path) {
            name = pax.path;
            nlen = pax.path_len;
        } else {
            name = (const char *)h + OFF_NAME;
            nlen = field_len(h + OFF_NAME, LEN_NAME);
            prefix = (const char *)h + OFF_PREFIX;
            plen = field_len(h + OFF_PREFIX, LEN_PREFIX);
        }
        if (plen == 0 && (name_is(name, nlen, SIO_TARW_END_NAME) ||
                          name_is(name, nlen, SIO_TARW_ERROR_NAME))) {
            if (in_sample) {
                r->kind = SIO_TARR_SAMPLE;
                r->consumed = off;
                goto out;
            }
            if (size > SIO_TARR_TRAILER_MAX) {
                rc = sio_seterr(err, SIO_ERR_LIMIT,
                                "tar: trailer member too large");
                goto out;
            }
            rc = parse_trailer(data, (size_t)size,
                               name_is(name, nlen, SIO_TARW_END_NAME), r,
                               err);
            if (rc == SIO_OK && r->kind == SIO_TARR_END) {
                r->end_json = (const char *)data;
                r->end_json_len = (size_t)size;
            }
            r->consumed = off + total;
            goto out;
        }

        /* "<G>/<key>.<ext>": G from the first part, the extension from the
         * last component (which is always in `name`). */
        const char *first = plen ? prefix : name;
        size_t flen = plen ? plen : nlen;
        if (flen < SIO_TARW_INDEX_DIGITS + (plen ? 0u : 1u) ||
            (flen > SIO_TARW_INDEX_DIGITS &&
             first[SIO_TARW_INDEX_DIGITS] != '/')) {
            rc = sio_seterr(err, SIO_ERR_FORMAT,
                            "tar: member name is not <index>/<key>.<ext>");
            goto out;
        }
        memcpy(gbuf, first, SIO_TARW_INDEX_DIGITS);
        uint64_t g;
        if (parse_dec(gbuf, SIO_TARW_INDEX_DIGITS, &g) != 0) {
            rc = sio_seterr(err, SIO_ERR_FORMAT,
                            "tar: member name does not start with the index");
            goto out;
        }
        const char *last = name;
        for (size_t i = 0; i < nlen; i++)
            if (name[i] == '/')
                last = name + i + 1;
        size_t llen = nlen - (size_t)(last - name);
        const char *dot = memchr(last, '.', llen);
        if (!dot || dot == last || dot + 1 == last + llen) {
            rc = sio_seterr(err, SIO_ERR_FORMAT,
                            "tar: member name has no <key>.<ext> form");
            goto out;
        }
        if (in_sample && g != smp->global_index) {
            r->kind = SIO_TARR_SAMPLE;
            r->consumed = off;
            goto out;
        }
        if (!in_sample) {
            if (!have_pax || !pax.has_index || !pax.has_position ||
                !pax.key || pax.index != g) {
                rc = sio_seterr(err, SIO_ERR_FORMAT,
                                "tar: sample %llu does not start with its "
                          "SHARDCAST pax header", (unsigned long long)g);
                goto out;
            }
            in_sample = 1;
            smp->global_index = g;
            smp->position = pax.position;
            smp->key = pax.key;
            smp->key_len = pax.key_len;
            smp->shard_url = pax.shard ? pax.shard : "";
            smp->shard_url_len = pax.shard_len;
        }
        if (smp->nfields >= fields_max) {
            rc = sio_seterr(err, SIO_ERR_LIMIT,
                            "tar: sample %llu has more than %zu fields",
                      (unsigned long long)g, fields_max);
            goto out;
        }
        sio_frame_field *f = &fields[smp->nfields++];
        f->name = dot + 1;
        f->name_len = (size_t)(last + llen - (dot + 1));
        f->data = data;
        f->len = (size_t)size;
        smp->bytes += size;
        have_pax = 0;
        off += total;
    }
out:
    return rc;
}
