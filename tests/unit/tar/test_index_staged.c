/*
 * test_index_staged.c — indexing a shard's staged bytes
 * (sio_index_build_staged): staged whole, the index is complete and the
 * same as the shard's own; staged short because the fetch failed (cut_at:
 * here at a header boundary, where the bytes alone look like a whole
 * shard that just lacks its end blocks), the groups before the cut are
 * known, the entry is not complete, and the build fails as a read of the
 * shard cut there fails; a compressed shard's decompressed bytes give the
 * shard's own stream-only index.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "samplesum.h"
#include "shardio.h"
#include "shardio_index.h"
#include "tarutil.h"

static uint64_t rnd_state = 0x1234567887654321ull;
static uint64_t rnd(void)
{
    return xorshift_next(&rnd_state);
}

static sio_index_entry *fresh(sio_index **ix, sio_io *io, const char *url)
{
    sio_index_config icfg = {0};
    sio_index_close(*ix);
    CHECK(sio_index_open(&icfg, ix, NULL) == SIO_OK);
    return sio_index_get(*ix, io, url, UINT64_MAX);
}

static int same_groups(sio_index_entry *a, sio_index_entry *b, uint64_t n)
{
    for (uint64_t g = 0; g < n; g++) {
        sio_index_group x, y;
        if (!sio_index_group_get(a, g, &x) || !sio_index_group_get(b, g, &y) ||
            memcmp(&x, &y, sizeof x) != 0)
            return 0;
    }
    return 1;
}

int main(void)
{
    char dir[] = "/tmp/shardcast-staged-XXXXXX";
    char tar[600], gz[700], cmd[1600];
    CHECK(mkdtemp(dir) != NULL);
    sio_io *io = NULL;
    sio_index *ix = NULL, *ref = NULL;
    sio_index_config icfg = {0};
    CHECK(sio_io_create(NULL, &io, NULL) == SIO_OK);
    CHECK(sio_index_open(&icfg, &ref, NULL) == SIO_OK);
    for (int round = 0; round < 12; round++) {
        snprintf(tar, sizeof tar, "%s/s%02d.tar", dir, round);
        make_random_shard(tar, 20 + (int)(rnd() % 60), 0, rnd);
        /* The shard's own index. */
        sio_index_entry *own = sio_index_get(ref, io, tar, UINT64_MAX);
        sio_error e;
        CHECK(sio_index_build(io, tar, 0, NULL, own, &e) == SIO_OK);
        sio_index_info oi;
        sio_index_get_info(own, &oi);
        CHECK(oi.complete && oi.known > 2);

        /* Staged whole: the same index. */
        int fd = open(tar, O_RDONLY);
        CHECK(fd >= 0);
        uint64_t reached = 0;
        sio_index_entry *st = fresh(&ix, io, tar);
        CHECK(sio_index_build_staged(io, tar, 0, NULL, st, fd, 0, UINT64_MAX,
                                     NULL, &reached, &e) == SIO_OK);
        sio_index_info si;
        sio_index_get_info(st, &si);
        CHECK(si.complete && si.known == oi.known && !si.stream_only);
        CHECK(same_groups(own, st, oi.known));

        /* The fetch failed at a group's first header: the bytes before it
         * alone would read as a shard without its end blocks. */
        uint64_t k = 1 + rnd() % (oi.known - 1);
        sio_index_group gk;
        CHECK(sio_index_group_get(own, k, &gk));
        char part[700];
        snprintf(part, sizeof part, "%s.part", tar);
        snprintf(cmd, sizeof cmd, "head -c %llu '%s' > '%s'",
                 (unsigned long long)gk.offset, tar, part);
        CHECK(system(cmd) == 0);
        int pfd = open(part, O_RDONLY);
        CHECK(pfd >= 0);
        st = fresh(&ix, io, tar);
        sio_code rc = sio_index_build_staged(io, tar, 0, NULL, st, pfd, 0,
                                             gk.offset, NULL, &reached, &e);
        sio_index_get_info(st, &si);
        CHECK(rc != SIO_OK);
        CHECK(!si.complete);
        CHECK(reached <= k && si.known <= k);
        CHECK(same_groups(own, st, si.known));
        close(pfd);
        unlink(part);
        close(fd);

        /* Compressed: its decompressed bytes give its own (stream-only)
         * index. */
        snprintf(gz, sizeof gz, "%s.gz", tar);
        snprintf(cmd, sizeof cmd, "gzip -c '%s' > '%s'", tar, gz);
        CHECK(system(cmd) == 0);
        sio_index_entry *gown = sio_index_get(ref, io, gz, UINT64_MAX);
        CHECK(sio_index_build(io, gz, 0, NULL, gown, &e) == SIO_OK);
        sio_index_info gi;
        sio_index_get_info(gown, &gi);
        CHECK(gi.complete && gi.stream_only && gi.known == oi.known);
        fd = open(tar, O_RDONLY); /* the decompressed stream */
        st = fresh(&ix, io, gz);
        CHECK(sio_index_build_staged(io, gz, 0, NULL, st, fd, 1, UINT64_MAX,
                                     NULL, &reached, &e) == SIO_OK);
        sio_index_get_info(st, &si);
        CHECK(si.complete && si.stream_only && si.known == gi.known);
        CHECK(same_groups(gown, st, gi.known));
        close(fd);
    }
    sio_index_close(ix);
    sio_index_close(ref);
    sio_io_destroy(io);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    CHECK_MAIN_END();
}
