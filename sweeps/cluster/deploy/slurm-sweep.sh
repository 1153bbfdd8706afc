#!/usr/bin/env bash
# A sweep on a Slurm allocation: a Ray head on the first node, a Ray worker on each other node,
# then `python -m sweeps.run --address` on the head, then Ray stopped on every node.
#   sbatch sweeps/cluster/deploy/slurm-sweep.sh search_spaces/width_vs_depth.yaml --set ...
# Ready to edit: the #SBATCH lines, the environment activation, STORAGE and TRACKING_URI.
# Requirements (see docs/clusters.md): the project and its virtual environment on a
# filesystem every node mounts (the job runs from the submit directory), STORAGE on a shared
# filesystem (or a cloud URI), and a tracking store the first node reaches (the driver runs there).
#SBATCH --job-name=arith-sweep
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=16
#SBATCH --gpus-per-node=4
#SBATCH --time=12:00:00
#SBATCH --output=sweep-%j.log
set -euo pipefail

SPEC=${1:?usage: sbatch slurm-sweep.sh SPEC.yaml [sweeps.run options]}
shift
STORAGE=${STORAGE:-$PWD/results/ray-storage}  # on a shared filesystem
TRACKING_URI=${TRACKING_URI:-sqlite:///$PWD/mlflow.db}
PORT=${RAY_PORT:-6379}

source .venv/bin/activate

# Token authentication (Ray >= 2.60): the head and every worker of this allocation get the
# token through srun's environment; a process without it cannot submit work to the cluster.
export RAY_AUTH_MODE=token
RAY_AUTH_TOKEN=$(python -c "import secrets; print(secrets.token_hex(32))")
export RAY_AUTH_TOKEN

mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
HEAD=${NODES[0]}
HEAD_IP=$(srun --nodes=1 --ntasks=1 -w "$HEAD" hostname --ip-address | awk '{print $1}')
ADDRESS="$HEAD_IP:$PORT"
CPUS=${SLURM_CPUS_PER_TASK:-1}
GPUS=${SLURM_GPUS_PER_NODE:-0}
GPUS=${GPUS##*:}  # "a100:4" -> 4

stop_ray() {
    # `ray stop` on every node of this allocation (each node runs only this job's Ray).
    srun --nodes="${#NODES[@]}" --ntasks-per-node=1 --overlap ray stop --force >/dev/null 2>&1 || true
}
trap stop_ray EXIT

echo "ray head on $HEAD ($ADDRESS), ${#NODES[@]} nodes"
srun --nodes=1 --ntasks=1 -w "$HEAD" --overlap \
    ray start --head --node-ip-address="$HEAD_IP" --port="$PORT" \
    --num-cpus="$CPUS" --num-gpus="$GPUS" --include-dashboard=false --block &
sleep 10

for node in "${NODES[@]:1}"; do
    srun --nodes=1 --ntasks=1 -w "$node" --overlap \
        ray start --address="$ADDRESS" --num-cpus="$CPUS" --num-gpus="$GPUS" --block &
done

# Wait until every node has joined (at most 5 minutes).
for _ in $(seq 60); do
    alive=$(python -c "import ray; ray.init(address='$ADDRESS', logging_level='ERROR'); print(sum(n['Alive'] for n in ray.nodes()))" 2>/dev/null || echo 0)
    [ "$alive" -ge "${#NODES[@]}" ] && break
    sleep 5
done
echo "$alive of ${#NODES[@]} nodes up"

# The driver runs here, on the first node: MLflow is written from here only.
python -m sweeps.run "$SPEC" --address "$ADDRESS" \
    --storage "$STORAGE" --storage-shared --tracking-uri "$TRACKING_URI" "$@"
