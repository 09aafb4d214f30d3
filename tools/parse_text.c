/* Numbers and comma-separated lists in command-line text, exactly as written (the
 * parsers of `clattn run`'s options; see parse_text.h). */
#include "parse_text.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The decimal integer that is exactly text[0..len) (optional sign, no spaces; leading
 * zeros, however many, are dropped before the length check). */
int parse_integer(const char *text, size_t len, long long *out)
{
    char buf[32];
    if (len == 0 || !(text[0] == '-' || text[0] == '+' || (text[0] >= '0' && text[0] <= '9'))) {
        return 0;
    }
    const size_t sign = text[0] == '-' || text[0] == '+' ? 1 : 0;
    size_t z = sign;
    while (z + 1 < len && text[z] == '0') {
        z++;
    }
    if (sign + (len - z) >= sizeof buf) {
        return 0;
    }
    memcpy(buf, text, sign);
    memcpy(buf + sign, text + z, len - z);
    len = sign + (len - z);
    buf[len] = '\0';
    char *end;
    errno = 0;
    long long value = strtoll(buf, &end, 10);
    if (end == buf || *end != '\0' || errno == ERANGE) {
        return 0;
    }
    *out = value;
    return 1;
}

/* Whether text[0..len) is written as a decimal integer (optional sign, digits only) but
 * lies outside long long's range, so that parse_integer refused it for its size. */
int integer_out_of_range(const char *text, size_t len)
{
    size_t i = len > 0 && (text[0] == '-' || text[0] == '+') ? 1 : 0;
    if (i == len) {
        return 0;
    }
    for (; i < len; i++) {
        if (text[i] < '0' || text[i] > '9') {
            return 0;
        }
    }
    long long value;
    return !parse_integer(text, len, &value);
}

/* The finite float32 number that is exactly text[0..len). */
int parse_float(const char *text, size_t len, float *out)
{
    char buf[64];
    if (len == 0 || len >= sizeof buf || text[0] == ' ' || text[0] == '\t') {
        return 0;
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    char *end;
    double value = strtod(buf, &end);
    if (end == buf || *end != '\0' || !isfinite(value) || fabs(value) > FLT_MAX) {
        return 0;
    }
    *out = (float)value;
    return 1;
}

/* The comma-separated items of `text`: calls item(start, len, index, arg) for each,
 * stopping at the first non-zero return, which it returns. */
int for_each_item(const char *text, int (*item)(const char *, size_t, size_t, void *), void *arg)
{
    size_t index = 0;
    for (const char *p = text;; ++index) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        int rc = item(p, len, index, arg);
        if (rc != 0 || comma == NULL) {
            return rc;
        }
        p = comma + 1;
    }
}

size_t count_items(const char *text)
{
    size_t n = 1;
    for (const char *p = text; (p = strchr(p, ',')) != NULL; ++p) {
        ++n;
    }
    return n;
}

/* The unsigned decimal integer that is exactly `text` (digits only: no sign, no
 * spaces), at most `max`; 0 if it is not one (or is larger). */
int parse_unsigned(const char *text, uint64_t max, uint64_t *out)
{
    if (text[0] == '\0' || strspn(text, "0123456789") != strlen(text)) {
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (*end != '\0' || errno == ERANGE || value > max) {
        return 0;
    }
    *out = (uint64_t)value;
    return 1;
}
