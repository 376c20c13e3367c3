/*
 * test_s3xml.c — S3 / STS XML parsing (shardio/store/s3xml.c).
 *
 * Fixtures follow the documented shapes of ListObjectsV2, S3 <Error> and
 * STS AssumeRoleWithWebIdentity responses, then hostile inputs: entity
 * bombs, external entities, oversized documents, malformed XML and bad
 * sizes. Credentials below are AWS's documentation examples, not real.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "store/s3xml.h"

#define XMLDECL "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
#define S3NS "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\""

static sio_code parse_str(const char *xml, sio_s3_list_page *p, sio_error *e)
{
    return sio_s3xml_parse_list(xml, strlen(xml), p, e);
}

/* A page wrapping one Contents element whose Size text is size. */
static sio_code parse_size(const char *size, uint64_t *out)
{
    char buf[512];
    sio_s3_list_page p;
    sio_error e;
    snprintf(buf, sizeof buf,
             "<ListBucketResult><Contents><Key>k.tar</Key><Size>%s</Size>"
             "</Contents></ListBucketResult>", size);
    sio_code rc = parse_str(buf, &p, &e);
    if (rc == SIO_OK)
        *out = p.sizes[0];
    sio_s3_list_page_free(&p);
    return rc;
}

/* A url-encoded page with one key; returns the code and the decoded key
 * copied into out. */
static sio_code parse_urlkey(const char *key, char *out, size_t outlen)
{
    size_t cap = strlen(key) + 256;
    char *buf = malloc(cap);
    sio_s3_list_page p;
    sio_error e;
    snprintf(buf, cap,
             "<ListBucketResult><EncodingType>url</EncodingType><Contents>"
             "<Key>%s</Key><Size>1</Size></Contents></ListBucketResult>", key);
    sio_code rc = parse_str(buf, &p, &e);
    if (rc == SIO_OK)
        snprintf(out, outlen, "%s", p.keys[0]);
    sio_s3_list_page_free(&p);
    free(buf);
    return rc;
}

static void test_documented_v2(void)
{
    /* The shape AWS documents for ListObjectsV2 with a delimiter. */
    const char *xml =
        XMLDECL
        "<ListBucketResult " S3NS ">\n"
        "  <Name>example-bucket</Name>\n"
        "  <Prefix>train/</Prefix>\n"
        "  <KeyCount>3</KeyCount>\n"
        "  <MaxKeys>1000</MaxKeys>\n"
        "  <Delimiter>/</Delimiter>\n"
        "  <IsTruncated>false</IsTruncated>\n"
        "  <Contents>\n"
        "    <Key>train/shard-000000.tar</Key>\n"
        "    <LastModified>2023-02-26T01:56:20.000Z</LastModified>\n"
        "    <ETag>&quot;bf1d737a4d46a19f3bced6905cc8b902&quot;</ETag>\n"
        "    <ChecksumAlgorithm>CRC32</ChecksumAlgorithm>\n"
        "    <Size>142863</Size>\n"
        "    <Owner><ID>75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a</ID>"
        "<DisplayName>owner</DisplayName></Owner>\n"
        "    <StorageClass>STANDARD</StorageClass>\n"
        "  </Contents>\n"
        "  <Contents>\n"
        "    <Key>train/shard-000001.tar</Key>\n"
        "    <Size>0</Size>\n"
        "  </Contents>\n"
        "  <CommonPrefixes>\n"
        "    <Prefix>train/extra/</Prefix>\n"
        "  </CommonPrefixes>\n"
        "  <Contents>\n"
        "    <Key>train/shard-000002.tar</Key>\n"
        "    <Size>18446744073709551615</Size>\n"
        "  </Contents>\n"
        "  <CommonPrefixes><Prefix>train/val/</Prefix></CommonPrefixes>\n"
        "</ListBucketResult>\n";
    sio_s3_list_page p;
    sio_error e;
    CHECK(parse_str(xml, &p, &e) == SIO_OK);
    CHECK_EQ_U64(p.n, 3);
    CHECK_EQ_U64(p.nprefixes, 2);
    if (p.n == 3) {
        CHECK_STR(p.keys[0], "train/shard-000000.tar");
        CHECK_STR(p.keys[1], "train/shard-000001.tar");
        CHECK_STR(p.keys[2], "train/shard-000002.tar");
        CHECK_EQ_U64(p.sizes[0], 142863);
        CHECK_EQ_U64(p.sizes[1], 0);
        CHECK_EQ_U64(p.sizes[2], UINT64_MAX);
    }
    if (p.nprefixes == 2) {
        CHECK_STR(p.prefixes[0], "train/extra/");
        CHECK_STR(p.prefixes[1], "train/val/");
    }
    CHECK(p.truncated == 0);
    CHECK(p.next_token == NULL);
    sio_s3_list_page_free(&p);
    CHECK(p.keys == NULL && p.n == 0);
    sio_s3_list_page_free(&p); /* freeing twice is harmless */
    sio_s3_list_page_free(NULL);
}

static void test_truncated_no_namespace(void)
{
    /* Un-namespaced root, as some S3-compatible servers send it. */
    const char *xml =
        "<ListBucketResult><Name>b</Name><Prefix></Prefix>"
        "<ContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</ContinuationToken>"
        "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM+AbC=</NextContinuationToken>"
        "<KeyCount>1</KeyCount><MaxKeys>1</MaxKeys>"
        "<IsTruncated>true</IsTruncated>"
        "<Contents><Key>a.tar</Key><Size>10</Size></Contents>"
        "</ListBucketResult>";
    sio_s3_list_page p;
    sio_error e;
    CHECK(parse_str(xml, &p, &e) == SIO_OK);
    CHECK_EQ_U64(p.n, 1);
    CHECK(p.truncated == 1);
    CHECK_STR(p.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM+AbC=");
    sio_s3_list_page_free(&p);

    /* A prefixed namespace (ns:ListBucketResult) is the same document. */
    const char *pref =
        "<s3:ListBucketResult xmlns:s3=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<s3:IsTruncated>true</s3:IsTruncated>"
        "<s3:NextContinuationToken>tok</s3:NextContinuationToken>"
        "<s3:Contents><s3:Key>x</s3:Key><s3:Size>7</s3:Size></s3:Contents>"
        "</s3:ListBucketResult>";
    CHECK(parse_str(pref, &p, &e) == SIO_OK);
    CHECK_EQ_U64(p.n, 1);
    CHECK(p.n == 1 && strcmp(p.keys[0], "x") == 0 && p.sizes[0] == 7);
    CHECK_STR(p.next_token, "tok");
    sio_s3_list_page_free(&p);

    /* An empty bucket: no Contents at all. */
    CHECK(parse_str("<ListBucketResult " S3NS "><Name>b</Name><KeyCount>0"
                    "</KeyCount><IsTruncated>false</IsTruncated>"
                    "</ListBucketResult>", &p, &e) == SIO_OK);
    CHECK_EQ_U64(p.n, 0);
    CHECK(p.keys == NULL && p.prefixes == NULL && !p.truncated);
    sio_s3_list_page_free(&p);
}

static void test_url_encoding(void)
{
    char k[2048];
    /* S3 writes a space as '+' (or %20) and a literal '+' as %2B. */
    CHECK(parse_urlkey("train/my+shard%20a%2Bb%2F.tar", k, sizeof k) == SIO_OK);
    CHECK_STR(k, "train/my shard a+b/.tar");
    /* UTF-8 as %-escaped bytes; hex digits in either case. */
    CHECK(parse_urlkey("%E6%97%a5%E6%9C%AC/caf%C3%A9.tar", k, sizeof k) == SIO_OK);
    CHECK_STR(k, "\xE6\x97\xA5\xE6\x9C\xAC/caf\xC3\xA9.tar");
    /* Control characters, which XML 1.0 cannot carry, are why url exists. */
    CHECK(parse_urlkey("a%01b%0Ac.tar", k, sizeof k) == SIO_OK);
    CHECK_STR(k, "a\x01" "b\nc.tar");
    /* Bad escapes and NUL are malformed. */
    CHECK(parse_urlkey("a%G1.tar", k, sizeof k) == SIO_ERR_FORMAT);
    CHECK(parse_urlkey("a%2", k, sizeof k) == SIO_ERR_FORMAT);
    CHECK(parse_urlkey("a%", k, sizeof k) == SIO_ERR_FORMAT);
    CHECK(parse_urlkey("a%00b", k, sizeof k) == SIO_ERR_FORMAT);

    /* Prefixes are decoded too; tokens are not (they are opaque). */
    const char *xml =
        "<ListBucketResult " S3NS "><EncodingType>url</EncodingType>"
        "<IsTruncated>true</IsTruncated>"
        "<NextContinuationToken>a+b%2F</NextContinuationToken>"
        "<CommonPrefixes><Prefix>dir%20one/</Prefix></CommonPrefixes>"
        "</ListBucketResult>";
    sio_s3_list_page p;
    sio_error e;
    CHECK(parse_str(xml, &p, &e) == SIO_OK);
    CHECK(p.nprefixes == 1 && strcmp(p.prefixes[0], "dir one/") == 0);
    CHECK_STR(p.next_token, "a+b%2F");
    sio_s3_list_page_free(&p);

    /* Without EncodingType, '+' and '%' are literal. */
    CHECK(parse_str("<ListBucketResult><Contents><Key>a+b%20c</Key><Size>1"
                    "</Size></Contents></ListBucketResult>", &p, &e) == SIO_OK);
    CHECK(p.n == 1 && strcmp(p.keys[0], "a+b%20c") == 0);
    sio_s3_list_page_free(&p);

    /* An unknown encoding cannot be decoded faithfully. */
    CHECK(parse_str("<ListBucketResult><EncodingType>base64</EncodingType>"
                    "</ListBucketResult>", &p, &e) == SIO_ERR_UNSUPPORTED);
}

static void test_entities_and_unicode(void)
{
    const char *xml =
        XMLDECL "<ListBucketResult " S3NS ">"
        "<Contents><Key>a&amp;b&lt;c&gt;&apos;d&quot;.tar</Key><Size>1</Size></Contents>"
        "<Contents><Key>&#x65E5;&#26412;/x.tar</Key><Size>2</Size></Contents>"
        "<Contents><Key>donn\xC3\xA9" "es/\xF0\x9F\x98\x80.tar</Key><Size>3</Size></Contents>"
        "<Contents><Key><![CDATA[cdata&<key>.tar]]></Key><Size>4</Size></Contents>"
        "<Contents><Key>split<!-- comment -->key.tar</Key><Size>5</Size></Contents>"
        "</ListBucketResult>";
    sio_s3_list_page p;
    sio_error e;
    CHECK(parse_str(xml, &p, &e) == SIO_OK);
    CHECK_EQ_U64(p.n, 5);
    if (p.n == 5) {
        CHECK_STR(p.keys[0], "a&b<c>'d\".tar");
        CHECK_STR(p.keys[1], "\xE6\x97\xA5\xE6\x9C\xAC/x.tar");
        CHECK_STR(p.keys[2], "donn\xC3\xA9" "es/\xF0\x9F\x98\x80.tar");
        CHECK_STR(p.keys[3], "cdata&<key>.tar");
        CHECK_STR(p.keys[4], "splitkey.tar");
        CHECK_EQ_U64(p.sizes[4], 5);
    }
    sio_s3_list_page_free(&p);

    /* Input need not be NUL-terminated: only len bytes are read. */
    const char *withtail = "<ListBucketResult><Contents><Key>k</Key><Size>9"
                           "</Size></Contents></ListBucketResult>GARBAGE<<<";
    CHECK(sio_s3xml_parse_list(withtail, strlen(withtail) - 10, &p, &e) == SIO_OK);
    CHECK(p.n == 1 && p.sizes[0] == 9);
    sio_s3_list_page_free(&p);
}

static void test_sizes(void)
{
    uint64_t v = 0;
    CHECK(parse_size("0", &v) == SIO_OK && v == 0);
    CHECK(parse_size("007", &v) == SIO_OK && v == 7);
    CHECK(parse_size("18446744073709551615", &v) == SIO_OK && v == UINT64_MAX);
    CHECK(parse_size("18446744073709551616", &v) == SIO_ERR_FORMAT);
    CHECK(parse_size("99999999999999999999", &v) == SIO_ERR_FORMAT);
    CHECK(parse_size("123456789012345678901234567890", &v) == SIO_ERR_FORMAT);
    CHECK(parse_size("-1", &v) == SIO_ERR_FORMAT);
    CHECK(parse_size("+5", &v) == SIO_ERR_FORMAT);
    CHECK(parse_size(" 5", &v) == SIO_ERR_FORMAT);
    CHECK(parse_size("5 ", &v) == SIO_ERR_FORMAT);
    CHECK(parse_size("1e3", &v) == SIO_ERR_FORMAT);
    CHECK(parse_size("0x10", &v) == SIO_ERR_FORMAT);
    CHECK(parse_size("", &v) == SIO_ERR_FORMAT);
    CHECK(parse_size("&#x31;&#x32;", &v) == SIO_OK && v == 12);
    CHECK(parse_size("<b>1</b>", &v) == SIO_ERR_FORMAT);
}

static void test_structure_errors(void)
{
    sio_s3_list_page p;
    sio_error e;
    memset(&e, 0, sizeof e);
    CHECK(parse_str("<ListBucketResult><Contents><Key>k</Key></Contents>"
                    "</ListBucketResult>", &p, &e) == SIO_ERR_FORMAT);
    CHECK(strstr(e.msg, "Size") != NULL);
    CHECK(p.keys == NULL && p.n == 0); /* zeroed on failure */
    CHECK(parse_str("<ListBucketResult><Contents><Size>1</Size></Contents>"
                    "</ListBucketResult>", &p, &e) == SIO_ERR_FORMAT);
    CHECK(strstr(e.msg, "Key") != NULL);
    CHECK(parse_str("<ListBucketResult><Contents><Key>k</Key><Size>1</Size>"
                    "<Size>2</Size></Contents></ListBucketResult>", &p, &e)
          == SIO_ERR_FORMAT);
    CHECK(parse_str("<ListBucketResult><Contents><Key></Key><Size>1</Size>"
                    "</Contents></ListBucketResult>", &p, &e) == SIO_ERR_FORMAT);
    CHECK(parse_str("<ListBucketResult><IsTruncated>yes</IsTruncated>"
                    "</ListBucketResult>", &p, &e) == SIO_ERR_FORMAT);
    CHECK(parse_str("<ListBucketResult><IsTruncated>true</IsTruncated>"
                    "<IsTruncated>false</IsTruncated></ListBucketResult>", &p,
                    &e) == SIO_ERR_FORMAT);
    CHECK(parse_str("<ListBucketResult><CommonPrefixes></CommonPrefixes>"
                    "</ListBucketResult>", &p, &e) == SIO_ERR_FORMAT);
    CHECK(parse_str("<ListAllMyBucketsResult/>", &p, &e) == SIO_ERR_FORMAT);
    CHECK(strstr(e.msg, "ListAllMyBucketsResult") != NULL);
    /* An S3 error document is not a listing. */
    CHECK(parse_str("<Error><Code>NoSuchBucket</Code></Error>", &p, &e)
          == SIO_ERR_FORMAT);
    /* Several contents partially parsed, then a bad one: nothing leaks
     * (ASan) and the page is zeroed. */
    CHECK(parse_str("<ListBucketResult><Contents><Key>a</Key><Size>1</Size>"
                    "</Contents><CommonPrefixes><Prefix>p/</Prefix>"
                    "</CommonPrefixes><Contents><Key>b</Key><Size>x</Size>"
                    "</Contents></ListBucketResult>", &p, &e) == SIO_ERR_FORMAT);
    CHECK(p.keys == NULL && p.prefixes == NULL && p.n == 0);
    CHECK(sio_s3xml_parse_list("x", 1, NULL, &e) == SIO_ERR_INVALID);
    CHECK(sio_s3xml_parse_list(NULL, 5, &p, &e) == SIO_ERR_INVALID);
}

static void test_malformed(void)
{
    static const char *bad[] = {
        "",
        "not xml at all",
        "<ListBucketResult>",
        "<ListBucketResult><Contents><Key>k</Key><Size>1</Size></Contents>",
        "<ListBucketResult></ListBucket>",
        "<ListBucketResult><Contents><Key>k</Contents></ListBucketResult>",
        "<ListBucketResult>&undefined;</ListBucketResult>",
        "<ListBucketResult><Contents><Key>&#0;</Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>\xC3\x28</Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult/><ListBucketResult/>",
        "<?xml version=\"1.0\"?>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sio_s3_list_page p;
        sio_error e;
        memset(&e, 0, sizeof e);
        sio_code rc = parse_str(bad[i], &p, &e);
        CHECK(rc == SIO_ERR_FORMAT);
        if (rc != SIO_ERR_FORMAT)
            fprintf(stderr, "  input %zu gave %d\n", i, (int)rc);
        CHECK(e.msg[0] != '\0');
        CHECK(strchr(e.msg, '\n') == NULL);
        CHECK(p.keys == NULL && p.n == 0);
    }
}

static void test_entity_attacks(void)
{
    /* The "billion laughs": 10^9 "lol"s if anything expanded it. It must be
     * refused at the DOCTYPE, quickly, without growing memory. */
    const char *bomb =
        "<?xml version=\"1.0\"?>\n"
        "<!DOCTYPE lolz [\n"
        " <!ENTITY lol \"lol\">\n"
        " <!ENTITY lol1 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">\n"
        " <!ENTITY lol2 \"&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;\">\n"
        " <!ENTITY lol3 \"&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;\">\n"
        " <!ENTITY lol4 \"&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;\">\n"
        " <!ENTITY lol5 \"&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;\">\n"
        " <!ENTITY lol6 \"&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;\">\n"
        " <!ENTITY lol7 \"&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;\">\n"
        " <!ENTITY lol8 \"&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;\">\n"
        " <!ENTITY lol9 \"&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;\">\n"
        "]>\n"
        "<ListBucketResult><Contents><Key>&lol9;</Key><Size>1</Size></Contents>"
        "</ListBucketResult>";
    sio_s3_list_page p;
    sio_error e;
    char code[64], msg[64];
    clock_t t0 = clock();
    CHECK(parse_str(bomb, &p, &e) == SIO_ERR_FORMAT);
    CHECK(strstr(e.msg, "DTD") != NULL);
    CHECK(p.n == 0);
    CHECK(sio_s3xml_parse_error(bomb, strlen(bomb), code, sizeof code, msg,
                                sizeof msg) == SIO_ERR_FORMAT);
    CHECK((double)(clock() - t0) / CLOCKS_PER_SEC < 1.0);

    /* External entity (XXE): a key must never receive a file's content. */
    const char *xxe =
        "<?xml version=\"1.0\"?>\n"
        "<!DOCTYPE r [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>\n"
        "<ListBucketResult><Contents><Key>&x;</Key><Size>1</Size></Contents>"
        "</ListBucketResult>";
    CHECK(parse_str(xxe, &p, &e) == SIO_ERR_FORMAT);
    CHECK(p.n == 0);
    /* External DTD over the network. */
    const char *netdtd =
        "<?xml version=\"1.0\"?>\n"
        "<!DOCTYPE ListBucketResult SYSTEM \"http://127.0.0.1:1/x.dtd\">\n"
        "<ListBucketResult/>";
    CHECK(parse_str(netdtd, &p, &e) == SIO_ERR_FORMAT);
    /* Parameter entities. */
    const char *pe =
        "<!DOCTYPE r [<!ENTITY % p SYSTEM \"file:///etc/passwd\"> %p;]>"
        "<ListBucketResult/>";
    CHECK(parse_str(pe, &p, &e) == SIO_ERR_FORMAT);
    sio_s3_sts_creds c;
    CHECK(sio_s3xml_parse_sts(bomb, strlen(bomb), &c, &e) == SIO_ERR_FORMAT);
}

static void test_limits(void)
{
    sio_s3_list_page p;
    sio_error e;
    /* Document size: refused before parsing. */
    size_t big = (size_t)SIO_S3XML_DOC_MAX + 1;
    char *doc = malloc(big);
    CHECK(doc != NULL);
    if (doc) {
        memset(doc, ' ', big);
        memcpy(doc, "<ListBucketResult>", 18);
        CHECK(sio_s3xml_parse_list(doc, big, &p, &e) == SIO_ERR_LIMIT);
        CHECK(strstr(e.msg, "limit") != NULL);
        free(doc);
    }

    /* Key length: 1024 bytes is S3's maximum and fine, 1025 is not. */
    char key[3 * SIO_S3XML_KEY_MAX + 8];
    char buf[3 * SIO_S3XML_KEY_MAX + 256];
    memset(key, 'k', SIO_S3XML_KEY_MAX);
    key[SIO_S3XML_KEY_MAX] = '\0';
    snprintf(buf, sizeof buf, "<ListBucketResult><Contents><Key>%s</Key>"
             "<Size>1</Size></Contents></ListBucketResult>", key);
    CHECK(parse_str(buf, &p, &e) == SIO_OK);
    CHECK(p.n == 1 && strlen(p.keys[0]) == SIO_S3XML_KEY_MAX);
    sio_s3_list_page_free(&p);
    key[SIO_S3XML_KEY_MAX] = 'k';
    key[SIO_S3XML_KEY_MAX + 1] = '\0';
    snprintf(buf, sizeof buf, "<ListBucketResult><Contents><Key>%s</Key>"
             "<Size>1</Size></Contents></ListBucketResult>", key);
    CHECK(parse_str(buf, &p, &e) == SIO_ERR_LIMIT);
    /* The limit applies after url decoding: 1024 escaped bytes pass. */
    for (size_t i = 0; i < SIO_S3XML_KEY_MAX; i++)
        memcpy(key + 3 * i, "%41", 3);
    key[3 * SIO_S3XML_KEY_MAX] = '\0';
    char out[SIO_S3XML_KEY_MAX + 1];
    CHECK(parse_urlkey(key, out, sizeof out) == SIO_OK);
    CHECK(strlen(out) == SIO_S3XML_KEY_MAX && out[0] == 'A');
    memcpy(key + 3 * SIO_S3XML_KEY_MAX, "%41", 4);
    CHECK(parse_urlkey(key, out, sizeof out) == SIO_ERR_LIMIT);

    /* Token length. */
    char *tok = malloc(SIO_S3XML_TOKEN_MAX + 256);
    if (tok) {
        size_t n = (size_t)snprintf(tok, 64, "<ListBucketResult>"
                                    "<NextContinuationToken>");
        memset(tok + n, 't', SIO_S3XML_TOKEN_MAX + 1);
        strcpy(tok + n + SIO_S3XML_TOKEN_MAX + 1,
               "</NextContinuationToken></ListBucketResult>");
        CHECK(parse_str(tok, &p, &e) == SIO_ERR_LIMIT);
        free(tok);
    }

    /* Entry count: a tolerant page of 1500 entries passes, one over the
     * limit does not. */
    const char *ent = "<Contents><Key>k</Key><Size>1</Size></Contents>";
    size_t entlen = strlen(ent);
    size_t cap = (SIO_S3XML_KEYS_MAX + 2) * entlen + 64;
    char *many = malloc(cap);
    CHECK(many != NULL);
    if (many) {
        size_t w = (size_t)sprintf(many, "<ListBucketResult>");
        size_t start = w;
        for (size_t i = 0; i < 1500; i++, w += entlen)
            memcpy(many + w, ent, entlen);
        strcpy(many + w, "</ListBucketResult>");
        CHECK(parse_str(many, &p, &e) == SIO_OK);
        CHECK_EQ_U64(p.n, 1500);
        sio_s3_list_page_free(&p);
        w = start;
        for (size_t i = 0; i < SIO_S3XML_KEYS_MAX + 1; i++, w += entlen)
            memcpy(many + w, ent, entlen);
        strcpy(many + w, "</ListBucketResult>");
        CHECK(parse_str(many, &p, &e) == SIO_ERR_LIMIT);
        CHECK(p.n == 0 && p.keys == NULL);
        free(many);
    }
}

static void test_error_documents(void)
{
    char code[64], msg[256];
    const char *slow =
        XMLDECL "<Error><Code>SlowDown</Code><Message>Please reduce your "
        "request rate.</Message><RequestId>4442587FB7D0A2F9</RequestId>"
        "<HostId>abc</HostId></Error>";
    CHECK(sio_s3xml_parse_error(slow, strlen(slow), code, sizeof code, msg,
                                sizeof msg) == SIO_OK);
    CHECK_STR(code, "SlowDown");
    CHECK_STR(msg, "Please reduce your request rate.");

    const char *nokey =
        XMLDECL "<Error><Code>NoSuchKey</Code><Message>The specified key does "
        "not exist.</Message><Key>train/shard-000009.tar</Key>"
        "<RequestId>1</RequestId></Error>";
    CHECK(sio_s3xml_parse_error(nokey, strlen(nokey), code, sizeof code, msg,
                                sizeof msg) == SIO_OK);
    CHECK_STR(code, "NoSuchKey");
    CHECK_STR(msg, "The specified key does not exist.");

    /* SignatureDoesNotMatch echoes the request; only Code and Message are
     * taken, never StringToSign or the key id. */
    const char *denied =
        "<Error><Code>AccessDenied</Code><Message>Access Denied</Message>"
        "<AWSAccessKeyId>AKIAIOSFODNN7EXAMPLE</AWSAccessKeyId>"
        "<StringToSign>AWS4-HMAC-SHA256\n...</StringToSign></Error>";
    CHECK(sio_s3xml_parse_error(denied, strlen(denied), code, sizeof code, msg,
                                sizeof msg) == SIO_OK);
    CHECK_STR(code, "AccessDenied");
    CHECK_STR(msg, "Access Denied");

    /* STS / IAM wrap the error in ErrorResponse, with a namespace. */
    const char *sts =
        "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
        "<Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>"
        "<Message>Couldn't retrieve verification key</Message></Error>"
        "<RequestId>r</RequestId></ErrorResponse>";
    CHECK(sio_s3xml_parse_error(sts, strlen(sts), code, sizeof code, msg,
                                sizeof msg) == SIO_OK);
    CHECK_STR(code, "InvalidIdentityToken");
    CHECK_STR(msg, "Couldn't retrieve verification key");

    /* No Message; control characters; truncation at a UTF-8 boundary. */
    const char *bare = "<Error><Code>InternalError</Code></Error>";
    CHECK(sio_s3xml_parse_error(bare, strlen(bare), code, sizeof code, msg,
                                sizeof msg) == SIO_OK);
    CHECK_STR(code, "InternalError");
    CHECK_STR(msg, "");
    const char *ctl = "<Error><Code>X</Code><Message>line1&#10;line2\tend"
                      "</Message></Error>";
    CHECK(sio_s3xml_parse_error(ctl, strlen(ctl), code, sizeof code, msg,
                                sizeof msg) == SIO_OK);
    CHECK_STR(msg, "line1?line2?end");
    const char *utf = "<Error><Code>SlowDown</Code><Message>ab\xC3\xA9\xC3\xA9"
                      "</Message></Error>";
    char small[6], tiny[5];
    CHECK(sio_s3xml_parse_error(utf, strlen(utf), tiny, sizeof tiny, small,
                                sizeof small) == SIO_OK);
    CHECK_STR(tiny, "Slow");
    CHECK_STR(small, "ab\xC3\xA9"); /* "abéé" cut to 5 bytes, not mid-é */
    CHECK(sio_s3xml_parse_error(utf, strlen(utf), NULL, 0, NULL, 0) == SIO_OK);

    /* Not error documents. */
    static const char *notErr[] = {
        "<ListBucketResult/>",
        "<Error><Message>no code</Message></Error>",
        "<Error><Code></Code></Error>",
        "<ErrorResponse><RequestId>r</RequestId></ErrorResponse>",
        "<html><body>502 Bad Gateway</body></html>",
        "502 Bad Gateway",
        "",
    };
    for (size_t i = 0; i < sizeof notErr / sizeof notErr[0]; i++) {
        strcpy(code, "junk");
        strcpy(msg, "junk");
        CHECK(sio_s3xml_parse_error(notErr[i], strlen(notErr[i]), code,
                                    sizeof code, msg, sizeof msg)
              == SIO_ERR_FORMAT);
        CHECK_STR(code, "");
        CHECK_STR(msg, "");
    }
    char *huge = malloc(SIO_S3XML_SMALL_DOC_MAX + 1);
    if (huge) {
        memset(huge, ' ', SIO_S3XML_SMALL_DOC_MAX + 1);
        CHECK(sio_s3xml_parse_error(huge, SIO_S3XML_SMALL_DOC_MAX + 1, code,
                                    sizeof code, msg, sizeof msg)
              == SIO_ERR_LIMIT);
        free(huge);
    }
}

/* AWS's documented AssumeRoleWithWebIdentity response (example values). */
#define STS_SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"
#define STS_TOKEN                                                           \
    "AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLEsessiontokenXXXXXX/"    \
    "2ZHYxIuDCQ2pXcQ="
static const char *sts_doc(const char *creds_inner, char *buf, size_t len)
{
    snprintf(buf, len,
             XMLDECL
             "<AssumeRoleWithWebIdentityResponse "
             "xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\n"
             "  <AssumeRoleWithWebIdentityResult>\n"
             "    <SubjectFromWebIdentityToken>system:serviceaccount:ml:loader"
             "</SubjectFromWebIdentityToken>\n"
             "    <Audience>sts.amazonaws.com</Audience>\n"
             "    <AssumedRoleUser>\n"
             "      <Arn>arn:aws:sts::123456789012:assumed-role/Loader/s</Arn>\n"
             "      <AssumedRoleId>AROACLKWSDQRAOEXAMPLE:s</AssumedRoleId>\n"
             "    </AssumedRoleUser>\n"
             "    <Credentials>%s</Credentials>\n"
             "    <Provider>oidc.eks.us-east-1.amazonaws.com</Provider>\n"
             "  </AssumeRoleWithWebIdentityResult>\n"
             "  <ResponseMetadata><RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE"
             "</RequestId></ResponseMetadata>\n"
             "</AssumeRoleWithWebIdentityResponse>\n",
             creds_inner);
    return buf;
}

static void test_sts(void)
{
    char buf[4096];
    sio_s3_sts_creds c;
    sio_error e;
    const char *ok = sts_doc(
        "<SessionToken>" STS_TOKEN "</SessionToken>"
        "<SecretAccessKey>" STS_SECRET "</SecretAccessKey>"
        "<Expiration>2014-10-24T23:00:23Z</Expiration>"
        "<AccessKeyId>ASgeIAIOSFODNN7EXAMPLE</AccessKeyId>", buf, sizeof buf);
    CHECK(sio_s3xml_parse_sts(ok, strlen(ok), &c, &e) == SIO_OK);
    CHECK_STR(c.access_key_id, "ASgeIAIOSFODNN7EXAMPLE");
    CHECK_STR(c.secret_access_key, STS_SECRET);
    CHECK_STR(c.session_token, STS_TOKEN);
    CHECK_STR(c.expiration, "2014-10-24T23:00:23Z");
    CHECK(c.expires_at == 1414191623);
    sio_s3_sts_creds_free(&c);
    CHECK(c.secret_access_key == NULL && c.expires_at == 0);
    sio_s3_sts_creds_free(NULL);

    /* AssumeRole has the same Credentials element. */
    const char *ar =
        "<AssumeRoleResponse><AssumeRoleResult><Credentials>"
        "<AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
        "<SessionToken>T</SessionToken>"
        "<Expiration>2024-02-29T12:34:56.789+00:00</Expiration>"
        "</Credentials></AssumeRoleResult></AssumeRoleResponse>";
    CHECK(sio_s3xml_parse_sts(ar, strlen(ar), &c, &e) == SIO_OK);
    CHECK(c.expires_at == 1709210096);
    sio_s3_sts_creds_free(&c);

    /* Missing or empty fields; messages name the field, never a value. */
    const char *nosess = sts_doc(
        "<SecretAccessKey>" STS_SECRET "</SecretAccessKey>"
        "<Expiration>2014-10-24T23:00:23Z</Expiration>"
        "<AccessKeyId>AKID</AccessKeyId>", buf, sizeof buf);
    CHECK(sio_s3xml_parse_sts(nosess, strlen(nosess), &c, &e) == SIO_ERR_FORMAT);
    CHECK(strstr(e.msg, "SessionToken") != NULL);
    CHECK(strstr(e.msg, STS_SECRET) == NULL);
    CHECK(c.secret_access_key == NULL && c.access_key_id == NULL);
    const char *badexp = sts_doc(
        "<SessionToken>" STS_TOKEN "</SessionToken>"
        "<SecretAccessKey>" STS_SECRET "</SecretAccessKey>"
        "<Expiration>tomorrow</Expiration>"
        "<AccessKeyId>AKID</AccessKeyId>", buf, sizeof buf);
    CHECK(sio_s3xml_parse_sts(badexp, strlen(badexp), &c, &e) == SIO_ERR_FORMAT);
    CHECK(strstr(e.msg, "Expiration") != NULL);
    CHECK(strstr(e.msg, STS_SECRET) == NULL && strstr(e.msg, STS_TOKEN) == NULL);
    const char *empty = sts_doc(
        "<SessionToken>" STS_TOKEN "</SessionToken>"
        "<SecretAccessKey></SecretAccessKey>"
        "<Expiration>2014-10-24T23:00:23Z</Expiration>"
        "<AccessKeyId>AKID</AccessKeyId>", buf, sizeof buf);
    CHECK(sio_s3xml_parse_sts(empty, strlen(empty), &c, &e) == SIO_ERR_FORMAT);

    /* A malformed document that carries the secret: the parser's
     * diagnostic (which can quote the document) is kept out. */
    const char *broken =
        "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>"
        "<Credentials><SecretAccessKey>" STS_SECRET "</Secret"
        "AccessKey&" STS_SECRET ";";
    CHECK(sio_s3xml_parse_sts(broken, strlen(broken), &c, &e) == SIO_ERR_FORMAT);
    CHECK(strstr(e.msg, "wJalr") == NULL);

    /* STS refused the token: SIO_ERR_AUTH with the code. */
    const char *refused =
        "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
        "<Error><Type>Sender</Type><Code>ExpiredTokenException</Code>"
        "<Message>Token expired: current date/time 1700000000 must be before "
        "the expiration date/time 1690000000</Message></Error>"
        "<RequestId>r</RequestId></ErrorResponse>";
    CHECK(sio_s3xml_parse_sts(refused, strlen(refused), &c, &e) == SIO_ERR_AUTH);
    CHECK(strstr(e.msg, "ExpiredTokenException") != NULL);
    CHECK(c.access_key_id == NULL);

    CHECK(sio_s3xml_parse_sts("<ListBucketResult/>", 19, &c, &e)
          == SIO_ERR_FORMAT);
    CHECK(sio_s3xml_parse_sts("x", 1, NULL, &e) == SIO_ERR_INVALID);
}

static void test_iso8601(void)
{
    int64_t t = 42;
    CHECK(sio_s3xml_parse_iso8601("1970-01-01T00:00:00Z", &t) == SIO_OK && t == 0);
    CHECK(sio_s3xml_parse_iso8601("1969-12-31T23:59:59Z", &t) == SIO_OK && t == -1);
    CHECK(sio_s3xml_parse_iso8601("2000-01-01T00:00:00Z", &t) == SIO_OK &&
          t == 946684800);
    CHECK(sio_s3xml_parse_iso8601("2014-10-24T23:00:23.000Z", &t) == SIO_OK &&
          t == 1414191623);
    CHECK(sio_s3xml_parse_iso8601("2014-10-25T01:00:23+02:00", &t) == SIO_OK &&
          t == 1414191623);
    CHECK(sio_s3xml_parse_iso8601("2014-10-24T22:30:23-00:30", &t) == SIO_OK &&
          t == 1414191623);
    CHECK(sio_s3xml_parse_iso8601("2024-02-29T12:34:56Z", &t) == SIO_OK &&
          t == 1709210096);
    static const char *bad[] = {
        "", "2014-10-24", "2014-10-24T23:00:23", "2014-10-24 23:00:23Z",
        "2023-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2014-13-01T00:00:00Z",
        "2014-00-01T00:00:00Z", "2014-10-32T00:00:00Z", "2014-10-24T24:00:00Z",
        "2014-10-24T23:60:00Z", "2014-10-24T23:00:23.Z", "2014-10-24T23:00:23ZZ",
        "2014-10-24T23:00:23+0200", "2014-10-24T23:00:23+24:00",
        "+014-10-24T23:00:23Z", "2014-1a-24T23:00:23Z",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(sio_s3xml_parse_iso8601(bad[i], &t) == SIO_ERR_FORMAT);
    }
    CHECK(sio_s3xml_parse_iso8601(NULL, &t) == SIO_ERR_FORMAT);
}

/* Many threads parsing at once, the first call included: libxml2's global
 * set-up must happen once (pthread_once) and parses share nothing. */
static void *parse_thread(void *arg)
{
    const char *xml = "<ListBucketResult " S3NS "><Contents><Key>a&amp;b</Key>"
                      "<Size>5</Size></Contents></ListBucketResult>";
    int *ok = arg;
    *ok = 1;
    for (int i = 0; i < 200; i++) {
        sio_s3_list_page p;
        sio_error e;
        if (parse_str(xml, &p, &e) != SIO_OK || p.n != 1 ||
            strcmp(p.keys[0], "a&b") != 0)
            *ok = 0;
        sio_s3_list_page_free(&p);
    }
    return NULL;
}

static void test_threads(void)
{
    pthread_t th[8];
    int ok[8] = {0};
    for (int i = 0; i < 8; i++)
        CHECK(pthread_create(&th[i], NULL, parse_thread, &ok[i]) == 0);
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        CHECK(ok[i] == 1);
    }
}

int main(void)
{
    test_threads(); /* first, so the first libxml2 use is concurrent */
    test_documented_v2();
    test_truncated_no_namespace();
    test_url_encoding();
    test_entities_and_unicode();
    test_sizes();
    test_structure_errors();
    test_malformed();
    test_entity_attacks();
    test_limits();
    test_error_documents();
    test_sts();
    test_iso8601();
    CHECK_MAIN_END();
}
