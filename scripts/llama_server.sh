#!/usr/bin/env bash
# Build llama.cpp's own HTTP server (`llama-server`) once, from the llama.cpp sources
# vendored in the llama-cpp-python sdist the venv already uses, and cache the binary
# like the wheel. It is the "real server nobody here wrote" the tests drive the
# anthropic provider (Messages API at /v1/messages) and the local provider's server
# mode (OpenAI API at /v1/chat/completions) against.
#
#   scripts/llama_server.sh          # prints the cached binary's path (builds it first)
#
# Only the llama-server target is built (about 6 minutes on 2 cores); the same portable
# CPU flags as the wheel (see bootstrap.sh: a native build uses AMX tiles this kind of VM
# does not grant, and a cached native binary would die with SIGILL on an older machine).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$here/.venv/bin/python}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/experience"
llama_version="0.3.36"
out="$cache/bin/llama-server-$llama_version"

if [ -x "$out" ]; then echo "$out"; exit 0; fi

fail() { printf 'llama_server: FAILED at step: %s\n' "$*" >&2; exit 1; }
work="$(mktemp -d "${TMPDIR:-/tmp}/llama-server.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "==> building llama-server from llama-cpp-python $llama_version's sources (once)" >&2
"$python" -m pip --disable-pip-version-check -q download --no-deps --no-binary :all: \
    "llama-cpp-python==$llama_version" -d "$work" >&2 \
    || fail "download the llama-cpp-python sdist"
tar xzf "$work"/llama_cpp_python-"$llama_version".tar.gz -C "$work" || fail "unpack the sdist"
src="$work/llama_cpp_python-$llama_version/vendor/llama.cpp"
cpu_flags=(-DGGML_NATIVE=OFF)
if [ "$(uname -m)" = x86_64 ]; then
    cpu_flags+=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
fi
# No curl: the tests hand it a model file, it never downloads one.
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DBUILD_SHARED_LIBS=OFF "${cpu_flags[@]}" >"$work/cmake.log" 2>&1 \
    || { tail -20 "$work/cmake.log" >&2; fail "configure (needs cmake, g++)"; }
cmake --build "$work/build" --target llama-server -j "$(nproc)" >"$work/build.log" 2>&1 \
    || { tail -30 "$work/build.log" >&2; fail "build llama-server"; }
mkdir -p "$(dirname "$out")"
install -m 0755 "$work/build/bin/llama-server" "$out.tmp" && mv "$out.tmp" "$out"
echo "$out"
