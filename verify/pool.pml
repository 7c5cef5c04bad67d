/*
 * The pool, checked by SPIN: the election (docs/design.md §5.1) and the serving right (docs/design.md §15,
 * docs/serving-right.md "The rules", rules 1-6), written from the rules,
 * not from the code. Three members, epochs up to MAXE, every interleaving of their steps,
 * of the network, of a writer without the key, of freezes, crashes and restarts.
 *
 * What it proves (assertions checked after every step, `check()`):
 *   P1  never two relay gates open at one instant;
 *   P2  an epoch is taken by one compare-and-set only, and no member's known epoch goes down;
 *   P3  a gate is open only for an epoch its member won by compare-and-set.
 * and, with -DLIVE only (a model of a good world: L1 below, by the STEPS macro), liveness:
 *   L1  LB ticks after the last crash or start, with no freeze, no writer without the key and
 *       a network that delivers, some relay gate is open (one live member alone, or more).
 *
 * ABSTRACTIONS (each sound for safety: the model has every behaviour the rules allow, and more)
 *
 * A1  Time is discrete: one `tick` is the unit of every duration. Every timer is an AGE in
 *     real ticks, all aged together by `tick`, saturating just past the largest threshold it is
 *     compared with (so a saturated age answers every comparison as the unbounded one would).
 *     No absolute time. Every step is one indivisible d_step: no state in between.
 * A2  Clock rates (rho): a member measures durations on its own clock. A duration that lets a
 *     member ACT after it (S, the TTL, lease_ok_at) is taken at its shortest real length (the
 *     *_LO constants: a clock running fast); one that bounds how long a gate may stay OPEN
 *     (W + GATE_LAG, the renew deadline) at its longest (the *_HI constants: a clock running
 *     slow). Two timers on ONE member's clock (its gate and its own "my window is over", rule 1)
 *     are compared on that clock, with one threshold. The rules' inequalities on these
 *     constants (S_LO > W_HI, TTL_LO > RD_HI, LOK_LO > RD_HI) are the ones the code's constants
 *     must meet with rho = 1 %: tests/test_spin_model.py checks them against core.serving.
 *     A threshold at its shortest says when a member MAY act, not that it must: a look at an
 *     unchanged lease past TTL_LO on a slow clock finds the TTL not yet over and asks for silence
 *     or death instead (the step `x looks, its clock slow`, the audit of the d_steps:
 *     docs/serving-right.md "The `d_step`s audited"; a d_step takes the first open guard).
 * A3  Freezes are free: a member that takes no step is frozen (SIGSTOP, a stalled VM) for as
 *     many ticks as the search likes; its clock runs on (A1), so its gate closes on time.
 *     A suspend (boot clock) is not modelled: the code keeps gate deadlines on CLOCK_BOOTTIME.
 * A4  The network: a beacon is delivered when its RECEIVER takes a `hear` step, with its
 *     sender's current content; any beacon may be lost (never heard), duplicated or delayed
 *     (heard later, again: what a receiver keeps only ever refreshes). A frozen sender's
 *     beacons may still arrive (more behaviours, not fewer). An ack names the send time of the
 *     newest leader beacon its member heard, taken as the instant it heard it (no transit
 *     time: the longest gate such an ack can give). Old signed acks replayed are left out:
 *     a member leaves a leader only after S of silence (its old acks then name beacons older
 *     than W) or on its resign (its gate is shut), so a replayed ack never opens a gate that
 *     its newest did not; the NO_R1_STICKY mutant is the case where this fails.
 * A5  The store: the lease is one record (epoch, holder, released, handoff_to) or no evidence
 *     (JUNK: damaged or forged; MISSING: deleted, or moved aside; OLD: an older validly signed
 *     copy put back). Renew_seq is not a counter: `miss[i]` says "a valid record was written
 *     since member i's last valid read" (exactly what a changed renew_seq tells a reader).
 *     Epoch claims (take, release, handoff, requalify, rewriting junk) are ONE atomic step:
 *     read, decide, lock, compare-and-set on the bytes read; a CAS that would fail is the
 *     same as not taking the step. `top` is the highest epoch in the members' claim records
 *     (rule 3e). The lockless renewal (docs/election.md "Renewing without the lock") is TWO steps, its
 *     read and its rename, which may land over a claim made in between.
 * A6  Membership is fixed at N = 3 (every member counts 3; docs/serving-right.md's assumption: members
 *     join or leave one at a time per TTL). Early takeover reports (rule 3b) are the other
 *     member's current beacon.
 * A7  A restart loses the member's whole beacon book (adherence, acks, its right, the clean
 *     release it heard, the beacons' replay memory) and its relay (the gate shuts: the relay
 *     dies with its supervisor); it keeps its known epoch and the last lease it saw (docs/security.md:
 *     "a restart remembers") and times that lease afresh (a first look).
 * A8  A writer without the key may put junk over the lease, delete it or put an old copy
 *     back at any step. Assumption V (docs/serving-right.md "The holder's beacons witness renewals the
 *     share hides", stated there): a member's read that is no evidence and hides a renewal
 *     it never read is possible only once that member heard a leader beacon of the holder
 *     sent after that renewal (the attack with ALL beacons lost is the known, documented
 *     case: "with beacons off the share is the only witness"). A member that knows no lease
 *     of the holder (it learned the epoch from a claim record, rule 3e) can be vouched by
 *     no beacon: the junk is then kept from it, which leaves out docs/serving-right.md's stated
 *     residual case ("Left: a member blind twice past the TTL with no valid read between,
 *     whose first reads both find junk, is timed from the first"), which SPIN finds
 *     otherwise (27 steps at epochs <= 4, two faults).
 * A9  Rule 6's "heard at most a TTL before" is not timed: a clean release heard at any time
 *     before counts (more behaviours, not fewer).
 * A10 At most MAXF crashes and hostile writes in one run (the search's bound, with MAXE).
 * A11 What can no longer matter is reset to one value (`normalize`, below).
 * A12 Dead variables reset (`normalize`, `normalize_resign`, `normalize_store`): a value that
 *     is overwritten before it is read again (the old record while a valid one lies there, a
 *     leader's lease timers, a resign nobody can still use, a right's fields once it is gone)
 *     is set to one value; each argument is at its reset. A crash that no record in the
 *     store names (`normalize_died`) is forgotten: no look can take it for evidence of death.
 * A13 (-DSHIFT, an option) epochs renamed: only their order matters.
 * A14 (-DSYM) the members are interchangeable: each state is stored as the least of its six
 *     renamings (in C, `canon`).
 * A15 Once the bound's epochs are spent and at most one right may still open a gate, no
 *     assertion can fail any more: the state becomes one sink and the search stops there.
 * A16 Positive evidence of death (core.liveness, cause `gone`) is about the lease's holder's
 *     process: it is given to a follower's look (`x looks, its holder gone`) only once that
 *     holder crashed (`died`: since its last claim; started again or not). Its other conditions (the host's answer at most FRESH old, no
 *     leader beacon of that epoch for two intervals, one heard before) are not modelled: more
 *     behaviours, not fewer. Forged evidence (an on-path writer of TCP resets, docs/design.md
 *     §13), the holder then alive, is not in the model; -DFORGED_GONE puts it in (a finding).
 * A16b (-DGONE_LOK: rule 7b as proposed for issues 36/37, the fast takeover on evidence of death;
 *     not built) `gl[x]`: the newest leader beacon x heard of the holder of the record in place
 *     named that very record (its renew_seq) and said `lok` (its lease_ok_at had passed). Set at
 *     x's `hear` of that holder; any valid write names another renewal and clears every gl (the
 *     code would compare the beacon's renew_seq with the read's); a restart loses it. Old copies
 *     are one level deep (A5, A8), as for every rule. -DGONE_ACKS_ONLY: evidence of death counts
 *     only for a holder x heard say `serve: ack` (as rule 3a asks of silence).
 * Each is argued where it is made; none removes a behaviour that could fail P1-P3.
 * The lockless renewal is two steps (A5); -DLOCKED_RENEW makes it one (read and write under
 * the lock), to tell which of SPIN's trails it is the cause of.
 *
 * Mutants (one -D at a time; each must give a trail, tests/test_spin_model.py):
 *   NO_R1_STICKY   rule 1: a member switches leader without S of silence
 *   NO_R1_STEPDOWN rule 1: a stepped-down leader acks another at once (its window may be open)
 *   NO_R1_SELF     rule 1 / hole 2: a taker counts its own vote at once
 *   NO_R2_ACKS     rule 2: an epoch in ack mode is gated by its renew deadline alone
 *   NO_R2_TOLD     rule 2: a taker's LEASE epoch says `serve: ack` before its majority
 *   NO_R3A         rule 3a: early takeover of a holder that serves by the lease
 *   NO_R3B         rule 3b: early takeover without the other members agreeing (liveness's
 *                  rule, not safety's: rule 5 alone keeps the taker's gate shut; no trail)
 *   NO_R3D         rule 3d: early takeover on a read that is no evidence
 *   NO_R3E         rule 3e: a claim that meets a fresher epoch writes anyway
 *   NO_R4_LOK      rule 4: requalify before lease_ok_at
 *   NO_R5          rule 5: an epoch taken on silence or from a release serves by the lease
 *   NO_R6_LOK      rule 6: a release says `fenced` before lease_ok_at
 *   NO_VOUCH       hole 1: junk kept over a live lease, no vouching by the holder's beacons
 *   NO_BLIND       a member's own blindness counted toward the TTL (no blind_gap)
 *   NO_FENCE       hole 3: a release to no one written before the relay's gate is shut
 *   NO_START_QUIET rule 1 across a restart: a started member acks a new leader at once (its
 *                  book lost: whom it acked before its stop); SPIN's trail of issue 37, fixed
 *   NO_STALE_ALIVE a record of an older epoch written since a member's last valid read is no
 *                  evidence of life (its TTL runs on), and its takeover on the TTL serves by the
 *                  lease: the lockless renewal's trail, fixed (issue 37, the archive replayer: the
 *                  restarts bounded, `ospent`: past the bound the takeover serves by acks)
 *   NO_STALE_LOK   a leader that finds an older epoch's record written over its own keeps its
 *                  lease_ok_at (its release clean, its requalify early): the second trail, fixed
 *   NO_GONE_ACKED  rule 7: an epoch taken on evidence of death serves by the lease at once (as
 *                  the code did): SPIN's trail of issue 37's third round, fixed
 *   NO_GONE_ACKS_ONLY rule 7's guard: evidence of death counts whatever the holder said it serves
 *                  by (with -DFORGED_GONE: a forger's trail, two relays)
 *   NO_GONE_LOK_CHECK (with -DGONE_LOK) rule 7b: a takeover on evidence of death starts in
 *                  `lease` mode whatever the dead holder's beacons said of its lease_ok_at (A16b)
 *   SHORT_S        S no longer than W (S_LO = W_HI)
 * A finding, not a mutant of a rule as built (-DLOK_BOUNDED): a leader's lease_ok_at restarted for
 * an older epoch's record over its own once per epoch it took, no more (a bound on what an archive
 * replayer makes of `ServingBook.overwritten`, issue 37): SPIN's trail, docs/election.md
 * "Renewing without the lock".
 */

#ifdef WITNESS
/* issue 38: the pool of two and the share's witness, a model of its own (verify/witness.pml) */
#include "witness.pml"
#else
#define N 3
#define NONE 3
#define UNKNOWN 4   /* a start's adherence: a leader it may have acked before (rule 1 across a restart) */
#ifndef MAXE
#define MAXE 4
#endif

/* ticks (A1, A2): the smallest numbers that keep the rules' inequalities strict */
#define W_HI 1      /* a majority's ack keeps the gate open while its send age <= W_HI */
#ifdef SHORT_S
#define S_LO 1      /* the mutant: S no longer than W */
#else
#define S_LO 2      /* a member is quiet about its leader once heard age >= S_LO */
#endif
#define RD_HI 2     /* the gate by the lease is open while the last renewal's age <= RD_HI */
#define TTL_LO 3    /* a follower may take an unchanged lease once its age >= TTL_LO */
#define LOK_LO 3    /* lease_ok_at = TTL(1+rho)/(1-rho) after the take, at its shortest */
#define BG 0        /* blind_gap: TTL - RENEW_DEADLINE less the drift, TTL_LO - RD_HI - 1 */
#ifndef MAXF
#define MAXF 2
#endif

#define LEASE 0
#define ACKED 1

/* the store */
#define NOFILE 0
#define VALID 1
#define JUNK 2
#define MISSING 3
#define OLD 4

byte top;                      /* highest epoch in the claim records */
byte faults;                   /* crashes and hostile writes so far (A10: at most MAXF) */
byte Lk, Le, Lh, Lrel, Lho;    /* kind, epoch, holder, released, handoff_to */
byte Oe, Oh, Orel, Oho;        /* the previous valid record (what OLD puts back) */
bit onew[N];                   /* ... was written after member i's last valid read: news to it */
byte owner[MAXE + 1];          /* ghost: who won each epoch's CAS (NONE: nobody yet) */
bit over;                      /* A15: nothing can break P1-P3 any more: the search stops here */
#ifdef LIVE
/* -DLIVE (liveness, L1 below): each tick is a round in which every member that is up did its
   duty (a follower looked, a leader renewed) and heard every other member that is up */
#ifndef LB
#define LB 6                   /* the bound: ticks after the last crash or start */
#endif
bit dn[N];                     /* its look or renewal done this round */
bit hd[N * N];                 /* hd[x*N+s]: x heard s this round */
byte calm;                     /* ticks since the last crash or start (saturates at LB + 1) */
#endif

/* members */
bit up[N];
bit died[N];                   /* it crashed since its last claim (A16: evidence of death may come) */
byte known[N];                 /* highest epoch known */
byte lead[N];                  /* epoch it leads, 0 if none */
/* the serving right of its last taken epoch (kept after a step-down: the gate is deadlines) */
byte re[N];
bit rmode[N];
bit told[N];                   /* its leader beacons say `serve: ack` */
bit fenced[N];
bit rlok[N];                   /* lease_ok_at is later than the take */
byte tk[N];                    /* age of the take */
byte ren[N];                   /* age of the last successful renewal's start */
byte ack[N * N];               /* ack[i*N+j]: send age of i's newest beacon j acked (ACAP: none) */
byte swn[N];                   /* rule 1, self: the leader it waits out (NONE: its vote counts) */
byte swe[N];
byte swa[N];                   /* age since it last heard that leader, at the take */
byte rese[N];                  /* the epoch it resigned (its resign beacons), 0 if none */
bit resc[N];                   /* that resign says `fenced` */
bit rr[N];                     /* a lockless renewal read, rename pending (within its tick) */
/* adherence (rule 1) */
byte an[N];
byte ae[N];
byte hz[N];                    /* age since it last heard its leader */
bit am[N];                     /* its leader said `serve: ack` */
bit ares[N];                   /* its leader resigned */
/* the newest clean release heard (rule 6) */
byte crn[N];
byte cre[N];
/* lease memory (core.lease_memory) */
byte mh[N];
byte me[N];
byte lage[N];                  /* age since the lease it saw changed */
byte rdage[N];                 /* age since its last completed read */
bit miss[N];                   /* a valid record was written since its last valid read */
bit rmiss[N];                  /* ... a renewal it never read, among them (A8) */
bit vch[N];                    /* the holder's beacons named a renewal it did not read */
bit bspent[N];                 /* the blind_gap restart spent until the next valid read */
/* issue 37, the archive replayer (older writers, bounded): an older epoch's record written since
   its last valid read was refused a restart for the bound (`lease_memory.writes_still`): until
   the lease it saw changes, a takeover on its TTL serves by acks (rule 5), not by the lease */
bit ospent[N];
#ifdef LOK_BOUNDED
bit lks[N];                    /* -DLOK_BOUNDED (a finding): its one lease_ok_at restart spent */
#endif

/* scratch, always reset to 0 at the end of a step (not state) */
hidden byte ne, ch, ce, i, dd, nopen;
hidden byte wrongcas, reused;
hidden byte cacked, chand, gonev, obound, slowc;

#define o1(x) (((x) + 1) % N)
#define o2(x) (((x) + 2) % N)
#define A(x, y) ack[(x) * N + (y)]
#define minack(x) (A(x, o1(x)) < A(x, o2(x)) -> A(x, o1(x)) : A(x, o2(x)))
#define maxack(x) (A(x, o1(x)) > A(x, o2(x)) -> A(x, o1(x)) : A(x, o2(x)))
#ifdef NO_R1_SELF
#define selfok(x) true
#else
#define selfok(x) (swn[x] == NONE || swa[x] >= S_LO)
#endif
/* a majority (2 of 3) heard one of its beacons within W, itself counted from self_from */
#define ackok(x) ((selfok(x) && minack(x) <= W_HI) || maxack(x) <= W_HI)
#ifdef NO_R2_ACKS
#define gate(x) (up[x] && re[x] > 0 && !fenced[x] && ren[x] <= RD_HI)
#else
#define gate(x) (up[x] && re[x] > 0 && !fenced[x] && ren[x] <= RD_HI && (rmode[x] == LEASE || ackok(x)))
#endif
/* rule 1: a member whose own window by acks may still be open acks nobody (its own clock) */
#ifdef NO_R1_STEPDOWN
#define ownopen(x) false
#else
#define ownopen(x) (re[x] > 0 && rmode[x] == ACKED && minack(x) <= W_HI)
#endif
/* rule 3b: the third member t's latest beacon says it does not hear (h, e) for S */
#define agrees(t, h, e) (up[t] && (lead[t] > 0 || ownopen(t) || an[t] != (h) || ae[t] != (e) || hz[t] >= S_LO))
#ifdef NO_R3B
#define third(x, h, e) true
#else
#define third(x, h, e) ((o1(x) == (h) && agrees(o2(x), h, e)) || (o2(x) == (h) && agrees(o1(x), h, e)))
#endif
#ifdef NO_R3A
#define saidack(x) true
#else
#define saidack(x) am[x]
#endif
/* rule 3a: it adheres to (h, e), heard it say `serve: ack`, and has not heard it for S */
#define silent(x, h, e) ((h) != (x) && an[x] == (h) && ae[x] == (e) && hz[x] >= S_LO && !ares[x] && saidack(x) && third(x, h, e))
/* rule 6: the clean release it heard names the released lease it claims over (A9: at any
   time after, not only within a TTL: more behaviours, not fewer) */
#define cleanof(x, h, e) (crn[x] == (h) && cre[x] == (e))
#define cleanover(x) cleanof(x, Lh, Le)
/* A16: positive evidence that the holder h of the lease read is gone (core.liveness; the code's
   `_holder_gone`, cause GONE): given only in a look that asks for it (`gonev`), only once h
   crashed since its last claim (`died`). The code's other conditions (an answer of h's host at most FRESH old, no leader beacon
   of that epoch for two intervals, one heard before) are left out: more behaviours, not fewer.
   Rule 7: the taker serves by acks (rule 5), as on silence: h's death shut h's gate, not the
   gates of the epochs before h's (-DNO_GONE_ACKED: in `lease` mode, as the code did). Its own
   vote waits S after it last heard the leader it adheres to (rule 1), h included: evidence of
   death can be forged (an on-path writer of TCP resets, docs/design.md §13). */
#ifdef FORGED_GONE
#define FORGED true    /* -DFORGED_GONE: evidence forged by an on-path writer of TCP resets, any time */
#else
#define FORGED false
#endif
#define GONE(x, h) (gonev && (h) != (x) && (h) < N && (died[h] || FORGED))
#ifdef NO_GONE_ACKED
#define GONE_ACKED 0
#else
#define GONE_ACKED 1
#endif
/* ---- A16b (-DGONE_LOK, -DGONE_ACKS_ONLY): rule 7b as proposed (issues 36/37), not built ----
   Rule 7b: a taker on evidence of death starts in `lease` mode when the newest leader beacon it
   heard of the dead holder named the very renewal it reads (renew_seq) and said `lok`: the
   holder's lease_ok_at had passed, so every gate of an epoch before the holder's was shut for
   good, and the holder's own died with it. Else rule 7 (`ack` mode). gl[x] is that beacon's
   word: set when x hears the holder of the record in place (the valid lease, or the record junk,
   a deletion or an old copy covers: that holder's last write) leading that record's epoch;
   cleared by every valid write (a renewal, a claim, a release: another renew_seq), by a crash
   (the book), and (A12) once no evidence of death can come any more. */
bit gl[N];
#define INPLACE(s) ((Lk == VALID && Lh == (s) && Le == lead[s] && !Lrel) || ((Lk == JUNK || Lk == MISSING || Lk == OLD) && Oh == (s) && Oe == lead[s] && !Orel))
#define LOKSAID(s) (!rlok[s] || tk[s] >= LOK_LO)
#ifdef GONE_LOK
#define HEARLOK(x, s) if :: lead[s] > 0 && INPLACE(s) -> gl[x] = LOKSAID(s) :: else -> skip fi
#else
#define HEARLOK(x, s) skip   /* as built: gl stays 0, the state space as before */
#endif
#define GLCLEAR gl[0] = 0; gl[1] = 0; gl[2] = 0
#define GONEMAY (FORGED || faults < MAXF || died[0] || died[1] || died[2])
#define GLNORM(x) if :: gl[x] && !GONEMAY -> gl[x] = 0 :: else -> skip fi
#ifdef GONE_LOK
#ifdef NO_GONE_LOK_CHECK
#define GONE_LOKX(x) 1   /* the mutant: the beacon not checked */
#else
#define GONE_LOKX(x) gl[x]
#endif
#else
#define GONE_LOKX(x) 0   /* as built: rule 7 alone */
#endif
#define GONE_CACKED(x) (GONE_ACKED && !GONE_LOKX(x))
/* Rule 7's guard (as built): evidence of death speeds up the takeover only of a holder x adheres
   to and heard say `serve: ack` (an epoch e of holder h: rule 3a's `saidack`), so that forged
   evidence (-DFORGED_GONE) reaches no further than a silence does. -DNO_GONE_ACKS_ONLY switches
   the guard off (the code before it: a forger's trail, docs/serving-right.md fourth round). */
#if defined(GONE_ACKS_ONLY) || !defined(NO_GONE_ACKS_ONLY)
#define GONEOF(x, h, e) (GONE(x, h) && an[x] == (h) && ae[x] == (e) && am[x])
#else
#define GONEOF(x, h, e) GONE(x, h)
#endif
/* ---- end A16b ---- */

/* issue 37: a takeover on the TTL serves by acks once an older writer's restart was refused */
#define OSP(x) ospent[x]

/* the audit (issue 37: a d_step takes the first open guard): the TTL of an unchanged lease is over
   by the member's own clock. At real age TTL_LO it MAY be (its clock fast: A2), and `look` then
   takes it first, as the code does (`decide`: `_decide_follower` says CONTEND `expired` before
   `gone` or `silent` is asked); its clock slow, it may NOT be yet, and the code's look asks for
   evidence of death or a majority's silence instead (a takeover serving by acks). That is the
   world's choice, a step of its own: `x looks, its clock slow` (`slowc`) */
#define TTLOVER(x) (lage[x] >= TTL_LO && !slowc)

/* a read that is no evidence: junk, no file, a replay of an epoch below what it knows */
#define noevidence(x) (Lk == JUNK || Lk == MISSING || (Lk == VALID && Le < known[x]) || (Lk == OLD && Oe < known[x]))
#ifdef NO_R4_LOK
#define lokok(x) true
#else
#define lokok(x) (!rlok[x] || tk[x] >= LOK_LO)
#endif
/* ages saturate just past the largest threshold they are compared with (A1) */
#define sat(x, c) if :: x < (c) -> x++ :: else -> skip fi
#define ACAP (W_HI + 1)

/* A11: what can no longer matter is reset to one value, so states that differ only there are
   one state. Each reset gives the same or more behaviours from then on:
   - a right whose gate is shut for good (not leading: no ack is taken, no renewal made, so
     a shut gate never reopens) and whose window no longer keeps its member from acking;
   - an adherence to nobody; a self-wait already over; lease_ok_at already passed;
   - a leader's read gap (it reads at every renewal) and its blind restart (taken as spent:
     no restart that would only delay a takeover), its vouch and missed renewal (none). */
inline normalize(x) {
  if
  :: lead[x] == 0 && re[x] > 0 && !gate(x) && !ownopen(x) ->
     re[x] = 0; rmode[x] = LEASE; told[x] = 0; fenced[x] = 0; rlok[x] = 0; tk[x] = 0; ren[x] = 0;
     A(x, o1(x)) = ACAP; A(x, o2(x)) = ACAP; swn[x] = NONE; swe[x] = 0; swa[x] = 0
  :: else -> skip
  fi;
  if
  :: re[x] == 0 ->   /* no right at all: a gate only a claim opens (which sets all of these) */
     rmode[x] = LEASE; told[x] = 0; fenced[x] = 0; ren[x] = 0; A(x, o1(x)) = ACAP; A(x, o2(x)) = ACAP
  :: else -> skip
  fi;
  if
  :: an[x] == NONE -> ae[x] = 0; hz[x] = 0; am[x] = 0; ares[x] = 0
  :: an[x] == UNKNOWN && hz[x] >= S_LO -> an[x] = NONE; ae[x] = 0; hz[x] = 0; am[x] = 0; ares[x] = 0
  :: else -> skip
  fi;
  if
  :: swn[x] == NONE || swa[x] >= S_LO -> swn[x] = NONE; swe[x] = 0; swa[x] = 0
  :: else -> skip
  fi;
  if
  :: rlok[x] && tk[x] >= LOK_LO -> rlok[x] = 0; tk[x] = 0
  :: !rlok[x] -> tk[x] = 0
  :: else -> skip
  fi;
  if
  :: lead[x] > 0 -> rdage[x] = 0; bspent[x] = 1; vch[x] = 0; rmiss[x] = 0; ospent[x] = 0
  :: else -> told[x] = 0; rlok[x] = 0; tk[x] = 0; rr[x] = 0
#ifdef LOK_BOUNDED
     ; lks[x] = 0
#endif
  fi;
  /* A12: the clean release it heard, for an epoch below what it knows (rule 6 asks it of a
     lease it reads as valid, whose epoch is at least what it knows, which only goes up) */
  if
  :: cre[x] < known[x] -> crn[x] = NONE; cre[x] = 0
  :: else -> skip
  fi;
  GLNORM(x)   /* A16b */
}

/* A12: member s's resign can no longer matter to anyone: nobody still adheres to (s, rese)
   without having heard it resign, nobody waits it out, and (if it said `fenced`) every other
   member knows an epoch above it. No member adheres to (s, rese) anew (s leads it no more). */
#define resuse(s, x) ((an[x] == (s) && ae[x] == rese[s] && !ares[x]) || (swn[x] == (s) && swe[x] == rese[s]) || (resc[s] && rese[s] >= known[x]))
inline normalize_resign(s) {
  if
  :: rese[s] > 0 && !resuse(s, o1(s)) && !resuse(s, o2(s)) -> rese[s] = 0; resc[s] = 0
  :: else -> skip
  fi
}

/* A12: the store's dead fields. The previous valid record (what OLD puts back) is read only
   while OLD lies there, and written afresh (SAVEOLD) whenever the lease goes from valid to
   junk or missing: it is dead while a valid record lies there, or when no hostile write is
   left (faults = MAXF) and none lies there. The record's fields are read only while it is
   valid (every write of a valid record writes them all); `miss` only while a valid record
   lies there (write_valid sets every one). An epoch's owner is read only for a gate's epoch
   (P3) and for a new epoch (P2), which must be above `top` (the assertion says so): an
   epoch no right holds any more, at or below `top`, is nobody's. */
inline normalize_store() {
  if
  :: Lk == VALID || Lk == NOFILE || (Lk != OLD && faults >= MAXF) ->
     Oe = 0; Oh = NONE; Orel = 0; Oho = NONE; onew[0] = 0; onew[1] = 0; onew[2] = 0
  :: else -> skip
  fi;
  if
  :: Lk != VALID -> Le = 0; Lh = NONE; Lrel = 0; Lho = NONE; miss[0] = 0; miss[1] = 0; miss[2] = 0
  :: else -> skip
  fi;
  i = 1;
  do
  :: i <= MAXE -> if :: i != re[0] && i != re[1] && i != re[2] -> owner[i] = NONE :: else -> skip fi; i++
  :: else -> break
  od;
  i = 0
}

/* A12 (issue 37, the must-hold size): a crash is evidence of death only of a lease that names
   the member who crashed (GONE reads died[h] for h = Lh, a valid record, or h = Oh, the old copy
   a writer without the key may put back; `normalize_store` has reset both when dead). The crash
   of a member that neither names can never be read again: no record naming it comes back before
   it claims again (every valid write names its writer, who leads an epoch it claimed, and a
   claim clears `died`; the old copy is only ever the record before it), and a look "its holder
   gone" whose holder has no `died` is the plain look, step for step. So that `died` is reset.
   -DKEEP_DIED keeps it (the same runs; SPIN's random simulation then offers that plain look
   under its other name more often: tests/test_spin_replay.py compares those looks too). */
inline normalize_died() {
  i = 0;
  do
  :: i < N -> if :: died[i] && Lh != i && Oh != i -> died[i] = 0 :: else -> skip fi; i++
  :: else -> break
  od;
  i = 0
}

/* A13 (-DSHIFT): epochs renamed. The model compares epochs only with each other (<, =, >),
   with 0 (none) and adds one (a claim): when every epoch a member, the store or a ghost still
   names is at least m > 1, lowering all of them by m - 1 gives a state with the very same
   futures. The bound MAXE then limits how many epochs are alive at once, not how many are
   taken in a run: every run of the plain bound, and more. */
#define lowest(v) if :: (v) > 0 && (v) < dd -> dd = (v) :: else -> skip fi
#define lower(v) if :: (v) > 0 -> v = (v) - dd :: else -> skip fi
inline shift_epochs() {
  dd = MAXE + 1;
  lowest(top); lowest(Le); lowest(Oe);
  i = 0;
  do
  :: i < N ->
     lowest(known[i]); lowest(lead[i]); lowest(re[i]); lowest(swe[i]); lowest(rese[i]);
     lowest(ae[i]); lowest(cre[i]); lowest(me[i]); i++
  :: else -> break
  od;
  if
  :: dd > 1 && dd <= MAXE ->
     dd = dd - 1;
     printf("@ epochs renamed: each lowered by %d\n", dd);
     lower(top); lower(Le); lower(Oe);
     i = 0;
     do
     :: i < N ->
        lower(known[i]); lower(lead[i]); lower(re[i]); lower(swe[i]); lower(rese[i]);
        lower(ae[i]); lower(cre[i]); lower(me[i]); i++
     :: else -> break
     od;
     i = 1;
     do
     :: i <= MAXE && i + dd <= MAXE -> owner[i] = owner[i + dd]; i++
     :: i <= MAXE && i + dd > MAXE -> owner[i] = NONE; i++
     :: else -> break
     od
  :: else -> skip
  fi;
  i = 0; dd = 0
}

/* A15: the bound reached and one right left. Once epoch MAXE is taken, no claim can be made
   (a claim takes known + 1 <= MAXE, or, below `top`, writes nothing: rule 3e; under NO_R3E,
   once every member knows MAXE; a crash keeps `known`): no epoch is taken again (P2), no
   right begins (P3), and a right only ever ends (its gate shut for good, or fenced). If then
   at most one member still has a right whose gate may open, no two gates can ever be open
   together (P1). The same holds one claim earlier when no right is left (the last claim
   begins the only one). Nothing the run does from here on can fail an assertion, and the
   state is replaced by one sink (`over`) where the search stops.
   (Not with SHIFT, where the bound is on the epochs alive at once.) */
#define live(x) (re[x] > 0 && !fenced[x])
#ifdef NO_R3E
#define SPENT (known[0] >= MAXE && known[1] >= MAXE && known[2] >= MAXE && live(0) + live(1) + live(2) <= 1)
#else
/* each claim left takes top + 1 (one below `top` writes nothing: rule 3e) and begins one right */
#define SPENT (MAXE - top + live(0) + live(1) + live(2) <= 1)
#endif
inline sink() {
  i = 0;
  do
  :: i < N ->
     up[i] = 0; died[i] = 0; known[i] = 0; lead[i] = 0; re[i] = 0; rmode[i] = 0; told[i] = 0; fenced[i] = 0;
     rlok[i] = 0; tk[i] = 0; ren[i] = 0; A(i, o1(i)) = 0; A(i, o2(i)) = 0; swn[i] = 0; swe[i] = 0;
     swa[i] = 0; rese[i] = 0; resc[i] = 0; rr[i] = 0; an[i] = 0; ae[i] = 0; hz[i] = 0; am[i] = 0;
     ares[i] = 0; crn[i] = 0; cre[i] = 0; mh[i] = 0; me[i] = 0; lage[i] = 0; rdage[i] = 0;
     miss[i] = 0; rmiss[i] = 0; vch[i] = 0; bspent[i] = 0; ospent[i] = 0; onew[i] = 0; gl[i] = 0; i++   /* gl: A16b */
  :: else -> break
  od;
  i = 0;
  do
  :: i <= MAXE -> owner[i] = 0; i++
  :: else -> break
  od;
  top = 0; faults = 0; Lk = 0; Le = 0; Lh = 0; Lrel = 0; Lho = 0; Oe = 0; Oh = 0; Orel = 0; Oho = 0;
  i = 0; over = 1
}

#ifdef LIVE
#undef SPENT
#define SPENT false   /* liveness goes on past the last claim */
#endif
inline normalize_all() {
#ifndef SHIFT
  if
  :: SPENT ->
     printf("@ the bound reached, one right left: nothing can fail from here\n"); sink()
  :: else ->
#endif
  normalize(0); normalize(1); normalize(2);
  normalize_resign(0); normalize_resign(1); normalize_resign(2);
  normalize_store()
#ifndef KEEP_DIED
  ; normalize_died()
#endif
#ifdef SHIFT
  ; shift_epochs()
#endif
#ifdef SYM
  ; c_code { canon(); }
#endif
#ifndef SHIFT
  fi
#endif
}

#ifdef SYM
/* A14 (-DSYM): the members are interchangeable. Every step offered to member x is offered to
   every member alike (handoff to either other member, each listening to each), the initial
   state is the same for all, and P1-P3 name no member: renaming the members by any
   permutation maps a run to a run and an error to an error. After every step the state is
   replaced by the least (byte by byte) of its six renamings, so SPIN stores one of each six.
   Done in C (SPIN's simulator skips it: trails are printed from searches without it). */
c_code {
#define SYMN 3
#ifdef LIVE
#define SYMLIVE(X) X(dn)
#else
#define SYMLIVE(X)
#endif
static const int symperm[6][3] = {{0,1,2},{0,2,1},{1,0,2},{1,2,0},{2,0,1},{2,1,0}};
#ifdef LOK_BOUNDED
#define SYMLOK(X) X(lks)
#else
#define SYMLOK(X)
#endif
#define SYMPLAIN(X) X(onew) X(up) X(died) X(rmode) X(told) X(fenced) X(rlok) X(resc) X(rr) X(am) X(ares) \
  X(miss) X(rmiss) X(vch) X(bspent) X(ospent) X(known) X(lead) X(re) X(tk) X(ren) X(swe) X(swa) X(rese) \
  X(ae) X(hz) X(cre) X(me) X(lage) X(rdage) X(gl) SYMLIVE(X) SYMLOK(X)   /* gl: A16b */
#define SYMWHO(X) X(swn) X(an) X(crn) X(mh)
static uchar symmap(const int *p, uchar v) { return v < SYMN ? (uchar) p[v] : v; }
/* the renaming of `now` by p (old member -> new member), written into `out`, as bytes */
static int symkey(const int *p, uchar *out) {
  int q[SYMN], j, k, n = 0;
  for (j = 0; j < SYMN; j++) q[p[j]] = j;
#define SYMP(f) for (j = 0; j < SYMN; j++) out[n++] = now.f[q[j]];
#define SYMW(f) for (j = 0; j < SYMN; j++) out[n++] = symmap(p, now.f[q[j]]);
  SYMPLAIN(SYMP)
  SYMWHO(SYMW)
  for (j = 0; j < SYMN; j++) for (k = 0; k < SYMN; k++) out[n++] = now.ack[q[j] * SYMN + q[k]];
#ifdef LIVE
  for (j = 0; j < SYMN; j++) for (k = 0; k < SYMN; k++) out[n++] = now.hd[q[j] * SYMN + q[k]];
#endif
  out[n++] = symmap(p, now.Lh); out[n++] = symmap(p, now.Lho); out[n++] = symmap(p, now.Oh); out[n++] = symmap(p, now.Oho);
  for (j = 0; j < (int) sizeof(now.owner); j++) out[n++] = symmap(p, now.owner[j]);
  return n;
}
static void canon(void) {
  uchar best[512], cur[512];
  int b = 0, m, n, j, k, q[SYMN];
  n = symkey(symperm[0], best);
  for (m = 1; m < 6; m++) {
    symkey(symperm[m], cur);
    if (memcmp(cur, best, n) < 0) { memcpy(best, cur, n); b = m; }
  }
  if (b == 0) return;
  { static int showing = -1;   /* SPIN_SHOW_SYM=1 ./pan -r: say each renaming (old -> new member) */
    if (showing < 0) showing = getenv("SPIN_SHOW_SYM") != NULL;
    if (showing) printf("P %d %d %d\n", symperm[b][0], symperm[b][1], symperm[b][2]); }
  /* write the least renaming back */
  n = 0;
#define SYMPB(f) for (j = 0; j < SYMN; j++) now.f[j] = best[n++];
  SYMPLAIN(SYMPB)
  SYMWHO(SYMPB)
  for (j = 0; j < SYMN; j++) for (k = 0; k < SYMN; k++) now.ack[j * SYMN + k] = best[n++];
#ifdef LIVE
  for (j = 0; j < SYMN; j++) for (k = 0; k < SYMN; k++) now.hd[j * SYMN + k] = best[n++];
#endif
  now.Lh = best[n++]; now.Lho = best[n++]; now.Oh = best[n++]; now.Oho = best[n++];
  for (j = 0; j < (int) sizeof(now.owner); j++) now.owner[j] = best[n++];
}
}
#endif

/* one machine-readable line of the state after each step (for the replay through the code,
   tests/test_spin_replay.py; only SPIN's simulator and pan's replay print) */
inline say_state() {
  nopen = gate(0); ne = gate(1); ch = gate(2);
  printf("S gate=%d,%d,%d", nopen, ne, ch);
  nopen = 0; ne = 0; ch = 0;
  printf(" up=%d,%d,%d", up[0], up[1], up[2]);
  printf(" died=%d,%d,%d", died[0], died[1], died[2]);
  printf(" lead=%d,%d,%d", lead[0], lead[1], lead[2]);
  printf(" re=%d,%d,%d", re[0], re[1], re[2]);
  printf(" mode=%d,%d,%d", rmode[0], rmode[1], rmode[2]);
  printf(" told=%d,%d,%d", told[0], told[1], told[2]);
  printf(" fenced=%d,%d,%d", fenced[0], fenced[1], fenced[2]);
  printf(" ren=%d,%d,%d", ren[0], ren[1], ren[2]);
  printf(" known=%d,%d,%d", known[0], known[1], known[2]);
  printf(" an=%d,%d,%d", an[0], an[1], an[2]);
  printf(" ae=%d,%d,%d", ae[0], ae[1], ae[2]);
  printf(" hz=%d,%d,%d", hz[0], hz[1], hz[2]);
  printf(" am=%d,%d,%d", am[0], am[1], am[2]);
  printf(" ares=%d,%d,%d", ares[0], ares[1], ares[2]);
  printf(" swn=%d,%d,%d", swn[0], swn[1], swn[2]);
  printf(" swa=%d,%d,%d", swa[0], swa[1], swa[2]);
  printf(" swe=%d,%d,%d", swe[0], swe[1], swe[2]);
  printf(" onew=%d,%d,%d", onew[0], onew[1], onew[2]);
  printf(" lage=%d,%d,%d", lage[0], lage[1], lage[2]);
  printf(" mh=%d,%d,%d", mh[0], mh[1], mh[2]);
  printf(" me=%d,%d,%d", me[0], me[1], me[2]);
  printf(" rese=%d,%d,%d", rese[0], rese[1], rese[2]);
  printf(" resc=%d,%d,%d", resc[0], resc[1], resc[2]);
  printf(" crn=%d,%d,%d", crn[0], crn[1], crn[2]);
  printf(" cre=%d,%d,%d", cre[0], cre[1], cre[2]);
  printf(" tk=%d,%d,%d", tk[0], tk[1], tk[2]);
  printf(" rlok=%d,%d,%d", rlok[0], rlok[1], rlok[2]);
  printf(" miss=%d,%d,%d", miss[0], miss[1], miss[2]);
  printf(" rmiss=%d,%d,%d", rmiss[0], rmiss[1], rmiss[2]);
  printf(" vch=%d,%d,%d", vch[0], vch[1], vch[2]);
  printf(" bspent=%d,%d,%d", bspent[0], bspent[1], bspent[2]);
  printf(" ospent=%d,%d,%d", ospent[0], ospent[1], ospent[2]);
  printf(" rdage=%d,%d,%d", rdage[0], rdage[1], rdage[2]);
  printf(" gl=%d,%d,%d", gl[0], gl[1], gl[2]);   /* A16b */
  printf(" ack=%d,%d,%d,%d,%d,%d", ack[1], ack[2], ack[3], ack[5], ack[6], ack[7]);
  printf(" L=%d,%d,%d,%d,%d O=%d,%d,%d,%d top=%d faults=%d\n", Lk, Le, Lh, Lrel, Lho, Oe, Oh, Orel, Oho, top, faults)
}

inline check() {
  say_state();
  /* P1: one relay at a time */
  nopen = gate(0) + gate(1) + gate(2);
  assert(nopen <= 1);
  /* P3: a gate only for an epoch won by this member's own CAS */
  wrongcas = (gate(0) && owner[re[0]] != 0) || (gate(1) && owner[re[1]] != 1) || (gate(2) && owner[re[2]] != 2);
  assert(!wrongcas);
  nopen = 0; reused = 0;
  ne = 0; ch = 0; ce = 0; dd = 0; cacked = 0; chand = 0; gonev = 0; obound = 0; slowc = 0;
  normalize_all()
}

inline learn(x, e) {
  /* P2: a member's known epoch only ever goes up (every write of known[] is here or a claim) */
  if
  :: e > known[x] -> known[x] = e
  :: else -> skip
  fi
}

#define SAVEOLD Oe = Le; Oh = Lh; Orel = Lrel; Oho = Lho; onew[0] = miss[0]; onew[1] = miss[1]; onew[2] = miss[2]
inline write_valid(e, h, rel, ho) {
  if
  :: Lk == VALID -> SAVEOLD
  :: else -> skip
  fi;
  Lk = VALID; Le = e; Lh = h; Lrel = rel; Lho = ho;
  miss[0] = 1; miss[1] = 1; miss[2] = 1;
  GLCLEAR   /* A16b */
}

/* member x takes epoch known+1 by compare-and-set on what it read (A5): before it, set
   cacked (starts_acked), ch/ce (the lease it claims over), chand (a handoff's lease) */
inline claim(x) {
  printf("C %d\n", x);   /* a claim attempted (the replay compares the code's CONTEND with it) */
#ifndef NO_R3E
  if
  :: top > known[x] -> known[x] = top; lage[x] = 0; lead[x] = 0; rr[x] = 0   /* rule 3e: a fresher
     epoch: write nothing, time it as a lease seen now, and a leader of an older one steps down */
  :: else ->
#endif
    ne = known[x] + 1;
    if
    :: ne > MAXE -> skip   /* the bound of the search: no more epochs */
    :: else ->
      reused = (owner[ne] != NONE || ne <= top);
      assert(!reused);   /* P2: an epoch is never reused */
      owner[ne] = x; top = ne; known[x] = ne; died[x] = 0;
#ifdef LOK_BOUNDED
      lks[x] = 0;
#endif
      write_valid(ne, x, 0, NONE);
      miss[x] = 0; rmiss[x] = 0; mh[x] = x; me[x] = ne; lage[x] = 0;
      lead[x] = ne; re[x] = ne; fenced[x] = 0; tk[x] = 0; ren[x] = 0; rr[x] = 0;
      A(x, o1(x)) = ACAP; A(x, o2(x)) = ACAP;
      rese[x] = 0; resc[x] = 0; swn[x] = NONE; swe[x] = 0; swa[x] = 0;
#ifdef NO_R5
      cacked = 0;
#endif
      if
      :: cacked ->
        rmode[x] = ACKED; told[x] = 1; rlok[x] = 1;
        /* rule 1: it acked a leader it heard within S: its own vote waits S from then (not if
           that one resigned, or it read a handoff's lease from it: fenced before written) */
        if
        :: an[x] != NONE && an[x] != x && !ares[x] && !(chand && an[x] == ch && ae[x] == ce) ->
             swn[x] = an[x]; swe[x] = ae[x]; swa[x] = hz[x]
        :: else -> skip
        fi
      :: else -> rmode[x] = LEASE; rlok[x] = 0;
#ifdef NO_R2_TOLD
        told[x] = 1   /* says `serve: ack` before a majority acked */
#else
        told[x] = 0
#endif
      fi
    fi
#ifndef NO_R3E
  fi
#endif
}

/* one cycle of a follower: read the lease, fold it in, decide, maybe claim (A5) */
inline look(x) {
  if
  :: Lk == VALID && Le >= known[x] ->
     if
     :: Lh != mh[x] || Le != me[x] || miss[x] -> lage[x] = 0; ospent[x] = 0   /* the lease changed */
     :: else -> skip
     fi;
     mh[x] = Lh; me[x] = Le; learn(x, Le);
     miss[x] = 0; rmiss[x] = 0; vch[x] = 0; bspent[x] = 0; rdage[x] = 0;
     ch = Lh; ce = Le;
     if
     :: Lrel && Lho == NONE -> cacked = !cleanover(x); claim(x)     /* released: at once */
     :: Lrel && Lho == x -> cacked = !cleanover(x); chand = 1; claim(x)   /* handed to me */
     :: Lrel && Lho != NONE && Lho != x && lage[x] >= TTL_LO ->
        cacked = !cleanover(x) || OSP(x); chand = 1; claim(x)       /* handoff lapsed */
     :: !Lrel && TTLOVER(x) -> cacked = OSP(x); claim(x)     /* expired: lease mode (issue 37: acks past the bound) */
     :: !Lrel && !TTLOVER(x) && GONEOF(x, Lh, Le) -> cacked = GONE_CACKED(x); claim(x)   /* gone */
     :: !Lrel && silent(x, Lh, Le) && !GONEOF(x, Lh, Le) -> cacked = 1; claim(x)   /* silent (rule 3) */
     :: else -> skip
     fi
  :: Lk == OLD && Oe >= known[x] && (Oh != mh[x] || Oe != me[x]) ->
     /* an old copy of a record it never saw: valid to it, a lease seen now; released, it is
        taken at once as the very record would be (the code's `decide`: found by the replay) */
     lage[x] = 0; ospent[x] = 0; mh[x] = Oh; me[x] = Oe; learn(x, Oe); rdage[x] = 0; bspent[x] = 0; vch[x] = 0;
     ch = Oh; ce = Oe;
     if
     :: Orel && Oho == NONE -> cacked = !cleanof(x, Oh, Oe); claim(x)
     :: Orel && Oho == x -> cacked = !cleanof(x, Oh, Oe); chand = 1; claim(x)
     :: !Orel && GONEOF(x, Oh, Oe) -> cacked = GONE_CACKED(x); claim(x)   /* its holder gone */
     :: else -> skip
     fi
  :: Lk == OLD && Oe >= known[x] && Oh == mh[x] && Oe == me[x] ->
     /* a copy of the lease it saw: a renewal it never read is a change (the timer restarts);
        else the very record or an older one (a lower renew_seq): the lease in place (3d) */
     if
     :: onew[x] -> lage[x] = 0; ospent[x] = 0; bspent[x] = 0; vch[x] = 0; rmiss[x] = 0
     :: else -> skip
     fi;
     rdage[x] = 0; ch = Oh; ce = Oe;
     if
     :: Orel && Oho == NONE -> cacked = !cleanof(x, Oh, Oe); claim(x)
     :: Orel && Oho == x -> cacked = !cleanof(x, Oh, Oe); chand = 1; claim(x)
     :: Orel && Oho != NONE && Oho != x && lage[x] >= TTL_LO -> cacked = !cleanof(x, Oh, Oe) || OSP(x); chand = 1; claim(x)
     :: !Orel && TTLOVER(x) -> cacked = OSP(x); claim(x)
     :: !Orel && !TTLOVER(x) && GONEOF(x, Oh, Oe) -> cacked = GONE_CACKED(x); claim(x)
     :: !Orel && silent(x, Oh, Oe) && !GONEOF(x, Oh, Oe) -> cacked = 1; claim(x)
     :: else -> skip
     fi
  :: (Lk == NOFILE || Lk == MISSING) && known[x] == 0 && me[x] == 0 ->
     rdage[x] = 0; cacked = 0; claim(x)                          /* no lease ever seen: first */
  :: noevidence(x) && (known[x] > 0 || me[x] > 0) && (!rmiss[x] || vch[x]) ->   /* no evidence (A8: V) */
#ifndef NO_BLIND
     if
     :: rdage[x] > BG && !bspent[x] -> lage[x] = 0; bspent[x] = 1
     :: else -> skip
     fi;
#endif
#ifndef NO_VOUCH
     if
     :: vch[x] -> lage[x] = 0; vch[x] = 0
     :: else -> skip
     fi;
#endif
#ifndef NO_STALE_ALIVE
     /* a record of an epoch below what it knows, written since its last valid read: that
        epoch's holder still writes (a lockless rename landed over a claim): it lives, and the
        TTL of the lease path starts again (docs/election.md "Renewing without the lock") */
     if
     :: Lk == VALID && miss[x] && !obound -> lage[x] = 0; miss[x] = 0
     /* issue 37 (the archive replayer): the restarts are bounded (one TTL past where the timer
        stood at the first, since the lease last changed: `lease_memory.older_restart`); past the
        bound, none, and the takeover its TTL then allows serves by acks (`ospent`). The model
        leaves the bound's instant open: any such look may be past it (`obound`: the step
        `x looks, past the older writers' bound`; a d_step takes the first open guard, so the
        choice is a step of its own) */
     :: Lk == VALID && miss[x] && obound -> ospent[x] = 1; miss[x] = 0
     :: else -> skip
     fi;
#endif
     rdage[x] = 0; ch = mh[x]; ce = me[x];
     if
     :: lage[x] >= TTL_LO -> cacked = OSP(x); claim(x)           /* the TTL of the last valid lease */
#ifdef NO_R3D
     :: me[x] > 0 && silent(x, mh[x], me[x]) -> cacked = 1; claim(x)
#endif
     :: else -> skip
     fi
  :: else -> skip   /* a read A8's assumption V rules out: as if not taken */
  fi
}

/* leader x's renewal read (A5): its own record -> the lockless rename may follow */
inline renew_read(x) {
  if
#ifdef LOCKED_RENEW
  :: Lk == VALID && Lh == x && Le == lead[x] && !Lrel -> renewed(x)   /* read and write under the lock */
#else
  :: Lk == VALID && Lh == x && Le == lead[x] && !Lrel -> rr[x] = 1; miss[x] = 0
#endif
  :: Lk == VALID && Le >= lead[x] && (Lh != x || Le > lead[x]) ->
     learn(x, Le); lead[x] = 0; rr[x] = 0                       /* you lost: step down */
  :: else ->                                                     /* no evidence: rewrite, locked */
     if
     :: top > lead[x] -> learn(x, top); lead[x] = 0              /* 3e: a fresher epoch */
     :: else ->
#ifndef NO_STALE_LOK
        /* a record of an older epoch written over its own: that epoch's holder renews on (a
           lockless rename landed over its claim) and its gate may be open by acks: no earlier
           gate is shut for good until lease_ok_at after this rewrite (rules 4 and 6) */
        if
#ifdef LOK_BOUNDED
        /* a finding (issue 37, the archive replayer): restarted once per epoch taken, no more */
        :: Lk == VALID && Le < lead[x] && !lks[x] -> rlok[x] = 1; tk[x] = 0; lks[x] = 1
#else
        :: Lk == VALID && Le < lead[x] -> rlok[x] = 1; tk[x] = 0
#endif
        :: else -> skip
        fi;
#endif
        renewed(x)
     fi
  fi
}

inline renewed(x) {
  /* its own write is a change of the lease it reads: its timer of the lease restarts (lage) */
  write_valid(lead[x], x, 0, NONE); miss[x] = 0; ren[x] = 0; rr[x] = 0; lage[x] = 0;
  i = 0;
  do
  :: i < N -> if :: i != x && me[i] <= lead[x] -> rmiss[i] = 1 :: else -> skip fi; i++   /* A8 */
  :: else -> break
  od;
  i = 0
}

/* the leader releases its epoch to `to` (or to no one): the worker fences first */
inline release(x, to) {
#ifdef NO_FENCE
  if
  :: to != NONE -> fenced[x] = 1
  :: else -> skip
  fi;
#else
  fenced[x] = 1;
#endif
  write_valid(lead[x], x, 1, to); miss[x] = 0;
  rese[x] = lead[x];
#ifdef NO_R6_LOK
  resc[x] = fenced[x];
#else
  resc[x] = fenced[x] && (!rlok[x] || tk[x] >= LOK_LO);
#endif
  lead[x] = 0; rr[x] = 0
}

/* member x hears member s's beacon (A4) */
inline hear(x, s) {
  if
  :: lead[s] > 0 ->
     /* a leader beacon */
     if
     :: lead[s] < known[x] -> skip                                   /* below its floor */
     :: an[x] == s && ae[x] == lead[s] ->
        hz[x] = 0; am[x] = told[s]
     :: an[x] != NONE && lead[s] < ae[x] -> skip
#ifndef NO_R1_STICKY
     :: an[x] != NONE && !ares[x] && hz[x] < S_LO -> skip           /* sticky: heard within S */
#endif
     :: else ->
        an[x] = s; ae[x] = lead[s]; hz[x] = 0; am[x] = told[s]; ares[x] = 0
     fi;
     HEARLOK(x, s);   /* A16b */
     /* the holder's beacons name a renewal this member did not read (vouched) */
     if
     :: mh[x] == s && me[x] == lead[s] && rmiss[x] -> vch[x] = 1
     :: else -> skip
     fi
  :: lead[s] == 0 && rese[s] > 0 ->
     /* its resign (sent 3x, heard late or twice: the same) */
     if
     :: an[x] == s && ae[x] == rese[s] -> ares[x] = 1
     :: else -> skip
     fi;
     if
     :: swn[x] == s && swe[x] == rese[s] -> swn[x] = NONE; swe[x] = 0; swa[x] = 0
     :: else -> skip
     fi;
     if
     :: resc[s] && (rese[s] > cre[x] || (rese[s] == cre[x] && s != crn[x])) -> crn[x] = s; cre[x] = rese[s]
     :: else -> skip
     fi
  :: else -> skip
  fi;
  /* its ack of my current epoch (its follower beacon, or a replayed older one) */
  if
  :: lead[x] > 0 && lead[s] == 0 && !ownopen(s) && an[s] == x && ae[s] == lead[x] && hz[s] < A(x, s) ->
     A(x, s) = hz[s]
  :: else -> skip
  fi;
  /* LEASE becomes ACKED at the first majority, never back; then its beacons say so (rule 2) */
  if
  :: lead[x] > 0 && rmode[x] == LEASE && ackok(x) -> rmode[x] = ACKED; told[x] = 1
  :: else -> skip
  fi
}

inline tick() {
  i = 0;
  do
  :: i < N ->
     sat(tk[i], LOK_LO); sat(ren[i], RD_HI + 1); sat(A(i, o1(i)), ACAP); sat(A(i, o2(i)), ACAP);
     sat(swa[i], S_LO); sat(hz[i], S_LO);
     sat(lage[i], TTL_LO); sat(rdage[i], BG + 1);
     rr[i] = 0;
     i++
  :: else -> break
  od;
  i = 0;
  normalize_all()
}

/* A7: a crash (power, kill -9): the relay dies with it; it starts later, its book lost */
inline crash(x) {
  up[x] = 0; died[x] = 1; lead[x] = 0; re[x] = 0; rmode[x] = LEASE; told[x] = 0; fenced[x] = 0; rlok[x] = 0;
  tk[x] = 0; ren[x] = 0; A(x, o1(x)) = ACAP; A(x, o2(x)) = ACAP; swn[x] = NONE; swe[x] = 0; swa[x] = 0;
  rese[x] = 0; resc[x] = 0; rr[x] = 0;
  an[x] = NONE; ae[x] = 0; hz[x] = 0; am[x] = 0; ares[x] = 0;
  crn[x] = NONE; cre[x] = 0;
  lage[x] = 0; rdage[x] = 0; vch[x] = 0; bspent[x] = 0; rmiss[x] = 0; ospent[x] = 0;
  gl[x] = 0   /* A16b */
}

/* A7: a start. Its book is lost, not the acks it sent before: it may have acked a leader just
   before it stopped, who may still count that ack for W. The code's book (`ServingBook.started`)
   takes it for an adherence to an unknown leader heard at the start: sticky for S (rule 1), and
   its own vote in an epoch it takes waits as long. Without it (-DNO_START_QUIET) SPIN's trail:
   a member acks leader 0, restarts, acks leader 1 at once, and both gates are open. */
#ifdef NO_START_QUIET
#define START(x) skip
#else
#define START(x) an[x] = UNKNOWN; ae[x] = 0; hz[x] = 0; am[x] = 0; ares[x] = 0
#endif

/* every step member x may take: each one indivisible step (d_step: no state in between) */
#define LEADS(x) (up[x] && !MUTE(x) && lead[x] > 0 && ren[x] <= RD_HI)
#define OWNLEASE(x) (Lk == VALID && Lh == x && Le == lead[x] && !Lrel)
#ifdef SUP_RELEASE
#define SUPERVISOR(x) \
  :: d_step { !over && (LEADS(x) && OWNLEASE(x) && !sup[x]) -> printf("@ %d: its supervisor releases\n", x); write_valid(lead[x], x, 1, NONE); miss[x] = 0; sup[x] = 1; check() } \
  :: d_step { !over && (sup[x]) -> printf("@ %d: its supervisor kills its relay and exits\n", x); sup[x] = 0; crash(x); check() }
bit sup[N];   /* its supervisor released: it says and hears nothing more; its relay serves until killed */
#define MUTE(x) sup[x]
#else
#define MUTE(x) false
#define SUPERVISOR(x)
#endif
/* L1 (-DLIVE): liveness as a bounded response, checked as an assertion (a safety property of the
   model restricted to a good world): no writer without the key, no release or handoff (an
   operator's), no freeze and a network that delivers: time advances (`tick`) only once every
   member that is up did its round: a follower looked, a leader renewed (its read and rename),
   and it heard every other member that is up. Crashes (at most MAXF) and starts may come at any
   instant. Asserted at the end of every round: LB ticks or more after the last crash or start,
   whatever members are up (one alone, or more), some relay gate is open — unless the search's
   epochs are spent (a claim is then impossible: the bound, not the rules). A15's sink is off. */
#ifdef LIVE
#define VOLUNTARY false
#define HOSTILE false
#define DUTY(x) dn[x] = 1
#define HEARD(x, s) hd[(x) * N + (s)] = 1
#define UPSET calm = 0
#define done(x) (!up[x] || (lead[x] > 0 && ren[x] == 0 && !rr[x]) || (lead[x] == 0 && dn[x]))
#define heardall(x) (!up[x] || ((!up[o1(x)] || hd[(x) * N + o1(x)]) && (!up[o2(x)] || hd[(x) * N + o2(x)])))
#define ROUND (done(0) && done(1) && done(2) && heardall(0) && heardall(1) && heardall(2))
#define SERVES \
  nopen = gate(0) + gate(1) + gate(2); \
  assert(calm <= LB || nopen >= 1 || top >= MAXE); \
  nopen = 0; sat(calm, LB + 1); \
  dn[0] = 0; dn[1] = 0; dn[2] = 0; \
  hd[1] = 0; hd[2] = 0; hd[3] = 0; hd[5] = 0; hd[6] = 0; hd[7] = 0
#else
/* -DNO_RELEASE, -DNO_HOSTILE: a smaller world (no release or handoff by the worker; no writer
   without the key), to find a trail sooner: every run of it is a run of the whole model */
#ifdef NO_RELEASE
#define VOLUNTARY false
#else
#define VOLUNTARY true
#endif
#ifdef NO_HOSTILE
#define HOSTILE false
#else
#define HOSTILE true
#endif
#define DUTY(x) skip
#define HEARD(x, s) skip
#define UPSET skip
#define ROUND true
#define SERVES skip
#endif
/* issue 37: a look that finds an older epoch's record written since its last valid read, past the
   bound of such restarts (offered only then: elsewhere it is the plain look) */
#ifdef NO_STALE_ALIVE
#define OLDER_BOUND(x)
#else
#define OLDER_BOUND(x) \
  :: d_step { !over && (up[x] && !MUTE(x) && lead[x] == 0 && Lk == VALID && Le < known[x] && miss[x]) -> printf("@ %d looks, past the older writers' bound\n", x); DUTY(x); obound = 1; look(x); check() } \

#endif
/* the audit: a look at an unchanged lease (valid or its own old copy, not released) whose TTL_LO is
   over but whose TTL, on a slow clock, is not (TTLOVER): offered only where that look takes over
   early (its holder silent to a majority, rule 3, or gone, A16), else it is a look that does
   nothing. Not under -DLIVE: the ages saturate, so the model cannot bound how long a clock stays
   behind (a clock slow for ever is no good world: L1 would fail on it) */
#define RDH (Lk == VALID -> Lh : Oh)
#define RDE (Lk == VALID -> Le : Oe)
#define SLOWREAD(x) (lage[x] >= TTL_LO && ((Lk == VALID && Le >= known[x] && !Lrel && Lh == mh[x] && Le == me[x] && !miss[x]) || \
  (Lk == OLD && Oe >= known[x] && !Orel && Oh == mh[x] && Oe == me[x] && !onew[x])))
#if defined(LIVE) || defined(NO_SLOW)
#define SLOW_LOOKS(x)
#else
#define SLOW_LOOKS(x) \
  :: d_step { !over && (up[x] && !MUTE(x) && lead[x] == 0 && SLOWREAD(x) && silent(x, RDH, RDE)) -> printf("@ %d looks, its clock slow\n", x); slowc = 1; look(x); check() } \
  :: d_step { !over && (up[x] && !MUTE(x) && lead[x] == 0 && SLOWREAD(x) && RDH != x && RDH < N && (died[RDH] || FORGED)) -> printf("@ %d looks, its clock slow, its holder gone\n", x); slowc = 1; gonev = 1; look(x); check() } \

#endif
#define STEPS(x) \
  ::  d_step { !over && (up[x] && !MUTE(x) && lead[x] == 0) -> printf("@ %d looks\n", x); DUTY(x); look(x); check() } \
  ::  d_step { !over && (up[x] && !MUTE(x) && lead[x] == 0 && (died[o1(x)] || died[o2(x)] || FORGED)) -> printf("@ %d looks, its holder gone\n", x); DUTY(x); gonev = 1; look(x); check() } \
  OLDER_BOUND(x) \
  SLOW_LOOKS(x) \
  :: d_step { !over && (LEADS(x) && !rr[x]) -> printf("@ %d renewal read\n", x); renew_read(x); check() } \
  :: d_step { !over && (LEADS(x) && rr[x]) -> printf("@ %d renews\n", x); renewed(x); check() } \
  :: d_step { !over && (up[x] && !MUTE(x) && lead[x] > 0 && ren[x] > RD_HI) -> printf("@ %d past its renew deadline\n", x); lead[x] = 0; rr[x] = 0; check() } \
  :: d_step { !over && (VOLUNTARY && LEADS(x) && OWNLEASE(x)) -> printf("@ %d hands off to %d\n", x, o1(x)); release(x, o1(x)); check() } \
  :: d_step { !over && (VOLUNTARY && LEADS(x) && OWNLEASE(x)) -> printf("@ %d hands off to %d\n", x, o2(x)); release(x, o2(x)); check() } \
  :: d_step { !over && (VOLUNTARY && LEADS(x) && OWNLEASE(x)) -> printf("@ %d releases\n", x); release(x, NONE); check() } \
  SUPERVISOR(x) \
  :: d_step { !over && LEADS(x) && OWNLEASE(x) && rmode[x] == ACKED && !ackok(x) && lokok(x) -> \
              printf("@ %d requalifies\n", x); cacked = 0; ch = x; ce = Le; claim(x); check() } \
  :: d_step { !over && (up[x] && !MUTE(x) && faults < MAXF) -> printf("@ %d crashes\n", x); faults++; crash(x); UPSET; check() } \
  :: d_step { !over && (!up[x]) -> printf("@ %d starts\n", x); up[x] = 1; START(x); UPSET; check() }
/* the renew deadline step above; the worker's release to either other member or to no one;
   with -DSUP_RELEASE, the supervisor's release on SIGTERM (written before its relay's gate
   is shut, which then closes by its deadlines or the crash that follows; its resign has a
   fresh boot, which no member takes for its leader's: no resign at all here; SPIN finds two
   relays with it, docs/serving-right.md "The model, checked by SPIN"); requalify (rule 4); a crash (A7,
   A10); a start */

#define LISTEN(x, s) :: d_step { !over && (up[x] && up[s] && !MUTE(x) && !MUTE(s)) -> printf("@ %d hears %d\n", x, s); HEARD(x, s); hear(x, s); check() }

init {
  atomic {
    Lk = NOFILE; Lh = NONE; Lho = NONE; Oh = NONE; Oho = NONE;
    i = 0;
    do
    :: i <= MAXE -> owner[i] = NONE; i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < N ->
       up[i] = 1; swn[i] = NONE; an[i] = NONE; crn[i] = NONE; mh[i] = NONE;
       A(i, o1(i)) = ACAP; A(i, o2(i)) = ACAP;
       i++
    :: else -> break
    od;
    i = 0
  }
end:
  do
  :: d_step { !over && ROUND -> printf("@ tick\n"); SERVES; tick(); say_state() }
  STEPS(0)
  STEPS(1)
  STEPS(2)
  LISTEN(0, 1)
  LISTEN(0, 2)
  LISTEN(1, 0)
  LISTEN(1, 2)
  LISTEN(2, 0)
  LISTEN(2, 1)
  /* the writer without the key (A8) */
  :: d_step { !over && (HOSTILE && faults < MAXF && Lk == VALID) -> printf("@ junk over the lease\n"); faults++; SAVEOLD; Lk = JUNK; check() }
  :: d_step { !over && (HOSTILE && faults < MAXF && Lk == VALID) -> printf("@ the lease deleted\n"); faults++; SAVEOLD; Lk = MISSING; check() }
  :: d_step { !over && (HOSTILE && faults < MAXF && Lk != NOFILE && Lk != VALID && Lk != OLD && Oe > 0) -> printf("@ an old copy put back\n"); faults++; Lk = OLD; check() }
  od
}
#endif /* WITNESS */
