/* The knob table (knobs.h) and its one accessor. */
#include "knobs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

static const agmm_knob table[AGMM_KNOB_COUNT] = {
#define AGMM_KNOB_ENTRY(id, kind, def, allowed, min, max, doc) {"AGMM_" #id, kind, def, allowed, min, max, doc},
    AGMM_KNOBS(AGMM_KNOB_ENTRY)
#undef AGMM_KNOB_ENTRY
};

const agmm_knob *agmm_knob_at(agmm_knob_id id)
{
    return (unsigned)id < AGMM_KNOB_COUNT ? &table[id] : NULL;
}

/* The index of `word` among the '|'-separated words of `allowed`, or -1. */
static int word_index(const char *allowed, const char *word)
{
    size_t len = strlen(word);
    int i = 0;
    for (const char *p = allowed; *p; i++) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && strncmp(p, word, n) == 0)
            return i;
        if (bar == NULL)
            break;
        p = bar + 1;
    }
    return -1;
}

/* A number's text to a value in [min, max] (whole if `whole`): 1, or 0 if it is not one. */
static int parse_number(const char *text, double min, double max, int whole, double *out)
{
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || !isfinite(v) || v < min || v > max || (whole && v != floor(v)))
        return 0;
    *out = v;
    return 1;
}

size_t agmm_knob_allowed(const agmm_knob *k, char *buf, size_t len)
{
    switch (k->kind) {
    case AGMM_KNOB_CHOICE: {
        size_t used = agmm_format(buf, len, "one of ");
        for (const char *p = k->allowed; *p && used + 3 < len; p++) {
            if (*p == '|')
                buf[used++] = ',';
            buf[used++] = *p == '|' ? ' ' : *p;
        }
        buf[used] = '\0';
        return used;
    }
    case AGMM_KNOB_NUMBER:
    case AGMM_KNOB_INTEGER:
        return agmm_format(buf, len, "a %s in %g..%g (%s)", k->kind == AGMM_KNOB_INTEGER ? "whole number" : "number",
                           k->min, k->max, k->allowed);
    case AGMM_KNOB_TEXT:
        break;
    }
    return agmm_format(buf, len, "%s", k->allowed);
}

agmm_status agmm_knob_read(agmm_knob_id id, agmm_knob_value *out, agmm_error *err)
{
    const agmm_knob *k = agmm_knob_at(id);
    const char *text = getenv(k->var);
    if (text != NULL && text[0] == '\0' && k->kind != AGMM_KNOB_TEXT)
        text = NULL;
    *out = (agmm_knob_value){.text = text, .choice = -1};
    int ok = 1;
    switch (k->kind) {
    case AGMM_KNOB_CHOICE:
        out->choice = word_index(k->allowed, k->def);
        if (text != NULL) {
            int i = word_index(k->allowed, text);
            ok = i >= 0;
            if (ok)
                out->choice = i;
        }
        break;
    case AGMM_KNOB_NUMBER:
    case AGMM_KNOB_INTEGER:
        /* The default is declared as text once, in the table; it always parses (tests/test_knobs.c). */
        parse_number(k->def, k->min, k->max, k->kind == AGMM_KNOB_INTEGER, &out->number);
        if (text != NULL) {
            double v = 0;
            ok = parse_number(text, k->min, k->max, k->kind == AGMM_KNOB_INTEGER, &v);
            if (ok)
                out->number = v;
        }
        break;
    case AGMM_KNOB_TEXT:
        break;
    }
    if (ok)
        return AGMM_SUCCESS;
    char allowed[256];
    agmm_knob_allowed(k, allowed, sizeof allowed);
    out->text = NULL;
    return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "%s=%s: must be %s (unset: %s)", k->var, text, allowed, k->def);
}

agmm_status agmm_knobs_check(agmm_error *err)
{
    for (int i = 0; i < AGMM_KNOB_COUNT; i++) {
        agmm_knob_value v;
        agmm_status st = agmm_knob_read((agmm_knob_id)i, &v, err);
        if (st != AGMM_SUCCESS)
            return st;
    }
    return AGMM_SUCCESS;
}

int agmm_log_level_from_env(void)
{
    /* The knob's words are in the order of the levels. */
    agmm_error ignored;
    agmm_knob_value v;
    agmm_knob_read(AGMM_KNOB_LOG, &v, &ignored);
    return v.choice;
}
