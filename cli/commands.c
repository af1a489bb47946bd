/*
 * commands.c: the one table of the tool's commands: for each its name, arguments, summary,
 * options (with their defaults and ranges), one example and the handler. main.c dispatches
 * through it and prints the usage and every command's --help from it; util.c's option parser
 * reads each command's options from it. A new command or option is one entry here.
 */
#include "cli.h"

#define END                                                                                        \
    { NULL, CLI_FLAG, NULL, false, false, 0, 0, NULL, NULL, false }
#define FLAG(name, help)                                                                           \
    { name, CLI_FLAG, NULL, false, false, 0, 0, NULL, help, false }
/* A flag that needs a part this build may lack: listed only where it is built (`have`). */
#define FLAG_BUILT(name, have, help)                                                               \
    { name, CLI_FLAG, NULL, false, false, 0, 0, NULL, help, !(have) }
#define TEXT(name, value, def, help)                                                               \
    { name, CLI_TEXT, value, false, false, 0, 0, def, help, false }
#define NUM(name, lo, hi, def, help)                                                               \
    { name, CLI_NUM, "N", false, false, lo, hi, def, help, false }
#define NUM_AS(name, value, lo, hi, def, help)                                                     \
    { name, CLI_NUM, value, false, false, lo, hi, def, help, false }
#define SIZE(name, lo, def, help)                                                                  \
    { name, CLI_SIZE, "BYTES", false, false, lo, UINT64_MAX, def, help, false }

/* --set, the same on every command that opens a FILE. */
#define SET_OPT                                                                                    \
    FLAG("set", "a shard (or GGUF split part) opens its whole set; without it a shard is that "    \
                "file alone and an index is its set")

static const cli_option info_opts[] = {
    SET_OPT,
    FLAG("json", "JSON on one line instead of the table"),
    FLAG("metadata", "every metadata value in full (long strings and arrays are cut otherwise)"),
    TEXT("as", "TYPE", NULL,
         "also the sizes tensors would take converted to TYPE (" CLI_TARGETS ")"),
    END,
};

#define CYCLES_MAX 100000
#define THREADS_HELP "reader threads of heap loads"

static const cli_option load_opts[] = {
    {"mode", CLI_TEXT, "heap|mmap|mmap-private", false, true, 0, 0, NULL,
     "how the weights come into memory: read into the heap, mapped shared, mapped private", false},
    SET_OPT,
    {"lock", CLI_TEXT, "best-effort|required", true, false, 0, 0, "off; --lock alone: required",
     "mlock the weights; best-effort goes on without the lock where it is refused", false},
    FLAG("prefetch", "mmap modes: read the data in at load (MADV_POPULATE_READ)"),
    FLAG("touch", "read a byte of every page after each load"),
    NUM("cycles", 1, CYCLES_MAX, "1", "load and release this many times"),
    NUM("threads", 0, 64, "0: one per online CPU", THREADS_HELP),
    SIZE("max-buffer", 0, "0: no limit", "the largest buffer one load allocates"),
    TEXT("convert", "SPEC", NULL,
         "heap mode: TYPE (every tensor) or FROM:TO,FROM:TO... (targets " CLI_TARGETS ")"),
    TEXT("backend", "cpu|cuda[:N[,M...]]", "cpu",
         "where the tensors go; cuda:0,1 places them over several devices"),
    TEXT("placement", "balance|layers", "balance",
         "several devices: runs of about equal bytes, or whole layers per device"),
    SIZE("pinned-budget", 1, "256M", "CUDA: pinned staging memory"),
    FLAG("registered", "CUDA, mmap modes: register the mapping instead of staging it"),
    FLAG("direct", "CUDA staged: read with O_DIRECT, past the page cache, where allowed"),
    TEXT("direct-io", "auto|off|on", "auto",
         "heap and CUDA staged: auto reads what the page cache holds through it and the rest "
         "with O_DIRECT; off: all buffered; on: all O_DIRECT (as --direct)"),
    FLAG("hold", "after the last load, print this process's pid and keep the model loaded until "
                 "SIGINT, SIGTERM or SIGUSR1 (for probe --pid)"),
    FLAG("json", "JSON on one line instead of the table"),
    END,
};

static const cli_option check_opts[] = {
    SET_OPT,
    NUM("cycles", 1, CYCLES_MAX, "3", "cycles per mode"),
    NUM("threads", 0, 64, "0: one per online CPU", THREADS_HELP),
    FLAG("json", "JSON on one line instead of the table"),
    FLAG_BUILT("ggml", CLI_HAVE_GGML,
               "load through the ggml bridge and read every tensor back through ggml"),
    FLAG_BUILT("llama", CLI_HAVE_LLAMA,
               "load into llama.cpp through the llama.cpp bridge in each load mode, decode one "
               "token, free, and measure each cycle"),
    END,
};

static const cli_option demo_opts[] = {
    TEXT("model", "PATH", "default-SIZE.gguf in $XDG_CACHE_HOME/weightmap or ~/.cache/weightmap",
         "the model to check; made there (make-model, GGUF) when PATH does not exist"),
    SIZE("size", 1 << 20, "512M", "the size of the model demo makes"),
    NUM("cycles", 1, CYCLES_MAX, "3", "cycles per mode"),
    FLAG("json", "JSON on one line instead of the table"),
    END,
};

static const cli_option probe_opts[] = {
    NUM("pid", 1, 2147483647, "this process", "the process to look at"),
    TEXT("file", "F", "every .gguf and .safetensors file", "only the regions of the file F"),
    FLAG("json", "JSON instead of the table"),
    END,
};

static const cli_option make_model_opts[] = {
    {"size", CLI_SIZE, "BYTES", false, true, 1, UINT64_MAX, NULL,
     "the file's size at most; the shapes are chosen to come close", false},
    NUM("seed", 0, UINT64_MAX, "0", "the data's seed: the same arguments give the same bytes"),
    TEXT("format", "gguf|safetensors", "by OUT's extension, else gguf",
         "GGUF (Q8_0, Q4_0 matrices) or safetensors (F16)"),
    NUM("shards", 1, 9999, "one file", "a set of N files (and an index for safetensors)"),
    END,
};

static const cli_option cat_opts[] = {
    SET_OPT,
    TEXT("as", "TYPE", "as stored", "convert the tensor to TYPE (" CLI_TARGETS ")"),
    FLAG("force", "write binary to a terminal too"),
    END,
};

#define MODE_OPT(req, def)                                                                         \
    {                                                                                              \
        "mode", CLI_TEXT, "heap|mmap|mmap-private", false, req, 0, 0, def,                         \
            "how the weights would come into memory (as load --mode)", false                       \
    }
#define BACKEND_OPT                                                                                \
    TEXT("backend", "cpu|cuda[:N[,M...]]", "cpu", "where the tensors would go (as load --backend)")

static const cli_option fit_opts[] = {
    MODE_OPT(true, NULL),
    {"lock", CLI_TEXT, "best-effort|required", true, false, 0, 0, "off; --lock alone: required",
     "the load would mlock the weights", false},
    BACKEND_OPT,
    NUM("threads", 0, 64, "0: one per online CPU", THREADS_HELP),
    FLAG("json", "JSON on one line instead of the table"),
    END,
};

static const cli_option swap_opts[] = {
    {"budget", CLI_SIZE, "BYTES", false, true, 1, UINT64_MAX, NULL,
     "host bytes the pool's models may hold, loads' peaks included", false},
    SIZE("device-budget", 1, "no limit", "device bytes the pool's models may hold, per device"),
    FLAG("sleep", "a device model that must make room sleeps in host memory instead of "
                  "going, where the budget has room for its copy (WM_POOL_SLEEP)"),
    NUM("cycles", 1, CYCLES_MAX, "3", "rounds over the files"),
    {"mode", CLI_TEXT, "heap|mmap|mmap-private", false, false, 0, 0, "heap; --llama: none",
     "how the weights come into memory (as load --mode); with --llama, llama.cpp's load mode: "
     "none, mmap, mlock, mmap-mlock, direct-io or auto",
     false},
    BACKEND_OPT,
    NUM("threads", 0, 64, "0: one per online CPU", THREADS_HELP),
    FLAG("json", "JSON on one line instead of the table"),
    FLAG_BUILT("llama", CLI_HAVE_LLAMA,
               "llama.cpp models through the llama.cpp bridge's pool (wm_llama_pool_get), on the "
               "CPU, each decoding one token after its get; evictions are llama_model_free"),
    END,
};

#ifdef WM_CLI_TRACE
static const cli_option trace_opts[] = {
    TEXT("file", "F", "any GGUF or safetensors file over 1 MiB",
         "a weight file to follow (repeat for several)"),
    TEXT("load-marker", "SPEC", NULL,
         "a call of this function is one load, entry to return (repeat for several)"),
    TEXT("cycles-marker", "SPEC", NULL,
         "the return of this function means \"the model is released\" (repeat for several)"),
    TEXT("release-marker", "SPEC", NULL, "the same as --cycles-marker"),
    FLAG("no-known-markers",
         "no known runtime's load and release functions as markers (llama.cpp, whisper.cpp...)"),
    TEXT("release-signal", "SIG", "RTMIN+4",
         "the signal the program raises for a release (a number, USR1, USR2, RTMIN+N)"),
    FLAG("strict", "exit 3 when a rule could not be judged (1 when one is broken)"),
    FLAG("json", "the report as JSON"),
    TEXT("svg", "OUT", NULL, "also a picture of the footprint, loads, releases and mappings"),
    TEXT("out", "REPORT", "standard output", "write the report to this file"),
    NUM_AS("interval", "MS", 1, 10000, "2", "milliseconds between two footprint samples"),
    END,
};
#endif

const cli_command cli_commands[] = {
    {"info", "FILE", "what is in a weight file: format, metadata, tensors, sizes",
     "What is in FILE (GGUF, safetensors, a sharded set through its index, or with --set the\n"
     "whole set of any shard or split part; a shard alone is that file): the format, every\n"
     "metadata entry, every tensor (type, shape, offset, bytes) and the totals by type.",
     info_opts, "weightmap info model.gguf --as f16", false, cmd_info},
    {"load", "FILE", "load, touch and release FILE; what each cycle cost and gave back",
     "Loads FILE with the mode given (there is no default), releases it, and prints per cycle\n"
     "the load time and the memory figures loaded and after the release: the footprint,\n"
     "privatised and locked bytes, the regions that map the file, and the library's ledger,\n"
     "which must read 0. Exit 1 when memory is not returned. FILE opens as info opens it.",
     load_opts, "weightmap load model.gguf --mode heap --cycles 3 --threads 0", false, cmd_load},
    {"check", "FILE", "every mode in turn: is every byte returned?",
     "load in every mode (heap, mmap, mmap-private), several cycles each, and one verdict:\n"
     "\"all memory returned\", or the rows marked LEAK and exit 1. FILE opens as info opens\n"
     "it.",
     check_opts, "weightmap check model.gguf --cycles 5", false, cmd_check},
    {"probe", "", "a process's memory figures and every region of its weight files",
     "The memory figures of a process (footprint, resident, file resident, locked, committed)\n"
     "and every region that maps a weight file, with its resident, privatised and locked\n"
     "bytes. `weightmap load FILE --mode M --hold` gives a process to look at.",
     probe_opts, "weightmap probe --pid 1234 --json", false, cmd_probe},
    {"make-model", "OUT", "a deterministic llama-shaped model (llama.cpp loads it)",
     "Writes a llama-shaped model to OUT: token embeddings, attention and feed-forward blocks,\n"
     "norms, the output head, llama.* hyper-parameters and a tokenizer. The same arguments\n"
     "give the same bytes. With --shards, OUT's stem + -0000K-of-0000N for each part.",
     make_model_opts, "weightmap make-model /tmp/m.gguf --size 64M --seed 1", false,
     cmd_make_model},
    {"demo", "", "check on a model made on first use (512 MiB, cached)",
     "check on the default model, made on first use in the cache folder (created when\n"
     "missing: $XDG_CACHE_HOME/weightmap, else $HOME/.cache/weightmap, else\n"
     "$TMPDIR/weightmap-cache-UID), or on --model PATH.",
     demo_opts, "weightmap demo --size 64M --cycles 1", false, cmd_demo},
    {"cat", "FILE TENSOR", "one tensor's bytes to standard output, converted if asked",
     "TENSOR's bytes, as stored or converted (--as), to standard output. FILE opens as info\n"
     "opens it: a shard is that file alone, an index its set, and with --set a shard or split\n"
     "part its whole set.",
     cat_opts, "weightmap cat model.gguf token_embd.weight --as f32 > embd.f32", false, cmd_cat},
    {"fit", "FILE", "what loading FILE will cost, against what the system has",
     "What loading FILE in --mode on --backend will cost, from the plan the load would run\n"
     "(staging, read threads, conversion buffers included): bytes by kind (anonymous, file\n"
     "shared, file private, locked, pinned, device) at the load's peak and while loaded; and\n"
     "what the system has now (MemAvailable, the cgroup's memory.max less memory.current, a\n"
     "device's free memory). Exit 0 when it fits; 1 naming what does not fit and the mode\n"
     "that would.",
     fit_opts, "weightmap fit model.gguf --mode heap", false, cmd_fit},
    {"swap", "FILE...", "load files in rotation through a pool under a budget; the verdict",
     "Loads the files in turn, --cycles rounds, through a pool of models under --budget (least\n"
     "recently used idle models evicted until the next fits), and prints per switch the time,\n"
     "the footprint, the ledger's peak and the bytes the evictions returned; then the verdict:\n"
     "the peak never above the budget (plus the pool's own entries), every eviction returned\n"
     "every byte by the ledger, the footprint after the last release as before the first\n"
     "load. A budget below what a file needs is refused at once, naming the file.",
     swap_opts, "weightmap swap a.gguf b.gguf c.gguf --cycles 5 --budget 2G", false, cmd_swap},
#ifdef WM_CLI_TRACE /* tools/trace/: Linux's (LD_PRELOAD, /proc; docs/PORTING.md for Darwin) */
    {"trace", "-- CMD ARGS...", "any program's weight-memory lifecycle, and the verdicts",
     "Runs CMD with libwmtrace.so preloaded and reports its weight-memory lifecycle: malloc\n"
     "per thread and per load (scratch, and what a load kept), every mapping of a weight\n"
     "file, mlock, the figures at each release and their change; then the facts and the\n"
     "verdicts (docs/TRACE.md has the rules). SPEC names any function of the process:\n"
     "SYMBOL, OBJECT:SYMBOL or OBJECT+0xOFFSET (OBJECT: the start of a loaded file's name),\n"
     "hooked however it is called, then =ret, =argN or =*argN where the handle is that pairs\n"
     "a release with its load. The verdict: broken, clean (every rule judged and held) or not\n"
     "judged (which rule, and why). Exit: 1 when a rule is broken, else CMD's status (128+N\n"
     "for signal N), else 3 with --strict when something was not judged. Options end at CMD.",
     trace_opts,
     "weightmap trace --load-marker wm_model_load --cycles-marker wm_model_release -- "
     "weightmap load m.gguf --mode heap",
     true, cmd_trace},
#endif
    {NULL, NULL, NULL, NULL, NULL, NULL, false, NULL},
};
