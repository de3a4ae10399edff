# launch.sh: sourced by the multi-GPU bench scripts. Starts ranks
# torchrun-style (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_PORT; MASTER_ADDR is
# the caller's), one process per GPU, a fresh port per job.
port=${port:-29600}
# The elastic TCP transport (and NCCL's TCP bootstrap) admit only ranks that
# hold the job's key: one fresh key for every job this script starts.
export LOOMRT_JOB_KEY=${LOOMRT_JOB_KEY:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
# launch N LOG cmd...: N ranks, rank r's output in LOG.r; fails if any rank does.
launch() {
  local n=$1 log=$2; shift 2
  port=$((port + 1))
  local pids=() rc=0
  for r in $(seq 0 $((n - 1))); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n MASTER_PORT=$port "$@" > "$log.$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}
# run_logged N NAME cmd...: N ranks of cmd with --log-json $OUT/NAME.jsonl
# (a stale log removed first), the ranks' output in $OUT/NAME.r; when a rank
# fails, says so with the last lines of ranks 0 and 1 (the script goes on).
run_logged() {
  local n=$1 name=$2; shift 2
  rm -f "$OUT/$name.jsonl"
  launch "$n" "$OUT/$name" "$@" --log-json "$OUT/$name.jsonl" ||
    { echo "$name failed:"; tail -n 3 "$OUT/$name".{0,1}; }
}
