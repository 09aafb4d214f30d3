/* libFuzzer target for the .npy parser of tools/npy/npy.c (npy_parse, every dtype, and
 * its float32 shorthand npy_parse_f32).
 *
 * Besides crashes and sanitizer reports (ASan: no read outside the input, whose
 * buffer is exactly `size` bytes; UBSan), it checks the parser's contract (npy.h):
 *  - success: a known dtype, rank 1..NPY_MAX_NDIM, non-negative dims, unused dims 1,
 *    count the product of the shape, the data (count elements, every one read here)
 *    the input's last esize·count bytes read little-endian, data never NULL;
 *  - failure: the array zeroed, a message that starts with the name;
 *  - the same outcome with a NULL or tiny message buffer, and with one dtype accepted
 *    (success exactly when it is the file's dtype);
 *  - npy_parse_f32 succeeds exactly when npy_parse finds a float32 file, with the same
 *    shape and data.
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
    npy_data arr;
    char err[256];
    memset(&arr, 0xA5, sizeof arr); /* the parser must overwrite every field */
    err[0] = '\0';
    const int rc = npy_parse(NAME, data, size, NPY_ACCEPT_ALL, &arr, err, sizeof err);
    check(rc == 0 || rc == -1, "returns 0 or -1");
    if (rc == 0) {
        check((unsigned)arr.dtype < NPY_DTYPE_COUNT, "a known dtype");
        const size_t esize = npy_dtype_size(arr.dtype);
        check(arr.ndim >= 1 && arr.ndim <= NPY_MAX_NDIM, "rank within 1..NPY_MAX_NDIM");
        size_t count = 1;
        for (int i = 0; i < NPY_MAX_NDIM; i++) {
            check(arr.shape[i] >= 0, "dims are non-negative");
            check(i < arr.ndim || arr.shape[i] == 1, "unused dims are 1");
            count *= (size_t)arr.shape[i];
        }
        check(count == arr.count, "count is the product of the shape");
        check(arr.data != NULL, "data is not NULL after success");
        check(arr.count <= size / esize, "the data comes from the input");
        /* every element read (ASan: within the allocation) and equal to the input's
           little-endian bytes at the end of the file */
        const uint8_t *src = data + size - esize * arr.count;
        for (size_t i = 0; i < arr.count; i++) {
            uint64_t bits = 0, got = 0;
            for (size_t b = 0; b < esize; b++)
                bits |= (uint64_t)src[esize * i + b] << (8 * b);
            if (esize == 1) {
                got = ((const uint8_t *)arr.data)[i];
            } else if (esize == 2) {
                got = ((const uint16_t *)arr.data)[i];
            } else if (esize == 4) {
                got = ((const uint32_t *)arr.data)[i];
            } else {
                got = ((const uint64_t *)arr.data)[i];
            }
            check(got == bits, "data equals the input's last esize*count bytes");
        }
    } else {
        static const npy_data zero;
        check(arr.dtype == 0 && arr.ndim == 0 && arr.count == 0 && arr.data == NULL &&
                  memcmp(arr.shape, zero.shape, sizeof arr.shape) == 0,
              "the array is zeroed on failure");
        check(strncmp(err, NAME ": ", strlen(NAME) + 2) == 0, "the message starts with the name");
        check(strlen(err) > strlen(NAME) + 2, "the message says something");
    }

    /* one dtype accepted: success exactly for the file's dtype */
    npy_data one;
    const npy_dtype probe = (npy_dtype)(size % NPY_DTYPE_COUNT);
    int rc2 = npy_parse(NAME, data, size, NPY_ACCEPT(probe), &one, NULL, 0);
    check(rc2 == (rc == 0 && arr.dtype == probe ? 0 : -1), "one dtype accepted");
    npy_data_free(&one);

    /* the float32 shorthand */
    npy_array f32;
    memset(&f32, 0xA5, sizeof f32);
    rc2 = npy_parse_f32(NAME, data, size, &f32, err, sizeof err);
    check(rc2 == (rc == 0 && arr.dtype == NPY_F32 ? 0 : -1), "npy_parse_f32 agrees");
    if (rc2 == 0) {
        check(f32.ndim == arr.ndim && f32.count == arr.count &&
                  memcmp(f32.shape, arr.shape, sizeof f32.shape) == 0 &&
                  memcmp(f32.data, arr.data, 4 * arr.count) == 0,
              "npy_parse_f32 gives the same array");
        npy_free(&f32);
        check(is_zeroed(&f32), "npy_free zeroes the array");
    } else {
        check(is_zeroed(&f32), "the float32 array is zeroed on failure");
        check(strncmp(err, NAME ": ", strlen(NAME) + 2) == 0, "the message starts with the name");
    }
    if (rc == 0) {
        npy_data_free(&arr);
        check(arr.data == NULL && arr.count == 0 && arr.ndim == 0, "npy_data_free zeroes it");
    }

    /* the same outcome without a message buffer, and with a tiny one */
    npy_data again;
    rc2 = npy_parse(NAME, data, size, NPY_ACCEPT_ALL, &again, NULL, 0);
    check(rc2 == rc, "same outcome with err NULL");
    npy_data_free(&again);
    char tiny[4];
    memset(tiny, 'x', sizeof tiny);
    const size_t tiny_len = 1 + size % sizeof tiny;
    rc2 = npy_parse(NAME, data, size, NPY_ACCEPT_ALL, &again, tiny, tiny_len);
    check(rc2 == rc, "same outcome with a tiny err buffer");
    if (rc2 != 0)
        check(memchr(tiny, '\0', tiny_len) != NULL, "a tiny message is still terminated");
    npy_data_free(&again);
    return 0;
}
