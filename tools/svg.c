/* The SVG drawing of `clattn heatmap`: the weights matrix as coloured cells with token
 * labels, a title, and the viridis colour scale as its legend; see svg.h. */
#include "svg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Matrices at most this size in both directions show each cell's value. */
enum { VALUE_LIMIT = 16 };

/* Characters (UTF-8 code points) of a string. */
size_t utf8_chars(const char *s)
{
    size_t n = 0;
    for (; *s != '\0'; ++s) {
        n += ((unsigned char)*s & 0xC0) != 0x80;
    }
    return n;
}

/* ---- a growing text buffer --------------------------------------------------------- */

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
put(text *t, const char *fmt, ...)
{
    if (t->failed) {
        return;
    }
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->data != NULL ? t->data + t->len : NULL,
                          t->data != NULL ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if (t->data != NULL && (size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap * 2 + (size_t)n + 4096;
        char *data = realloc(t->data, cap);
        if (data == NULL) {
            t->failed = 1;
            return;
        }
        t->data = data;
        t->cap = cap;
    }
}

/* Appends `s` escaped for XML character data and attribute values: the five special
 * characters as entities, characters that XML 1.0 forbids (C0 controls but tab, LF
 * and CR) and bytes that are not valid UTF-8 as U+FFFD. */
static void put_escaped(text *t, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p != '\0') {
        unsigned c = *p;
        size_t n = c < 0x80             ? 1
                   : (c & 0xE0) == 0xC0 ? 2
                   : (c & 0xF0) == 0xE0 ? 3
                   : (c & 0xF8) == 0xF0 ? 4
                                        : 0;
        int valid = n > 0;
        for (size_t i = 1; valid && i < n; ++i) {
            valid = (p[i] & 0xC0) == 0x80;
        }
        if (valid && n > 1) { /* reject overlong forms, surrogates and > U+10FFFF */
            unsigned cp = n == 2   ? (c & 0x1Fu) << 6 | (p[1] & 0x3Fu)
                          : n == 3 ? (c & 0x0Fu) << 12 | (p[1] & 0x3Fu) << 6 | (p[2] & 0x3Fu)
                                   : (c & 0x07u) << 18 | (p[1] & 0x3Fu) << 12 |
                                         (p[2] & 0x3Fu) << 6 | (p[3] & 0x3Fu);
            unsigned min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
            valid = cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF) &&
                    cp != 0xFFFE && cp != 0xFFFF;
        }
        if (!valid) {
            put(t, "\xEF\xBF\xBD"); /* U+FFFD */
            ++p;
            continue;
        }
        switch (c) {
        case '&': put(t, "&amp;"); break;
        case '<': put(t, "&lt;"); break;
        case '>': put(t, "&gt;"); break;
        case '"': put(t, "&quot;"); break;
        case '\'': put(t, "&apos;"); break;
        default:
            if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
                put(t, "\xEF\xBF\xBD");
            } else {
                put(t, "%.*s", (int)n, (const char *)p);
            }
        }
        p += n;
    }
}

/* ---- colours ----------------------------------------------------------------------- */

/* viridis (matplotlib; van der Walt & Smith 2015) sampled at 0, 1/8, .., 1: perceptually
 * uniform, readable in grey and by colour-blind readers. Interpolated linearly in sRGB. */
static const unsigned char viridis[9][3] = {
    {0x44, 0x01, 0x54}, {0x47, 0x2d, 0x7b}, {0x3b, 0x52, 0x8b},
    {0x2c, 0x72, 0x8e}, {0x21, 0x91, 0x8c}, {0x28, 0xae, 0x80},
    {0x5e, 0xc9, 0x62}, {0xad, 0xdc, 0x30}, {0xfd, 0xe7, 0x25},
};

static void colour_at(double t, unsigned char rgb[3])
{
    t = t < 0.0 ? 0.0 : t > 1.0 ? 1.0 : t;
    double x = t * 8.0;
    int i = x >= 8.0 ? 7 : (int)x;
    double f = x - i;
    for (int c = 0; c < 3; ++c) {
        rgb[c] = (unsigned char)lround(viridis[i][c] + f * (viridis[i + 1][c] - viridis[i][c]));
    }
}

/* Relative luminance (WCAG) of an sRGB colour, 0..1. Black text has the better contrast
 * ratio on colours above about 0.18, white text below. */
static double luminance(const unsigned char rgb[3])
{
    double l[3];
    for (int c = 0; c < 3; ++c) {
        double v = rgb[c] / 255.0;
        l[c] = v <= 0.03928 ? v / 12.92 : pow((v + 0.055) / 1.055, 2.4);
    }
    return 0.2126 * l[0] + 0.7152 * l[1] + 0.0722 * l[2];
}

/* ---- the drawing ------------------------------------------------------------------- */

/* Approximate advance of one character of the 12 px sans-serif labels (px). */
#define CHAR_W 6.8
#define SQRT1_2 0.70710678118654752
/* Approximate advance of one character of the 12 px subtitle and of the 16 px bold
 * title (px). */
#define TEXT_W 6.6
#define TITLE_W 10.0

static double maxd(double a, double b)
{
    return a > b ? a : b;
}

/* A value that is not finite as the cells and tooltips write it: NaN (whatever its sign),
 * inf, -inf. */
static const char *nonfinite_text(double v)
{
    return isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf";
}

void render(const heatmap *h, text *t)
{
    const int64_t n_max = h->n_q > h->n_kv ? h->n_q : h->n_kv;
    const double cell = fmin(56.0, fmax(4.0, floor(720.0 / (double)n_max)));
    const int show_values = h->n_q <= VALUE_LIMIT && h->n_kv <= VALUE_LIMIT;
    /* label every `step`-th row and column so that labels never overlap */
    const int64_t step = (int64_t)ceil(14.0 / cell);
    const double margin = 16.0, font = 12.0;

    /* the range of the colour scale: finite values of visible cells */
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < h->n_q * h->n_kv; ++i) {
        if ((h->masked == NULL || !h->masked[i]) && isfinite(h->w[i])) {
            lo = fmin(lo, h->w[i]);
            hi = fmax(hi, h->w[i]);
        }
    }
    const int have_range = lo <= hi;

    /* column labels: horizontal when they fit their cell, else rotated by -45 degrees */
    const double col_w = (double)h->cols->max_chars * CHAR_W;
    const int rotate = col_w + 6.0 > cell * (double)step; /* labels need a gap */
    const double col_h = rotate ? col_w * SQRT1_2 + font : font + 6.0;
    const double row_w = (double)h->rows->max_chars * CHAR_W + 8.0;

    const double title_y = margin + 16.0, subtitle_y = title_y + 20.0;
    const double keys_y = subtitle_y + 26.0; /* the axis name "keys" */
    const double y0 = keys_y + 8.0 + col_h;
    const double x0 = margin + 22.0 + row_w;
    const double mw = cell * (double)h->n_kv, mh = cell * (double)h->n_q;
    const double spill = rotate ? col_w * SQRT1_2 - cell / 2.0 : 0.0;
    const double bar_x = x0 + mw + maxd(28.0, spill + 16.0), bar_w = 18.0;
    const double bar_h = maxd(mh, 140.0);
    const double width_title = margin * 2 + maxd(TITLE_W * (double)utf8_chars(h->title),
                                                 TEXT_W * (double)utf8_chars(h->subtitle));
    const double width = ceil(maxd(bar_x + bar_w + 8.0 + 14.0 * CHAR_W + margin, width_title));
    const double height = ceil(y0 + maxd(mh, bar_h) + 30.0 + margin);

    put(t, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    put(t,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
        "viewBox=\"0 0 %.0f %.0f\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
        "font-size=\"%.0f\">\n",
        width, height, width, height, font);
    put(t, "<title>");
    put_escaped(t, h->title);
    put(t, " \xE2\x80\x94 "); /* — */
    put_escaped(t, h->subtitle);
    put(t, "</title>\n");
    put(t, "<defs><linearGradient id=\"scale\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">");
    for (int i = 0; i <= 8; ++i) {
        put(t, "<stop offset=\"%g\" stop-color=\"#%02x%02x%02x\"/>", i / 8.0, viridis[i][0],
            viridis[i][1], viridis[i][2]);
    }
    put(t, "</linearGradient></defs>\n");
    put(t, "<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n");
    put(t, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"16\" font-weight=\"bold\">", margin, title_y);
    put_escaped(t, h->title);
    put(t, "</text>\n<text x=\"%.1f\" y=\"%.1f\" fill=\"#444444\">", margin, subtitle_y);
    put_escaped(t, h->subtitle);
    put(t, "</text>\n");

    /* axis names */
    put(t,
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-style=\"italic\" "
        "fill=\"#444444\">keys</text>\n",
        x0 + mw / 2.0, keys_y);
    put(t,
        "<text transform=\"translate(%.1f %.1f) rotate(-90)\" text-anchor=\"middle\" "
        "font-style=\"italic\" fill=\"#444444\">queries</text>\n",
        margin + 10.0, y0 + mh / 2.0);

    /* column (key) labels */
    put(t, "<g class=\"key-labels\">\n");
    for (int64_t j = 0; j < h->n_kv; j += step) {
        double cx = x0 + cell * ((double)j + 0.5);
        if (rotate) {
            put(t, "<text transform=\"translate(%.1f %.1f) rotate(-45)\">", cx - 3.0, y0 - 6.0);
        } else {
            put(t, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", cx, y0 - 6.0);
        }
        put_escaped(t, h->cols->text[j]);
        put(t, "</text>\n");
    }
    put(t, "</g>\n<g class=\"query-labels\" text-anchor=\"end\">\n");
    for (int64_t i = 0; i < h->n_q; i += step) {
        put(t, "<text x=\"%.1f\" y=\"%.1f\">", x0 - 6.0, y0 + cell * ((double)i + 0.5) + 4.0);
        put_escaped(t, h->rows->text[i]);
        put(t, "</text>\n");
    }
    put(t, "</g>\n");

    /* the cells, each with a tooltip "query -> key: value" */
    const double value_font = fmin(12.0, cell * 0.27);
    put(t,
        "<g class=\"cells\" text-anchor=\"middle\" shape-rendering=\"crispEdges\" "
        "font-size=\"%.1f\">\n",
        value_font);
    for (int64_t i = 0; i < h->n_q; ++i) {
        for (int64_t j = 0; j < h->n_kv; ++j) {
            const double v = h->w[i * h->n_kv + j];
            const int masked = h->masked != NULL && h->masked[i * h->n_kv + j];
            unsigned char rgb[3] = {0xdd, 0xdd, 0xdd}; /* masked */
            if (!masked && isfinite(v)) {
                colour_at(have_range && hi > lo ? (v - lo) / (hi - lo) : 0.5, rgb);
            } else if (!masked) {
                rgb[0] = 0xff, rgb[1] = 0x00, rgb[2] = 0xff; /* NaN or infinite: magenta */
            }
            const double x = x0 + cell * (double)j, y = y0 + cell * (double)i;
            put(t,
                "<rect class=\"cell\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                "fill=\"#%02x%02x%02x\"><title>",
                x, y, cell, cell, rgb[0], rgb[1], rgb[2]);
            put_escaped(t, h->rows->text[i]);
            put(t, " \xE2\x86\x92 "); /* → */
            put_escaped(t, h->cols->text[j]);
            if (masked) {
                put(t, ": masked</title></rect>\n");
            } else if (isfinite(v)) {
                put(t, ": %.6g</title></rect>\n", v);
            } else {
                put(t, ": %s</title></rect>\n", nonfinite_text(v));
            }
            if (show_values) {
                const char *ink = luminance(rgb) > 0.18 ? "#000000" : "#ffffff";
                double shown = fabs(v) < 0.005 ? 0.0 : v; /* no "-0.00" */
                put(t, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">", x + cell / 2.0,
                    y + cell / 2.0 + value_font * 0.35, masked ? "#888888" : ink);
                if (masked) {
                    put(t, "\xE2\x80\x93"); /* – */
                } else if (isfinite(v)) {
                    put(t, "%.2f", shown);
                } else {
                    put(t, "%s", nonfinite_text(v));
                }
                put(t, "</text>\n");
            }
        }
    }
    put(t, "</g>\n");
    put(t,
        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
        "stroke=\"#333333\" stroke-width=\"1\"/>\n",
        x0, y0, mw, mh);

    /* the legend: a colour bar from min (bottom) to max (top), with five ticks */
    put(t, "<g class=\"legend\">\n");
    put(t,
        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"url(#scale)\" "
        "stroke=\"#333333\" stroke-width=\"1\"/>\n",
        bar_x, y0, bar_w, bar_h);
    if (have_range) {
        const int ticks = hi > lo ? 5 : 1;
        for (int k = 0; k < ticks; ++k) {
            double f = ticks > 1 ? k / (double)(ticks - 1) : 0.5;
            double y = y0 + bar_h * (1.0 - f), v = lo + f * (hi - lo);
            const char *tag = ticks == 1 ? "all " : k == 0 ? "min " : k == ticks - 1 ? "max " : "";
            put(t,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333333\"/>"
                "<text x=\"%.1f\" y=\"%.1f\">%s%.4g</text>\n",
                bar_x + bar_w, y, bar_x + bar_w + 4.0, y, bar_x + bar_w + 7.0, y + 4.0, tag, v);
        }
    } else {
        put(t, "<text x=\"%.1f\" y=\"%.1f\">no finite visible value</text>\n", bar_x + bar_w + 7.0,
            y0 + bar_h / 2.0);
    }
    int any_masked = 0;
    for (int64_t i = 0; h->masked != NULL && i < h->n_q * h->n_kv; ++i) {
        any_masked |= h->masked[i];
    }
    if (any_masked) {
        put(t,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"#dddddd\" "
            "stroke=\"#333333\" stroke-width=\"0.5\"/><text x=\"%.1f\" y=\"%.1f\">masked</text>\n",
            bar_x, y0 + bar_h + 12.0, bar_x + 18.0, y0 + bar_h + 22.0);
    }
    put(t, "</g>\n</svg>\n");
}
