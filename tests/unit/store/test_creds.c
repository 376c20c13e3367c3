/*
 * test_creds.c — the AWS credential chain: INI parsing, environment,
 * shared files and profiles, and the web identity (STS), container and
 * IMDSv2 providers against fake endpoints on 127.0.0.1 (testhttpd.h),
 * including the refresh of temporary credentials before they expire.
 * Every test clears the AWS_* environment and points HOME at an empty
 * directory, so nothing leaves the machine.
 */
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>

#include "check.h"
#include "store/creds.h"
#include "testhttpd.h"

static const char *const aws_vars[] = {
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
    "AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_EC2_METADATA_DISABLED"};

static char tmpdir[256];

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof aws_vars / sizeof aws_vars[0]; i++)
        unsetenv(aws_vars[i]);
    setenv("HOME", tmpdir, 1);
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* The fake endpoints ------------------------------------------------------ */

typedef struct fake {
    atomic_int container_calls, sts_calls, imds_calls;
    int expire_in_s;      /* container/STS credentials live this long */
    int sts_fail;         /* STS answers an AccessDenied error */
    int bad_auth;         /* the container rejected the token */
} fake;

static void iso(time_t t, char *buf, size_t len)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int handler(void *ud, int fd, const thttp_req *r)
{
    fake *fk = ud;
    char body[4096], exp[64], hv[512];
    if (strcmp(r->path, "/creds") == 0) {
        int n = atomic_fetch_add(&fk->container_calls, 1) + 1;
        if (thttp_header(r, "Authorization", hv, sizeof hv) != 0 ||
            strcmp(hv, "pod-token-123") != 0) {
            fk->bad_auth = 1;
            return thttp_respond(fd, 401, NULL, "{}", 2) == 0;
        }
        iso(time(NULL) + fk->expire_in_s, exp, sizeof exp);
        snprintf(body, sizeof body,
                 "{\"AccessKeyId\":\"AKIDC%d\",\"SecretAccessKey\":\"sec%d\","
                 "\"Token\":\"tok%d\",\"Expiration\":\"%s\"}", n, n, n, exp);
        return thttp_respond(fd, 200, NULL, body, strlen(body)) == 0;
    }
    if (strcmp(r->path, "/sts/") == 0) {
        int n = atomic_fetch_add(&fk->sts_calls, 1) + 1;
        if (strcmp(r->method, "POST") != 0 ||
            !strstr(r->body, "Action=AssumeRoleWithWebIdentity") ||
            !strstr(r->body, "WebIdentityToken=jwt.token.value") ||
            !strstr(r->body, "RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Ftest") ||
            !strstr(r->body, "RoleSessionName=sess1"))
            return thttp_respond(fd, 400, NULL, "", 0) == 0;
        if (fk->sts_fail) {
            const char *x = "<ErrorResponse><Error><Type>Sender</Type><Code>"
                            "AccessDenied</Code><Message>Not authorized"
                            "</Message></Error></ErrorResponse>";
            return thttp_respond(fd, 403, NULL, x, strlen(x)) == 0;
        }
        iso(time(NULL) + fk->expire_in_s, exp, sizeof exp);
        snprintf(body, sizeof body,
                 "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts."
                 "amazonaws.com/doc/2011-06-15/\"><AssumeRoleWithWebIdentity"
                 "Result><Credentials><AccessKeyId>AKIDS%d</AccessKeyId>"
                 "<SecretAccessKey>ssec%d</SecretAccessKey><SessionToken>"
                 "stok%d</SessionToken><Expiration>%s</Expiration>"
                 "</Credentials></AssumeRoleWithWebIdentityResult>"
                 "</AssumeRoleWithWebIdentityResponse>", n, n, n, exp);
        return thttp_respond(fd, 200, NULL, body, strlen(body)) == 0;
    }
    if (strncmp(r->path, "/latest/", 8) == 0) {
        atomic_fetch_add(&fk->imds_calls, 1);
        if (strcmp(r->path, "/latest/api/token") == 0) {
            if (strcmp(r->method, "PUT") != 0 ||
                thttp_header(r, "X-aws-ec2-metadata-token-ttl-seconds", hv,
                             sizeof hv) != 0)
                return thttp_respond(fd, 400, NULL, "", 0) == 0;
            return thttp_respond(fd, 200, NULL, "imds-tok", 8) == 0;
        }
        if (thttp_header(r, "X-aws-ec2-metadata-token", hv, sizeof hv) != 0 ||
            strcmp(hv, "imds-tok") != 0)
            return thttp_respond(fd, 401, NULL, "", 0) == 0;
        if (strcmp(r->path, "/latest/meta-data/iam/security-credentials/") == 0)
            return thttp_respond(fd, 200, NULL, "node-role\n", 10) == 0;
        if (strcmp(r->path,
                   "/latest/meta-data/iam/security-credentials/node-role") == 0) {
            iso(time(NULL) + 6 * 3600, exp, sizeof exp);
            snprintf(body, sizeof body,
                     "{\"Code\":\"Success\",\"Type\":\"AWS-HMAC\","
                     "\"AccessKeyId\":\"AKIDI\",\"SecretAccessKey\":\"isec\","
                     "\"Token\":\"itok\",\"Expiration\":\"%s\"}", exp);
            return thttp_respond(fd, 200, NULL, body, strlen(body)) == 0;
        }
    }
    return thttp_respond(fd, 404, NULL, "", 0) == 0;
}

/* Helpers ------------------------------------------------------------------ */

static sio_creds *provider(sio_fetch *f, const char *profile, uint32_t before,
                           const char *sts)
{
    sio_creds_config cc;
    sio_creds *c = NULL;
    sio_error e;
    memset(&cc, 0, sizeof cc);
    cc.fetch = f;
    cc.profile = profile;
    cc.refresh_before_s = before;
    cc.sts_endpoint = sts;
    CHECK(sio_creds_create(&cc, &c, &e) == SIO_OK);
    return c;
}

static sio_code get(sio_creds *c, sio_creds_value *v, sio_error *e)
{
    return sio_creds_get(c, 1, v, e);
}

static void test_ini(void)
{
    const char *t = "# comment\n"
                    "[default]\n"
                    "aws_access_key_id = AK1\n"
                    "  nested = ignored\n"
                    "Aws_Secret_Access_Key=SK1  \r\n"
                    "; another comment\n"
                    "[profile  dev ]\n"
                    "region = eu-west-1\n"
                    "s3 =\n"
                    "    addressing_style = path\n"
                    "region = eu-west-2\n"
                    "[other]\n"
                    "empty =\n";
    char out[64];
    size_t n = strlen(t);
    CHECK(sio_creds_ini_get(t, n, "default", "aws_access_key_id", out,
                            sizeof out) == SIO_OK);
    CHECK_STR(out, "AK1");
    CHECK(sio_creds_ini_get(t, n, "default", "aws_secret_access_key", out,
                            sizeof out) == SIO_OK);
    CHECK_STR(out, "SK1");
    CHECK(sio_creds_ini_get(t, n, "default", "nested", out, sizeof out) ==
          SIO_ERR_NOTFOUND);
    CHECK(sio_creds_ini_get(t, n, "profile dev", "region", out, sizeof out) ==
          SIO_OK);
    CHECK_STR(out, "eu-west-2"); /* the last one wins */
    CHECK(sio_creds_ini_get(t, n, "profile dev", "addressing_style", out,
                            sizeof out) == SIO_ERR_NOTFOUND);
    CHECK(sio_creds_ini_get(t, n, "other", "empty", out, sizeof out) == SIO_OK);
    CHECK_STR(out, "");
    CHECK(sio_creds_ini_get(t, n, "default", "aws_access_key_id", out, 3) ==
          SIO_ERR_LIMIT);
    CHECK(sio_creds_ini_has_section(t, n, "default"));
    CHECK(sio_creds_ini_has_section(t, n, "profile dev"));
    CHECK(!sio_creds_ini_has_section(t, n, "dev"));
    CHECK(!sio_creds_ini_has_section(t, n, "profile other"));
    {
        char *big = malloc(SIO_CREDS_LINE_MAX + 64);
        memcpy(big, "[default]\nk = ", 14);
        memset(big + 14, 'x', SIO_CREDS_LINE_MAX + 10);
        big[SIO_CREDS_LINE_MAX + 24] = '\0';
        CHECK(sio_creds_ini_get(big, strlen(big), "default", "k", out,
                                sizeof out) == SIO_ERR_LIMIT);
        free(big);
    }
}

static void test_env_and_files(sio_fetch *f)
{
    char cpath[512], fpath[512];
    sio_creds_value v;
    sio_error e;
    sio_creds *c;

    clear_env();
    setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "SKENV", 1);
    setenv("AWS_SESSION_TOKEN", "TKENV", 1);
    c = provider(f, NULL, 0, NULL);
    CHECK(get(c, &v, &e) == SIO_OK);
    CHECK_STR(v.access_key, "AKENV");
    CHECK_STR(v.secret_key, "SKENV");
    CHECK_STR(v.session_token, "TKENV");
    CHECK(v.expires_at == 0);
    CHECK_STR(sio_creds_source(c), "env");
    sio_creds_value_free(&v);
    sio_creds_destroy(c);

    /* shared files in ~/.aws */
    clear_env();
    snprintf(cpath, sizeof cpath, "%s/.aws", tmpdir);
    mkdir(cpath, 0700);
    snprintf(cpath, sizeof cpath, "%s/.aws/credentials", tmpdir);
    snprintf(fpath, sizeof fpath, "%s/.aws/config", tmpdir);
    write_file(cpath, "[default]\naws_access_key_id=AKDEF\n"
                      "aws_secret_access_key=SKDEF\n"
                      "[prod]\naws_access_key_id = AKPROD\n"
                      "aws_secret_access_key = SKPROD\n"
                      "aws_session_token = TKPROD\n");
    write_file(fpath, "[default]\nregion=us-east-1\n"
                      "[profile dev]\naws_access_key_id=AKDEV\n"
                      "aws_secret_access_key=SKDEV\n");
    c = provider(f, NULL, 0, NULL);
    CHECK(get(c, &v, &e) == SIO_OK);
    CHECK_STR(v.access_key, "AKDEF");
    CHECK(v.session_token == NULL);
    CHECK_STR(sio_creds_source(c), "profile");
    sio_creds_value_free(&v);
    sio_creds_destroy(c);

    setenv("AWS_PROFILE", "prod", 1);
    c = provider(f, NULL, 0, NULL);
    CHECK(get(c, &v, &e) == SIO_OK);
    CHECK_STR(v.access_key, "AKPROD");
    CHECK_STR(v.session_token, "TKPROD");
    sio_creds_value_free(&v);
    sio_creds_destroy(c);

    /* a profile only in the config file, "[profile dev]" */
    c = provider(f, "dev", 0, NULL);
    CHECK(get(c, &v, &e) == SIO_OK);
    CHECK_STR(v.access_key, "AKDEV");
    sio_creds_value_free(&v);
    sio_creds_destroy(c);

    /* file locations from the environment; a missing named profile */
    setenv("AWS_SHARED_CREDENTIALS_FILE", fpath, 1); /* no [nosuch] */
    setenv("AWS_CONFIG_FILE", cpath, 1);
    c = provider(f, "nosuch", 0, NULL);
    CHECK(get(c, &v, &e) == SIO_ERR_AUTH);
    CHECK(strstr(e.msg, "profile nosuch not found") != NULL);
    sio_creds_destroy(c);

    /* nothing anywhere (IMDS disabled): AUTH, saying what was tried */
    clear_env();
    unlink(cpath);
    unlink(fpath);
    c = provider(f, NULL, 0, NULL);
    CHECK(get(c, &v, &e) == SIO_ERR_AUTH);
    CHECK(strstr(e.msg, "IMDS disabled") != NULL);
    CHECK_STR(sio_creds_source(c), "");
    /* the engine thread never loads: */
    CHECK(sio_creds_get(c, 0, &v, &e) == SIO_ERR_AUTH);
    sio_creds_destroy(c);
}

static void test_container(sio_fetch *f, thttp *srv, fake *fk)
{
    char url[128], tokpath[512];
    sio_creds_value v;
    sio_error e;
    sio_creds *c;

    clear_env();
    snprintf(url, sizeof url, "http://127.0.0.1:%d/creds", srv->port);
    snprintf(tokpath, sizeof tokpath, "%s/pod-token", tmpdir);
    write_file(tokpath, "pod-token-123\n");
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
    setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tokpath, 1);
    /* They expire in 3 s; refreshed 2 s before: after ~1 s. */
    fk->expire_in_s = 3;
    c = provider(f, NULL, 2, NULL);
    CHECK(get(c, &v, &e) == SIO_OK);
    CHECK_STR(v.access_key, "AKIDC1");
    CHECK_STR(v.session_token, "tok1");
    CHECK(v.expires_at > time(NULL));
    CHECK_STR(sio_creds_source(c), "container");
    sio_creds_value_free(&v);
    /* Expiry-driven refresh by the background thread; the non-blocking
     * snapshot (what the engine thread uses) sees it. */
    int refreshed = 0;
    for (int i = 0; i < 60 && !refreshed; i++) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        CHECK(sio_creds_get(c, 0, &v, &e) == SIO_OK);
        refreshed = strcmp(v.access_key, "AKIDC1") != 0;
        sio_creds_value_free(&v);
    }
    CHECK(refreshed);
    CHECK(atomic_load(&fk->container_calls) >= 2);
    CHECK(!fk->bad_auth);
    sio_creds_destroy(c);

    /* A wrong token: AUTH, and the message does not quote it. */
    write_file(tokpath, "wrong-token-456");
    c = provider(f, NULL, 0, NULL);
    CHECK(get(c, &v, &e) == SIO_ERR_AUTH);
    CHECK(strstr(e.msg, "status=401") != NULL);
    CHECK(strstr(e.msg, "wrong-token-456") == NULL);
    sio_creds_destroy(c);

    /* plain http to a non-local host is refused before any request */
    setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://192.0.2.1/creds", 1);
    c = provider(f, NULL, 0, NULL);
    CHECK(get(c, &v, &e) == SIO_ERR_AUTH);
    CHECK(strstr(e.msg, "loopback") != NULL);
    sio_creds_destroy(c);
}

static void test_web_identity(sio_fetch *f, thttp *srv, fake *fk)
{
    char sts[128], tokpath[512];
    sio_creds_value v;
    sio_error e;
    sio_creds *c;

    clear_env();
    snprintf(sts, sizeof sts, "http://127.0.0.1:%d/sts", srv->port);
    snprintf(tokpath, sizeof tokpath, "%s/web-token", tmpdir);
    write_file(tokpath, "jwt.token.value\n");
    setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tokpath, 1);
    setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/test", 1);
    setenv("AWS_ROLE_SESSION_NAME", "sess1", 1);
    setenv("AWS_ENDPOINT_URL_STS", sts, 1);
    fk->expire_in_s = 3600;
    c = provider(f, NULL, 0, NULL);
    CHECK(get(c, &v, &e) == SIO_OK);
    CHECK_STR(v.access_key, "AKIDS1");
    CHECK_STR(v.secret_key, "ssec1");
    CHECK_STR(v.session_token, "stok1");
    CHECK_STR(sio_creds_source(c), "web-identity");
    sio_creds_value_free(&v);
    sio_creds_destroy(c);

    /* STS refuses: AUTH with its code, never the token */
    fk->sts_fail = 1;
    c = provider(f, NULL, 0, NULL);
    CHECK(get(c, &v, &e) == SIO_ERR_AUTH);
    CHECK(strstr(e.msg, "AccessDenied") != NULL);
    CHECK(strstr(e.msg, "jwt.token.value") == NULL);
    sio_creds_destroy(c);
    fk->sts_fail = 0;

    /* the same through a profile in the config file, endpoint in config */
    clear_env();
    char cfgpath[512], text[1024];
    snprintf(cfgpath, sizeof cfgpath, "%s/aws-config", tmpdir);
    snprintf(text, sizeof text,
             "[profile irsa]\nrole_arn = arn:aws:iam::123456789012:role/test\n"
             "web_identity_token_file = %s\nrole_session_name = sess1\n",
             tokpath);
    write_file(cfgpath, text);
    setenv("AWS_CONFIG_FILE", cfgpath, 1);
    snprintf(sts, sizeof sts, "http://127.0.0.1:%d/sts/", srv->port);
    c = provider(f, "irsa", 0, sts);
    CHECK(get(c, &v, &e) == SIO_OK);
    CHECK(v.access_key && strncmp(v.access_key, "AKIDS", 5) == 0);
    sio_creds_value_free(&v);
    sio_creds_destroy(c);
}

static void test_imds(sio_fetch *f, thttp *srv, fake *fk)
{
    char ep[128];
    sio_creds_value v;
    sio_error e;
    sio_creds *c;

    clear_env();
    unsetenv("AWS_EC2_METADATA_DISABLED");
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", srv->port);
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", ep, 1);
    c = provider(f, NULL, 0, NULL);
    CHECK(get(c, &v, &e) == SIO_OK);
    CHECK_STR(v.access_key, "AKIDI");
    CHECK_STR(v.secret_key, "isec");
    CHECK_STR(v.session_token, "itok");
    CHECK_STR(sio_creds_source(c), "imds");
    CHECK_EQ_U64(atomic_load(&fk->imds_calls), 3);
    sio_creds_value_free(&v);
    sio_creds_destroy(c);

    /* nothing listening: a quick AUTH, not a stall */
    setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1", 1);
    time_t t0 = time(NULL);
    c = provider(f, NULL, 0, NULL);
    CHECK(get(c, &v, &e) == SIO_ERR_AUTH);
    CHECK(time(NULL) - t0 < 10);
    sio_creds_destroy(c);
}

int main(void)
{
    sio_fetch *f = NULL;
    sio_fetch_setup fc;
    sio_error e;
    thttp srv;
    fake fk;

    snprintf(tmpdir, sizeof tmpdir, "/tmp/sio-creds-XXXXXX");
    CHECK(mkdtemp(tmpdir) != NULL);
    memset(&fk, 0, sizeof fk);
    memset(&fc, 0, sizeof fc);
    fc.fetch.retry_base_ms = 10;
    fc.fetch.retry_max_ms = 50;
    CHECK(sio_fetch_create(&fc, &f, &e) == SIO_OK);
    /* As on an io's engine: the s3 backend's reading of error bodies. */
    sio_fetch_set_classifier(f, sio_s3_classify);
    CHECK(thttp_start(&srv, handler, &fk) == 0);

    test_ini();
    test_env_and_files(f);
    test_container(f, &srv, &fk);
    test_web_identity(f, &srv, &fk);
    test_imds(f, &srv, &fk);

    thttp_stop(&srv);
    sio_fetch_destroy(f);
    {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        CHECK(system(cmd) == 0);
    }
    CHECK_MAIN_END();
}
