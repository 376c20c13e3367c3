/*
 * group.c — the WebDataset grouping rule (contract in group.h).
 */
#include "tar/group.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int skip_name(const char *name, size_t *keylen)
{
    if (!name || !*name)
        return 1;
    size_t nl = strlen(name);
    if (nl >= SIO_TARP_NAME_MAX)
        return 1;
    if (!strchr(name, '/') && nl >= 4 && name[0] == '_' && name[1] == '_' &&
        name[nl - 1] == '_' && name[nl - 2] == '_')
        return 1;
    return sio_split_key(name, keylen) != 0;
}

int sio_tar_skip_member(const sio_tar_entry *e, size_t *keylen)
{
    return !e->regular || skip_name(e->name, keylen);
}

void sio_group_limits(sio_shard_limits *lim)
{
    if (!lim->member_max)
        lim->member_max = SIO_MEMBER_MAX_DEFAULT;
    if (!lim->sample_max)
        lim->sample_max = SIO_SAMPLE_MAX_DEFAULT;
    if (!lim->fields_max)
        lim->fields_max = SIO_FIELDS_MAX_DEFAULT;
}

void sio_group_init(sio_group *g)
{
    memset(g, 0, sizeof *g);
}

void sio_group_free(sio_group *g)
{
    free(g->key);
    free(g->names);
    memset(g, 0, sizeof *g);
}

void sio_group_reset(sio_group *g)
{
    g->open = 0;
    g->keylen = 0;
    g->gxlen = 0;
    g->gxover = 0;
    g->nlen = 0;
    g->nf = 0;
    g->dlen = 0;
    g->bad = 0;
    g->reason[0] = '\0';
}

static int reserve(char **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    char *q = realloc(*p, n);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* Note ext among the open group's member extensions. */
static void gx_add(sio_group *g, const char *ext)
{
    size_t xl = strlen(ext) + 1;
    if (g->gxover || xl > sizeof g->gx - g->gxlen) {
        g->gxover = 1;
        return;
    }
    memcpy(g->gx + g->gxlen, ext, xl);
    g->gxlen += xl;
}

int sio_group_member(sio_group *g, const sio_tar_entry *e, char *ext,
                     int *first)
{
    size_t kl = 0;
    *first = 0;
    if (sio_tar_skip_member(e, &kl))
        return SIO_GROUP_SKIP;
    const char *name = e->name;
    if (g->open) {
        if (kl != g->keylen || memcmp(name, g->key, kl) != 0)
            return SIO_GROUP_NEXT;
    } else {
        if (reserve(&g->key, &g->keycap, kl + 1))
            return -1;
        memcpy(g->key, name, kl);
        g->key[kl] = '\0';
        g->keylen = kl;
        g->open = 1;
        *first = 1;
    }
    size_t nl = strlen(name); /* < SIO_TARP_NAME_MAX: not skipped */
    for (size_t i = kl + 1; i <= nl; i++)
        ext[i - kl - 1] = (char)tolower((unsigned char)name[i]);
    gx_add(g, ext);
    return SIO_GROUP_MEMBER;
}

int sio_group_field(sio_group *g, const char *ext, uint64_t size,
                    const sio_shard_limits *lim, size_t *name_off)
{
    if (g->bad)
        return 0;
    for (size_t i = 0; i < g->nlen; i += strlen(g->names + i) + 1)
        if (strcmp(g->names + i, ext) == 0) {
            snprintf(g->reason, sizeof g->reason, "repeated field %.64s",
                     ext);
            g->bad = 1;
            return 0;
        }
    if (size != SIO_GROUP_SIZE_UNKNOWN && size > lim->member_max) {
        snprintf(g->reason, sizeof g->reason,
                 "member of %llu bytes above member_max=%llu",
                 (unsigned long long)size,
                 (unsigned long long)lim->member_max);
        g->bad = 1;
        return 0;
    }
    uint64_t len = size == SIO_GROUP_SIZE_UNKNOWN ? 0 : size;
    if (g->nf >= lim->fields_max || len > lim->sample_max ||
        g->dlen > lim->sample_max - len) {
        snprintf(g->reason, sizeof g->reason,
                 "sample above sample_max=%llu bytes or fields_max=%u",
                 (unsigned long long)lim->sample_max, lim->fields_max);
        g->bad = 1;
        return 0;
    }
    size_t xl = strlen(ext) + 1;
    if (reserve(&g->names, &g->ncap, g->nlen + xl))
        return -1;
    memcpy(g->names + g->nlen, ext, xl);
    *name_off = g->nlen;
    g->nlen += xl;
    g->nf++;
    g->dlen += len;
    return 1;
}

int sio_group_grow(sio_group *g, uint64_t len, const sio_shard_limits *lim)
{
    if (len > lim->member_max || len > lim->sample_max ||
        g->dlen > lim->sample_max - len) {
        snprintf(g->reason, sizeof g->reason,
                 len > lim->member_max
                     ? "member above member_max=%llu bytes"
                     : "sample above sample_max=%llu bytes",
                 (unsigned long long)(len > lim->member_max
                                          ? lim->member_max
                                          : lim->sample_max));
        g->bad = 1;
        return -1;
    }
    g->dlen += len;
    return 0;
}

int sio_group_has_ext(const sio_group *g, const char *ext)
{
    if (g->gxover)
        return -1;
    for (size_t i = 0; i < g->gxlen; i += strlen(g->gx + i) + 1)
        if (strcmp(g->gx + i, ext) == 0)
            return 1;
    return 0;
}

int sio_group_damage_name(const char *name, int known, size_t *kl,
                          char *ext)
{
    sio_tar_entry de = {.name = name, .regular = 1};
    if (!known || sio_tar_skip_member(&de, kl))
        return -1;
    size_t nl = strlen(name);
    if (nl > SIO_TARP_DMG_NAME_MAX)
        return -1;
    for (size_t i = *kl + 1; i <= nl; i++)
        ext[i - *kl - 1] = (char)tolower((unsigned char)name[i]);
    return 0;
}

int sio_group_damage_owner(const sio_group *g, const char *name, int known,
                           const char *next, size_t nextlen, size_t *kl,
                           char *ext)
{
    *kl = 0;
    if (sio_group_damage_name(name, known, kl, ext) != 0)
        return 0;
    int has = sio_group_has_ext(g, ext);
    if (*kl == g->keylen && memcmp(name, g->key, *kl) == 0)
        return has == 0 ? 1 : 0;
    if (next && *kl == nextlen && memcmp(name, next, *kl) == 0)
        return has == 1 ? 2 : 0;
    return has == 1 ? 3 : 0;
}

int sio_group_damage_after(const sio_group *g, const char *name, int known)
{
    char ext[SIO_TARP_DMG_NAME_MAX + 1];
    size_t kl = 0;
    if (sio_group_damage_name(name, known, &kl, ext) != 0)
        return 0;
    if (kl == g->keylen && memcmp(name, g->key, kl) == 0)
        return 0;
    return sio_group_has_ext(g, ext) == 1;
}
