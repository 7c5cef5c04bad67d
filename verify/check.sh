#!/usr/bin/env bash
# SPIN on the pool's model (verify/pool.pml), showing SPIN's own output for every search.
#   verify/check.sh full            the stated bound: no error may be found
#   verify/check.sh ci              the smaller bound .ci/run checks
#   verify/check.sh mutants [NAMES] every rule switched off, one at a time: each must give a trail
#   verify/check.sh one FLAGS...    one search, e.g. `one -DNO_R5 -DMAXE=3`
#   verify/check.sh witness         two members and the share's witness (issue 38): no error
#   verify/check.sh witness-mutants [NAMES]  the witness's rules switched off: each a trail
# Each search runs niced in a scratch directory, its memory bounded (MEMLIM, MB).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
MEMLIM=${MEMLIM:-4000}
NICE=${NICE:-15}
# the bounds: epochs up to MAXE, at most MAXF crashes and hostile writes in a run
FULL=${FULL:-"-DMAXE=4 -DMAXF=2"}
FULL_DEPTH=${FULL_DEPTH:-24}
CI=${CI_BOUND:-"-DMAXE=2 -DMAXF=1"}
CI_DEPTH=${CI_DEPTH:-22}
MUT=${MUT_BOUND:-"-DMAXE=2 -DMAXF=0"}
MUT_HOSTILE=${MUT_HOSTILE_BOUND:-"-DMAXE=2 -DMAXF=2"}
MUT_DEEP=${MUT_DEEP_BOUND:-"-DMAXE=3 -DMAXF=0"}
MUT_DEPTH=${MUT_DEPTH:-26}
MUT_DEEP_DEPTH=${MUT_DEEP_DEPTH:-30}
# every rule switched off, one at a time; the holes of issue 22's last round put back
MUTANTS="NO_FENCE NO_R1_SELF NO_R5 NO_R2_ACKS NO_R2_TOLD NO_R3A NO_R1_STICKY NO_R1_STEPDOWN SHORT_S NO_R4_LOK NO_R6_LOK NO_R3E NO_R3B NO_R3D NO_VOUCH NO_BLIND"
# the mutants of the lease's side need the writer without the key (or a crash)
HOSTILE="NO_R3E NO_R3D NO_VOUCH NO_BLIND"
# a taker's own vote matters only over a release by a leader it did not adhere to: a third epoch
DEEP="NO_R1_SELF"

# the pool of two and the share's witness (verify/witness.pml, issue 38): small enough to search
# exhaustively (no depth bound that cuts a run short: -m is far past the deepest state)
WITNESS_BOUND=${WITNESS_BOUND:-"-DMAXE=2 -DMAXF=1"}
WITNESS_MUTANTS="NO_WAIT BLIND_REFRESH SHORT_D NO_ENTRY_CAS NO_STEPDOWN_V UNRELY_EARLY"

# search FLAGS... -- BFS/DFS is chosen by the caller; prints SPIN's output, returns pan's errors
search() {
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  cp "$here"/*.pml "$work/"   # pool.pml includes witness.pml under -DWITNESS
  # every -D goes to both: spin's preprocessor (the model's bounds and mutants) and gcc (pan's)
  (cd "$work" && spin "$@" -a pool.pml >/dev/null &&
     gcc ${CC_OPT:--O1} -w -DSAFETY -DNOREDUCE -DMEMLIM="$MEMLIM" "$@" -o pan pan.c &&
     nice -n "$NICE" ./pan -m100000 ${PAN_ARGS:-} > out.txt 2>&1 || true
   grep -v '^\s*$' out.txt | grep -v '^Depth=' || true
   if [ -f pool.pml.trail ]; then
     echo "trail: $(grep -c . pool.pml.trail) steps"
     # the trail, step by step (each line one indivisible step of the model)
     spin "$@" -t -k pool.pml.trail pool.pml 2>/dev/null | grep -E '^ *@ |assertion violated' | sed 's/^ */  /' | paste -sd ';' | sed 's/;  / | /g'

   fi)
}

case ${1:-full} in
  full)
    echo "== the rules as built: 3 members, $FULL, every run of up to $FULL_DEPTH steps (depth-first, -DREACH, hash-compact) =="
    PAN_ARGS="-m$FULL_DEPTH" search $FULL -DHC4 -DREACH
    ;;
  ci)
    echo "== the rules as built: 3 members, $CI, every run of up to $CI_DEPTH steps (depth-first, -DREACH, hash-compact) =="
    PAN_ARGS="-m$CI_DEPTH" search $CI -DHC4 -DREACH
    ;;
  mutants)
    for m in ${2:-$MUTANTS}; do
      bound=$MUT
      case " $HOSTILE " in *" $m "*) bound=$MUT_HOSTILE ;; esac
      case " $DEEP " in *" $m "*) bound=$MUT_DEEP ;; esac
      depth=$MUT_DEPTH
      case " $DEEP " in *" $m "*) depth=$MUT_DEEP_DEPTH ;; esac
      echo "== mutant $m ($bound, every run of up to $depth steps: depth-first, -DREACH, hash-compact) =="
      PAN_ARGS="-m$depth" search $bound -D"$m" -DHC4 -DREACH
    done
    ;;
  witness)
    echo "== the witness as built: 2 members + the share's witness, $WITNESS_BOUND, exhaustive (breadth-first) =="
    PAN_ARGS="-m1000000" search -DWITNESS $WITNESS_BOUND -DBFS
    ;;
  witness-mutants)
    for m in ${2:-$WITNESS_MUTANTS}; do
      echo "== witness mutant $m ($WITNESS_BOUND, breadth-first: the shortest trail) =="
      PAN_ARGS="-m1000000" search -DWITNESS $WITNESS_BOUND -D"$m" -DBFS
    done
    ;;
  one)
    shift
    search "$@"
    ;;
  *) echo "usage: $0 full|ci|mutants|one FLAGS..." >&2; exit 2 ;;
esac
