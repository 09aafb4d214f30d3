/* Progress lines on standard error; see progress.h. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "1h02m", "3m05s", "42s" */
static void format_duration(char *out, size_t len, double s)
{
    const long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(out, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(out, len, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(out, len, "%lds", t);
}

void progress_start(progress *p, const char *command, long total, int quiet)
{
    p->command = command;
    p->total = total > 0 ? total : 1;
    p->done = 0;
    p->t0 = now_s();
    p->quiet = quiet;
    p->tty = isatty(STDERR_FILENO);
    p->line_open = 0;
}

void progress_step(progress *p, const char *fmt, ...)
{
    if (p->quiet) {
        p->done++;
        return;
    }
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const double elapsed = now_s() - p->t0;
    char el[32], left[48] = "";
    format_duration(el, sizeof el, elapsed);
    if (p->done > 0) { /* the mean step so far, times the steps left */
        char rest[32];
        format_duration(rest, sizeof rest,
                        elapsed / (double)p->done * (double)(p->total - p->done));
        snprintf(left, sizeof left, ", about %s left", rest);
    }
    if (p->tty) {
        fprintf(stderr, "\r\033[K%s: [%ld/%ld] %s (%s elapsed%s)", p->command, p->done + 1,
                p->total, what, el, left);
        p->line_open = 1;
    } else {
        fprintf(stderr, "%s: [%ld/%ld] %s (%s elapsed%s)\n", p->command, p->done + 1, p->total,
                what, el, left);
    }
    fflush(stderr);
    p->done++;
}

void progress_skip(progress *p, long n)
{
    p->done += n;
    if (p->done > p->total)
        p->done = p->total;
}

void progress_clear(progress *p)
{
    if (p->line_open) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        p->line_open = 0;
    }
}
