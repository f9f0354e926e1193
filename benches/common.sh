# Shared by the benchmark scripts (sourced after they define `die`).

# fresh_work DIR: DIR made absolute and emptied, printed. The work folder is deleted whole,
# so it is only ever a folder of its own under /tmp.
fresh_work() {
  local work
  work=$(realpath -m "$1")
  case "$work" in /tmp/?*) ;; *) die "--work must be a folder under /tmp (got $work)" ;; esac
  rm -rf "$work"
  echo "$work"
}

# kit_and_venv REPO: sets BENCH_KIT (the CDC-apply kit: $BENCH_KIT, else ../shared/bench
# beside the repository, else /work/shared/bench) and PY (the python of its venv, VENV,
# default /tmp/benchvenv, which the kit's setup_venv.sh makes).
kit_and_venv() {
  if [ -z "${BENCH_KIT:-}" ]; then
    BENCH_KIT=$1/../shared/bench
    [ -f "$BENCH_KIT/gen.py" ] || BENCH_KIT=/work/shared/bench
  fi
  [ -f "$BENCH_KIT/gen.py" ] || die "the CDC-apply kit is not at $BENCH_KIT (set BENCH_KIT)"
  VENV=${VENV:-/tmp/benchvenv}
  PY=$VENV/bin/python
  [ -x "$PY" ] || die "no Python venv at $VENV: run bash $BENCH_KIT/setup_venv.sh"
}

# median: the median of the numbers on stdin, one per line.
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
