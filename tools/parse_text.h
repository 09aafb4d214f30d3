/* Numbers and comma-separated lists in command-line text, exactly as written: no
 * spaces, no trailing characters. Each returns 1 (or the item callback's status) on
 * success and 0 when the text is not such a value; nothing prints. */
#ifndef CLATTN_TOOLS_PARSE_TEXT_H
#define CLATTN_TOOLS_PARSE_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* The decimal integer that is exactly text[0..len) (optional sign; any leading zeros). */
int parse_integer(const char *text, size_t len, long long *out);

/* Whether text[0..len) is written as a decimal integer but lies outside long long's
 * range (parse_integer refused it for its size). */
int integer_out_of_range(const char *text, size_t len);

/* The finite float32 number that is exactly text[0..len). */
int parse_float(const char *text, size_t len, float *out);

/* The unsigned decimal integer (digits only) that is exactly `text`, at most `max`. */
int parse_unsigned(const char *text, uint64_t max, uint64_t *out);

/* Calls item(start, len, index, arg) for each comma-separated item of `text`, stopping at
 * the first non-zero return, which it returns. */
int for_each_item(const char *text, int (*item)(const char *, size_t, size_t, void *), void *arg);

/* The number of comma-separated items of `text` (at least 1). */
size_t count_items(const char *text);

#endif
