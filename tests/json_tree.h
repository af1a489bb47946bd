/*
 * json_tree.h: a JSON tree for tests that read JSON reports (test_trace.c), over the library's
 * own parser (src/format/json.h): parsed in the library's arena, then copied into malloc'd nodes
 * so that any number of trees may be alive at once and the library's ledger is empty again as
 * soon as jparse returns. Lookups are NULL-safe: a missing member or item is NULL, and the
 * predicates are false on NULL.
 */
#ifndef WMT_JSON_TREE_H
#define WMT_JSON_TREE_H

#include "format/json.h"

#include <stdlib.h>
#include <string.h>

typedef struct jnode {
    struct jnode *next, *child;
    char *key, *str; /* str: a string's value */
    double num;      /* a number's value */
    int type;        /* wm__jtype */
} jnode;

static jnode *jcopy(const wm__jval *v) {
    jnode *n = calloc(1, sizeof *n);
    if (!n) abort();
    n->type = v->type;
    n->key = v->key ? strdup(v->key) : NULL;
    if (v->type == WM_JSTRING) n->str = strdup(v->str);
    if (v->type == WM_JNUMBER && !wm__json_f64(v, &n->num)) abort();
    jnode **tail = &n->child;
    for (const wm__jval *c = v->child; c; c = c->next) {
        *tail = jcopy(c);
        tail = &(*tail)->next;
    }
    return n;
}

static void jfree(jnode *n) {
    while (n) {
        jnode *next = n->next;
        jfree(n->child);
        free(n->key);
        free(n->str);
        free(n);
        n = next;
    }
}

/* The tree of a NUL-terminated JSON text, or NULL when it is not JSON. */
static jnode *jparse(const char *text) {
    const wm__jval *root = NULL;
    wm__json_begin();
    wm_status st =
        wm__json_load((const unsigned char *)text, strlen(text), 0, "report", &root, NULL);
    jnode *n = st ? NULL : jcopy(root);
    wm__json_end();
    return n;
}

static const jnode *jget(const jnode *o, const char *key) {
    if (!o || o->type != WM_JOBJECT) return NULL;
    for (const jnode *c = o->child; c; c = c->next)
        if (!strcmp(c->key, key)) return c;
    return NULL;
}
static const jnode *jfirst(const jnode *a) { return a ? a->child : NULL; }
static const jnode *jitem(const jnode *a, int k) {
    const jnode *c = jfirst(a);
    while (c && k-- > 0)
        c = c->next;
    return c;
}
static int jsize(const jnode *a) {
    int n = 0;
    for (const jnode *c = jfirst(a); c; c = c->next)
        n++;
    return n;
}
static bool jis(const jnode *v, int type) { return v && v->type == type; }
#define jforeach(v, a) for ((v) = jfirst(a); (v); (v) = (v)->next)

#endif /* WMT_JSON_TREE_H */
