/*
 * test_journal.c — an epoch journal read back from the state directory is
 * not trusted: lines that do not parse, shards past the dataset, repeated
 * decisions (the first wins), overlong lines and a file longer than one
 * decision per shard; a large journal loads and answers in O(n log n).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "shardio_index.h"

static char dir[64];

static void test_forged_lines(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/forged", dir);
    char longline[3000];
    memset(longline, 'x', sizeof longline - 2);
    memcpy(longline, "SKIP 7 1 ", 9);
    longline[sizeof longline - 2] = '\n';
    longline[sizeof longline - 1] = '\0';
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs("SKIP 3 5 format bad\n", f);
    fputs("SKIP 3 9 format a second decision for 3: not taken\n", f);
    fputs("SKIP 20 0 notfound past the dataset's 20 shards\n", f);
    fputs("SKIP 4294967295 0 x\n", f);
    fputs("SKIP -1 0 x\n", f);
    fputs("garbage\n", f);
    fwrite("SKIP 2 3\0junk\n", 1, 14, f); /* a NUL byte: no decision */
    fputs(longline, f); /* an overlong line is not a decision */
    fputs("SKIP 1 2 io ok\n", f);
    fputs("SKIP 0 18446744073709551615 io the largest cut\n", f);
    fputs("SKIP 9 4 torn", f); /* no newline: torn, ignored */
    fclose(f);
    sio_journal *j = NULL;
    CHECK(sio_journal_open(path, 20, &j, NULL) == SIO_OK);
    if (!j)
        return;
    uint64_t g = 0;
    CHECK(sio_journal_cut(j, 3, &g) && g == 5);
    CHECK(sio_journal_cut(j, 1, &g) && g == 2);
    CHECK(sio_journal_cut(j, 0, &g) && g == UINT64_MAX);
    CHECK(!sio_journal_cut(j, 7, &g));
    CHECK(!sio_journal_cut(j, 2, &g));
    CHECK(!sio_journal_cut(j, 9, &g));
    CHECK(!sio_journal_cut(j, 20, &g));
    CHECK_EQ_U64(sio_journal_count(j), 3);
    /* the order of the decisions is the file's */
    uint32_t sh[8];
    uint64_t gr[8];
    CHECK_EQ_U64(sio_journal_list(j, sh, gr, 8), 3);
    CHECK(sh[0] == 3 && sh[1] == 1 && sh[2] == 0);
    /* a new decision for a shard that has one keeps the first */
    CHECK_EQ_U64(sio_journal_record(j, 3, 1, SIO_ERR_IO, "again"), 5);
    CHECK_EQ_U64(sio_journal_record(j, 5, 6, SIO_ERR_IO, "new"), 6);
    CHECK(sio_journal_cut(j, 5, &g) && g == 6);
    sio_journal_close(j);
    /* reloaded: the new decision is there, nothing else changed */
    CHECK(sio_journal_open(path, 20, &j, NULL) == SIO_OK);
    if (!j)
        return;
    CHECK_EQ_U64(sio_journal_count(j), 4);
    CHECK(sio_journal_cut(j, 5, &g) && g == 6);
    CHECK(sio_journal_cut(j, 3, &g) && g == 5);
    sio_journal_close(j);
    unlink(path);
}

/* A file longer than one decision per shard is read up to that many
 * lines; a large one (every shard, descending, each repeated) loads fast. */
static void test_long_journal(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/long", dir);
    enum { SHARDS = 200000 };
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    for (int rep = 0; rep < 3; rep++)
        for (int s = SHARDS - 1; s >= 0; s--)
            fprintf(f, "SKIP %d %d io r\n", s, rep);
    fclose(f);
    sio_journal *j = NULL;
    clock_t t0 = clock();
    CHECK(sio_journal_open(path, SHARDS, &j, NULL) == SIO_OK);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    if (!j)
        return;
    CHECK_EQ_U64(sio_journal_count(j), SHARDS);
    uint64_t g = 1;
    for (uint32_t s = 0; s < SHARDS; s += 997)
        CHECK(sio_journal_cut(j, s, &g) && g == 0);
    sio_journal_close(j);
    /* the file holds 3 decisions a shard: with a dataset of 1000 shards
     * only the first 1000 lines are read */
    CHECK(sio_journal_open(path, 1000, &j, NULL) == SIO_OK);
    if (!j)
        return;
    CHECK_EQ_U64(sio_journal_count(j), 0); /* lines name shards >= 1000 */
    sio_journal_close(j);
    fprintf(stderr, "journal of %d lines loaded in %.2f s\n", 3 * SHARDS,
            secs);
    unlink(path);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/shardcast-journal-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    test_forged_lines();
    test_long_journal();
    rmdir(dir);
    CHECK_MAIN_END();
}
