/*
 * .npy reader and writer for float32, float16, bool, uint8, uint16 and int32 arrays;
 * see npy.h.
 *
 * File layout: magic "\x93NUMPY", major and minor version bytes, header length
 * (uint16 little-endian for 1.0, uint32 for 2.0 and 3.0), the header (a Python dict
 * literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (6, 3), } padded
 * with spaces and ended by '\n'), then the raw array data.
 */
#define _POSIX_C_SOURCE 200809L /* open, fstat, pread */

#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#if defined(__GNUC__)
#define NPY_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define NPY_PRINTF(fmt_index, first_arg)
#endif

/* The ranks npy_read() accepts by default, as its messages describe them. */
#define NPY_ANY_RANK "1 to 4 dimensions"
/* The most one read() asks for (Linux reads at most about 2 GiB at a time anyway). */
#define NPY_READ_CHUNK ((size_t)1 << 30)

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

enum {
    NPY_MAGIC_LEN = 6,
    NPY_PREAMBLE_MAX = 12,  /* magic, version and a 4-byte header length (2.0, 3.0) */
    NPY_ALIGN = 64,         /* the writer pads the header to this many bytes */
    NPY_SHAPE_STR_LEN = 100 /* "(" + 4 × (19 digits + ", ") + ")" fits */
};

/* descr, name and element size of each npy_dtype, in enum order */
static const struct {
    const char *descr;
    const char *name;
    size_t size;
} npy_dtypes[NPY_DTYPE_COUNT] = {
    {"<f4", "float32", 4}, {"<f2", "float16", 2}, {"|b1", "bool", 1}, {"|u1", "uint8", 1},
    {"<u2", "uint16", 2},  {"<i4", "int32", 4},   {"|i1", "int8", 1}, {"<f8", "float64", 8},
};

size_t npy_dtype_size(npy_dtype dtype)
{
    return (unsigned)dtype < NPY_DTYPE_COUNT ? npy_dtypes[dtype].size : 0;
}

const char *npy_dtype_descr(npy_dtype dtype)
{
    return (unsigned)dtype < NPY_DTYPE_COUNT ? npy_dtypes[dtype].descr : "?";
}

const char *npy_dtype_name(npy_dtype dtype)
{
    return (unsigned)dtype < NPY_DTYPE_COUNT ? npy_dtypes[dtype].name : "?";
}

/* Format "name: message" into err; always returns -1 so callers can `return fail(...)`. */
NPY_PRINTF(4, 5)
static int fail(char *err, size_t errlen, const char *name, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        int n = snprintf(err, errlen, "%s: ", name);
        if (n >= 0 && (size_t)n < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

/* "(6, 3)", or "(5,)" for rank 1, as Python writes tuples; 1 <= ndim <= NPY_MAX_NDIM
 * always fits NPY_SHAPE_STR_LEN. */
static void format_shape(char buf[NPY_SHAPE_STR_LEN], const int64_t *shape, int ndim)
{
    int used = snprintf(buf, NPY_SHAPE_STR_LEN, "(");
    for (int i = 0; i < ndim; ++i) {
        used += snprintf(buf + used, NPY_SHAPE_STR_LEN - (size_t)used, i > 0 ? ", %lld" : "%lld",
                         (long long)shape[i]);
    }
    snprintf(buf + used, NPY_SHAPE_STR_LEN - (size_t)used, ndim == 1 ? ",)" : ")");
}

/* Up to 40 bytes of header text for a message, non-printable bytes shown as '?'. */
static const char *printable(char out[44], const unsigned char *text, size_t len)
{
    size_t n = len > 40 ? 40 : len;
    // cppcheck-suppress knownConditionTrueFalse ; false positive: len comes from the file
    for (size_t i = 0; i < n; ++i) {
        out[i] = text[i] >= 0x20 && text[i] < 0x7f ? (char)text[i] : '?';
    }
    strcpy(out + n, len > 40 ? "..." : "");
    return out;
}

/* The element count of a shape, or -1 if it (or its byte size with `esize`-byte
 * elements) overflows int64_t or size_t. Dims must be >= 0; any zero dim gives 0
 * whatever the others are. */
static int64_t shape_count(const int64_t *shape, int ndim, size_t esize)
{
    int64_t count = 1;
    for (int i = 0; i < ndim; ++i) {
        if (shape[i] == 0) {
            return 0;
        }
    }
    for (int i = 0; i < ndim; ++i) {
        if (count > INT64_MAX / shape[i]) {
            return -1;
        }
        count *= shape[i];
    }
    if ((uint64_t)count > SIZE_MAX / esize || count > INT64_MAX / (int64_t)esize) {
        return -1;
    }
    return count;
}

/* ---- header dict parser: a cursor over [p, end) that never reads past end ---- */

typedef struct cursor {
    const unsigned char *start; /* header start, for positions in messages */
    const unsigned char *p;
    const unsigned char *end;
} cursor;

typedef struct header {
    const unsigned char *descr; /* points into the header bytes */
    size_t descr_len;
    int fortran_order;
    size_t ndim; /* as written, may exceed NPY_MAX_NDIM (only the first dims are kept) */
    int64_t shape[NPY_MAX_NDIM];
} header;

static void skip_space(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) {
        ++c->p;
    }
}

/* Skip spaces, then consume `ch` if it is next. */
static int accept(cursor *c, unsigned char ch)
{
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        ++c->p;
        return 1;
    }
    return 0;
}

/* Skip spaces, then consume the identifier `word` (True, False) if it is next. */
static int accept_word(cursor *c, const char *word)
{
    size_t len = strlen(word);
    skip_space(c);
    if ((size_t)(c->end - c->p) >= len && memcmp(c->p, word, len) == 0) {
        c->p += len;
        return 1;
    }
    return 0;
}

/* A quoted string without escapes: 'abc' or "abc". */
static int parse_string(cursor *c, const unsigned char **s, size_t *len)
{
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) {
        return -1;
    }
    unsigned char quote = *c->p++;
    const unsigned char *begin = c->p;
    while (c->p < c->end && *c->p != quote) {
        if (*c->p == '\\' || *c->p == '\n') {
            return -1;
        }
        ++c->p;
    }
    if (c->p >= c->end) {
        return -1;
    }
    *s = begin;
    *len = (size_t)(c->p - begin);
    ++c->p;
    return 0;
}

static int malformed(const cursor *c, const char *name, const char *expected, char *err,
                     size_t errlen)
{
    return fail(err, errlen, name, "malformed header: expected %s at header byte %td", expected,
                c->p - c->start);
}

/* A non-negative decimal integer, optionally with Python 2's 'L' suffix. */
static int parse_dim(cursor *c, const char *name, int64_t *value, char *err, size_t errlen)
{
    skip_space(c);
    if (c->p < c->end && *c->p == '-') {
        return fail(err, errlen, name, "shape has a negative dimension");
    }
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') {
        return malformed(c, name, "a dimension (non-negative integer)", err, errlen);
    }
    int64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int digit = *c->p - '0';
        if (v > (INT64_MAX - digit) / 10) {
            return fail(err, errlen, name, "shape has a dimension larger than 2^63-1");
        }
        v = v * 10 + digit;
        ++c->p;
    }
    if (c->p < c->end && *c->p == 'L') {
        ++c->p;
    }
    *value = v;
    return 0;
}

/* A tuple of dimensions: (), (5,), (6, 3), (6, 3,). */
static int parse_shape(cursor *c, const char *name, header *h, char *err, size_t errlen)
{
    if (!accept(c, '(')) {
        return malformed(c, name, "a tuple '(' for 'shape'", err, errlen);
    }
    h->ndim = 0;
    int trailing_comma = 0;
    while (!accept(c, ')')) {
        int64_t dim = 0;
        if (parse_dim(c, name, &dim, err, errlen) != 0) {
            return -1;
        }
        if (h->ndim < NPY_MAX_NDIM) {
            h->shape[h->ndim] = dim;
        }
        ++h->ndim;
        trailing_comma = accept(c, ',');
        if (!trailing_comma) {
            if (!accept(c, ')')) {
                return malformed(c, name, "',' or ')' in 'shape'", err, errlen);
            }
            break;
        }
    }
    if (h->ndim == 1 && !trailing_comma) {
        return fail(err, errlen, name, "malformed header: 'shape' is not a tuple (need \"(n,)\")");
    }
    return 0;
}

/* One "'key': value" entry; `seen` has a bit per known key. */
static int parse_entry(cursor *c, const char *name, header *h, unsigned *seen, char *err,
                       size_t errlen)
{
    static const char *const keys[] = {"descr", "fortran_order", "shape"};
    const unsigned char *key;
    size_t key_len;
    if (parse_string(c, &key, &key_len) != 0) {
        return malformed(c, name, "a quoted key", err, errlen);
    }
    unsigned which = 0;
    while (which < 3 &&
           !(strlen(keys[which]) == key_len && memcmp(keys[which], key, key_len) == 0)) {
        ++which;
    }
    if (which == 3) {
        char shown[44];
        return fail(err, errlen, name, "malformed header: unexpected key '%s'",
                    printable(shown, key, key_len));
    }
    if (*seen & (1u << which)) {
        return fail(err, errlen, name, "malformed header: key '%s' appears twice", keys[which]);
    }
    *seen |= 1u << which;
    if (!accept(c, ':')) {
        return malformed(c, name, "':' after a key", err, errlen);
    }
    switch (which) {
    case 0:
        if (parse_string(c, &h->descr, &h->descr_len) != 0) {
            return fail(err, errlen, name,
                        "'descr' is not a dtype string such as '<f4' (structured dtypes are "
                        "not supported)");
        }
        return 0;
    case 1:
        if (accept_word(c, "True")) {
            h->fortran_order = 1;
        } else if (accept_word(c, "False")) {
            h->fortran_order = 0;
        } else {
            return malformed(c, name, "True or False for 'fortran_order'", err, errlen);
        }
        return 0;
    default: return parse_shape(c, name, h, err, errlen);
    }
}

/* The whole dict: '{' entries '}', then only spaces and newlines. */
static int parse_dict(const unsigned char *text, size_t len, const char *name, header *h, char *err,
                      size_t errlen)
{
    cursor c = {text, text, text + len};
    unsigned seen = 0;
    if (!accept(&c, '{')) {
        return malformed(&c, name, "'{' (a dict)", err, errlen);
    }
    while (!accept(&c, '}')) {
        if (parse_entry(&c, name, h, &seen, err, errlen) != 0) {
            return -1;
        }
        if (!accept(&c, ',')) {
            if (!accept(&c, '}')) {
                return malformed(&c, name, "',' or '}'", err, errlen);
            }
            break;
        }
    }
    skip_space(&c);
    if (c.p != c.end) {
        return malformed(&c, name, "nothing after the dict's '}'", err, errlen);
    }
    static const char *const missing[] = {"descr", "fortran_order", "shape"};
    for (unsigned i = 0; i < 3; ++i) {
        if (!(seen & (1u << i))) {
            return fail(err, errlen, name, "malformed header: no '%s' key", missing[i]);
        }
    }
    return 0;
}

/* Magic, version and header length of a `size`-byte file, given its first
 * min(size, NPY_PREAMBLE_MAX) bytes. On success *prefix is where the header dict
 * starts and *header_len its length, which is known to fit in the file. */
static int parse_preamble(const char *name, const unsigned char *bytes, size_t size, size_t *prefix,
                          size_t *header_len, char *err, size_t errlen)
{
    size_t magic_len = size < NPY_MAGIC_LEN ? size : NPY_MAGIC_LEN;
    if (memcmp(bytes, npy_magic, magic_len) != 0) {
        return fail(err, errlen, name, "not a .npy file (bad magic; expected \"\\x93NUMPY\")");
    }
    if (size < NPY_MAGIC_LEN + 2) {
        return fail(err, errlen, name, "truncated: %zu bytes, too short for a .npy header", size);
    }
    unsigned major = bytes[6], minor = bytes[7];
    if (major < 1 || major > 3 || minor != 0) {
        return fail(err, errlen, name,
                    "unsupported .npy format version %u.%u (supported: 1.0, 2.0, 3.0)", major,
                    minor);
    }
    *prefix = major == 1 ? 10 : NPY_PREAMBLE_MAX;
    if (size < *prefix) {
        return fail(err, errlen, name, "truncated: file ends inside the header length field");
    }
    *header_len = (size_t)bytes[8] | (size_t)bytes[9] << 8;
    if (major > 1) {
        *header_len |= (size_t)bytes[10] << 16 | (size_t)bytes[11] << 24;
    }
    if (*header_len > size - *prefix) {
        return fail(err, errlen, name,
                    "truncated: header length %zu runs past the end of the file (%zu bytes)",
                    *header_len, size);
    }
    return 0;
}

/* "'<f4', little-endian float32" for a single accepted dtype, else a list such as
 * "'|b1' (bool) or '<f4' (float32)", in enum order. */
static void accepted_list(char *buf, size_t len, unsigned accept)
{
    unsigned n = 0, total = 0;
    for (unsigned d = 0; d < NPY_DTYPE_COUNT; ++d) {
        total += (accept >> d) & 1u;
    }
    buf[0] = '\0';
    for (unsigned d = 0; d < NPY_DTYPE_COUNT; ++d) {
        if (!(accept & (1u << d))) {
            continue;
        }
        size_t used = strlen(buf);
        const char *sep = n == 0 ? "" : n + 1 == total ? " or " : ", ";
        if (total == 1) {
            snprintf(buf + used, len - used, "'%s', little-endian %s", npy_dtypes[d].descr,
                     npy_dtypes[d].name);
        } else {
            snprintf(buf + used, len - used, "%s'%s' (%s)", sep, npy_dtypes[d].descr,
                     npy_dtypes[d].name);
        }
        ++n;
    }
}

/* The dtype of a descr string, or -1 (and *other_order set if it is a known dtype in
 * another byte order, such as '>f4' or '=f2'). */
/* Whether this machine stores numbers little-endian (what '=' then means in a descr). */
static int host_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    return first == 1;
}

static int lookup_dtype(const unsigned char *descr, size_t len, int *other_order)
{
    *other_order = 0;
    for (int d = 0; d < NPY_DTYPE_COUNT; ++d) {
        const char *known = npy_dtypes[d].descr;
        if (len != strlen(known)) {
            continue;
        }
        if (memcmp(descr, known, len) == 0) {
            return d;
        }
        /* '=' is native order: little-endian on a little-endian machine */
        if (known[0] == '<' && descr[0] == '=' && host_little_endian() &&
            memcmp(descr + 1, known + 1, len - 1) == 0) {
            return d;
        }
        if (known[0] == '<' && (descr[0] == '>' || descr[0] == '=') &&
            memcmp(descr + 1, known + 1, len - 1) == 0) {
            *other_order = 1;
        }
    }
    return -1;
}

/* The header dict (`header_len` bytes at `text`) and the checks of dtype (one of
 * `accept`), order, rank (min_ndim..NPY_MAX_NDIM, described by `ranks` in messages) and
 * of the data size against `data_bytes`, the bytes after the header. On success
 * out->dtype/shape/ndim/count are set (out->data is not). */
static int parse_header(const char *name, const unsigned char *text, size_t header_len,
                        size_t data_bytes, unsigned accept, int min_ndim, const char *ranks,
                        npy_data *out, char *err, size_t errlen)
{
    header h = {0};
    if (parse_dict(text, header_len, name, &h, err, errlen) != 0) {
        return -1;
    }
    int other_order = 0;
    int dtype = lookup_dtype(h.descr, h.descr_len, &other_order);
    if (dtype < 0 || !(accept & (1u << dtype))) {
        char shown[44], list[160];
        accepted_list(list, sizeof list, accept);
        return fail(err, errlen, name, "dtype '%s' is not supported (%sneed %s)",
                    printable(shown, h.descr, h.descr_len),
                    other_order ? "not little-endian; " : "", list);
    }
    if (h.fortran_order) {
        return fail(err, errlen, name,
                    "fortran_order is True (column-major); only C-order arrays are supported "
                    "(save np.ascontiguousarray(a))");
    }
    if (h.ndim < (size_t)min_ndim || h.ndim > NPY_MAX_NDIM) {
        return fail(err, errlen, name, "rank %zu is not supported (need %s)", h.ndim, ranks);
    }

    int ndim = (int)h.ndim;
    size_t esize = npy_dtypes[dtype].size;
    char shape_str[NPY_SHAPE_STR_LEN];
    format_shape(shape_str, h.shape, ndim);
    int64_t count = shape_count(h.shape, ndim, esize);
    if (count < 0) {
        return fail(err, errlen, name, "shape %s has too many elements (overflows 64-bit sizes)",
                    shape_str);
    }
    size_t need = (size_t)count * esize;
    if (data_bytes != need) {
        return fail(err, errlen, name, "%s: data is %zu bytes but shape %s needs %zu (%s)",
                    data_bytes < need ? "truncated" : "trailing bytes", data_bytes, shape_str, need,
                    npy_dtypes[dtype].name);
    }

    out->dtype = (npy_dtype)dtype;
    out->ndim = ndim;
    for (int i = 0; i < NPY_MAX_NDIM; ++i) {
        out->shape[i] = i < ndim ? h.shape[i] : 1;
    }
    out->count = (size_t)count;
    return 0;
}

/* Little-endian bytes to host values of `esize` bytes each; dst may be the same
 * memory as src. */
static void decode(void *dst, const unsigned char *src, size_t count, size_t esize)
{
    unsigned char *out = dst;
    if (esize == 1) {
        memmove(out, src, count);
        return;
    }
    for (size_t i = 0; i < count; ++i) {
        const unsigned char *b = src + esize * i;
        if (esize == 2) {
            uint16_t v = (uint16_t)(b[0] | b[1] << 8);
            memcpy(out + 2 * i, &v, sizeof v);
        } else if (esize == 4) {
            uint32_t v =
                (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
            memcpy(out + 4 * i, &v, sizeof v);
        } else { /* 8 */
            uint64_t v = 0;
            for (int k = 7; k >= 0; --k) {
                v = v << 8 | b[k];
            }
            memcpy(out + 8 * i, &v, sizeof v);
        }
    }
}

/* Host values of `esize` bytes each to little-endian bytes. */
static void encode(unsigned char *dst, const void *src, size_t count, size_t esize)
{
    const unsigned char *in = src;
    for (size_t i = 0; i < count; ++i) {
        if (esize == 1) {
            dst[i] = in[i];
        } else if (esize == 2) {
            uint16_t v;
            memcpy(&v, in + 2 * i, sizeof v);
            dst[2 * i] = (unsigned char)v;
            dst[2 * i + 1] = (unsigned char)(v >> 8);
        } else if (esize == 4) {
            uint32_t v;
            memcpy(&v, in + 4 * i, sizeof v);
            dst[4 * i] = (unsigned char)v;
            dst[4 * i + 1] = (unsigned char)(v >> 8);
            dst[4 * i + 2] = (unsigned char)(v >> 16);
            dst[4 * i + 3] = (unsigned char)(v >> 24);
        } else { /* 8 */
            uint64_t v;
            memcpy(&v, in + 8 * i, sizeof v);
            for (int k = 0; k < 8; ++k) {
                dst[8 * i + (size_t)k] = (unsigned char)(v >> (8 * k));
            }
        }
    }
}

int npy_parse(const char *name, const unsigned char *bytes, size_t size, unsigned accept,
              npy_data *out, char *err, size_t errlen)
{
    size_t prefix = 0, header_len = 0;
    npy_data result = {0};
    if (out != NULL) {
        *out = result;
    }
    if (name == NULL) {
        name = "(unnamed)";
    }
    if (out == NULL || (bytes == NULL && size > 0) || (accept & NPY_ACCEPT_ALL) == 0) {
        return fail(err, errlen, name, "invalid argument");
    }
    accept &= NPY_ACCEPT_ALL;
    if (bytes == NULL) {
        bytes = npy_magic; /* size is 0: only the "truncated" message is reachable */
    }
    if (parse_preamble(name, bytes, size, &prefix, &header_len, err, errlen) != 0 ||
        parse_header(name, bytes + prefix, header_len, size - prefix - header_len, accept, 1,
                     NPY_ANY_RANK, &result, err, errlen) != 0) {
        return -1;
    }
    size_t esize = npy_dtypes[result.dtype].size;
    result.data = malloc(result.count > 0 ? result.count * esize : 1);
    if (result.data == NULL) {
        return fail(err, errlen, name, "out of memory for %zu elements", result.count);
    }
    decode(result.data, bytes + prefix + header_len, result.count, esize);
    *out = result;
    // cppcheck-suppress memleak ; false positive: out->data owns the buffer
    return 0;
}

/* Reads exactly `len` bytes at `offset` of the open file. */
static int read_at(int fd, const char *path, void *buf, size_t len, size_t offset, char *err,
                   size_t errlen)
{
    unsigned char *p = buf;
    size_t done = 0;
    while (done < len) {
        size_t want = len - done < NPY_READ_CHUNK ? len - done : NPY_READ_CHUNK;
        ssize_t got = pread(fd, p + done, want, (off_t)(offset + done));
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            return fail(err, errlen, path, "read error: %s", strerror(errno));
        }
        if (got == 0) {
            return fail(err, errlen, path, "truncated: the file shrank while it was read");
        }
        done += (size_t)got;
    }
    return 0;
}

const char *npy_file_kind(unsigned mode)
{
    if (S_ISDIR(mode)) {
        return "a directory";
    }
    if (S_ISLNK(mode)) {
        return "a symbolic link";
    }
    if (S_ISFIFO(mode)) {
        return "a FIFO (named pipe)";
    }
    if (S_ISCHR(mode) || S_ISBLK(mode)) {
        return "a device";
    }
    if (S_ISSOCK(mode)) {
        return "a socket";
    }
    return "a special file";
}

/* Reads the open regular file `fd` of `size` bytes: the preamble, then the header, then
 * (once both are valid, so that the data size is known to match) the data. */
static int read_npy(int fd, const char *path, size_t size, unsigned accept, int min_ndim,
                    const char *ranks, npy_data *out, char *err, size_t errlen)
{
    unsigned char preamble[NPY_PREAMBLE_MAX];
    size_t prefix = 0, header_len = 0;
    if (read_at(fd, path, preamble, size < sizeof preamble ? size : sizeof preamble, 0, err,
                errlen) != 0 ||
        parse_preamble(path, preamble, size, &prefix, &header_len, err, errlen) != 0) {
        return -1;
    }
    unsigned char *text = malloc(header_len > 0 ? header_len : 1);
    if (text == NULL) {
        return fail(err, errlen, path, "out of memory for a %zu-byte header", header_len);
    }
    int rc = read_at(fd, path, text, header_len, prefix, err, errlen);
    if (rc == 0) {
        rc = parse_header(path, text, header_len, size - prefix - header_len, accept, min_ndim,
                          ranks, out, err, errlen);
    }
    free(text);
    if (rc != 0) {
        return -1;
    }
    size_t esize = npy_dtypes[out->dtype].size;
    out->data = malloc(out->count > 0 ? out->count * esize : 1);
    if (out->data == NULL) {
        return fail(err, errlen, path, "out of memory for %zu elements", out->count);
    }
    if (read_at(fd, path, out->data, out->count * esize, prefix + header_len, err, errlen) != 0) {
        free(out->data);
        out->data = NULL;
        return -1;
    }
    /* Little-endian bytes to host values, in place. */
    decode(out->data, (const unsigned char *)out->data, out->count, esize);
    return 0;
}

int npy_read(const char *path, unsigned accept, int min_ndim, const char *ranks, npy_data *out,
             char *err, size_t errlen)
{
    npy_data result = {0};
    if (out != NULL) {
        *out = result;
    }
    if (path == NULL || out == NULL || min_ndim < 1 || min_ndim > NPY_MAX_NDIM ||
        (accept & NPY_ACCEPT_ALL) == 0) {
        return fail(err, errlen, path != NULL ? path : "(null)", "invalid argument");
    }
    accept &= NPY_ACCEPT_ALL;
    if (ranks == NULL) {
        ranks = NPY_ANY_RANK;
    }
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is rejected below). */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        return fail(err, errlen, path, "cannot open: %s", strerror(errno));
    }
    struct stat st;
    int rc = -1;
    if (fstat(fd, &st) != 0) {
        fail(err, errlen, path, "cannot stat: %s", strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        fail(err, errlen, path, "is %s, not a regular file (a .npy input must be a regular file)",
             npy_file_kind(st.st_mode));
    } else if (st.st_size < 0 || (uintmax_t)st.st_size > SIZE_MAX) {
        fail(err, errlen, path, "too large for this machine's size_t");
    } else {
        rc = read_npy(fd, path, (size_t)st.st_size, accept, min_ndim, ranks, &result, err, errlen);
    }
    close(fd);
    if (rc == 0) {
        *out = result;
    }
    // cppcheck-suppress memleak ; false positive: out->data owns the buffer
    return rc;
}

void npy_data_free(npy_data *array)
{
    if (array != NULL) {
        free(array->data);
        memset(array, 0, sizeof *array);
    }
}

int npy_write_stream(FILE *stream, const char *name, npy_dtype dtype, const void *data,
                     const int64_t *shape, int ndim, char *err, size_t errlen)
{
    if (name == NULL) {
        name = "(unnamed)";
    }
    if (stream == NULL || shape == NULL || ndim < 1 || ndim > NPY_MAX_NDIM ||
        (unsigned)dtype >= NPY_DTYPE_COUNT) {
        return fail(err, errlen, name, "invalid argument (rank must be 1 to %d, dtype known)",
                    NPY_MAX_NDIM);
    }
    for (int i = 0; i < ndim; ++i) {
        if (shape[i] < 0) {
            return fail(err, errlen, name, "cannot write a negative dimension");
        }
    }
    const size_t esize = npy_dtypes[dtype].size;
    int64_t count = shape_count(shape, ndim, esize);
    if (count < 0 || (count > 0 && data == NULL)) {
        return fail(err, errlen, name, "invalid argument (size overflow or no data)");
    }

    /* magic, version 1.0, header length, dict, space padding to NPY_ALIGN, '\n' */
    char shape_str[NPY_SHAPE_STR_LEN];
    char head[256];
    format_shape(shape_str, shape, ndim);
    int dict_len = snprintf(head + 10, sizeof head - 10,
                            "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                            npy_dtypes[dtype].descr, shape_str);
    size_t total = 10 + (size_t)dict_len + 1;
    total += (NPY_ALIGN - total % NPY_ALIGN) % NPY_ALIGN;
    size_t header_len = total - 10;
    memcpy(head, npy_magic, NPY_MAGIC_LEN);
    head[6] = 1;
    head[7] = 0;
    head[8] = (char)(header_len & 0xff);
    head[9] = (char)(header_len >> 8);
    memset(head + 10 + dict_len, ' ', total - 1 - 10 - (size_t)dict_len);
    head[total - 1] = '\n';
    if (fwrite(head, 1, total, stream) != total) {
        return fail(err, errlen, name, "write failed: %s", strerror(errno));
    }

    unsigned char chunk[4096];
    const size_t per_chunk = sizeof chunk / esize;
    const unsigned char *bytes = data;
    for (size_t done = 0; done < (size_t)count;) {
        size_t n = (size_t)count - done < per_chunk ? (size_t)count - done : per_chunk;
        encode(chunk, bytes + done * esize, n, esize);
        if (fwrite(chunk, esize, n, stream) != n) {
            return fail(err, errlen, name, "write failed: %s", strerror(errno));
        }
        done += n;
    }
    if (fflush(stream) != 0) {
        return fail(err, errlen, name, "write failed: %s", strerror(errno));
    }
    return 0;
}

int npy_write(const char *path, npy_dtype dtype, const void *data, const int64_t *shape, int ndim,
              char *err, size_t errlen)
{
    if (path == NULL) {
        return fail(err, errlen, "(null)", "invalid argument");
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        return fail(err, errlen, path, "cannot create: %s", strerror(errno));
    }
    int rc = npy_write_stream(f, path, dtype, data, shape, ndim, err, errlen);
    if (fclose(f) != 0 && rc == 0) {
        rc = fail(err, errlen, path, "write failed: %s", strerror(errno));
    }
    if (rc != 0) {
        remove(path);
    }
    return rc;
}
