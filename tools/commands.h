/* The subcommands of the `clattn` program, one file each (tools/main.c dispatches).
 * Each runs on argv after its name and returns the exit status: 0 success, 1 failure,
 * 2 usage error. */
#ifndef CLATTN_TOOLS_COMMANDS_H
#define CLATTN_TOOLS_COMMANDS_H

int cmd_devices(int argc, char **argv); /* devices.c */
int cmd_demo(int argc, char **argv);    /* demo.c */
int cmd_run(int argc, char **argv);     /* run.c, run_args.c */
int cmd_bench(int argc, char **argv);   /* bench.c */
int cmd_tune(int argc, char **argv);    /* tune.c */
int cmd_heatmap(int argc, char **argv); /* heatmap.c, svg.c */

#endif
