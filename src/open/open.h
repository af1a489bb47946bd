/*
 * open.h: the open layer (src/open/): a file's open and its I/O, over src/os/, handing the bytes
 * to the parsers of src/format/. What the rest of the library calls is in internal.h (the open
 * path); this is what the layer's files call of each other.
 */
#ifndef WM_OPEN_H
#define WM_OPEN_H

#include "../internal.h"

/* The header of the file open as f->shards[0] read (or mapped) and parsed (header.c): GGUF over
 * a growing prefix, safetensors its length then exactly its bytes. f->header holds what the
 * file keeps of it. On failure the caller runs wm__file_free on the half-built file. */
wm_status wm__gguf_read(wm_file *f, wm_error *err);
wm_status wm__safetensors_read(wm_file *f, wm_error *err);

#endif /* WM_OPEN_H */
