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
#   EVENS_THREADS           (cpu) torch threads per worker (default: SLURM_CPUS_PER_TASK)
#   EVENS_RESTARTS          restarts inside one allocation after a step dies (default 3)
#   EVENS_RESTART_DELAY     seconds before a restart (default 10)
#
# Exit: 0 when the search is complete or the job was requeued; 2 when evens refused its input;
# 75 when a checkpoint was saved but the job could not be requeued (resubmit to resume); else the
# failing step's status after the last restart.
set -uo pipefail
CONFIG=${1:?usage: evens-job.sh CONFIG RUN_DIR [evens run arguments]}
RUN_DIR=${2:?usage: evens-job.sh CONFIG RUN_DIR [evens run arguments]}
shift 2

EVENS=${EVENS:-evens}
DEVICE=${EVENS_DEVICE:-cuda}
NODES=${SLURM_JOB_NUM_NODES:-1}
PER_NODE=${EVENS_TASKS_PER_NODE:?set EVENS_TASKS_PER_NODE (the .sbatch files do)}
RESTARTS=${EVENS_RESTARTS:-3}
TASKS=$(( NODES * PER_NODE ))  # rank 0, the master, takes one slot of the first node
RESUMABLE=75                   # evens: stopped by a signal, checkpoint saved

export HDF5_USE_FILE_LOCKING=${HDF5_USE_FILE_LOCKING:-FALSE}  # parallel file systems that refuse HDF5's locks
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
device_args=(--set "train.device=$DEVICE")
if [ "$DEVICE" = cuda ]; then
    device_args+=(--set "train.workers_per_gpu=${EVENS_WORKERS_PER_GPU:-1}")
else
    device_args+=(--set "train.threads=${EVENS_THREADS:-${SLURM_CPUS_PER_TASK:-1}}")
fi

step_pid=0
warned() {  # Slurm's early warning (--signal=B:USR1@...) reaches this shell only: pass it to every rank
    echo "evens-job.sh: SIGUSR1: asking the search to save its checkpoint and stop" >&2
    [ "$step_pid" -gt 0 ] && kill -s USR1 "$step_pid" 2>/dev/null
}
terminated() {  # Slurm signals every rank itself at the time limit or preemption; stay to requeue
    echo "evens-job.sh: SIGTERM: the search is saving its checkpoint" >&2
}
trap warned USR1
trap terminated TERM

attempt=0
while :; do
    if [ -f "$RUN_DIR/checkpoint.h5" ]; then
        args=(run --resume "$RUN_DIR" "$@")
    else
        args=(run "$CONFIG" --out "$RUN_DIR" "$@")
    fi
    echo "evens-job.sh: job ${SLURM_JOB_ID:-?}, attempt $attempt: srun -n $TASKS $EVENS ${args[*]}" >&2
    srun --ntasks="$TASKS" --ntasks-per-node="$PER_NODE" --kill-on-bad-exit=1 \
        "$EVENS" "${args[@]}" "${device_args[@]}" &
    step_pid=$!
    wait "$step_pid"; rc=$?
    while kill -0 "$step_pid" 2>/dev/null; do  # a trapped signal interrupted the wait: the step goes on
        wait "$step_pid"; rc=$?
    done
    step_pid=0
    case "$rc" in
        0)
            echo "evens-job.sh: the search is complete: $RUN_DIR" >&2
            exit 0 ;;
        "$RESUMABLE")
            if [ -n "${SLURM_JOB_ID:-}" ] && scontrol requeue "$SLURM_JOB_ID"; then
                echo "evens-job.sh: checkpoint saved; job $SLURM_JOB_ID requeued, and it will resume" >&2
                exit 0
            fi
            echo "evens-job.sh: checkpoint saved, but the job could not be requeued; submit it again to resume" >&2
            exit "$RESUMABLE" ;;
        2)
            echo "evens-job.sh: evens refused its input (exit 2; the message is above); not restarting" >&2
            exit 2 ;;
    esac
    attempt=$(( attempt + 1 ))
    if [ "$attempt" -gt "$RESTARTS" ]; then
        echo "evens-job.sh: the step failed $attempt times (last exit $rc); giving up" >&2
        exit "$rc"
    fi
    echo "evens-job.sh: the step ended with exit $rc; resuming (restart $attempt of $RESTARTS)" >&2
    sleep "${EVENS_RESTART_DELAY:-10}"
done
