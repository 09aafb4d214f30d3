/* `clattn bench`: timing of attention calls; see tools/bench.c. */
#ifndef CLATTN_TOOLS_BENCH_H
#define CLATTN_TOOLS_BENCH_H

/* Runs the bench subcommand on argv (after "bench"); returns the exit status. */
int cmd_bench(int argc, char **argv);

#endif
