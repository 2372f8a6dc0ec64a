#!/bin/bash
# txd: app 'one', 1 replica(s). Submit with: sbatch --parsable < this-file
#SBATCH --output=slurm-%j.out
#SBATCH --job-name=r-0
#SBATCH --qos=high
#SBATCH --constraint=a100&ib
#SBATCH --exclusive
#SBATCH --ntasks-per-node=1

export PYTHONUNBUFFERED=1 SLURM_UNBUFFEREDIO=1
export TORCHX_MAX_RETRIES=0

srun '--output=slurm-'"$SLURM_JOB_ID"'-r-0.out' '--error=slurm-'"$SLURM_JOB_ID"'-r-0.err' --wait=60 --kill-on-bad-exit=1 echo 'login:'"$SLURM_JOB_ID"''
exitcode=$?
restarts="${SLURM_RESTART_COUNT:-0}"
if [ "$exitcode" -ne 0 ] && [ "$TORCHX_MAX_RETRIES" -gt "$restarts" ]; then
  echo "txd: exit code $exitcode, requeued (retry $((restarts + 1)))"
  scontrol requeue "$SLURM_JOB_ID" && exec sleep 300
fi
echo "txd: exit code $exitcode"
exit "$exitcode"
