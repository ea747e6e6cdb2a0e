/* A stand-in SPANK host for the fast loadability test: it exports the spank_* and slurm_*
 * functions the plugin imports (as srun and slurmstepd do), dlopen()s the plugin with
 * immediate binding, checks its data symbols and calls its callbacks. Behaviour is steered
 * by environment variables so one binary covers every case:
 *   STUB_CTX=local|remote|allocator|slurmd|job_script   what spank_context() answers
 *   STUB_OPT=<value>|-                                  the option's value ("-": not given)
 *   STUB_CALL=init|prolog|task_init|exit|option:<value>|spares:<value> which callback to call
 *   STUB_STEP=<id>                                      the step id (S_JOB_STEPID), default 1
 *   STUB_NODEID=<n>                                     the node's index (S_JOB_NODEID), default 0
 * Built with -DWITH_PREPEND it also exports spank_prepend_task_argv, as slurmstepd of Slurm
 * 23.11 and newer does, and prints what the plugin prepends.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct spank_option {
    char *name; char *arginfo; char *usage; int has_arg; int val;
    int (*cb)(int val, const char *optarg, int remote);
};
typedef void *spank_t;
static struct spank_option *registered, *registered_spares;

int spank_context(void) {
    const char *c = getenv("STUB_CTX");
    if (!c) return 0;
    if (!strcmp(c, "local")) return 1;
    if (!strcmp(c, "remote")) return 2;
    if (!strcmp(c, "allocator")) return 3;
    if (!strcmp(c, "slurmd")) return 4;
    if (!strcmp(c, "job_script")) return 5;
    return 0;
}
int spank_option_register(spank_t sp, struct spank_option *opt) {
    (void)sp;
    if (!registered) registered = opt; else registered_spares = opt;
    printf("registered name=%s arginfo=%s has_arg=%d usage_set=%d\n", opt->name, opt->arginfo,
           opt->has_arg, opt->usage != NULL);
    return 0;
}
int spank_option_getopt(spank_t sp, struct spank_option *opt, char **optarg) {
    (void)sp;
    /* --fabric-check from STUB_OPT, --fabric-check-spares from STUB_SPARES */
    const char *v = getenv(opt->val == 1 ? "STUB_OPT" : "STUB_SPARES");
    if (!v || !strcmp(v, "-")) return 1; /* ESPANK_ERROR: not given */
    *optarg = (char *)v;
    return 0;
}
int spank_get_item(spank_t sp, int item, ...) {
    (void)sp;
    va_list ap; va_start(ap, item);
    if (item == 2) { uint32_t *id = va_arg(ap, uint32_t *); *id = 4242; va_end(ap); return 0; }
    if (item == 0) { uint32_t *uid = va_arg(ap, uint32_t *); *uid = 1000; va_end(ap); return 0; }
    if (item == 3) {
        uint32_t *step = va_arg(ap, uint32_t *);
        *step = getenv("STUB_STEP") ? (uint32_t)strtoul(getenv("STUB_STEP"), NULL, 0) : 1;
        va_end(ap); return 0;
    }
    if (item == 4) {
        uint32_t *n = va_arg(ap, uint32_t *);
        *n = getenv("STUB_NNODES") ? (uint32_t)strtoul(getenv("STUB_NNODES"), NULL, 0) : 1;
        va_end(ap); return 0;
    }
    if (item == 5) {
        uint32_t *nodeid = va_arg(ap, uint32_t *);
        *nodeid = getenv("STUB_NODEID") ? (uint32_t)strtoul(getenv("STUB_NODEID"), NULL, 0) : 0;
        va_end(ap); return 0;
    }
    va_end(ap); return 3;
}
static void logv(const char *lvl, const char *fmt, va_list ap) {
    printf("%s: ", lvl); vprintf(fmt, ap); printf("\n");
}
int spank_getenv(spank_t sp, const char *var, char *buf, int len) {
    (void)sp;
    const char *v = strcmp(var, "SLURM_STEP_NODELIST") ? NULL : getenv("STUB_STEP_NODELIST");
    if (!v) return 3004; /* ESPANK_ENV_NOEXIST */
    if ((int)strlen(v) >= len) return 3005; /* ESPANK_NOSPACE */
    strcpy(buf, v);
    return 0;
}
int spank_setenv(spank_t sp, const char *var, const char *val, int overwrite) {
    (void)sp;
    printf("setenv %s=%s overwrite=%d\n", var, val, overwrite);
    return 0;
}
int spank_unsetenv(spank_t sp, const char *var) {
    (void)sp;
    printf("unsetenv %s\n", var);
    return 0;
}
#ifdef WITH_PREPEND
int spank_prepend_task_argv(spank_t sp, int argc, const char *argv[]) {
    (void)sp;
    printf("prepend argc=%d", argc);
    for (int i = 0; i < argc; i++) printf(" [%s]", argv[i]);
    printf(" null_end=%d\n", argv[argc] == NULL);
    return 0;
}
#endif
void slurm_info(const char *fmt, ...) { va_list ap; va_start(ap, fmt); logv("info", fmt, ap); va_end(ap); }
void slurm_error(const char *fmt, ...) { va_list ap; va_start(ap, fmt); logv("error", fmt, ap); va_end(ap); }
void slurm_verbose(const char *fmt, ...) { va_list ap; va_start(ap, fmt); logv("verbose", fmt, ap); va_end(ap); }
void slurm_debug(const char *fmt, ...) { va_list ap; va_start(ap, fmt); logv("debug", fmt, ap); va_end(ap); }

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: stub_host PLUGIN.so [ARGS...]\n"); return 2; }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!h) { printf("dlopen failed: %s\n", dlerror()); return 1; }
    const char *name = dlsym(h, "plugin_name");
    const char *type = dlsym(h, "plugin_type");
    const unsigned int *version = dlsym(h, "plugin_version");
    if (!name || !type || !version) { printf("missing data symbols\n"); return 1; }
    printf("plugin_name=%s plugin_type=%s plugin_version=0x%x\n", name, type, *version);
    typedef int (*spank_f)(spank_t, int, char **);
    spank_f init = (spank_f)dlsym(h, "slurm_spank_init");
    spank_f prolog = (spank_f)dlsym(h, "slurm_spank_job_prolog");
    spank_f task_init = (spank_f)dlsym(h, "slurm_spank_task_init");
    spank_f spank_exit = (spank_f)dlsym(h, "slurm_spank_exit");
    const char *call = getenv("STUB_CALL") ? getenv("STUB_CALL") : "init";
    int rc;
    if (!strcmp(call, "prolog")) {
        rc = prolog((spank_t)0x1, argc - 2, argv + 2);
    } else if (!strcmp(call, "exit")) {
        if (!spank_exit) { printf("no slurm_spank_exit\n"); return 1; }
        rc = spank_exit((spank_t)0x1, argc - 2, argv + 2);
    } else if (!strcmp(call, "task_init")) {
        if (!task_init) { printf("no slurm_spank_task_init\n"); return 1; }
        rc = task_init((spank_t)0x1, argc - 2, argv + 2);
    } else {
        rc = init((spank_t)0x1, argc - 2, argv + 2);
        if (!strncmp(call, "option:", 7)) {
            if (!registered) { printf("no option registered\n"); return 1; }
            rc = registered->cb(registered->val, call + 7, 0);
        }
        if (!strncmp(call, "spares:", 7)) {
            if (!registered_spares) { printf("no spares option registered\n"); return 1; }
            rc = registered_spares->cb(registered_spares->val, call + 7, 0);
        }
    }
    printf("rc=%d\n", rc);
    return 0;
}
