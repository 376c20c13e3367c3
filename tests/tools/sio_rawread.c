/*
 * sio_rawread.c — read tar shards with libarchive and discard the data:
 * the raw decoding speed the engine benchmark compares against.
 *
 *   sio_rawread FILE...
 *
 * Prints one JSON object: members, payload bytes, seconds, MB/s.
 */
#include <archive.h>
#include <archive_entry.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

int main(int argc, char **argv)
{
    static char buf[1 << 18];
    uint64_t members = 0, bytes = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 1; i < argc; i++) {
        struct archive *a = archive_read_new();
        struct archive_entry *e;
        archive_read_support_filter_all(a);
        archive_read_support_format_tar(a);
        if (archive_read_open_filename(a, argv[i], sizeof buf) != ARCHIVE_OK) {
            fprintf(stderr, "%s: %s\n", argv[i], archive_error_string(a));
            archive_read_free(a);
            return 1;
        }
        while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
            la_ssize_t r;
            members++;
            while ((r = archive_read_data(a, buf, sizeof buf)) > 0)
                bytes += (uint64_t)r;
            if (r < 0) {
                fprintf(stderr, "%s: %s\n", argv[i], archive_error_string(a));
                archive_read_free(a);
                return 1;
            }
        }
        archive_read_free(a);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) +
               (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("{\"members\":%" PRIu64 ",\"bytes\":%" PRIu64
           ",\"seconds\":%.3f,\"mb_per_s\":%.1f}\n",
           members, bytes, s, (double)bytes / s / 1e6);
    return 0;
}
