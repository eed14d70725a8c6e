/* `auto`'s cache (tune.h): the key of a plan, and the file shared by every process of the user.
 *
 * The file is text, one choice per line, readable and editable by hand:
 *     # agmm tune cache v1
 *     <key>\t<backend>\t<what was measured>
 * A first line other than the header, a line without a key and a backend name, or a line longer
 * than LINE_BYTES makes the whole file unreadable: it is ignored (the caller warns) and the next
 * store replaces it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "tune.h"
#include "../core/knobs.h"

/* Internal, not knobs (core/knobs.h): the first two are the file's format, and a writer that
 * gives up on the lock only loses one cached line, which costs one measurement later. */
#define HEADER "# agmm tune cache v1"
#define LINE_BYTES 1024
#define LOCK_WAIT_MS 2000
/* How auto measures, in every key: a choice measured another way is never matched and costs one
 * measurement. 2: the candidates take turns (tune.c's time_held); keys before it had none, and
 * their candidates were timed one after another, which a moving clock made unreliable. */
#define MEASURING 2

static const char *kind_name(agmm_world_kind kind)
{
    switch (kind) {
    case AGMM_WORLD_CPU: return "cpu";
    case AGMM_WORLD_GPU: return "gpu";
    case AGMM_WORLD_EMULATED: return "emulated";
    case AGMM_WORLD_AUTO: break;
    }
    return "?";
}

void agmm_tune_key(const agmm_plan *shape, const char *device, int nccl_version, char *key, size_t len)
{
    const agmm_rank_info *ri = agmm_ctx_info(shape->ctx);
    int used = snprintf(key, len, "agmm=%d auto=%d nccl=%d device=", AGMM_VERSION, MEASURING, nccl_version);
    /* The device's name with its blanks made underscores: a key is one field of a line. */
    for (const char *c = device; *c && used + 1 < (int)len; c++)
        key[used++] = (*c == ' ' || *c == '\t') ? '_' : *c;
    if (used >= (int)len)
        return;
    key[used] = '\0';
    used += snprintf(key + used, len - (size_t)used, " world=%s W=%d per_device=%d op=%s ", kind_name(ri->kind),
                     ri->nranks, ri->ranks_on_device, agmm_op_name(shape->op));
    if (used >= (int)len)
        return;
    /* The descriptor as the ranks compare it: every field but the backend, defaults resolved. */
    agmm_op_type_of(shape->op)->describe(shape, key + used, len - (size_t)used);
}

const char *agmm_tune_cache_path(char *buf, size_t len)
{
    agmm_error ignored; /* text: any value is allowed */
    agmm_knob_value v;
    agmm_knob_read(AGMM_KNOB_TUNE_CACHE, &v, &ignored);
    const char *env = v.text;
    if (env != NULL) {
        if (env[0] == '\0')
            return NULL;
        snprintf(buf, len, "%s", env);
        return buf;
    }
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0])
        snprintf(buf, len, "%s/agmm/tune.txt", xdg);
    else if (home && home[0])
        snprintf(buf, len, "%s/.cache/agmm/tune.txt", home);
    else
        return NULL;
    return buf;
}

/* Splits a data line (its newline removed) in place into key and backend; 0 if it is not one. */
static int parse_line(char *line, char **key, char **backend)
{
    char *tab = strchr(line, '\t');
    if (tab == NULL || tab == line)
        return 0;
    *tab = '\0';
    *key = line;
    *backend = tab + 1;
    char *end = strchr(*backend, '\t');
    if (end)
        *end = '\0';
    if (**backend == '\0')
        return 0;
    for (const char *c = *backend; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
            return 0;
    return 1;
}

/* Reads the next line into buf (without its newline): 1, 0 at the end, -1 if longer than the
 * buffer. */
static int read_line(FILE *f, char *buf, size_t len)
{
    if (fgets(buf, (int)len, f) == NULL)
        return 0;
    size_t n = strlen(buf);
    if (n > 0 && buf[n - 1] == '\n')
        buf[--n] = '\0';
    else if (!feof(f))
        return -1;
    return 1;
}

/* Walks the file's data lines: visit(key, backend, the whole line, arg) for each; stops early when
 * visit returns non-zero and returns that. 0 at the end (and for a missing file); -1 if the file
 * is not a readable cache (why says where). */
static int walk(const char *path, int (*visit)(const char *key, const char *backend, const char *line, void *arg),
                void *arg, char *why, size_t why_len)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    char line[LINE_BYTES + 2], copy[LINE_BYTES + 2];
    int r = read_line(f, line, sizeof line), lineno = 1, out = 0;
    if (r != 1 || strncmp(line, HEADER, strlen(HEADER)) != 0) {
        snprintf(why, why_len, "%s: line 1 is not \"%s\"", path, HEADER);
        out = -1;
    }
    while (out == 0 && (r = read_line(f, line, sizeof line)) != 0) {
        lineno++;
        if (r > 0 && (line[0] == '#' || line[0] == '\0'))
            continue;
        char *key, *backend;
        if (r > 0)
            memcpy(copy, line, strlen(line) + 1);
        if (r < 0 || !parse_line(line, &key, &backend)) {
            snprintf(why, why_len, "%s: line %d is not \"key<TAB>backend...\" of at most %d bytes", path, lineno,
                     LINE_BYTES);
            out = -1;
        } else {
            out = visit(key, backend, copy, arg);
        }
    }
    fclose(f);
    return out;
}

typedef struct {
    const char *key;
    char *backend;
    size_t len;
} lookup_arg;

static int lookup_visit(const char *key, const char *backend, const char *line, void *varg)
{
    lookup_arg *a = varg;
    if (strcmp(key, a->key) != 0)
        return 0;
    snprintf(a->backend, a->len, "%s", backend);
    return 1;
}

int agmm_tune_file_lookup(const char *path, const char *key, char *backend, size_t len, char *why, size_t why_len)
{
    lookup_arg a = {key, backend, len};
    return walk(path, lookup_visit, &a, why, why_len);
}

/* ---- storing ---- */

/* mkdir -p of the directory holding `path`. */
static void make_parent_dirs(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir)
        return;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0755);
            *p = '/';
        }
    mkdir(dir, 0755);
}

/* Takes the writers' lock, waiting at most LOCK_WAIT_MS; returns its descriptor or -1. */
static int lock_take(const char *path, char *why, size_t why_len)
{
    char lock[4096 + 8];
    snprintf(lock, sizeof lock, "%s.lock", path);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(why, why_len, "%s: %s", lock, strerror(errno));
        return -1;
    }
    for (int waited = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; waited++) {
        if (errno != EWOULDBLOCK || waited >= LOCK_WAIT_MS) {
            snprintf(why, why_len, "%s: %s", lock, errno == EWOULDBLOCK ? "held by another writer for 2 s" : strerror(errno));
            close(fd);
            return -1;
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    return fd;
}

static int check_visit(const char *key, const char *backend, const char *line, void *arg)
{
    return 0;
}

typedef struct {
    FILE *out;
    const char *skip; /* the key being replaced */
} copy_arg;

static int copy_visit(const char *key, const char *backend, const char *line, void *varg)
{
    copy_arg *a = varg;
    if (strcmp(key, a->skip) != 0)
        fprintf(a->out, "%s\n", line);
    return 0;
}

int agmm_tune_file_store(const char *path, const char *key, const char *backend, const char *detail, char *why,
                         size_t why_len)
{
    if (strlen(key) + strlen(backend) + strlen(detail) + 2 > LINE_BYTES) {
        snprintf(why, why_len, "the line for %s would exceed %d bytes", key, LINE_BYTES);
        return -1;
    }
    make_parent_dirs(path);
    int lock = lock_take(path, why, why_len);
    if (lock < 0)
        return -1;
    char tmp[4096 + 16];
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    int fd = mkstemp(tmp);
    FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
    int ok = out != NULL && fchmod(fd, 0644) == 0;
    if (ok) {
        fprintf(out, "%s\n", HEADER);
        /* The lines of every other key, if the whole file is readable; a corrupt one is dropped. */
        copy_arg a = {out, key};
        char ignored[256];
        if (walk(path, check_visit, NULL, ignored, sizeof ignored) == 0)
            walk(path, copy_visit, &a, ignored, sizeof ignored);
        fprintf(out, "%s\t%s\t%s\n", key, backend, detail);
        ok = ok && fflush(out) == 0 && fsync(fd) == 0;
    }
    if (!ok)
        snprintf(why, why_len, "%s: %s", tmp, strerror(errno));
    if (out)
        ok = fclose(out) == 0 && ok;
    else if (fd >= 0)
        close(fd);
    if (ok && rename(tmp, path) != 0) {
        snprintf(why, why_len, "rename %s -> %s: %s", tmp, path, strerror(errno));
        ok = 0;
    }
    if (!ok && fd >= 0)
        unlink(tmp);
    flock(lock, LOCK_UN);
    close(lock);
    return ok ? 0 : -1;
}
