/* Progress of long subcommands (`clattn tune`, `clattn bench`) on standard error: which
 * step of how many, the elapsed time and an estimate of what is left. On a terminal one
 * line is rewritten in place; otherwise each step is a plain line; nothing at all when
 * quiet. Standard output (tables, JSON) is never touched. */
#ifndef CLATTN_TOOLS_PROGRESS_H
#define CLATTN_TOOLS_PROGRESS_H

#include "cli.h"

typedef struct progress {
    const char *command; /* "clattn tune" */
    long total, done;
    double t0;     /* seconds, monotonic */
    int quiet;     /* --quiet: nothing */
    int tty;       /* standard error is a terminal: one line in place */
    int line_open; /* a line in place waits to be cleared */
} progress;

/* Starts counting `total` steps. */
void progress_start(progress *p, const char *command, long total, int quiet);
/* Announces the next step (printf-style description), then counts it as started. */
void progress_step(progress *p, const char *fmt, ...) CLI_PRINTF(2, 3);
/* Counts `n` steps as done without running them (skipped work). */
void progress_skip(progress *p, long n);
/* Clears the line in place (call before writing a result line to standard output that
 * shares the terminal) and at the end. */
void progress_clear(progress *p);

#endif
