# bench/prepare.sh — sourced by bench/run.sh, steady.sh, throttle.sh and
# objects.sh: the set-up every benchmark shares. bench_prepare takes
# the script's arguments, consumes
#   --skip-deps    do not install packages
#   --skip-build   use the binaries already in --build (default build/)
# installs what is missing (scripts/deps.sh, bench/deps.sh, s3rver) and
# builds into the build folder (scripts/build.sh), and leaves everything
# else (--build included) in the array BENCH_ARGS for the Python driver.
# BENCH_NICE (default 0) is the niceness of the build.
#
# bench_main NAME DRIVER NICENESS ARGS...: what every bench/*.sh does —
# bench_prepare ARGS (building at NICENESS), then replace the shell with
# bench/DRIVER run at NICENESS, given --command "bench/NAME ARGS" (the
# command line the results record) and BENCH_ARGS.

bench_prepare() {
  local skip_deps=0 skip_build=0 build="$ROOT/build"
  BENCH_ARGS=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --skip-deps) skip_deps=1 ;;
      --skip-build) skip_build=1 ;;
      --build) build="$2"; BENCH_ARGS+=("$1" "$2"); shift ;;
      --build=*) build="${1#--build=}"; BENCH_ARGS+=("$1") ;;
      *) BENCH_ARGS+=("$1") ;;
    esac
    shift
  done
  if [ "$skip_deps" = 0 ]; then
    "$ROOT/scripts/deps.sh"
    "$ROOT/bench/deps.sh"
    "$ROOT/scripts/s3rver-install.sh" >/dev/null
  fi
  if [ "$skip_build" = 0 ]; then
    echo "== build ($build)"
    nice -n "${BENCH_NICE:-0}" "$ROOT/scripts/build.sh" "$build"
  fi
}

bench_main() {
  local name="$1" driver="$2" niceness="$3" command
  shift 3
  BENCH_NICE="$niceness"
  bench_prepare "$@"
  command="bench/$name${BENCH_ARGS[*]:+ ${BENCH_ARGS[*]}}"
  exec nice -n "$niceness" /usr/bin/python3 "$ROOT/bench/$driver" \
    --command "$command" ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}
}
