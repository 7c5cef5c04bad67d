#!/usr/bin/env bash
# SPIN on the pool's model (verify/pool.pml), showing SPIN's own output for every search.
#   verify/check.sh full            the largest bounds searched whole in 30 minutes: no error
#   verify/check.sh musthold        the must-hold size (epochs <= 4, 2 faults): bitstate, coverage
#                                   only (a swarm of seeds), not proof; no error may be found
#   verify/check.sh ci              the smaller bound .ci/run checks
#   verify/check.sh mutants [NAMES] every rule switched off, one at a time: each must give a trail
#   verify/check.sh one FLAGS...    one search, e.g. `one -DNO_R5 -DMAXE=3`
#   verify/check.sh live [LB]       liveness (-DLIVE, L1 in pool.pml): a gate open LB ticks after the
#                                   last crash or start, in a world that delivers; no error
#   verify/check.sh witness         two members and the share's witness (issue 38): no error
#   verify/check.sh gone-lok        rule 7b as proposed (-DGONE_LOK, not built: docs/serving-right.md
#                                   "Found by SPIN, fourth round"): no error without a forger, and
#                                   the trail that refutes it with one
#   verify/check.sh witness-mutants [NAMES]  the witness's rules switched off: each a trail
# Each search runs niced in a scratch directory, its memory bounded (MEMLIM, MB).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
MEMLIM=${MEMLIM:-12000}
NICE=${NICE:-15}
# the bounds: epochs up to MAXE, at most MAXF crashes and hostile writes in a run.
# `full`: the largest bounds searched whole within 30 minutes on 2 cores (docs/serving-right.md
# "How far the search goes"): epochs <= 3 with no fault, then epochs <= 2 with two faults
FULL=${FULL:-"-DMAXE=3 -DMAXF=0"}
FULL_FAULTS=${FULL_FAULTS:-"-DMAXE=2 -DMAXF=2"}
# the must-hold size, 3 members, epochs <= 4, 2 faults: far more states than this machine can
# store or visit in 30 minutes (ibid.); `musthold` runs it in bitstate (-DBITSTATE: one bit per
# state, states may be missed: coverage, not proof), MUST_RUNS runs of MUST_SECONDS each, each
# with its own seed for the order of the steps (-DT_RAND, pan -RS: a swarm), 2^MUST_HASH bits
MUST=${MUST:-"-DMAXE=4 -DMAXF=2"}
MUST_RUNS=${MUST_RUNS:-3}
MUST_SECONDS=${MUST_SECONDS:-600}
MUST_HASH=${MUST_HASH:-34}
# the CI: epochs <= 2, one fault (the lockless renewal's trails need epochs <= 3: docs/serving-right.md
# "Found by SPIN, second round", fixed; `verify/check.sh one -DMAXE=3 -DMAXF=0 -DSYM` searches it)
CI=${CI_BOUND:-"-DMAXE=2 -DMAXF=1"}
# the exhaustive searches: the members' symmetry (A14), states stored whole (exact; STORE=-DHC4
# for hash-compact), no depth bound (-m: the stack only)
REDUCE=${REDUCE:-"-DSYM"}
STORE=${STORE:-""}
MUT=${MUT_BOUND:-"-DMAXE=2 -DMAXF=0"}
MUT_HOSTILE=${MUT_HOSTILE_BOUND:-"-DMAXE=2 -DMAXF=2"}
# a third epoch, the renewal under the lock: a run of that variant is a run of the lockless model
# (its read and rename taken back to back), so a trail there is a trail here, found sooner
MUT_DEEP=${MUT_DEEP_BOUND:-"-DMAXE=3 -DMAXF=0 -DLOCKED_RENEW"}
# every rule switched off, one at a time; the holes of issue 22's last round put back
MUTANTS="NO_GONE_ACKS_ONLY NO_GONE_ACKED NO_STALE_ALIVE NO_STALE_LOK NO_START_QUIET NO_FENCE NO_R1_SELF NO_R5 NO_R2_ACKS NO_R2_TOLD NO_R3A NO_R1_STICKY NO_R1_STEPDOWN SHORT_S NO_R4_LOK NO_R6_LOK NO_R3E NO_R3B NO_R3D NO_VOUCH NO_BLIND"
# the mutants of the lease's side need the writer without the key (or a crash)
HOSTILE="NO_R3E NO_R3D NO_VOUCH NO_BLIND"
# a restart needs one crash
RESTART="NO_START_QUIET"
MUT_RESTART=${MUT_RESTART_BOUND:-"-DMAXE=2 -DMAXF=1"}
# a taker's own vote matters only over a release by a leader it did not adhere to; lease_ok_at
# only after a takeover on silence: a third epoch
DEEP="NO_R1_SELF NO_R4_LOK NO_R6_LOK"
# the lockless renewal's rules (issue 37): a rename landing over a claim, then a third epoch
LOCKLESS="NO_STALE_ALIVE NO_STALE_LOK"
MUT_LOCKLESS=${MUT_LOCKLESS_BOUND:-"-DMAXE=3 -DMAXF=0"}
# rule 7, a takeover on evidence of death (A16): a crash, and a third epoch (a holder taken on
# silence, then its taker dead); the renewal under the lock, as for DEEP, no writer without the
# key and no worker's release (a smaller world: a trail there is one here, found sooner)
GONE="NO_GONE_ACKED"
# With rule 7's guard (evidence counts only of a holder heard serving by acks) that world gives
# no trail: the taker there never heard epoch 2's holder. Forged evidence of a live holder serving
# by acks does: a taker in `lease` mode opens beside it (epochs <= 2, no fault, -DFORGED_GONE).
RULE7_WORLD="-DMAXE=3 -DMAXF=1 -DLOCKED_RENEW -DNO_HOSTILE -DNO_RELEASE"
MUT_GONE=${MUT_GONE_BOUND:-"-DMAXE=2 -DMAXF=0 -DFORGED_GONE"}
# rule 7b as proposed (-DGONE_LOK, A16b; not built): a takeover on evidence of death in `lease`
# mode when the dead holder's newest leader beacon said `lok` for the renewal read. Its mutant
# (the beacon not checked) in rule 7's world; its refutation: a forger of evidence of death
# (-DFORGED_GONE) of a holder heard serving by acks (-DGONE_ACKS_ONLY), epochs <= 2, no fault
# With rule 7's guard in, NO_GONE_LOK_CHECK gives no trail in that world (6,781,504 states, 0
# errors: evidence then counts only of a holder the taker heard serving by acks), so it is a mutant
# of nothing built and out of MUTANTS; `mutants NO_GONE_LOK_CHECK` still searches it.
GONE_LOK="NO_GONE_LOK_CHECK"
MUT_GONE_LOK=${MUT_GONE_LOK_BOUND:-"$RULE7_WORLD -DGONE_LOK"}
FORGED_LOK=${FORGED_LOK_BOUND:-"-DMAXE=2 -DMAXF=0 -DFORGED_GONE -DGONE_ACKS_ONLY -DGONE_LOK"}
# rule 7's guard (evidence of death counts only of a holder heard serving by acks): a forger of
# evidence (-DFORGED_GONE, an on-path writer of TCP resets that drops beacons) gives no trail with
# it (`ci` searches that world too) and one without it (the mutant)
FORGED=${FORGED_BOUND:-"-DMAXE=2 -DMAXF=0 -DFORGED_GONE"}
GUARD="NO_GONE_ACKS_ONLY"
# liveness (L1): epochs <= 3, one crash (and starts); the bound LB in ticks (6: no error there,
# docs/serving-right.md "Liveness"; two crashes, one member alone, not yet searched)
LIVE_BOUND=${LIVE_BOUND:-"-DMAXE=3 -DMAXF=1"}

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
     nice -n "$NICE" ${PAN_TIMEOUT:+timeout -s INT "$PAN_TIMEOUT"} ./pan -m3000000 -w${HASH:-26} ${PAN_ARGS:-} > out.txt 2>&1 || true
   grep -v '^\s*$' out.txt | grep -v '^Depth=' || true
   if [ -f pool.pml.trail ]; then
     echo "trail: $(grep -c . pool.pml.trail) steps"
     # the trail, step by step (each line one indivisible step of the model); with -DSYM pan
     # replays it (SPIN's simulator skips the renaming in C), and says each renaming (P)
     case " $* " in
       *" -DSYM "*) SPIN_SHOW_SYM=1 ./pan -r 2>/dev/null | grep -E '^ *(@|P) |assertion violated' | sed 's/^ */  /' | paste -sd ';' | sed 's/;  / | /g' ;;
       *) spin "$@" -t -k pool.pml.trail pool.pml 2>/dev/null | grep -E '^ *@ |assertion violated' | sed 's/^ */  /' | paste -sd ';' | sed 's/;  / | /g' ;;
     esac
     # KEEP_REPLAY=FILE: the whole printout of the trail, state lines too (tests/spinreplay.py)
     if [ -n "${KEEP_REPLAY:-}" ]; then
       case " $* " in
         *" -DSYM "*) SPIN_SHOW_SYM=1 ./pan -r > "$KEEP_REPLAY" 2>/dev/null || true ;;
         *) spin "$@" -t -k pool.pml.trail pool.pml > "$KEEP_REPLAY" 2>/dev/null || true ;;
       esac
     fi

   fi)
}

case ${1:-full} in
  full)
    echo "== the rules as built: 3 members, $FULL, every run (exhaustive: depth-first, $REDUCE ${STORE:-exact}) =="
    HASH=${HASH:-28} search $FULL $REDUCE $STORE
    echo "== the rules as built: 3 members, $FULL_FAULTS, every run (exhaustive: depth-first, $REDUCE ${STORE:-exact}) =="
    HASH=${HASH:-27} search $FULL_FAULTS $REDUCE $STORE
    ;;
  musthold)
    # pan stops at MUST_SECONDS (SIGINT: it prints what it searched); its "hash factor" (bits of
    # the array per state stored, good above 100) says how few of the states it visited were
    # missed, not how many of the bound's states it visited: no claim of "every run" 
    for seed in $(seq 1 "$MUST_RUNS"); do
      echo "== the rules as built: 3 members, $MUST, bitstate -w$MUST_HASH, seed $seed, ${MUST_SECONDS} s (coverage, not proof) =="
      HASH=$MUST_HASH PAN_TIMEOUT=$MUST_SECONDS PAN_ARGS="-RS$seed" search $MUST $REDUCE -DBITSTATE -DT_RAND
    done
    ;;
  ci)
    echo "== the rules as built: 3 members, $CI, every run (exhaustive: depth-first, $REDUCE ${STORE:-exact}) =="
    search $CI $REDUCE $STORE
    echo "== the rules as built, a forger of evidence of death: 3 members, $FORGED, every run (exhaustive: depth-first, $REDUCE ${STORE:-exact}) =="
    search $FORGED $REDUCE $STORE
    ;;
  mutants)
    for m in ${2:-$MUTANTS}; do
      bound=$MUT
      case " $HOSTILE " in *" $m "*) bound=$MUT_HOSTILE ;; esac
      case " $DEEP " in *" $m "*) bound=$MUT_DEEP ;; esac
      case " $RESTART " in *" $m "*) bound=$MUT_RESTART ;; esac
      case " $LOCKLESS " in *" $m "*) bound=$MUT_LOCKLESS ;; esac
      case " $GONE " in *" $m "*) bound=$MUT_GONE ;; esac
      case " $GONE_LOK " in *" $m "*) bound=$MUT_GONE_LOK ;; esac
      case " $GUARD " in *" $m "*) bound=$FORGED ;; esac
      # depth-first with the members' symmetry, hash-compact (a trail found is a trail, whatever
      # the compaction hides); MUT_SEARCH="-DBFS -DHC4" gives the shortest trail, slower
      echo "== mutant $m ($bound, ${MUT_SEARCH:--DSYM -DHC4}) =="
      search $bound -D"$m" ${MUT_SEARCH:--DSYM -DHC4}
    done
    ;;
  live)
    lb=${2:-6}
    echo "== liveness L1: 3 members, $LIVE_BOUND, a gate open $lb ticks after the last crash or start (exhaustive: depth-first, $REDUCE ${STORE:-exact}) =="
    search $LIVE_BOUND -DLIVE -DLB="$lb" $REDUCE $STORE
    ;;
  gone-lok)
    echo "== rule 7b as proposed, no forger: 3 members, $MUT_GONE_LOK, every run (depth-first, -DSYM -DHC4): no error =="
    search $MUT_GONE_LOK -DSYM -DHC4
    echo "== rule 7b as proposed, a forger of evidence of death: $FORGED_LOK (depth-first, -DSYM -DHC4): a trail =="
    search $FORGED_LOK -DSYM -DHC4
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
  *) echo "usage: $0 full|musthold|ci|mutants|live [LB]|gone-lok|witness|witness-mutants|one FLAGS..." >&2; exit 2 ;;
esac
