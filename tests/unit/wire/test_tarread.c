/*
 * test_tarread.c — the tar stream reader (shardio/wire/tarread.c,
 * sio_tarr_parse) on streams written by the tar encoder (sio_tarw) and on
 * hostile bytes: every prefix asks for more, a whole stream gives the
 * sample and then the end summary; members and field counts above the
 * limits, a bad checksum, a member outside any sample and an archive
 * without a trailer are refused; error trailers (final, retryable with
 * advice, malformed advice).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "shardio.h"
#include "shardio_wire.h"

/* Global index 3: key "dir/s0003", fields cls ("3") and bin (300 bytes
 * of a counting pattern). */
static void make_sample(unsigned char bin[300], sio_field f[2], sio_sample *s)
{
    for (size_t k = 0; k < 300; k++)
        bin[k] = (unsigned char)(3 + k);
    f[0] = (sio_field){.name = "cls", .data = (const unsigned char *)"3",
                       .len = 1};
    f[1] = (sio_field){.name = "bin", .data = bin, .len = 300};
    memset(s, 0, sizeof *s);
    s->key = "dir/s0003";
    s->shard_url = "file:///d/shard-0.tar";
    s->global_index = 3;
    s->nfields = 2;
    s->fields = f;
    s->bytes = 301;
}

static void test_stream(void)
{
    sio_frame_field fields[4];
    sio_tarr_result r;
    sio_error err;
    sio_wbuf b;
    sio_wenc *w = NULL;
    sio_error e;
    unsigned char bin[300];
    sio_field f[2];
    sio_sample s;

    sio_wbuf_init(&b, 1 << 20);
    CHECK(sio_tarw_create(NULL, 0, sio_wbuf_append, &b, &w, &e) == SIO_OK);
    make_sample(bin, f, &s);
    sio_wenc_sample(w, &s, 0);
    sio_tarw_summary sum = {0, 0, 1, 0, 1, 1};
    sio_wenc_end(w, &sum);
    sio_wenc_destroy(w);

    /* Any prefix asks for more; the whole yields the sample then END. */
    int ok = 1;
    for (size_t k = 0; k < b.len - 1024; k += 97) {
        if (sio_tarr_parse(b.data, k, fields, 4, 1 << 20, &r, &err) !=
                SIO_OK ||
            (r.kind != SIO_TARR_NEED && r.kind != SIO_TARR_SAMPLE) ||
            (r.kind == SIO_TARR_NEED && r.need <= k))
            ok = 0;
    }
    CHECK(ok);
    CHECK(sio_tarr_parse(b.data, b.len, fields, 4, 1 << 20, &r, &err) ==
          SIO_OK);
    CHECK(r.kind == SIO_TARR_SAMPLE && r.sample.nfields == 2);
    CHECK_EQ_U64(r.sample.global_index, 3);
    CHECK_EQ_U64(r.sample.position, 0);
    CHECK(r.sample.key_len == 9 &&
          memcmp(r.sample.key, "dir/s0003", 9) == 0);
    CHECK(r.sample.fields == fields && fields[1].len == 300 &&
          memcmp(fields[1].data, bin, 300) == 0);
    CHECK(fields[0].name_len == 3 && memcmp(fields[0].name, "cls", 3) == 0);
    CHECK_EQ_U64(r.sample.bytes, 301);
    size_t used = r.consumed;
    CHECK(sio_tarr_parse(b.data + used, b.len - used, fields, 4, 1 << 20, &r,
                         &err) == SIO_OK);
    CHECK(r.kind == SIO_TARR_END && r.summary.position == 1);

    /* A member above the limit; a field count above the limit; a bad
     * checksum; a member outside any sample; no trailer. */
    CHECK(sio_tarr_parse(b.data, b.len, fields, 4, 100, &r, &err) ==
          SIO_ERR_LIMIT);
    CHECK(sio_tarr_parse(b.data, b.len, fields, 1, 1 << 20, &r, &err) ==
          SIO_ERR_LIMIT);
    b.data[600] ^= 1; /* inside the second header (after the 512-byte pax
                         header and its data block) */
    CHECK(sio_tarr_parse(b.data, b.len, fields, 4, 1 << 20, &r, &err) ==
          SIO_ERR_FORMAT);
    b.data[600] ^= 1;
    CHECK(sio_tarr_parse(b.data + 1024, b.len - 1024, fields, 4, 1 << 20,
                         &r, &err) == SIO_ERR_FORMAT);
    unsigned char zeros[1024] = {0};
    CHECK(sio_tarr_parse(zeros, sizeof zeros, fields, 4, 1 << 20, &r,
                         NULL) == SIO_ERR_FORMAT);
    sio_wbuf_free(&b);
}

static void test_error_trailers(void)
{
    sio_frame_field fields[4];
    sio_tarr_result r;
    sio_error err, e;
    sio_wbuf b;
    sio_wenc *w = NULL;

    /* Final, retryable with advice, malformed advice. */
    for (int k = 0; k < 3; k++) {
        sio_wbuf_init(&b, 1 << 20);
        CHECK(sio_tarw_create(NULL, 0, sio_wbuf_append, &b, &w, &e) ==
              SIO_OK);
        if (k == 0) {
            sio_wenc_error(w, "corrupt", 0, 0);
        } else if (k == 1) {
            sio_wenc_error(w, "server shutting down", 1, 1500);
        } else {
            /* A member with that name and a bad retryable value. */
            static const char j[] =
                "{\"status\":\"error\",\"reason\":\"x\",\"retryable\":\"y\"}";
            unsigned char blk[SIO_TAR_BLOCK * 2];
            int fits;
            memset(blk, 0, sizeof blk);
            sio_tar_header(blk, SIO_TARW_ERROR_NAME,
                           strlen(SIO_TARW_ERROR_NAME), '0', sizeof j - 1,
                           &fits);
            memcpy(blk + SIO_TAR_BLOCK, j, sizeof j - 1);
            sio_wbuf_append(&b, blk, sizeof blk);
        }
        sio_wenc_destroy(w);
        sio_code rc =
            sio_tarr_parse(b.data, b.len, fields, 4, 1 << 20, &r, &err);
        if (k == 2) {
            CHECK(rc == SIO_ERR_FORMAT);
            CHECK(strstr(err.msg, "retryable is not a boolean") != NULL);
        } else {
            CHECK(rc == SIO_OK && r.kind == SIO_TARR_ERROR);
            CHECK(r.error.retryable == k);
            CHECK_EQ_U64(r.error.retry_after_ms, k ? 1500 : 0);
            CHECK_STR(r.error.reason,
                      k ? "server shutting down" : "corrupt");
            CHECK_EQ_U64(r.consumed, b.len);
        }
        sio_wbuf_free(&b);
    }
}

/* The stream's identity: a pax global header before the first sample,
 * read back as SIO_TARR_IDENT; refused after a sample, and a malformed one
 * is a format error. */
static void test_ident(void)
{
    sio_frame_field fields[4];
    sio_tarr_result r;
    sio_error err;
    sio_wbuf b;
    sio_wenc *w = NULL;
    unsigned char bin[300];
    sio_field f[2];
    sio_sample s;
    sio_stream_ident id;

    memset(&id, 0, sizeof id);
    snprintf(id.job, sizeof id.job, "train");
    id.epoch = 7;
    snprintf(id.fingerprint, sizeof id.fingerprint,
             "0123456789abcdef0123456789abcdef");
    id.replica = 2;
    id.replicas = 3;
    id.served_by = 0;
    sio_wbuf_init(&b, 1 << 20);
    CHECK(sio_tarw_create(NULL, 0, sio_wbuf_append, &b, &w, &err) == SIO_OK);
    CHECK(sio_tarw_write_ident(w, &id, &err) == SIO_OK);
    make_sample(bin, f, &s);
    CHECK(sio_wenc_sample(w, &s, 0) == SIO_OK);
    CHECK(sio_tarw_write_ident(w, &id, &err) == SIO_ERR_INVALID);
    sio_tarw_summary sum = {0, 0, 1, 0, 1, 1};
    sio_wenc_end(w, &sum);
    sio_wenc_destroy(w);

    CHECK(sio_tarr_parse(b.data, 100, fields, 4, 1 << 20, &r, &err) ==
          SIO_OK);
    CHECK(r.kind == SIO_TARR_NEED);
    CHECK(sio_tarr_parse(b.data, b.len, fields, 4, 1 << 20, &r, &err) ==
          SIO_OK);
    CHECK(r.kind == SIO_TARR_IDENT && r.consumed == 1024);
    CHECK(strcmp(r.ident.job, "train") == 0 && r.ident.epoch == 7);
    CHECK(strcmp(r.ident.fingerprint, id.fingerprint) == 0);
    CHECK(r.ident.replica == 2 && r.ident.replicas == 3 &&
          r.ident.served_by == 0);
    size_t used = r.consumed;
    CHECK(sio_tarr_parse(b.data + used, b.len - used, fields, 4, 1 << 20, &r,
                         &err) == SIO_OK);
    CHECK(r.kind == SIO_TARR_SAMPLE && r.sample.global_index == 3);

    /* A bad fingerprint, and a part outside the set, are refused by the
     * writer; bytes that say so anyway are a format error. */
    sio_stream_ident bad = id;
    bad.fingerprint[0] = 'X';
    sio_wbuf b2;
    sio_wbuf_init(&b2, 1 << 20);
    CHECK(sio_tarw_create(NULL, 0, sio_wbuf_append, &b2, &w, &err) ==
          SIO_OK);
    CHECK(sio_tarw_write_ident(w, &bad, &err) == SIO_ERR_INVALID);
    sio_wenc_destroy(w);
    sio_wbuf_free(&b2);
    /* "SHARDCAST.replica=2" -> "SHARDCAST.replica=9": not below R = 3
     * (the checksum is fixed up so that only the record is wrong). */
    unsigned char *rec = memmem(b.data, 1024, "SHARDCAST.replica=2", 19);
    CHECK(rec != NULL);
    if (rec) {
        rec[18] = '9';
        unsigned sum8 = 0;
        for (size_t k = 0; k < 512; k++)
            sum8 += (k >= 148 && k < 156) ? ' ' : b.data[k];
        snprintf((char *)b.data + 148, 8, "%06o", sum8);
        CHECK(sio_tarr_parse(b.data, b.len, fields, 4, 1 << 20, &r, &err) ==
              SIO_ERR_FORMAT);
    }
    sio_wbuf_free(&b);
}

int main(void)
{
    test_ident();
    test_stream();
    test_error_trailers();
    CHECK_MAIN_END();
}
