/*
 * cli_bench_verify.c — `shardcast bench --verify FILE`: loading the file (a
 * mkwds JSON manifest or a plain "key sha256" list) into a key table, the
 * check of each delivered sample (run on the consumer threads), and the
 * exactly-once verdict over all consumers after the run.
 *
 * Threading: the tables are built before the consumer threads start and
 * are read-only afterwards, except the per-sample delivery counters, which
 * are atomics; each consumer writes only its own problem list.
 * Ownership: the manifest owns the file's bytes, the JSON tree and the
 * tables until bench_manifest_free().
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_bench.h"
#include "shardio.h"

/* Samples a manifest may describe (bounded so a bad file cannot make the
 * key table huge). */
#define MANIFEST_SAMPLES_MAX 50000000u
/* Largest --verify file read into memory: 50 M lines of a 64-digit hash
 * and a key of ~20 bytes fit (a JSON manifest of that many samples is
 * larger per sample but holds far fewer in practice). */
#define MANIFEST_FILE_MAX (UINT64_C(4) << 30)

static uint64_t fnv(const char *p, size_t n)
{
    uint64_t h = UINT64_C(14695981039346656037);
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= UINT64_C(1099511628211);
    }
    return h;
}

/* Index of key in the manifest, or -1. */
static long mf_find(const manifest *m, const char *key, size_t len)
{
    size_t i = (size_t)fnv(key, len) & (m->cap - 1);
    while (m->table[i]) {
        size_t idx = m->table[i] - 1;
        if (strlen(m->keys[idx]) == len && memcmp(m->keys[idx], key, len) == 0)
            return (long)idx;
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}


void bench_manifest_free(manifest *m)
{
    json_decref(m->root);
    free(m->text);
    free(m->keys);
    free(m->hash);
    free(m->table);
    free((void *)m->seen);
    memset(m, 0, sizeof *m);
}

/* Parse 64 hex digits into out; -1 when malformed. */
static int parse_hash(const char *hx, size_t len, unsigned char out[32])
{
    if (len != 64)
        return -1;
    for (size_t k = 0; k < 32; k++) {
        int hi = sio_hexval(hx[2 * k]), lo = sio_hexval(hx[2 * k + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[k] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

/* Add sample i (key, hash text) to the tables; -1 with a message. */
static int mf_add(manifest *m, size_t i, const char *key, const char *hx,
                  size_t hxlen, const char *path, const char *where)
{
    if (parse_hash(hx, hxlen, m->hash[i]) != 0) {
        fprintf(stderr, "shardcast bench: %s: %s: bad hash (64 hex "
                "digits)\n", path, where);
        return -1;
    }
    if (mf_find(m, key, strlen(key)) >= 0) {
        fprintf(stderr, "shardcast bench: %s: key %s twice\n", path, key);
        return -1;
    }
    m->keys[i] = key;
    size_t h = (size_t)fnv(key, strlen(key)) & (m->cap - 1);
    while (m->table[h])
        h = (h + 1) & (m->cap - 1);
    m->table[h] = i + 1;
    return 0;
}

static int mf_alloc(manifest *m, const char *path)
{
    if (m->n > MANIFEST_SAMPLES_MAX) {
        fprintf(stderr, "shardcast bench: %s: more than %u samples\n", path,
                MANIFEST_SAMPLES_MAX);
        return -1;
    }
    m->cap = 16;
    while (m->cap < 2 * m->n)
        m->cap *= 2;
    m->keys = calloc(m->n ? m->n : 1, sizeof *m->keys);
    m->hash = calloc(m->n ? m->n : 1, sizeof *m->hash);
    m->table = calloc(m->cap, sizeof *m->table);
    m->seen = calloc(m->n ? m->n : 1, sizeof *m->seen);
    if (!m->keys || !m->hash || !m->table || !m->seen) {
        fprintf(stderr, "shardcast bench: out of memory for the manifest\n");
        return -1;
    }
    return 0;
}

/* The whole file into m->text (NUL-terminated); -1 with a message. */
static int mf_read(manifest *m, const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    size_t cap = 1 << 16, n = 0;
    if (!f) {
        fprintf(stderr, "shardcast bench: cannot open %s: %s\n", path,
                strerror(errno));
        return -1;
    }
    m->text = malloc(cap + 1);
    while (m->text) {
        n += fread(m->text + n, 1, cap - n, f);
        if (n < cap)
            break;
        if ((uint64_t)cap * 2 > MANIFEST_FILE_MAX) {
            fprintf(stderr, "shardcast bench: %s: larger than %" PRIu64
                    " bytes\n", path, MANIFEST_FILE_MAX);
            fclose(f);
            return -1;
        }
        char *t = realloc(m->text, cap * 2 + 1);
        if (!t)
            break;
        m->text = t;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!m->text || bad) {
        fprintf(stderr, "shardcast bench: cannot read %s: %s\n", path,
                m->text ? "read error" : "out of memory");
        return -1;
    }
    m->text[n] = '\0';
    *len = n;
    return 0;
}

/* A plain list: "key<white space>hash" lines. Keys become NUL-terminated
 * views into m->text. */
static int mf_load_list(manifest *m, const char *path, size_t len)
{
    char *p, *end = m->text + len;
    m->n = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t i = 0, lineno = 0;
        if (pass == 1 && mf_alloc(m, path) != 0)
            return -1;
        for (p = m->text; p < end;) {
            char *nl = memchr(p, '\n', (size_t)(end - p));
            char *le = nl ? nl : end, *next = nl ? nl + 1 : end;
            lineno++;
            /* trim (also a CR before the newline) */
            while (p < le && isspace((unsigned char)*p))
                p++;
            while (le > p && isspace((unsigned char)le[-1]))
                le--;
            if (p == le || *p == '#') {
                p = next;
                continue;
            }
            if (memchr(p, '\0', (size_t)(le - p))) {
                fprintf(stderr, "shardcast bench: %s: line %zu holds a NUL "
                        "byte\n", path, lineno);
                return -1;
            }
            char *h = le;
            while (h > p && !isspace((unsigned char)h[-1]))
                h--;
            char *ke = h;
            while (ke > p && isspace((unsigned char)ke[-1]))
                ke--;
            if (ke == p) {
                fprintf(stderr, "shardcast bench: %s: line %zu: expected "
                        "\"KEY SHA256\"\n", path, lineno);
                return -1;
            }
            if (pass == 1) {
                char where[48];
                snprintf(where, sizeof where, "line %zu", lineno);
                *ke = '\0';
                if (mf_add(m, i, p, h, (size_t)(le - h), path, where) != 0)
                    return -1;
            }
            i++;
            if (pass == 0 && i > MANIFEST_SAMPLES_MAX)
                break;
            p = next;
        }
        m->n = i;
    }
    return 0;
}

int bench_manifest_load(manifest *m, const char *path, const char *field)
{
    json_error_t jerr;
    size_t len = 0;
    memset(m, 0, sizeof *m);
    m->field = field;
    if (mf_read(m, path, &len) != 0)
        goto fail;
    const char *q = m->text;
    while (isspace((unsigned char)*q))
        q++;
    if (*q != '{') {
        m->plain = 1;
        if (!field) {
            fprintf(stderr, "shardcast bench: %s is a plain list (not a JSON "
                    "manifest): give --verify-field NAME, the field its "
                    "hashes are of\n", path);
            goto fail;
        }
        if (mf_load_list(m, path, len) != 0)
            goto fail;
        return 0;
    }
    m->root = json_loadb(m->text, len, 0, &jerr);
    json_t *samples = json_object_get(m->root, "samples");
    if (!json_is_array(samples)) {
        fprintf(stderr, "shardcast bench: %s: not a mkwds manifest (%s)\n",
                path, m->root ? "no samples list" : jerr.text);
        goto fail;
    }
    m->n = json_array_size(samples);
    if (mf_alloc(m, path) != 0)
        goto fail;
    for (size_t i = 0; i < m->n; i++) {
        json_t *s = json_array_get(samples, i);
        const char *key = json_string_value(json_object_get(s, "key"));
        json_t *hv = field ? json_object_get(
                                 json_object_get(json_object_get(s, "fields"),
                                                 field),
                                 "sha256")
                           : json_object_get(s, "hash");
        const char *hx = json_string_value(hv);
        char where[64];
        if (!key || !hx) {
            fprintf(stderr, "shardcast bench: %s: sample %zu lacks key or "
                    "%s%s%s\n", path, i, field ? "fields." : "hash",
                    field ? field : "", field ? ".sha256" : "");
            goto fail;
        }
        snprintf(where, sizeof where, "sample %zu", i);
        if (mf_add(m, i, key, hx, strlen(hx), path, where) != 0)
            goto fail;
    }
    return 0;
fail:
    bench_manifest_free(m);
    return -1;
}

static void problem(consumer *c, const char *what, const scc_sample *s)
{
    if (c->nproblems < VERIFY_SHOWN)
        snprintf(c->problems[c->nproblems++], sizeof c->problems[0],
                 "key %.*s (index %llu): %s",
                 (int)(s->key_len > 80 ? 80 : s->key_len), s->key,
                 (unsigned long long)s->global_index, what);
}

void bench_check_sample(consumer *c, const scc_sample *s)
{
    unsigned char h[32];
    const char *field = c->mf->field;
    long idx = mf_find(c->mf, s->key, s->key_len);
    if (idx < 0) {
        c->unknown++;
        problem(c, "not in the manifest", s);
        return;
    }
    if (field) {
        const scc_field *f = scc_sample_field(s, field);
        char what[96];
        if (!f) {
            c->mismatched++;
            snprintf(what, sizeof what, "has no field %s", field);
            problem(c, what, s);
        } else if (EVP_Digest(f->data, f->len, h, NULL, EVP_sha256(),
                              NULL) != 1 ||
                   memcmp(h, c->mf->hash[idx], 32) != 0) {
            c->mismatched++;
            snprintf(what, sizeof what, "sha256 of field %s differs", field);
            problem(c, what, s);
        }
    } else if (scc_sample_hash(s, h) != SCC_OK ||
               memcmp(h, c->mf->hash[idx], 32) != 0) {
        c->mismatched++;
        problem(c, "content hash differs", s);
    }
    atomic_fetch_add(&c->mf->seen[idx], 1);
}


int bench_verify_tally(const bench_args *a, manifest *mf, const consumer *cs,
                       char *msg, size_t len, json_t **out)
{
    uint64_t n = a->n, first = a->first, limit = a->limit;
    size_t complete = 0;
    int verify_ok;
    for (size_t i = 0; i < n; i++)
        complete += cs[i].complete;
    uint64_t unknown = 0, mismatched = 0, missing = 0, dup = 0;
    for (size_t i = 0; i < n; i++) {
        unknown += cs[i].unknown;
        mismatched += cs[i].mismatched;
    }
    for (size_t i = 0; i < mf->n; i++) {
        uint32_t s = atomic_load(&mf->seen[i]);
        if (s == 0)
            missing++;
        else
            dup += s - 1;
    }
    int union_checked = complete == n && first == 0 && n == a->cc.world &&
                        a->cc.start == 0 && a->cc.global_start == 0 &&
                        !limit && (a->cc.nfields == 0 || mf->field);
    const char *part = cs[0].partition;
    uint64_t rem = mf->n % a->cc.world;
    uint64_t want_missing = 0, want_dup = 0;
    /* With R > 1 replicas each replica's part is dealt to its own local
     * world lw_j and padded or cut on its own: the client does not know
     * the parts' sizes, only that each replica pads or drops fewer than
     * lw_j samples. */
    uint64_t R = a->cc.nreplicas, slack = 0;
    int exact = R <= 1;
    for (uint64_t j = 0; j < R && R > 1; j++)
        slack += (a->cc.world - j + R - 1) / R - 1;
    if (strcmp(part, "even-pad") == 0)
        want_dup = exact ? (rem ? a->cc.world - rem : 0) : slack;
    else if (strcmp(part, "none") == 0)
        want_missing = 0;
    else /* even-drop, and tar (which does not say): the default */
        want_missing = exact ? rem : slack;
    verify_ok = unknown == 0 && mismatched == 0;
    if (union_checked && exact)
        verify_ok = verify_ok && missing == want_missing &&
                    dup == want_dup;
    else if (union_checked)
        verify_ok = verify_ok && missing <= want_missing &&
                    dup <= want_dup;
    else
        verify_ok = verify_ok && dup == 0;
    const char *bound = exact ? "" : "at most ";
    snprintf(msg, len,
             "%s: %" PRIu64 " unknown, %" PRIu64 " hash mismatches, %"
             PRIu64 " missing (expected %s%" PRIu64 "), %" PRIu64
             " duplicates (expected %s%" PRIu64 ")%s",
             verify_ok ? "ok" : "FAILED", unknown, mismatched, missing,
             union_checked ? bound : "",
             union_checked ? want_missing : missing, dup,
             union_checked ? bound : "", union_checked ? want_dup : 0,
             union_checked ? "" : "; union not checked (not the whole "
                                  "world run to the end)");
    json_t *probs = json_array();
    for (size_t i = 0; i < n; i++)
        for (size_t p = 0; p < cs[i].nproblems; p++)
            json_array_append_new(probs, json_string(cs[i].problems[p]));
    *out = json_pack("{s:b, s:s, s:o, s:b, s:I, s:I, s:I, s:I, s:I, s:I, "
                   "s:s, s:o}",
                   "ok", verify_ok, "format",
                   mf->plain ? "list" : "manifest", "field",
                   mf->field ? json_string(mf->field) : json_null(),
                   "union_checked", union_checked,
                   "manifest_samples", (json_int_t)mf->n, "unknown",
                   (json_int_t)unknown, "hash_mismatches",
                   (json_int_t)mismatched, "missing", (json_int_t)missing,
                   "duplicates", (json_int_t)dup, "expected_missing",
                   (json_int_t)want_missing, "partition",
                   part[0] ? part : "unknown", "problems", probs);
    if (*out) {
        /* expected_*: exact, or (replicas) upper bounds. */
        json_object_set_new(*out, "expected_duplicates",
                            json_integer((json_int_t)want_dup));
        json_object_set_new(*out, "expected_exact", json_boolean(exact));
    }
    return verify_ok;
}
