/*
 * llama_log.c: llama.cpp's log during a load through the llama.cpp bridge (llama_bridge.h):
 * whatever callback the process gave llama_log_set (a runtime's, the CLI's silent one, or
 * llama.cpp's default) still gets every line, and the loading thread keeps the last line of
 * level ERROR that says why (llama.cpp's closing "failed to load model" says only that it
 * failed), so that a refused model's error carries llama.cpp's own reason. Public API only, of
 * llama.cpp and ggml (llama.h).
 */
#include "llama_bridge.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned users; /* loads between begin and end: the capture is installed while > 0 */
static ggml_log_callback prev;
static void *prev_user;
static _Thread_local char *kept; /* this thread's load's buffer, or NULL */
static _Thread_local size_t kept_cap;

static void capture(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (kept && level == GGML_LOG_LEVEL_ERROR && text && !strstr(text, "failed to load model")) {
        size_t n = strcspn(text, "\n");
        n = n < kept_cap - 1 ? n : kept_cap - 1;
        memcpy(kept, text, n);
        kept[n] = 0;
    }
    pthread_mutex_lock(&lock);
    ggml_log_callback cb = prev;
    void *u = prev_user;
    pthread_mutex_unlock(&lock);
    if (cb) cb(level, text, u);
}

void wm__llama_log_begin(char *buf, size_t cap) {
    buf[0] = 0;
    kept = buf;
    kept_cap = cap;
    pthread_mutex_lock(&lock);
    if (users++ == 0) {
        llama_log_get(&prev, &prev_user);
        if (prev == capture) prev = NULL; /* cannot be: the last end restored it */
        llama_log_set(capture, NULL);
    }
    pthread_mutex_unlock(&lock);
}

void wm__llama_log_end(void) {
    kept = NULL;
    pthread_mutex_lock(&lock);
    if (--users == 0) llama_log_set(prev, prev_user);
    pthread_mutex_unlock(&lock);
}

void wm__llama_say(enum ggml_log_level level, const char *fmt, ...) {
    ggml_log_callback cb = NULL;
    void *user = NULL;
    llama_log_get(&cb, &user);
    if (!cb) return;
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    cb(level, text, user);
}
