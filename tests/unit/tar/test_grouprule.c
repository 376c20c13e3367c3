/*
 * test_grouprule.c — the WebDataset grouping rule on its own
 * (shardio/tar/group.c), the one copy the shard reader and the plan's
 * reader follow: which members are skipped, which make one sample, when
 * a sample is bad, and whose member a damaged header was.
 */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "shardio.h"
#include "tar/group.h"

static sio_shard_limits lim;

/* Feed member `name` (size bytes) to g: what the rule said, and with a
 * member, whether its data is kept (*kept). */
static int member(sio_group *g, const char *name, uint64_t size, int *kept)
{
    char ext[SIO_GROUP_EXT_MAX];
    sio_tar_entry e = {.name = name, .size = size, .regular = 1};
    int first = 0;
    size_t off = 0;
    int what = sio_group_member(g, &e, ext, &first);
    *kept = -2;
    if (what == SIO_GROUP_MEMBER)
        *kept = sio_group_field(g, ext, size, &lim, &off);
    return what;
}

static void test_skip(void)
{
    sio_group g;
    int kept;
    sio_group_init(&g);
    CHECK(member(&g, "noext", 1, &kept) == SIO_GROUP_SKIP);
    CHECK(member(&g, ".hidden", 1, &kept) == SIO_GROUP_SKIP);
    CHECK(member(&g, "dir/.x", 1, &kept) == SIO_GROUP_SKIP);
    CHECK(member(&g, "__meta__", 1, &kept) == SIO_GROUP_SKIP);
    CHECK(!g.open);
    /* "__*__" only at the top level; a key below a folder is a key. */
    CHECK(member(&g, "d/__k__.txt", 1, &kept) == SIO_GROUP_MEMBER);
    CHECK(g.open);
    CHECK_STR(g.key, "d/__k__");
    sio_tar_entry dir = {.name = "d/x.txt", .size = 0, .regular = 0};
    char ext[SIO_GROUP_EXT_MAX];
    int first;
    CHECK(sio_group_member(&g, &dir, ext, &first) == SIO_GROUP_SKIP);
    /* A name of SIO_TARP_NAME_MAX bytes or more is skipped. */
    static char lng[SIO_TARP_NAME_MAX + 8];
    memset(lng, 'a', sizeof lng - 1);
    lng[sizeof lng - 1] = '\0';
    lng[10] = '.';
    CHECK(member(&g, lng, 1, &kept) == SIO_GROUP_SKIP);
    sio_group_free(&g);
}

static void test_groups(void)
{
    sio_group g;
    int kept;
    sio_group_init(&g);
    CHECK(member(&g, "a/000.JPG", 10, &kept) == SIO_GROUP_MEMBER);
    CHECK(kept == 1);
    CHECK(member(&g, "a/000.cls", 2, &kept) == SIO_GROUP_MEMBER);
    CHECK(kept == 1);
    /* Multi-dot extensions: the key ends at the base name's first dot. */
    CHECK(member(&g, "a/000.seg.png", 5, &kept) == SIO_GROUP_MEMBER);
    CHECK_EQ_U64(g.nf, 3);
    CHECK_EQ_U64(g.dlen, 17);
    CHECK_STR(g.names, "jpg"); /* lower case */
    CHECK_STR(g.names + 4, "cls");
    CHECK_STR(g.names + 8, "seg.png");
    CHECK(!g.bad);
    /* Another key: the group ends before it, nothing is taken. */
    CHECK(member(&g, "a/001.jpg", 1, &kept) == SIO_GROUP_NEXT);
    CHECK_EQ_U64(g.nf, 3);
    CHECK(sio_group_has_ext(&g, "seg.png") == 1);
    CHECK(sio_group_has_ext(&g, "png") == 0);
    sio_group_reset(&g);
    CHECK(member(&g, "a/001.jpg", 1, &kept) == SIO_GROUP_MEMBER);
    CHECK_STR(g.key, "a/001");
    CHECK_EQ_U64(g.nf, 1);
    sio_group_free(&g);
}

static void test_bad(void)
{
    sio_group g;
    int kept;
    sio_group_init(&g);
    /* A repeated extension, whatever its case. */
    CHECK(member(&g, "k.txt", 1, &kept) == SIO_GROUP_MEMBER && kept == 1);
    CHECK(member(&g, "k.TXT", 1, &kept) == SIO_GROUP_MEMBER && kept == 0);
    CHECK(g.bad);
    CHECK(strstr(g.reason, "repeated field txt") != NULL);
    /* Once bad, nothing more is kept, but every member still counts for
     * the extensions a damaged header is judged by. */
    CHECK(member(&g, "k.cls", 1, &kept) == SIO_GROUP_MEMBER && kept == 0);
    CHECK(sio_group_has_ext(&g, "cls") == 1);
    sio_group_reset(&g);
    CHECK(!g.bad);
    /* member_max, sample_max, fields_max. */
    sio_shard_limits keep = lim;
    lim.member_max = 100;
    lim.sample_max = 150;
    lim.fields_max = 3;
    CHECK(member(&g, "m.a", 101, &kept) == SIO_GROUP_MEMBER && kept == 0);
    CHECK(strstr(g.reason, "member_max=100") != NULL);
    sio_group_reset(&g);
    CHECK(member(&g, "m.a", 100, &kept) == SIO_GROUP_MEMBER && kept == 1);
    CHECK(member(&g, "m.b", 50, &kept) == SIO_GROUP_MEMBER && kept == 1);
    CHECK(member(&g, "m.c", 1, &kept) == SIO_GROUP_MEMBER && kept == 0);
    CHECK(strstr(g.reason, "sample_max=150") != NULL);
    sio_group_reset(&g);
    CHECK(member(&g, "m.a", 0, &kept) == SIO_GROUP_MEMBER && kept == 1);
    CHECK(member(&g, "m.b", 0, &kept) == SIO_GROUP_MEMBER && kept == 1);
    CHECK(member(&g, "m.c", 0, &kept) == SIO_GROUP_MEMBER && kept == 1);
    CHECK(member(&g, "m.d", 0, &kept) == SIO_GROUP_MEMBER && kept == 0);
    CHECK(strstr(g.reason, "fields_max=3") != NULL);
    /* A size known only once read (a zip entry with a data descriptor). */
    sio_group_reset(&g);
    char ext[SIO_GROUP_EXT_MAX];
    int first;
    size_t off;
    sio_tar_entry e = {.name = "z.bin", .size = 0, .regular = 1};
    CHECK(sio_group_member(&g, &e, ext, &first) == SIO_GROUP_MEMBER);
    CHECK(first);
    CHECK(sio_group_field(&g, ext, SIO_GROUP_SIZE_UNKNOWN, &lim, &off) == 1);
    CHECK(sio_group_grow(&g, 120, &lim) == -1);
    CHECK(g.bad);
    CHECK(strstr(g.reason, "member_max=100") != NULL);
    sio_group_reset(&g);
    CHECK(sio_group_member(&g, &e, ext, &first) == SIO_GROUP_MEMBER);
    CHECK(sio_group_field(&g, ext, SIO_GROUP_SIZE_UNKNOWN, &lim, &off) == 1);
    CHECK(sio_group_grow(&g, 90, &lim) == 0);
    CHECK_EQ_U64(g.dlen, 90);
    e.name = "z.cls";
    CHECK(sio_group_member(&g, &e, ext, &first) == SIO_GROUP_MEMBER);
    CHECK(!first);
    CHECK(sio_group_field(&g, ext, 61, &lim, &off) == 0);
    CHECK(strstr(g.reason, "sample_max=150") != NULL);
    lim = keep;
    sio_group_free(&g);
}

static void test_damage(void)
{
    sio_group g;
    int kept;
    size_t kl;
    char ext[SIO_TARP_DMG_NAME_MAX + 1];
    sio_group_init(&g);
    CHECK(member(&g, "s1.jpg", 1, &kept) == SIO_GROUP_MEMBER);
    /* Not believed without `known`, or as no member's name. */
    CHECK(sio_group_damage_name("s1.cls", 0, &kl, ext) == -1);
    CHECK(sio_group_damage_name("noext", 1, &kl, ext) == -1);
    CHECK(sio_group_damage_name("s1.CLS", 1, &kl, ext) == 0);
    CHECK_EQ_U64(kl, 2);
    CHECK_STR(ext, "cls");
    /* The open group's: it has no .cls yet. */
    CHECK(sio_group_damage_owner(&g, "s1.cls", 1, "s2", 2, &kl, ext) == 1);
    CHECK_STR(ext, "cls");
    /* Its key but an extension it has: unknown. */
    CHECK(sio_group_damage_owner(&g, "s1.jpg", 1, "s2", 2, &kl, ext) == 0);
    /* The next group's: the open one already has that extension. */
    CHECK(sio_group_damage_owner(&g, "s2.jpg", 1, "s2", 2, &kl, ext) == 2);
    CHECK(sio_group_damage_owner(&g, "s2.cls", 1, "s2", 2, &kl, ext) == 0);
    /* Neither's: a sample of its own, of one member. */
    CHECK(sio_group_damage_owner(&g, "s9.jpg", 1, "s2", 2, &kl, ext) == 3);
    CHECK_EQ_U64(kl, 2);
    CHECK(sio_group_damage_owner(&g, "s9.cls", 1, "s2", 2, &kl, ext) == 0);
    /* At the archive's end. */
    CHECK(sio_group_damage_owner(&g, "s9.jpg", 1, NULL, 0, &kl, ext) == 3);
    CHECK(sio_group_damage_owner(&g, "s1.cls", 1, NULL, 0, &kl, ext) == 1);
    CHECK(sio_group_damage_owner(&g, "s1.cls", 0, NULL, 0, &kl, ext) == 0);
    /* After the indexed end: the next group's first member. */
    CHECK(sio_group_damage_after(&g, "s2.jpg", 1) == 1);
    CHECK(sio_group_damage_after(&g, "s2.cls", 1) == 0);
    CHECK(sio_group_damage_after(&g, "s1.jpg", 1) == 0);
    CHECK(sio_group_damage_after(&g, "s2.jpg", 0) == 0);
    sio_group_free(&g);
}

/* More extensions than the group notes: "unknown", so a damaged header
 * next to such a group is never believed. */
static void test_many_members(void)
{
    sio_group g;
    int kept;
    size_t kl;
    char ext[SIO_TARP_DMG_NAME_MAX + 1];
    sio_group_init(&g);
    char name[64];
    for (int i = 0; i < 400; i++) {
        snprintf(name, sizeof name, "k.f%04d", i);
        CHECK(member(&g, name, 0, &kept) == SIO_GROUP_MEMBER);
    }
    CHECK(g.gxover);
    CHECK(sio_group_has_ext(&g, "f0001") == -1);
    CHECK(sio_group_damage_owner(&g, "k2.f0001", 1, "k2", 2, &kl, ext) == 0);
    CHECK(sio_group_damage_after(&g, "k2.f0001", 1) == 0);
    sio_group_reset(&g);
    CHECK(!g.gxover);
    sio_group_free(&g);
}

int main(void)
{
    sio_group_limits(&lim);
    CHECK_EQ_U64(lim.member_max, SIO_MEMBER_MAX_DEFAULT);
    CHECK_EQ_U64(lim.sample_max, SIO_SAMPLE_MAX_DEFAULT);
    CHECK_EQ_U64(lim.fields_max, SIO_FIELDS_MAX_DEFAULT);
    test_skip();
    test_groups();
    test_bad();
    test_damage();
    test_many_members();
    CHECK_MAIN_END();
}
