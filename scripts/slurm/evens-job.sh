#!/bin/bash
# The body of scripts/slurm/evens-{gpu,cpu}.sbatch: run or resume an evens search in one Slurm job,
# requeue it when it is stopped by a signal, and restart it a few times when a step dies.
#
#   evens-job.sh CONFIG RUN_DIR [more `evens run` arguments]
#
# Settings (environment variables; the .sbatch files set the device ones):
#   EVENS                   the evens command (default: evens on the PATH)
#   EVENS_DEVICE            cuda or cpu (default cuda)
#   EVENS_TASKS_PER_NODE    MPI ranks per node: GPUs x workers per GPU, or cores / threads
#   EVENS_WORKERS_PER_GPU   (cuda) workers sharing each GPU, checked by UUID at start (default 1)
#   EVENS_THREADS           (cpu) torch threads per worker (default: evens' own choice, train.threads = 0:
#                           OMP_NUM_THREADS, else the cores srun binds each task to, divided among the
#                           tasks that share them)
#   EVENS_CPUS_PER_TASK     cores per task given to srun (default SLURM_CPUS_PER_TASK, which srun no longer
#                           inherits from sbatch since Slurm 22.05)
#   EVENS_SRUN_MPI          srun's --mpi plugin (default: the site's); pmi2 for the MPICH that PyPI installs
#   EVENS_RESTARTS          restarts inside one allocation after a step dies (default 3)
#   EVENS_RESTART_DELAY     seconds before a restart (default 10)
#   EVENS_LOCK_WAIT         seconds to wait for an earlier step that still holds the run (default 120)
#
# A step stopped by a signal (exit 75, checkpoint saved) is requeued unless the job was cancelled
# (scancel): Slurm's state of the job decides. After SIGTERM (cancel, preemption, time limit) no
# step is started again.
#
# A job that requeued itself twice in a row without a new evaluation recorded is not requeued a
# third time: something other than the time limit stops it (RUN_DIR/.evens-requeues counts them).
#
# Exit: 0 when the search is complete or the job was requeued; 2 when evens refused its input
# (bad input, or srun's MPI plugin not matching evens' MPI); 75 when a checkpoint was saved but the
# job was cancelled, could not be requeued or made no progress (resubmit to resume); else the failing
# step's status after the last restart.
set -uo pipefail
CONFIG=${1:?usage: evens-job.sh CONFIG RUN_DIR [evens run arguments]}
RUN_DIR=${2:?usage: evens-job.sh CONFIG RUN_DIR [evens run arguments]}
shift 2

EVENS=${EVENS:-evens}
DEVICE=${EVENS_DEVICE:-cuda}
NODES=${SLURM_JOB_NUM_NODES:-1}
PER_NODE=${EVENS_TASKS_PER_NODE:?set EVENS_TASKS_PER_NODE (the .sbatch files do)}
RESTARTS=${EVENS_RESTARTS:-3}
LOCK_WAIT=${EVENS_LOCK_WAIT:-120}
TASKS=$(( NODES * PER_NODE ))  # rank 0, the master, takes one slot of the first node
RESUMABLE=75                   # evens: stopped by a signal, checkpoint saved

export HDF5_USE_FILE_LOCKING=${HDF5_USE_FILE_LOCKING:-FALSE}  # parallel file systems that refuse HDF5's locks
device_args=(--set "train.device=$DEVICE")
if [ "$DEVICE" = cuda ]; then
    device_args+=(--set "train.workers_per_gpu=${EVENS_WORKERS_PER_GPU:-1}")
elif [ -n "${EVENS_THREADS:-}" ]; then
    device_args+=(--set "train.threads=$EVENS_THREADS")
fi
srun_args=(--ntasks="$TASKS" --ntasks-per-node="$PER_NODE" --kill-on-bad-exit=1)
CPUS_PER_TASK=${EVENS_CPUS_PER_TASK:-${SLURM_CPUS_PER_TASK:-}}
[ -n "$CPUS_PER_TASK" ] && srun_args+=(--cpus-per-task="$CPUS_PER_TASK")
[ -n "${EVENS_SRUN_MPI:-}" ] && srun_args+=(--mpi="$EVENS_SRUN_MPI")

step_pid=0
ending=0
warned() {  # Slurm's early warning (--signal=B:USR1@...) reaches this shell only: pass it to every rank
    echo "evens-job.sh: SIGUSR1: asking the search to save its checkpoint and stop" >&2
    [ "$step_pid" -gt 0 ] && kill -s USR1 "$step_pid" 2>/dev/null
}
terminated() {  # Slurm signals every rank itself (cancel, preemption, time limit); stay to decide on a requeue
    echo "evens-job.sh: SIGTERM: the search is saving its checkpoint" >&2
    ending=1
}
trap warned USR1
trap terminated TERM

seconds() {  # a Slurm duration ([D-][HH:]MM:SS) in seconds; nothing for UNLIMITED or none
    local d=0 t=$1 h=0 m=0 s=0
    [[ "$t" =~ ^([0-9]+-)?([0-9]+:)?([0-9]+):([0-9]+)$ ]] || return 0
    [ -n "${BASH_REMATCH[1]}" ] && d=${BASH_REMATCH[1]%-}
    [ -n "${BASH_REMATCH[2]}" ] && h=${BASH_REMATCH[2]%:}
    m=${BASH_REMATCH[3]}; s=${BASH_REMATCH[4]}
    echo $(( ((10#$d * 24 + 10#$h) * 60 + 10#$m) * 60 + 10#$s ))
}

job_state() {  # Slurm's state of this job: RUNNING, CANCELLED, PREEMPTED, TIMEOUT, PENDING, COMPLETING, ... (empty: unknown)
    local info state acct run limit
    info=$(scontrol show job "$SLURM_JOB_ID" -o 2>/dev/null)
    state=$(grep -o 'JobState=[A-Z_]*' <<< "$info" | head -n 1)
    state=${state#JobState=}
    if [ "$state" = COMPLETING ]; then  # scontrol names this flag while Slurm kills the job; accounting has the state
        acct=$(sacct -X -n -P -o State -j "$SLURM_JOB_ID" 2>/dev/null | head -n 1)
        if [ -n "$acct" ]; then
            state=${acct%% *}  # "CANCELLED by 1000"
        else  # no accounting: a job that has run its whole time limit timed out; a cancel and a preemption look alike
            run=$(seconds "$(grep -o 'RunTime=[0-9:-]*' <<< "$info" | head -n 1 | cut -d= -f2)")
            limit=$(seconds "$(grep -o 'TimeLimit=[0-9:-]*' <<< "$info" | head -n 1 | cut -d= -f2)")
            [ -n "$run" ] && [ -n "$limit" ] && [ "$run" -ge "$limit" ] && state=TIMEOUT
        fi
    fi
    echo "$state"
}

wait_for_run_lock() {  # a requeued job may start while the old step still drains and holds the run
    local lock="$RUN_DIR/.evens-lock" waited=0
    [ -f "$lock" ] || return 0
    while [ "$ending" -eq 0 ]; do
        flock -n -E 99 "$lock" true 2>/dev/null
        [ $? -eq 99 ] || return 0  # free (where flock is not supported, evens judges the lock itself)
        if [ "$waited" -ge "$LOCK_WAIT" ]; then
            echo "evens-job.sh: $RUN_DIR is still held after $LOCK_WAIT s; starting anyway" >&2
            return 0
        fi
        [ "$waited" -eq 0 ] && echo "evens-job.sh: $RUN_DIR is held by an earlier step ($(tr -s '\n' ' ' < "$lock")); waiting up to $LOCK_WAIT s for it to end" >&2
        sleep 2
        waited=$(( waited + 2 ))
    done
}

clean_mpich_leftovers() {  # what MPICH leaves after MPI_Abort, on this node (docs/cluster.md)
    local file found held
    found=$(find /tmp /dev/shm -maxdepth 1 -user "$(id -u)" \( -name 'hydra_hwloc_xmlfile_*' -o -name 'mpich_shm_*' \) 2>/dev/null)
    [ -n "$found" ] || return 0
    # listed before the processes are read: a file made meanwhile is not removed, one in use shows as held
    held=$( { find /proc/[0-9]*/fd -type l -printf '%l\n' 2>/dev/null; cat /proc/[0-9]*/maps 2>/dev/null | awk '{ print $6 }'; } | sort -u)
    for file in $found; do
        grep -qxF -- "$file" <<< "$held" || rm -f -- "$file"
    done
}

recorded_evaluations() {  # evaluations in the run file so far (0 before the first checkpoint)
    [ -f "$RUN_DIR/checkpoint.h5" ] || { echo 0; return; }
    "$EVENS" status "$RUN_DIR" --json 2>/dev/null | sed -n 's/^  "evaluations": \([0-9]*\),*$/\1/p' | head -n 1
}

idle_requeues() {  # requeues in a row, before this one, after which no new evaluation was recorded
    local count
    count=$(cat "$RUN_DIR/.evens-requeues" 2>/dev/null)
    [[ "$count" =~ ^[0-9]+$ ]] && echo "$count" || echo 0
}

at_start=$(recorded_evaluations)
attempt=0
while :; do
    if [ -f "$RUN_DIR/checkpoint.h5" ]; then
        args=(run --resume "$RUN_DIR" "$@")
    else
        args=(run "$CONFIG" --out "$RUN_DIR" "$@")
    fi
    wait_for_run_lock
    echo "evens-job.sh: job ${SLURM_JOB_ID:-?}, attempt $attempt: srun ${srun_args[*]} $EVENS ${args[*]}" >&2
    srun "${srun_args[@]}" "$EVENS" "${args[@]}" "${device_args[@]}" &
    step_pid=$!
    wait "$step_pid"; rc=$?
    while kill -0 "$step_pid" 2>/dev/null; do  # a trapped signal interrupted the wait: the step goes on
        wait "$step_pid"; rc=$?
    done
    step_pid=0
    [ "$rc" -eq 0 ] || clean_mpich_leftovers
    case "$rc" in
        0)
            echo "evens-job.sh: the search is complete: $RUN_DIR" >&2
            exit 0 ;;
        "$RESUMABLE")
            [ -n "${SLURM_JOB_ID:-}" ] || { echo "evens-job.sh: checkpoint saved; not a Slurm job: run it again to resume" >&2; exit "$RESUMABLE"; }
            state=$(job_state)
            now=$(recorded_evaluations)
            idle=$(idle_requeues)
            if [ "${now:-0}" -gt "${at_start:-0}" ]; then idle=0; else idle=$(( idle + 1 )); fi
            mkdir -p "$RUN_DIR" && echo "$idle" > "$RUN_DIR/.evens-requeues"  # (evens takes a new run's directory holding only this)
            case "$state" in
                RUNNING|PREEMPTED|TIMEOUT)  # the early warning, a preemption, the time limit
                    if [ "$idle" -gt 2 ]; then  # a loop, not a time limit: stop before a site notices
                        echo "evens-job.sh: checkpoint saved; job $SLURM_JOB_ID is not requeued: its last $(( idle - 1 )) requeues recorded no new evaluation (${now:-0} in all; is each step stopped before it can train?); submit it again to resume" >&2
                        exit "$RESUMABLE"
                    fi
                    if scontrol requeue "$SLURM_JOB_ID"; then
                        echo "evens-job.sh: checkpoint saved; job $SLURM_JOB_ID requeued (it was $state), and it will resume" >&2
                        exit 0
                    fi
                    echo "evens-job.sh: checkpoint saved, but the job could not be requeued; submit it again to resume" >&2 ;;
                PENDING|REQUEUED|REQUEUE_FED|REQUEUE_HOLD)
                    echo "evens-job.sh: checkpoint saved; Slurm has requeued job $SLURM_JOB_ID ($state), and it will resume" >&2
                    exit 0 ;;
                CANCELLED)  # scancel: what the user asked for
                    echo "evens-job.sh: checkpoint saved; job $SLURM_JOB_ID was cancelled, so it is not requeued; submit it again to resume" >&2 ;;
                COMPLETING)  # Slurm ends the job before its time limit, and keeps no accounting that would say why
                    echo "evens-job.sh: checkpoint saved; Slurm is ending job $SLURM_JOB_ID before its time limit (a cancel, or a preemption: without accounting, sacct cannot tell), so it is not requeued; submit it again to resume" >&2 ;;
                *)
                    echo "evens-job.sh: checkpoint saved; Slurm shows job $SLURM_JOB_ID as '$state' (scontrol, sacct), so it is not requeued; submit it again to resume" >&2 ;;
            esac
            exit "$RESUMABLE" ;;
        2)
            echo "evens-job.sh: evens refused its input (exit 2; the message is above); not restarting" >&2
            exit 2 ;;
    esac
    if [ "$ending" -eq 1 ]; then  # Slurm is ending the job: a new step would fail, or be killed
        echo "evens-job.sh: the step ended with exit $rc after SIGTERM; the job is ending, not restarting" >&2
        exit "$rc"
    fi
    attempt=$(( attempt + 1 ))
    if [ "$attempt" -gt "$RESTARTS" ]; then
        echo "evens-job.sh: the step failed $attempt times (last exit $rc); giving up" >&2
        exit "$rc"
    fi
    echo "evens-job.sh: the step ended with exit $rc; resuming (restart $attempt of $RESTARTS)" >&2
    sleep "${EVENS_RESTART_DELAY:-10}"
done
