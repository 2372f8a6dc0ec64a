#!/bin/bash
# txd: app 'train', 3 replica(s). Submit with: sbatch --parsable < this-file
#SBATCH --chdir=/home/u/jobs
#SBATCH --output=slurm-%j.out
#SBATCH '--comment=nightly run'
#SBATCH --job-name=trainer-0
#SBATCH --requeue
#SBATCH --partition=gpu
#SBATCH --time=1:00:00
#SBATCH --account=ml
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=1024
#SBATCH --gpus-per-task=2
#SBATCH --ntasks=1
#SBATCH hetjob
#SBATCH --job-name=trainer-1
#SBATCH --requeue
#SBATCH --partition=gpu
#SBATCH --time=1:00:00
#SBATCH --account=ml
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=1024
#SBATCH --gpus-per-task=2
#SBATCH --ntasks=1
#SBATCH hetjob
#SBATCH --job-name=ps-0
#SBATCH --requeue
#SBATCH --partition=gpu
#SBATCH --time=1:00:00
#SBATCH --account=ml
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1

export PYTHONUNBUFFERED=1 SLURM_UNBUFFEREDIO=1
export TORCHX_MAX_RETRIES=1

srun '--output=slurm-'"$SLURM_JOB_ID"'-trainer-0.out' '--error=slurm-'"$SLURM_JOB_ID"'-trainer-0.err' --wait=60 --kill-on-bad-exit=1 env 'DOLLAR=$HOME' LIST=a,b=c 'MSG=it'"'"'s "quoted", with spaces' python train.py --run ''"$SLURM_JOB_ID"'' --rank 0 --data /shared/img/d \
  : '--output=slurm-'"$SLURM_JOB_ID"'-trainer-1.out' '--error=slurm-'"$SLURM_JOB_ID"'-trainer-1.err' --wait=60 --kill-on-bad-exit=1 env 'DOLLAR=$HOME' LIST=a,b=c 'MSG=it'"'"'s "quoted", with spaces' python train.py --run ''"$SLURM_JOB_ID"'' --rank 1 --data /shared/img/d \
  : '--output=slurm-'"$SLURM_JOB_ID"'-ps-0.out' '--error=slurm-'"$SLURM_JOB_ID"'-ps-0.err' --wait=60 --kill-on-bad-exit=1 bash -c 'echo ${rank0_env} '"$SLURM_JOB_ID"''
exitcode=$?
restarts="${SLURM_RESTART_COUNT:-0}"
if [ "$exitcode" -ne 0 ] && [ "$TORCHX_MAX_RETRIES" -gt "$restarts" ]; then
  echo "txd: exit code $exitcode, requeued (retry $((restarts + 1)))"
  scontrol requeue "$SLURM_JOB_ID" && exec sleep 300
fi
echo "txd: exit code $exitcode"
exit "$exitcode"
