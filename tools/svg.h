/* The SVG drawing of `clattn heatmap` (tools/svg.c): the weights of one (batch, head)
 * with their labels, rendered into a growing text buffer. */
#ifndef CLATTN_TOOLS_SVG_H
#define CLATTN_TOOLS_SVG_H

#include <stddef.h>
#include <stdint.h>

/* The labels of the rows or of the columns. */
typedef struct labels {
    char **text; /* count entries, malloc'd */
    int64_t count;
    size_t max_chars; /* longest label, in characters (code points) */
} labels;

/* A growing text buffer (data is malloc'd). */
typedef struct text {
    char *data;
    size_t len, cap;
    int failed; /* out of memory */
} text;

typedef struct heatmap {
    const float *w;              /* n_q × n_kv, row-major */
    const unsigned char *masked; /* n_q × n_kv, 1 = masked (grey); NULL: none */
    int64_t n_q, n_kv;
    const labels *rows, *cols;
    const char *title;
    char subtitle[1024]; /* plain text, escaped when written (two file names of up to
                          * 255 bytes, the sizes and the block note fit) */
} heatmap;

/* Characters (UTF-8 code points) of a string. */
size_t utf8_chars(const char *s);

/* Appends the SVG document of `h` to `t` (t->failed is set if memory runs out). */
void render(const heatmap *h, text *t);

#endif
