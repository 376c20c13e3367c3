/*
 * names.c — job names and field lists (names.h).
 */
#include "names.h"

#include <ctype.h>
#include <string.h>

int sc_job_name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

int sc_job_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SC_JOB_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!sc_job_name_char((unsigned char)s[i]))
            return 0;
    return 1;
}

int sc_fields_split(const char *list,
                    char names[][SIO_TARW_FIELD_NAME_MAX + 1], size_t *n)
{
    const char *p = list;
    *n = 0;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || len > SIO_TARW_FIELD_NAME_MAX ||
            *n >= SIO_TARW_FILTER_MAX)
            return -1;
        char *f = names[*n];
        for (size_t i = 0; i < len; i++) {
            unsigned char c = (unsigned char)p[i];
            if (!isalnum(c) && c != '.' && c != '_' && c != '-' && c != '+')
                return -1;
            f[i] = (char)tolower(c);
        }
        f[len] = '\0';
        for (size_t j = 0; j < *n; j++)
            if (strcmp(names[j], f) == 0)
                return -1;
        (*n)++;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}
