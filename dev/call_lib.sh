# Sourced by the device call scripts of dev/ (`. dev/call_lib.sh`): `left N` (seconds left of an N
# second budget, for timeouts), the environment every call needs (NVLink multicast off, the
# toolkit's libraries), a scratch folder $O, `log` lines with the time (also into $O/run.log),
# and `call_finish`, which packs $O into $OUT/all.tgz (the device tool brings back few files).
set -u
call_t0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - call_t0) )); }
export NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
O=/tmp/o
mkdir -p "$O"
log() { echo "== $* ($(date +%T))" | tee -a "$O/run.log"; }
call_finish() {
  mkdir -p "$OUT"
  tar czf "$OUT/all.tgz" -C "$O" .
  echo "call done after $(( $(date +%s) - call_t0 )) s"
}
