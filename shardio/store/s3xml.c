/*
 * s3xml.c — S3 / STS XML documents: listing pages, error documents and
 * temporary credentials (see s3xml.h for the contracts).
 *
 * Every document is untrusted. It is parsed by libxml2 from memory with
 * XML_PARSE_NONET and without XML_PARSE_NOENT / DTDLOAD / DTDATTR / HUGE,
 * with libxml2's own error printing switched off (NOERROR, NOWARNING, and
 * the thread's structured error handler diverted during the parse: the
 * library never writes to stderr). A document that declares a DTD is
 * stopped at the DOCTYPE by a SAX hook, so no entity declaration is ever
 * read and an entity bomb has nothing to expand. Lengths are checked
 * against the named limits of s3xml.h before anything is copied.
 *
 * Threading: no shared state besides libxml2's one-time initialisation
 * (pthread_once below); each call has its own parser context and tree.
 * Ownership: results are malloc'd and handed to the caller; the tree is
 * freed before returning.
 */
#include "store/s3xml.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xmlerror.h>

#include "store/store_int.h"

static pthread_once_t xml_once = PTHREAD_ONCE_INIT;

static void xml_init_once(void)
{
    xmlInitParser();
}

void sio_s3xml_global_init(void)
{
    pthread_once(&xml_once, xml_init_once);
}

/* ------------------------------------------------------------------ */
/* Parsing a document                                                  */

/* Swallows what libxml2 reports outside the parser context (encoding
 * conversion errors go to the thread's global channel, which defaults to
 * stderr, whatever the parse options say). The parse's own errors are read
 * from the context afterwards. */
static void quiet_error(void *userdata, xmlErrorPtr e)
{
    (void)userdata;
    (void)e;
}

/* Per-parse state reachable from the SAX hook through ctxt->_private. */
typedef struct parse_state {
    int saw_dtd;
} parse_state;

/* SAX internalSubset: called at "<!DOCTYPE"; S3 and STS never send one,
 * and refusing here means no declaration of the subset is parsed. */
static void refuse_dtd(void *vctx, const xmlChar *name, const xmlChar *eid,
                       const xmlChar *sid)
{
    xmlParserCtxtPtr ctxt = vctx;
    parse_state *st = ctxt->_private;
    (void)name;
    (void)eid;
    (void)sid;
    if (st)
        st->saw_dtd = 1;
    xmlStopParser(ctxt);
}

/*
 * Parse len bytes into a tree. max is the document size limit.
 * On SIO_OK *out is a tree the caller frees with xmlFreeDoc. what names the
 * document in messages. secret: the document carries credentials, so
 * libxml2's diagnostic text (which may quote document bytes) is left out.
 */
static sio_code read_doc(const char *xml, size_t len, size_t max,
                         const char *what, int secret, xmlDocPtr *out,
                         sio_error *err)
{
    sio_code rc = SIO_OK;
    xmlParserCtxtPtr ctxt = NULL;
    xmlDocPtr doc = NULL;
    parse_state st = {0};
    xmlStructuredErrorFunc saved_fn;
    void *saved_ctx;
    const int opts = XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING |
                     XML_PARSE_NOCDATA;

    *out = NULL;
    sio_s3xml_global_init();
    if (!xml && len) {
        rc = sio_seterr(err, SIO_ERR_INVALID, "%s: NULL document", what);
        goto out;
    }
    if (len > max || len > INT_MAX) {
        rc = sio_seterr(err, SIO_ERR_LIMIT,
                        "%s: document of %zu bytes exceeds the limit of %zu",
                        what, len, max);
        goto out;
    }
    if (len == 0) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "%s: empty document", what);
        goto out;
    }
    ctxt = xmlNewParserCtxt();
    if (!ctxt || !ctxt->sax) {
        rc = sio_seterr(err, SIO_ERR_NOMEM, "%s: out of memory", what);
        goto out;
    }
    ctxt->sax->internalSubset = refuse_dtd;
    ctxt->_private = &st;
    /* libxml2's error channels are per-thread: divert this thread's for
     * the duration of the parse and give the host its own back. */
    saved_fn = xmlStructuredError;
    saved_ctx = xmlStructuredErrorContext;
    xmlSetStructuredErrorFunc(NULL, quiet_error);
    doc = xmlCtxtReadMemory(ctxt, xml, (int)len, NULL, NULL, opts);
    xmlSetStructuredErrorFunc(saved_ctx, saved_fn);
    if (st.saw_dtd) {
        rc = sio_seterr(err, SIO_ERR_FORMAT,
                        "%s: document declares a DTD (refused)", what);
        goto out;
    }
    if (!doc || !ctxt->wellFormed) {
        const xmlError *e = xmlCtxtGetLastError(ctxt);
        if (e && e->code == XML_ERR_NO_MEMORY) {
            rc = sio_seterr(err, SIO_ERR_NOMEM, "%s: out of memory", what);
            goto out;
        }
        /* libxml2's text names the construct (mostly tag or entity
         * names, which can quote document bytes: hence left out of
         * credential documents); cut at its newline to keep one line. */
        char detail[160] = "";
        if (e && e->message && !secret) {
            snprintf(detail, sizeof detail, "%s", e->message);
            detail[strcspn(detail, "\r\n")] = '\0';
        }
        rc = sio_seterr(err, SIO_ERR_FORMAT,
                        "%s: malformed XML at line %d: %s", what,
                        e ? e->line : 0, detail[0] ? detail : "parse error");
        goto out;
    }
    if (!xmlDocGetRootElement(doc)) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "%s: no root element", what);
        goto out;
    }
    *out = doc;
    doc = NULL;
out:
    if (doc)
        xmlFreeDoc(doc);
    if (ctxt) {
        ctxt->_private = NULL;
        xmlFreeParserCtxt(ctxt);
    }
    return rc;
}

/* An element whose local name is name (any namespace or none). */
static int is_elem(const xmlNode *n, const char *name)
{
    return n && n->type == XML_ELEMENT_NODE && n->name &&
           strcmp((const char *)n->name, name) == 0;
}

/* The first child element named name, or NULL. */
static xmlNode *child_elem(const xmlNode *parent, const char *name)
{
    for (xmlNode *c = parent ? parent->children : NULL; c; c = c->next)
        if (is_elem(c, name))
            return c;
    return NULL;
}

/* Number of child elements named name (stops counting past limit). */
static size_t count_children(const xmlNode *parent, const char *name,
                             size_t limit)
{
    size_t k = 0;
    for (xmlNode *c = parent->children; c && k <= limit; c = c->next)
        if (is_elem(c, name))
            k++;
    return k;
}

/* Is there more than one child element named name? */
static int repeated(const xmlNode *parent, const char *name)
{
    return count_children(parent, name, 1) > 1;
}

/*
 * The text of a leaf element: its text and CDATA children concatenated
 * (comments and processing instructions ignored). A child element or an
 * entity reference makes it malformed (SIO_ERR_FORMAT); more than max bytes
 * gives SIO_ERR_LIMIT. On SIO_OK *out is malloc'd and NUL-terminated and
 * *outlen (may be NULL) its length; XML 1.0 cannot carry a NUL character,
 * so the string has no embedded NUL.
 */
static sio_code leaf_text(const xmlNode *el, size_t max, char **out,
                          size_t *outlen)
{
    sio_code rc = SIO_OK;
    size_t total = 0;
    char *s = NULL;

    *out = NULL;
    if (outlen)
        *outlen = 0;
    for (const xmlNode *c = el->children; c; c = c->next) {
        if (c->type == XML_TEXT_NODE || c->type == XML_CDATA_SECTION_NODE) {
            size_t l = c->content ? strlen((const char *)c->content) : 0;
            if (l > max || total > max - l) {
                rc = SIO_ERR_LIMIT;
                goto out;
            }
            total += l;
        } else if (c->type != XML_COMMENT_NODE && c->type != XML_PI_NODE) {
            rc = SIO_ERR_FORMAT;
            goto out;
        }
    }
    s = malloc(total + 1);
    if (!s) {
        rc = SIO_ERR_NOMEM;
        goto out;
    }
    total = 0;
    for (const xmlNode *c = el->children; c; c = c->next) {
        if ((c->type == XML_TEXT_NODE || c->type == XML_CDATA_SECTION_NODE) &&
            c->content) {
            size_t l = strlen((const char *)c->content);
            memcpy(s + total, c->content, l);
            total += l;
        }
    }
    s[total] = '\0';
    *out = s;
    s = NULL;
    if (outlen)
        *outlen = total;
out:
    free(s);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Field decoding                                                      */


/*
 * Decode EncodingType=url text in place: "%XX" is a byte and '+' a space,
 * as S3 writes it (a literal '+' arrives as %2B; botocore decodes the same
 * way). A bad escape or an escaped NUL (a key is a C string here) is
 * SIO_ERR_FORMAT. Decoding only shrinks the text.
 */
static sio_code url_decode_inplace(char *s, size_t *len)
{
    size_t r = 0, w = 0, n = *len;
    while (r < n) {
        unsigned char c = (unsigned char)s[r];
        if (c == '%') {
            int hi, lo;
            if (n - r < 3)
                return SIO_ERR_FORMAT;
            hi = sio_hexval((unsigned char)s[r + 1]);
            lo = sio_hexval((unsigned char)s[r + 2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                return SIO_ERR_FORMAT;
            s[w++] = (char)(hi << 4 | lo);
            r += 3;
        } else {
            s[w++] = c == '+' ? ' ' : (char)c;
            r++;
        }
    }
    s[w] = '\0';
    *len = w;
    return SIO_OK;
}

/* Strict decimal uint64: one or more ASCII digits, nothing else, no
 * overflow. Leading zeros are accepted ("0" is a valid size). */
static int parse_u64_strict(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/*
 * A key-like field (Contents/Key, CommonPrefixes/Prefix): text, decoded
 * when urlenc, at most SIO_S3XML_KEY_MAX bytes after decoding, not empty.
 * The raw text may be up to 3x longer (every byte %-escaped).
 */
static sio_code key_field(const xmlNode *el, int urlenc, const char *what,
                          size_t idx, char **out, sio_error *err)
{
    size_t len = 0;
    char *s = NULL;
    sio_code rc = leaf_text(el, urlenc ? 3u * SIO_S3XML_KEY_MAX
                                       : SIO_S3XML_KEY_MAX, &s, &len);
    *out = NULL;
    if (rc == SIO_ERR_LIMIT) {
        rc = sio_seterr(err, rc, "listing: %s %zu longer than %u bytes",
                        what, idx, SIO_S3XML_KEY_MAX);
        goto out;
    }
    if (rc == SIO_ERR_NOMEM) {
        rc = sio_seterr(err, rc, "listing: out of memory");
        goto out;
    }
    if (rc) {
        rc = sio_seterr(err, rc, "listing: %s %zu is not plain text", what,
                        idx);
        goto out;
    }
    if (urlenc && url_decode_inplace(s, &len) != SIO_OK) {
        rc = sio_seterr(err, SIO_ERR_FORMAT,
                        "listing: %s %zu has a bad %%-escape (EncodingType=url)",
                        what, idx);
        goto out;
    }
    if (len > SIO_S3XML_KEY_MAX) {
        rc = sio_seterr(err, SIO_ERR_LIMIT,
                        "listing: %s %zu longer than %u bytes", what, idx,
                        SIO_S3XML_KEY_MAX);
        goto out;
    }
    if (len == 0) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "listing: %s %zu is empty", what,
                        idx);
        goto out;
    }
    *out = s;
    s = NULL;
out:
    free(s);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Listing pages                                                       */

void sio_s3_list_page_free(sio_s3_list_page *page)
{
    if (!page)
        return;
    sio_strv_free(page->keys, page->n);
    sio_strv_free(page->prefixes, page->nprefixes);
    free(page->sizes);
    free(page->next_token);
    memset(page, 0, sizeof *page);
}

/* One <Contents>: Key and Size, each exactly once. */
static sio_code parse_contents(const xmlNode *el, int urlenc, size_t idx,
                               char **key, uint64_t *size, sio_error *err)
{
    sio_code rc = SIO_OK;
    char *txt = NULL;
    const xmlNode *k = child_elem(el, "Key");
    const xmlNode *sz = child_elem(el, "Size");

    *key = NULL;
    if (!k || !sz) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "listing: Contents %zu has no %s",
                        idx, k ? "Size" : "Key");
        goto out;
    }
    if (repeated(el, "Key") || repeated(el, "Size")) {
        rc = sio_seterr(err, SIO_ERR_FORMAT,
                        "listing: Contents %zu repeats Key or Size", idx);
        goto out;
    }
    /* 20 digits hold any uint64; longer is malformed, not merely large. */
    rc = leaf_text(sz, 20, &txt, NULL);
    if (rc == SIO_ERR_NOMEM) {
        rc = sio_seterr(err, rc, "listing: out of memory");
        goto out;
    }
    if (rc || parse_u64_strict(txt, size) != 0) {
        rc = sio_seterr(err, SIO_ERR_FORMAT,
                        "listing: Contents %zu has an invalid Size", idx);
        goto out;
    }
    rc = key_field(k, urlenc, "key", idx, key, err);
out:
    free(txt);
    return rc;
}

/* An optional single-valued field of the page root; NULL when absent. */
static sio_code opt_field(const xmlNode *root, const char *name, size_t max,
                          char **out, sio_error *err)
{
    sio_code rc = SIO_OK;
    const xmlNode *el = child_elem(root, name);
    *out = NULL;
    if (!el)
        goto out;
    if (repeated(root, name)) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "listing: %s appears twice",
                        name);
        goto out;
    }
    rc = leaf_text(el, max, out, NULL);
    if (rc == SIO_ERR_LIMIT)
        rc = sio_seterr(err, rc, "listing: %s longer than %zu bytes", name,
                        max);
    else if (rc == SIO_ERR_NOMEM)
        rc = sio_seterr(err, rc, "listing: out of memory");
    else if (rc)
        rc = sio_seterr(err, rc, "listing: %s is not plain text", name);
out:
    return rc;
}

sio_code sio_s3xml_parse_list(const char *xml, size_t len,
                              sio_s3_list_page *page, sio_error *err)
{
    sio_code rc = SIO_OK;
    xmlDocPtr doc = NULL;
    const xmlNode *root;
    char *enc = NULL, *trunc = NULL;
    int urlenc = 0;
    size_t nkeys, npref;

    if (!page)
        return sio_seterr(err, SIO_ERR_INVALID, "listing: NULL page");
    memset(page, 0, sizeof *page);
    rc = read_doc(xml, len, SIO_S3XML_DOC_MAX, "listing", 0, &doc, err);
    if (rc)
        goto out;
    root = xmlDocGetRootElement(doc);
    if (!is_elem(root, "ListBucketResult")) {
        rc = sio_seterr(err, SIO_ERR_FORMAT,
                        "listing: root element is <%.64s>, not "
                        "<ListBucketResult>", (const char *)root->name);
        goto out;
    }

    rc = opt_field(root, "EncodingType", 64, &enc, err);
    if (rc)
        goto out;
    if (enc) {
        if (strcmp(enc, "url") != 0) {
            rc = sio_seterr(err, SIO_ERR_UNSUPPORTED,
                            "listing: EncodingType '%.32s' is not 'url'", enc);
            goto out;
        }
        urlenc = 1;
    }
    rc = opt_field(root, "IsTruncated", 16, &trunc, err);
    if (rc)
        goto out;
    if (trunc) {
        if (strcmp(trunc, "true") == 0) {
            page->truncated = 1;
        } else if (strcmp(trunc, "false") != 0) {
            rc = sio_seterr(err, SIO_ERR_FORMAT,
                            "listing: IsTruncated is neither true nor false");
            goto out;
        }
    }
    rc = opt_field(root, "NextContinuationToken", SIO_S3XML_TOKEN_MAX,
                   &page->next_token, err);
    if (rc)
        goto out;
    if (page->next_token && !page->next_token[0]) {
        free(page->next_token);
        page->next_token = NULL;
    }

    nkeys = count_children(root, "Contents", SIO_S3XML_KEYS_MAX);
    npref = count_children(root, "CommonPrefixes", SIO_S3XML_KEYS_MAX);
    if (nkeys + npref > SIO_S3XML_KEYS_MAX) {
        rc = sio_seterr(err, SIO_ERR_LIMIT,
                        "listing: more than %u entries in one page",
                        SIO_S3XML_KEYS_MAX);
        goto out;
    }
    if (nkeys) {
        page->keys = calloc(nkeys, sizeof *page->keys);
        page->sizes = calloc(nkeys, sizeof *page->sizes);
        if (!page->keys || !page->sizes) {
            rc = sio_seterr(err, SIO_ERR_NOMEM, "listing: out of memory");
            goto out;
        }
    }
    if (npref) {
        page->prefixes = calloc(npref, sizeof *page->prefixes);
        if (!page->prefixes) {
            rc = sio_seterr(err, SIO_ERR_NOMEM, "listing: out of memory");
            goto out;
        }
    }
    for (const xmlNode *c = root->children; c; c = c->next) {
        if (is_elem(c, "Contents")) {
            rc = parse_contents(c, urlenc, page->n, &page->keys[page->n],
                                &page->sizes[page->n], err);
            if (rc)
                goto out;
            page->n++;
        } else if (is_elem(c, "CommonPrefixes")) {
            /* S3 sends one Prefix per CommonPrefixes element. */
            const xmlNode *p = child_elem(c, "Prefix");
            if (!p || repeated(c, "Prefix")) {
                rc = sio_seterr(err, SIO_ERR_FORMAT,
                                "listing: CommonPrefixes %zu needs exactly one "
                                "Prefix", page->nprefixes);
                goto out;
            }
            rc = key_field(p, urlenc, "prefix", page->nprefixes,
                           &page->prefixes[page->nprefixes], err);
            if (rc)
                goto out;
            page->nprefixes++;
        }
    }
out:
    free(enc);
    free(trunc);
    if (doc)
        xmlFreeDoc(doc);
    if (rc)
        sio_s3_list_page_free(page);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Error documents                                                     */

/*
 * Copy src into dst[cap] for a log line: control characters become '?',
 * and a cut never splits a UTF-8 sequence. cap 0 writes nothing.
 */
static void copy_sanitized(char *dst, size_t cap, const char *src)
{
    size_t w = 0, r = 0;
    if (!dst || cap == 0)
        return;
    while (src && src[r]) {
        unsigned char c = (unsigned char)src[r];
        size_t clen = 1;
        if (c >= 0xC0) {
            /* Length of the sequence from its lead byte; the parser has
             * already checked that the document is well-formed UTF-8. */
            clen = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
            for (size_t i = 1; i < clen; i++)
                if (!src[r + i]) {
                    clen = i;
                    break;
                }
        }
        if (w + clen >= cap)
            break;
        if (clen == 1) {
            dst[w++] = (c < 0x20 || c == 0x7F) ? '?' : (char)c;
        } else {
            memcpy(dst + w, src + r, clen);
            w += clen;
        }
        r += clen;
    }
    dst[w] = '\0';
}

/* The <Error> element of an error document, or NULL. */
static const xmlNode *find_error_elem(const xmlNode *root)
{
    if (is_elem(root, "Error"))
        return root;
    if (is_elem(root, "ErrorResponse"))
        return child_elem(root, "Error");
    return NULL;
}

/* Code and Message of an <Error> element; *msg may come back NULL. */
static sio_code error_fields(const xmlNode *e, char **code, char **msg)
{
    /* Limits: the document is at most SIO_S3XML_SMALL_DOC_MAX and the
     * output is cut to the caller's buffer anyway. */
    sio_code rc = SIO_OK;
    const xmlNode *c = child_elem(e, "Code");
    const xmlNode *m = child_elem(e, "Message");
    *code = *msg = NULL;
    if (!c) {
        rc = SIO_ERR_FORMAT;
        goto out;
    }
    rc = leaf_text(c, SIO_S3XML_SMALL_DOC_MAX, code, NULL);
    if (rc)
        goto out;
    if (!(*code)[0]) {
        rc = SIO_ERR_FORMAT;
        goto out;
    }
    if (m)
        rc = leaf_text(m, SIO_S3XML_SMALL_DOC_MAX, msg, NULL);
out:
    if (rc) {
        free(*code);
        free(*msg);
        *code = *msg = NULL;
    }
    return rc;
}

sio_code sio_s3xml_parse_error(const char *xml, size_t len, char *code,
                               size_t codelen, char *msg, size_t msglen)
{
    sio_code rc = SIO_OK;
    xmlDocPtr doc = NULL;
    const xmlNode *e;
    char *c = NULL, *m = NULL;

    copy_sanitized(code, codelen, "");
    copy_sanitized(msg, msglen, "");
    rc = read_doc(xml, len, SIO_S3XML_SMALL_DOC_MAX, "error document", 0,
                  &doc, NULL);
    if (rc)
        goto out;
    e = find_error_elem(xmlDocGetRootElement(doc));
    if (!e) {
        rc = SIO_ERR_FORMAT;
        goto out;
    }
    rc = error_fields(e, &c, &m);
    if (rc)
        goto out;
    copy_sanitized(code, codelen, c);
    copy_sanitized(msg, msglen, m ? m : "");
out:
    free(c);
    free(m);
    if (doc)
        xmlFreeDoc(doc);
    return rc;
}

/* ------------------------------------------------------------------ */
/* ISO 8601 timestamps                                                 */

static int digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar
 * (Howard Hinnant's days_from_civil algorithm). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int is_leap(int y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

sio_code sio_s3xml_parse_iso8601(const char *s, int64_t *out)
{
    static const int mdays[12] = {31, 28, 31, 30, 31, 30,
                                  31, 31, 30, 31, 30, 31};
    int Y, M, D, h, mi, se, off = 0;
    if (!s || !out || strlen(s) < 20)
        return SIO_ERR_FORMAT;
    if (digits(s, 4, &Y) || s[4] != '-' || digits(s + 5, 2, &M) ||
        s[7] != '-' || digits(s + 8, 2, &D) || (s[10] != 'T' && s[10] != 't') ||
        digits(s + 11, 2, &h) || s[13] != ':' || digits(s + 14, 2, &mi) ||
        s[16] != ':' || digits(s + 17, 2, &se))
        return SIO_ERR_FORMAT;
    if (M < 1 || M > 12 || D < 1 ||
        D > mdays[M - 1] + (M == 2 && is_leap(Y)) || h > 23 || mi > 59 ||
        se > 60)
        return SIO_ERR_FORMAT;
    s += 19;
    if (*s == '.') {
        s++;
        if (*s < '0' || *s > '9')
            return SIO_ERR_FORMAT;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    if (*s == 'Z' || *s == 'z') {
        s++;
    } else if (*s == '+' || *s == '-') {
        int oh, om;
        if (digits(s + 1, 2, &oh) || s[3] != ':' || digits(s + 4, 2, &om) ||
            oh > 23 || om > 59)
            return SIO_ERR_FORMAT;
        off = (oh * 60 + om) * 60 * (*s == '-' ? -1 : 1);
        s += 6;
    } else {
        return SIO_ERR_FORMAT;
    }
    if (*s)
        return SIO_ERR_FORMAT;
    /* A leap second (:60) counts as the next second, as POSIX time does. */
    *out = days_from_civil(Y, M, D) * 86400 + h * 3600 + mi * 60 + se - off;
    return SIO_OK;
}

/* ------------------------------------------------------------------ */
/* STS credentials                                                     */

static void free_secret(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

void sio_s3_sts_creds_free(sio_s3_sts_creds *c)
{
    if (!c)
        return;
    free(c->access_key_id);
    free_secret(c->secret_access_key);
    free_secret(c->session_token);
    free(c->expiration);
    memset(c, 0, sizeof *c);
}

/* One required credential field; messages name the field, never the value. */
static sio_code cred_field(const xmlNode *creds, const char *name, char **out,
                           sio_error *err)
{
    sio_code rc = SIO_OK;
    const xmlNode *el = child_elem(creds, name);
    *out = NULL;
    if (!el) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "sts: Credentials has no %s",
                        name);
        goto out;
    }
    if (repeated(creds, name)) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "sts: %s appears twice", name);
        goto out;
    }
    rc = leaf_text(el, SIO_S3XML_CRED_FIELD_MAX, out, NULL);
    if (rc == SIO_ERR_LIMIT)
        rc = sio_seterr(err, rc, "sts: %s longer than %u bytes", name,
                        SIO_S3XML_CRED_FIELD_MAX);
    else if (rc == SIO_ERR_NOMEM)
        rc = sio_seterr(err, rc, "sts: out of memory");
    else if (rc)
        rc = sio_seterr(err, rc, "sts: %s is not plain text", name);
    else if (!(*out)[0])
        rc = sio_seterr(err, SIO_ERR_FORMAT, "sts: %s is empty", name);
out:
    if (rc && *out) {
        free_secret(*out);
        *out = NULL;
    }
    return rc;
}

sio_code sio_s3xml_parse_sts(const char *xml, size_t len,
                             sio_s3_sts_creds *out, sio_error *err)
{
    sio_code rc = SIO_OK;
    xmlDocPtr doc = NULL;
    const xmlNode *root, *result = NULL, *creds, *e;
    char *c = NULL, *m = NULL;

    if (!out)
        return sio_seterr(err, SIO_ERR_INVALID, "sts: NULL output");
    memset(out, 0, sizeof *out);
    rc = read_doc(xml, len, SIO_S3XML_SMALL_DOC_MAX, "sts", 1, &doc, err);
    if (rc)
        goto out;
    root = xmlDocGetRootElement(doc);
    e = find_error_elem(root);
    if (e) {
        char cb[128], mb[256];
        rc = error_fields(e, &c, &m);
        if (rc == SIO_ERR_NOMEM) {
            rc = sio_seterr(err, rc, "sts: out of memory");
            goto out;
        }
        copy_sanitized(cb, sizeof cb, c ? c : "unknown");
        copy_sanitized(mb, sizeof mb, m ? m : "");
        rc = sio_seterr(err, SIO_ERR_AUTH, "sts: refused: code=%s message=\"%s\"",
                        cb, mb);
        goto out;
    }
    if (is_elem(root, "AssumeRoleWithWebIdentityResponse"))
        result = child_elem(root, "AssumeRoleWithWebIdentityResult");
    else if (is_elem(root, "AssumeRoleResponse"))
        result = child_elem(root, "AssumeRoleResult");
    else {
        rc = sio_seterr(err, SIO_ERR_FORMAT,
                        "sts: unexpected root element <%.64s>",
                        (const char *)root->name);
        goto out;
    }
    creds = result ? child_elem(result, "Credentials") : NULL;
    if (!creds) {
        rc = sio_seterr(err, SIO_ERR_FORMAT, "sts: response has no Credentials");
        goto out;
    }
    rc = cred_field(creds, "AccessKeyId", &out->access_key_id, err);
    if (rc)
        goto out;
    rc = cred_field(creds, "SecretAccessKey", &out->secret_access_key, err);
    if (rc)
        goto out;
    rc = cred_field(creds, "SessionToken", &out->session_token, err);
    if (rc)
        goto out;
    rc = cred_field(creds, "Expiration", &out->expiration, err);
    if (rc)
        goto out;
    if (sio_s3xml_parse_iso8601(out->expiration, &out->expires_at) != SIO_OK) {
        rc = sio_seterr(err, SIO_ERR_FORMAT,
                        "sts: Expiration is not an ISO 8601 UTC time");
        goto out;
    }
out:
    free(c);
    free(m);
    if (doc)
        xmlFreeDoc(doc);
    if (rc)
        sio_s3_sts_creds_free(out);
    return rc;
}
