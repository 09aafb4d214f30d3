/* `clattn bench`: timing of attention calls; see tools/bench.c. */
#ifndef CLATTN_TOOLS_BENCH_H
#define CLATTN_TOOLS_BENCH_H

/* The CLI's names of the masks, indexed by clattn_mask, NULL-terminated (clattn.c):
 * one spelling for `run --mask` and `bench --shapes`. */
extern const char *const cli_mask_names[];

/* Runs the bench subcommand on argv (after "bench"); returns the exit status. */
int cmd_bench(int argc, char **argv);

/* Runs the tune subcommand on argv (after "tune"); returns the exit status. */
int cmd_tune(int argc, char **argv);

#endif
