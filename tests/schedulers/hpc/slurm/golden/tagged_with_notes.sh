#!/bin/bash
# txd: app 'train', 3 replica(s). Submit with: sbatch --parsable < this-file
# txd: Slurm version unknown (no sinfo); assumed 24.05
#SBATCH --chdir=/home/u/jobs
#SBATCH --output=slurm-%j-t4g.out
#SBATCH --job-name=trainer-0
#SBATCH --requeue
#SBATCH --time=UNLIMITED
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=1024
#SBATCH --gpus-per-task=2
#SBATCH --ntasks=1
#SBATCH hetjob
#SBATCH --job-name=trainer-1
#SBATCH --requeue
#SBATCH --time=UNLIMITED
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=1024
#SBATCH --gpus-per-task=2
#SBATCH --ntasks=1
#SBATCH hetjob
#SBATCH --job-name=ps-0
#SBATCH --requeue
#SBATCH --time=UNLIMITED
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1

export PYTHONUNBUFFERED=1 SLURM_UNBUFFEREDIO=1
export TORCHX_MAX_RETRIES=1

# TorchX's names for the log files: links to txd's, whose tag keeps a reused job id apart
for f in .out -trainer-0.out -trainer-0.err -trainer-1.out -trainer-1.err -ps-0.out -ps-0.err; do
  : >> "slurm-$SLURM_JOB_ID"-t4g"$f" && ln -f -- "slurm-$SLURM_JOB_ID"-t4g"$f" "slurm-$SLURM_JOB_ID$f" 2>/dev/null
done

srun '--output=slurm-'"$SLURM_JOB_ID"'-t4g-trainer-0.out' '--error=slurm-'"$SLURM_JOB_ID"'-t4g-trainer-0.err' --wait=60 --kill-on-bad-exit=1 env 'DOLLAR=$HOME' LIST=a,b=c 'MSG=it'"'"'s "quoted", with spaces' python train.py --run ''"$SLURM_JOB_ID"'' --rank 0 --data /shared/img/d \
  : '--output=slurm-'"$SLURM_JOB_ID"'-t4g-trainer-1.out' '--error=slurm-'"$SLURM_JOB_ID"'-t4g-trainer-1.err' --wait=60 --kill-on-bad-exit=1 env 'DOLLAR=$HOME' LIST=a,b=c 'MSG=it'"'"'s "quoted", with spaces' python train.py --run ''"$SLURM_JOB_ID"'' --rank 1 --data /shared/img/d \
  : '--output=slurm-'"$SLURM_JOB_ID"'-t4g-ps-0.out' '--error=slurm-'"$SLURM_JOB_ID"'-t4g-ps-0.err' --wait=60 --kill-on-bad-exit=1 bash -c 'echo ${rank0_env} '"$SLURM_JOB_ID"''
exitcode=$?
restarts="${SLURM_RESTART_COUNT:-0}"
if [ "$exitcode" -ne 0 ] && [ "$TORCHX_MAX_RETRIES" -gt "$restarts" ]; then
  echo "txd: exit code $exitcode, requeued (retry $((restarts + 1)))"
  scontrol requeue "$SLURM_JOB_ID" && exec sleep 300
fi
echo "txd: exit code $exitcode"
exit "$exitcode"
