/*
 * tarutil.h — writing small tar fixtures with libarchive for unit tests.
 */
#ifndef SHARDCAST_TARUTIL_H
#define SHARDCAST_TARUTIL_H

#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

typedef struct tar_member {
    const char *name;
    const char *data; /* NULL: a directory */
    size_t len;       /* 0 with data != NULL: strlen(data) */
} tar_member;

/* Write members to path. filter: "none", "gzip" or "zstd". format: "pax",
 * "gnu" or "ustar". Returns 0 on success. */
static inline int write_tar(const char *path, const tar_member *m, size_t n,
                            const char *filter, const char *format)
{
    struct archive *a = archive_write_new();
    int rc = -1;
    if (strcmp(filter, "gzip") == 0)
        archive_write_add_filter_gzip(a);
    else if (strcmp(filter, "zstd") == 0)
        archive_write_add_filter_zstd(a);
    if (strcmp(format, "gnu") == 0)
        archive_write_set_format_gnutar(a);
    else if (strcmp(format, "ustar") == 0)
        archive_write_set_format_ustar(a);
    else
        archive_write_set_format_pax_restricted(a);
    if (archive_write_open_filename(a, path) != ARCHIVE_OK)
        goto out;
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *e = archive_entry_new();
        size_t len = m[i].data ? (m[i].len ? m[i].len : strlen(m[i].data)) : 0;
        archive_entry_set_pathname(e, m[i].name);
        archive_entry_set_filetype(e, m[i].data ? AE_IFREG : AE_IFDIR);
        archive_entry_set_perm(e, 0644);
        archive_entry_set_size(e, (la_int64_t)len);
        if (archive_write_header(a, e) != ARCHIVE_OK) {
            fprintf(stderr, "write_header: %s\n", archive_error_string(a));
            archive_entry_free(e);
            goto out;
        }
        if (len && archive_write_data(a, m[i].data, len) != (la_ssize_t)len) {
            archive_entry_free(e);
            goto out;
        }
        archive_entry_free(e);
    }
    rc = 0;
out:
    if (archive_write_close(a) != ARCHIVE_OK)
        rc = -1;
    archive_write_free(a);
    return rc;
}

/*
 * A random WebDataset shard of about ngroups samples: 1-3 fields of 1-3000
 * bytes, some bad (a repeated field), some directories between samples,
 * some long (pax) names; gzip when compress. rnd gives the randomness.
 */
static inline void make_random_shard(const char *path, int ngroups,
                                     int compress, uint64_t (*rnd)(void))
{
    static char payload[8192];
    static char names[600][300];
    tar_member m[600];
    size_t n = 0;
    for (size_t i = 0; i < sizeof payload; i++)
        payload[i] = (char)('a' + i % 26);
    for (int g = 0; g < ngroups && n + 5 < 600; g++) {
        int nf = 1 + (int)(rnd() % 3);
        int longname = rnd() % 7 == 0;
        int bad = rnd() % 11 == 0;
        if (rnd() % 9 == 0) {
            snprintf(names[n], 300, "dir%d", g);
            m[n].name = names[n];
            m[n].data = NULL;
            m[n++].len = 0;
        }
        for (int f = 0; f < nf + bad; f++) {
            const char *ext = f == 0 ? "jpg" : f == 1 ? "json" : "cls";
            if (f == nf) /* the repeated field */
                ext = "jpg";
            if (longname)
                snprintf(names[n], 300, "%0120d/deep/k%05d.%s", g, g, ext);
            else
                snprintf(names[n], 300, "k%05d.%s", g, ext);
            m[n].name = names[n];
            m[n].data = payload + rnd() % 100;
            m[n++].len = 1 + (size_t)(rnd() % 3000);
        }
    }
    if (write_tar(path, m, n, compress ? "gzip" : "none", "pax") != 0)
        fprintf(stderr, "cannot write %s\n", path);
}

#endif
