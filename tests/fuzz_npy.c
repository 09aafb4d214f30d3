/* libFuzzer target for the .npy parser of tools/npy.c (npy_parse_f32).
 *
 * Besides crashes and sanitizer reports (ASan: no read outside the input, whose
 * buffer is exactly `size` bytes; UBSan), it checks the parser's contract (npy.h):
 *  - success: rank 1..NPY_MAX_NDIM, non-negative dims, unused dims 1, count the
 *    product of the shape, the data (count floats, every one read here) a copy of the
 *    input's last 4·count bytes, data never NULL;
 *  - failure: the array zeroed, a message that starts with the name;
 *  - the same outcome with a NULL or tiny message buffer.
 * A violated contract aborts, which libFuzzer reports as a crash.
 *
 * Build: cmake -DCLATTN_FUZZ=ON with clang (target fuzz_npy); seeds in tests/fuzz/npy,
 * tokens in tests/fuzz/npy.dict. */
#include "npy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NAME "fuzz.npy"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_npy: contract violated: %s\n", what);
        abort();
    }
}

static int is_zeroed(const npy_array *a)
{
    static const npy_array zero;
    return a->ndim == 0 && a->count == 0 && a->data == NULL &&
           memcmp(a->shape, zero.shape, sizeof a->shape) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    npy_array arr;
    char err[256];
    memset(&arr, 0xA5, sizeof arr); /* the parser must overwrite every field */
    err[0] = '\0';
    const int rc = npy_parse_f32(NAME, data, size, &arr, err, sizeof err);
    check(rc == 0 || rc == -1, "returns 0 or -1");
    if (rc == 0) {
        check(arr.ndim >= 1 && arr.ndim <= NPY_MAX_NDIM, "rank within 1..NPY_MAX_NDIM");
        size_t count = 1;
        for (int i = 0; i < NPY_MAX_NDIM; i++) {
            check(arr.shape[i] >= 0, "dims are non-negative");
            check(i < arr.ndim || arr.shape[i] == 1, "unused dims are 1");
            count *= (size_t)arr.shape[i];
        }
        check(count == arr.count, "count is the product of the shape");
        check(arr.data != NULL, "data is not NULL after success");
        check(arr.count <= size / 4, "the data comes from the input");
        /* every element read (ASan: within the allocation) and equal to the input's
           little-endian bytes at the end of the file */
        const uint8_t *src = data + size - 4 * arr.count;
        for (size_t i = 0; i < arr.count; i++) {
            const uint32_t bits = (uint32_t)src[4 * i] | (uint32_t)src[4 * i + 1] << 8 |
                                  (uint32_t)src[4 * i + 2] << 16 | (uint32_t)src[4 * i + 3] << 24;
            uint32_t got;
            memcpy(&got, &arr.data[i], sizeof got);
            check(got == bits, "data equals the input's last 4*count bytes");
        }
        npy_free(&arr);
        check(is_zeroed(&arr), "npy_free zeroes the array");
    } else {
        check(is_zeroed(&arr), "the array is zeroed on failure");
        check(strncmp(err, NAME ": ", strlen(NAME) + 2) == 0, "the message starts with the name");
        check(strlen(err) > strlen(NAME) + 2, "the message says something");
    }

    /* the same outcome without a message buffer, and with a tiny one */
    npy_array again;
    int rc2 = npy_parse_f32(NAME, data, size, &again, NULL, 0);
    check(rc2 == rc, "same outcome with err NULL");
    npy_free(&again);
    char tiny[4];
    memset(tiny, 'x', sizeof tiny);
    const size_t tiny_len = 1 + size % sizeof tiny;
    rc2 = npy_parse_f32(NAME, data, size, &again, tiny, tiny_len);
    check(rc2 == rc, "same outcome with a tiny err buffer");
    if (rc2 != 0)
        check(memchr(tiny, '\0', tiny_len) != NULL, "a tiny message is still terminated");
    npy_free(&again);
    return 0;
}
