# Progress for the long steps of scripts/*.sh (sourced; issue 31). One function:
#
#   progress_run [--bytes TOTAL --watch GLOB] [--about TEXT] LABEL -- COMMAND...
#
# runs COMMAND with its output in a log file. On a terminal (stderr is a tty) it keeps
# one status line alive every $PROGRESS_INTERVAL seconds (default 5), redrawn with \r:
#   "building llama.cpp ... 40 s (about 3 min on 2 cores)"       (size unknown: a heartbeat)
#   "assembling the model [#####.....] 52% 131/253 MB, about 4 s left"   (--bytes/--watch)
# Not on a terminal (CI logs, pipes) it prints one line when the step starts and one when
# it ends - no \r, no heartbeat. Either way it returns COMMAND's exit status, and on a
# failure prints the last 40 lines of the log and where the whole log is.
#
# The heartbeat is a background loop: killed when COMMAND ends, by a trap if the script
# is interrupted, and it also ends by itself once the shell that started it is gone -
# never a stray loop.

progress_interval() { printf '%s' "${PROGRESS_INTERVAL:-5}"; }

_progress_bytes() {  # the sum of the sizes of the files matching the glob $1 (0 if none)
    local total=0 f size
    for f in $1; do
        [ -f "$f" ] || continue
        size="$(stat -c %s "$f" 2>/dev/null || echo 0)"
        total=$((total + size))
    done
    printf '%s' "$total"
}

_progress_time() {  # seconds -> "40 s" / "3 min 20 s"
    if [ "$1" -lt 60 ]; then printf '%d s' "$1"; else printf '%d min %d s' $(($1 / 60)) $(($1 % 60)); fi
}

_progress_line() {  # label started_ms about total watch -> the status line for now
    local label="$1" started="$2" about="$3" total="$4" watch="$5"
    local elapsed_ms
    elapsed_ms=$(( $(date +%s%3N) - started ))
    if [ -n "$total" ] && [ "$total" -gt 0 ]; then
        local done_ pct filled bar left=""
        done_="$(_progress_bytes "$watch")"
        [ "$done_" -le "$total" ] || done_="$total"
        pct=$((done_ * 100 / total))
        filled=$((pct / 5))
        bar="$(printf '%*s' "$filled" '' | tr ' ' '#')$(printf '%*s' $((20 - filled)) '' | tr ' ' '.')"
        if [ "$done_" -gt 0 ] && [ "$done_" -lt "$total" ]; then
            # the rate so far, rounded up to the next second
            left=", about $(_progress_time $(( ((total - done_) * elapsed_ms / done_ + 999) / 1000 ))) left"
        fi
        printf '%s [%s] %3d%% %d/%d MB%s' "$label" "$bar" "$pct" $((done_ / 1048576)) \
            $((total / 1048576)) "$left"
    else
        printf '%s ... %s%s' "$label" "$(_progress_time $((elapsed_ms / 1000)))" "${about:+ ($about)}"
    fi
}

progress_run() {
    local total="" watch="" about="" label=""
    while [ "$#" -gt 0 ]; do
        case "$1" in
            --bytes) total="$2"; shift 2 ;;
            --watch) watch="$2"; shift 2 ;;
            --about) about="$2"; shift 2 ;;
            --) shift; break ;;
            *) label="$1"; shift ;;
        esac
    done
    local log started rc=0 beat="" tty=0 before=""
    log="$(mktemp "${TMPDIR:-/tmp}/progress.XXXXXX")"
    started="$(date +%s%3N)"  # milliseconds: a time estimate from a few seconds of work
    [ -t 2 ] && tty=1
    if [ "$tty" -eq 1 ]; then
        local interval parent=$$
        interval="$(progress_interval)"
        (
            trap - EXIT INT
            nap=""
            trap 'kill $nap 2>/dev/null; exit 0' TERM  # its sleep goes with it
            while kill -0 "$parent" 2>/dev/null; do  # ends by itself if the script dies
                # \r and erase-line: one status line redrawn in place
                printf '\r\033[K    %s' "$(_progress_line "$label" "$started" "$about" \
                    "$total" "$watch")" >&2
                sleep "$interval" & nap=$!
                wait "$nap"
            done
        ) >/dev/null &
        beat=$!
        # An interrupted script takes the loop with it, and still runs its own EXIT trap.
        before="$(trap -p EXIT)"
        local previous=""
        [ -z "$before" ] || previous="$(eval "set -- $before"; printf '%s' "$3")"
        # shellcheck disable=SC2064 # the pid is fixed now, on purpose
        trap "kill $beat 2>/dev/null; $previous" EXIT
    else
        printf '    started: %s\n' "$label" >&2
    fi
    if "$@" >"$log" 2>&1; then rc=0; else rc=$?; fi
    local took=$(( ($(date +%s%3N) - started) / 1000 ))
    if [ -n "$beat" ]; then
        kill "$beat" 2>/dev/null || true
        wait "$beat" 2>/dev/null || true
        if [ -n "$before" ]; then eval "$before"; else trap - EXIT; fi
        printf '\r\033[K' >&2
    fi
    if [ "$rc" -eq 0 ]; then
        printf '    done: %s (%d s)\n' "$label" "$took" >&2
        rm -f "$log"
    else
        printf '    failed: %s (exit %d after %d s); the last lines of its output:\n' \
            "$label" "$rc" "$took" >&2
        tail -n 40 "$log" | sed 's/^/      /' >&2
        printf '    (the whole output: %s)\n' "$log" >&2
    fi
    return "$rc"
}
