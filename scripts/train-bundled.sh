#!/usr/bin/env bash
# The long CPU training of the bundled DRUNets (issue #30; presets/train-drunet-{grey,colour}.toml),
# run in the background across days and sessions, outside every git tree:
#
#   scripts/train-bundled.sh start    # set up $TRAIN_HOME (binary, presets, photos) and start
#   scripts/train-bundled.sh resume   # after a reboot or a session's end: go on from the checkpoints
#   scripts/train-bundled.sh status   # running or not, the last steps, loss and steps per hour
#   scripts/train-bundled.sh stop     # stop now (the chunk in progress loses at most CHUNK steps)
#
# TRAIN_NETS (default "grey colour") picks the networks the loop trains, e.g. TRAIN_NETS=grey: the
# bundled colour denoiser is the grey DRUNet applied in an opponent colour space (assets/weights/
# README.md), which beat the colour DRUNet on every held-out row at step 31,000, so the loop gives
# the grey network all the CPU from there on.
#
# TRAIN_HOME (default ~/.cache/tessera/train30) holds everything the run needs, so it survives a
# new checkout or a rebuild: bin/tessera (the binary that started the run, copied once: a resumed
# run equals an uninterrupted one bit for bit only with the same code), presets/ (copied once),
# out/photos/train/ (the training photographs, from scripts/fetch_photos.py), runs/grey and
# runs/colour (checkpoints, then weights and train.json), progress.log (one line per chunk) and
# loop.pid.
#
# One process at a time, niced to 19 and on one compute thread, so it only takes idle CPU: the loop
# trains CHUNK steps (default 200) of the grey network, then of the colour one, and so on, each
# chunk a `tessera train --stop-after` / `--resume` of the previous one, until both reach the
# presets' step counts (the last chunk writes the weights and scores the held-out image).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
TRAIN_HOME=${TRAIN_HOME:-$HOME/.cache/tessera/train30}
CHUNK=${CHUNK:-200}
read -ra NETS <<<"${TRAIN_NETS:-grey colour}"
BIN=$TRAIN_HOME/bin/tessera
LOG=$TRAIN_HOME/progress.log
PIDFILE=$TRAIN_HOME/loop.pid

running() {
    [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

# The step a run's checkpoint (or finished train.json) is at; 0 when it has none.
step_of() {
    local run=$TRAIN_HOME/runs/$1
    if [[ -f $run/train.json ]] && grep -q '"stopped_early": *false' "$run/train.json"; then
        sed -n 's/.*"steps": *\([0-9]*\).*/\1/p' "$run/train.json" | head -n1
    elif [[ -f $run/checkpoint/checkpoint.json ]]; then
        sed -n 's/.*"step": *\([0-9]*\).*/\1/p' "$run/checkpoint/checkpoint.json" | head -n1
    else
        echo 0
    fi
}

steps_of() {
    sed -n 's/^steps *= *\([0-9]*\).*/\1/p' "$TRAIN_HOME/presets/train-drunet-$1.toml"
}

# The last reported loss of a run (from its train.json).
last_loss() {
    local json=$TRAIN_HOME/runs/$1/train.json
    [[ -f $json ]] || { echo "-"; return; }
    tr -d ' \n' <"$json" | grep -o '"loss":[0-9.eE+-]*' | tail -n1 | cut -d: -f2
}

setup() {
    mkdir -p "$TRAIN_HOME"/{bin,presets,runs,out/photos}
    if [[ ! -x $BIN ]]; then
        local built=${CARGO_TARGET_DIR:-$REPO/target}/release/tessera
        [[ -x $built ]] || { echo "no $built: cargo build --release --bin tessera first" >&2; exit 1; }
        cp "$built" "$BIN"
        git -C "$REPO" rev-parse HEAD >"$TRAIN_HOME/bin/COMMIT"
    fi
    for net in "${NETS[@]}"; do
        [[ -f $TRAIN_HOME/presets/train-drunet-$net.toml ]] ||
            cp "$REPO/presets/train-drunet-$net.toml" "$TRAIN_HOME/presets/"
    done
    if [[ ! -d $TRAIN_HOME/out/photos/train ]]; then
        local py=${TESSERA_BENCH_VENV:-$HOME/.cache/tessera/deepinv-venv}/bin/python
        "$py" "$REPO/scripts/fetch_photos.py" "$TRAIN_HOME/out/photos" >/dev/null
    fi
}

loop() {
    while :; do
        local busy=0
        for net in "${NETS[@]}"; do
            local at total target run preset started secs
            at=$(step_of "$net")
            total=$(steps_of "$net")
            ((at < total)) || continue
            busy=1
            target=$((at + CHUNK < total ? at + CHUNK : total))
            run=$TRAIN_HOME/runs/$net
            preset=$TRAIN_HOME/presets/train-drunet-$net.toml
            local where=(--out "$run")
            ((at > 0)) && where=(--resume "$run")
            started=$(date +%s)
            if ! nice -n 19 "$BIN" train "$preset" "${where[@]}" --stop-after "$target" \
                --threads-per-rank 1 --quiet >>"$TRAIN_HOME/train-$net.log" 2>&1; then
                echo "$(date -u +%FT%TZ) $net FAILED at step $at (see train-$net.log)" >>"$LOG"
                sleep 600
                continue
            fi
            secs=$(($(date +%s) - started))
            printf '%s %s step %s/%s loss %s chunk %ss steps/hour %s\n' "$(date -u +%FT%TZ)" \
                "$net" "$(step_of "$net")" "$total" "$(last_loss "$net")" "$secs" \
                "$(((target - at) * 3600 / (secs > 0 ? secs : 1)))" >>"$LOG"
        done
        ((busy)) || { echo "$(date -u +%FT%TZ) ${NETS[*]} done" >>"$LOG"; break; }
    done
}

case ${1:-status} in
start | resume)
    if running; then
        echo "already running (pid $(cat "$PIDFILE"))"
        exit 0
    fi
    setup
    # The loop runs from a copy (bash reads a script as it goes: an edit or a checkout of this file
    # must not change a running loop), in its own session so that it outlives this shell.
    cp "$0" "$TRAIN_HOME/bin/train-bundled.sh"
    TRAIN_HOME=$TRAIN_HOME CHUNK=$CHUNK TRAIN_NETS="${NETS[*]}" setsid nohup "$TRAIN_HOME/bin/train-bundled.sh" _loop \
        >>"$TRAIN_HOME/loop.log" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    echo "training in the background (pid $!), logs in $TRAIN_HOME"
    ;;
_loop) loop ;;
status)
    if running; then echo "running (loop pid $(cat "$PIDFILE"))"; else echo "not running"; fi
    for net in "${NETS[@]}"; do
        [[ -f $TRAIN_HOME/presets/train-drunet-$net.toml ]] &&
            echo "$net: step $(step_of "$net") of $(steps_of "$net"), last loss $(last_loss "$net")"
    done
    [[ -f $LOG ]] && tail -n 6 "$LOG"
    ;;
stop)
    if running; then
        # The loop's process group: the loop and the training chunk it runs (a stopped chunk
        # loses at most CHUNK steps; the last checkpoint is kept).
        kill -- -"$(cat "$PIDFILE")"
        echo "stopped"
    else
        echo "not running"
    fi
    ;;
*)
    echo "usage: $0 start|resume|status|stop" >&2
    exit 2
    ;;
esac
