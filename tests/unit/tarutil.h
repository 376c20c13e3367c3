/*
 * tarutil.h — writing small tar fixtures with libarchive for unit tests.
 */
#ifndef SHARDCAST_TARUTIL_H
#define SHARDCAST_TARUTIL_H

#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
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

#endif
