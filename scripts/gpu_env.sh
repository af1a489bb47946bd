# scripts/gpu_env.sh: sourced by the GPU scripts (bench/gpu.sh, gpu_ab.sh, python_gpu.sh,
# multigpu.sh). The GPU machines lack some Debian packages and reach no registry: wm_gpu_env
# unpacks the .deb files of folder $1, if any (fill it here with `apt-get download NAME...`;
# see each script; the library itself needs none) into /tmp/wm-deps. It sets the arrays `cm`
# (CMake arguments) and `gen` (the generator: Ninja where there is one).
wm_gpu_env() {
    local deps=$1 d=/tmp/wm-deps f
    cm=()
    gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    mkdir -p $d
    for f in "$deps"/*.deb; do [ -f "$f" ] && dpkg -x "$f" $d; done
    return 0
}
