/*
 * fuzz_jobspec.c — libFuzzer harness for the job spec parser
 * (sc_jobspec_parse in server/settings.c), which reads the body of
 * PUT /v1/jobs/{job} from an admin client.
 *
 * Input: byte 0 chooses whether the URL supplies the job name; the rest is
 * the JSON body (not NUL-terminated). Besides memory safety it checks the
 * parser's promises: an accepted spec has a valid name (the URL's, when
 * given), a source within SC_SOURCE_MAX, values within the settings
 * table's bounds and a valid field filter; it survives a copy and compares
 * equal to it; a rejection always comes with a reason and leaves nothing
 * allocated. An accepted spec then goes through the checks a PUT makes
 * before any work (sc_jobspec_check; byte 0's bit 1 allows link-local
 * sources): a spec they pass names at most --max-job-shards shards, and a
 * refusal has a reason.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "settings.h"
#include "shardio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sc_jobspec spec, copy;
    sc_config cfg;
    uint64_t shards;
    char reason[256];
    char names[SIO_TARW_FILTER_MAX][SIO_TARW_FIELD_NAME_MAX + 1];
    size_t n = 0;

    if (size < 1)
        return 0;
    const char *url_name = (data[0] & 1) ? "job-1" : NULL;
    size_t len = size - 1;
    char *body = malloc(len ? len : 1);
    if (!body)
        return 0;
    memcpy(body, data + 1, len);
    reason[0] = '\0';
    if (sc_jobspec_parse(body, len, url_name, &spec, reason, sizeof reason) ==
        0) {
        size_t nl = strlen(spec.name);
        if (nl == 0 || nl > SC_JOB_NAME_MAX)
            abort();
        for (size_t i = 0; i < nl; i++)
            if (!isalnum((unsigned char)spec.name[i]) &&
                !strchr("._-", spec.name[i]))
                abort();
        if (url_name && strcmp(spec.name, url_name) != 0)
            abort();
        size_t sl = spec.source ? strlen(spec.source) : 0;
        if (!spec.source != !!spec.sources || (spec.source && sl == 0) ||
            sl > SC_SOURCE_MAX)
            abort();
        if (spec.shuffle_buffer < 1 || spec.interleave < 1 ||
            spec.interleave > 4096 ||
            (spec.partition != SIO_PARTITION_EVEN_DROP &&
             spec.partition != SIO_PARTITION_EVEN_PAD &&
             spec.partition != SIO_PARTITION_NONE) ||
            (spec.on_error != SIO_ON_ERROR_SKIP &&
             spec.on_error != SIO_ON_ERROR_FAIL))
            abort();
        if (spec.fields && sc_fields_split(spec.fields, names, &n) != 0)
            abort();
        if (sc_jobspec_copy(&copy, &spec) == 0) {
            if (!sc_jobspec_equal(&copy, &spec))
                abort();
            sc_jobspec_free(&copy);
        }
        /* What a PUT checks before any work: a spec that passes names at
         * most the bound; a refusal says why. */
        memset(&cfg, 0, sizeof cfg);
        cfg.max_job_sources = 1024;
        cfg.max_job_shards = 10000000;
        cfg.io.allow_link_local = (data[0] & 2) != 0;
        reason[0] = '\0';
        if (sc_jobspec_check(&spec, &cfg, &shards, reason, sizeof reason) ==
            0) {
            if (shards > cfg.max_job_shards)
                abort();
        } else if (reason[0] == '\0') {
            abort();
        }
        sc_jobspec_free(&spec);
    } else if (reason[0] == '\0' || spec.name || spec.source || spec.fields) {
        abort();
    }
    free(body);
    return 0;
}
