/*
 * The share's witness, checked by SPIN (issue 38): a pool of TWO members and the witness record
 * in the store as the third vote (the rules W1-W7 and their argument: the docs' "The share's
 * witness: fast takeover in a pool of two"), written from the rules, not from the code. Included
 * by pool.pml under -DWITNESS (`verify/check.sh witness`), so the three-member model and this one
 * share the file's bounds (MAXE, MAXF) and its conventions (A1-A4 and A10-A11 of pool.pml hold
 * here as there: discrete ticks, ages saturating, durations that let a member ACT at their
 * shortest (*_LO) and those that keep a gate OPEN at their longest (*_HI); a member that takes
 * no step is frozen; a beacon may be lost, late or heard twice).
 *
 * What it proves (assertions after every step, `wcheck()`):
 *   P1  never two relay gates open at one instant;
 *   P2  an epoch is taken by one compare-and-set only, and no member's known epoch goes down;
 *   P3  a gate is open only for an epoch its member won by compare-and-set.
 *
 * ABSTRACTIONS (besides pool.pml's A1-A4, A10, A11)
 * B1  N = 2: each member counts two; a majority is two of the three votes {0, 1, witness}.
 * B2  The lease is always a valid record (its junk, deletions and old copies are pool.pml's
 *     business, A5/A8 there): its compare-and-set is one step. Renewal is one step (read and
 *     compare-and-set); the lockless renewal's race is pool.pml's. Releases and handoffs are
 *     left out: in a pool of two an epoch taken from a release starts in `lease` mode (rule 5
 *     needs three members) and touches no witness record; pool.pml checks them.
 * B3  The witness record is (kind, node, epoch, relies). A writer without the key may put junk
 *     over it or delete it (no evidence to every reader: W4c, W6). It may NOT put an older
 *     validly signed record back (assumption R, stated in the docs: no store-only witness
 *     survives a voter that lies).
 * B4  A refresh is three steps: sent (its send time is what counts), in effect (the read sees
 *     the record as it is then), returned (only then does its holder count it). A claim is two:
 *     in effect (read and compare-and-set under the lock, one step) and returned (its member
 *     learns it won; D is counted from here) with the lease's compare-and-set right after.
 *     An entry (W2) and an election's record (W1) are one step each: a compare-and-set whose
 *     send, effect and return coincide is the longest a holder may count it (more open time).
 * B5  A member's ack names the age of the newest leader beacon it heard (pool.pml's A4).
 *
 * Mutants (one -D each; each must give a trail, tests/test_spin_model.py):
 *   NO_WAIT        W5: the claimant counts the witness at once, whatever the record said
 *   BLIND_REFRESH  W6: a refresh succeeds without checking that the record still names it
 *   SHORT_D        W5: D no longer than V (D_LO = V_HI)
 *   NO_ENTRY_CAS   W2: entry over whatever the record holds (a claim too)
 *   NO_STEPDOWN_V  rule 1 with W3: a stepped-down leader acks before its witness window is over
 *   UNRELY_EARLY   W2b: a leader says it no longer relies on the witness before its window is over
 */

#define WN 2
#ifndef MAXE
#define MAXE 3
#endif
#ifndef MAXF
#define MAXF 1
#endif
#define WNONE 2
#define wo(x) (1 - (x))

/* ticks: the smallest numbers that keep the rules' inequalities strict */
#define W_HI 1      /* a majority's ack keeps the gate open while its send age <= W_HI */
#define S_LO 2      /* a member is quiet about its leader once heard age >= S_LO */
#define V_HI 1      /* a refresh keeps the witness vote while its send age <= V_HI (+ GATE_LAG) */
#ifdef SHORT_D
#define D_LO 1      /* the mutant: D no longer than V */
#else
#define D_LO 2      /* the claimant counts the witness once its claim returned D_LO ago */
#endif
#define RD_HI 2     /* the gate by the lease is open while the last renewal's age <= RD_HI */
#define TTL_LO 3    /* a follower may take an unchanged lease once its age >= TTL_LO */
#define LOK_LO 3    /* lease_ok_at after an epoch taken on silence */
#define ACAP (W_HI + 1)
#define VCAP (V_HI + 1)

#define LEASE 0
#define ACKED 1
#define NOFILE 0
#define VALID 1
#define JUNK 2
#define MISSING 3

byte top;                     /* highest epoch taken (the claim records, rule 3e) */
byte faults;
byte Lk, Le, Lh;              /* the lease: kind, epoch, holder */
byte Wk, Wn, We;              /* the witness record: kind, node, epoch */
bit Wr;                       /* ... relies */
byte owner[MAXE + 1];

bit up[WN];
byte known[WN];
byte lead[WN];                /* the epoch it leads, 0 if none */
byte re[WN];                  /* its right's epoch (kept after a step-down: the gate is deadlines) */
bit rmode[WN];
bit rlok[WN];
byte tk[WN];
byte ren[WN];                 /* age of its last renewal */
byte ackage[WN];              /* send age of its newest beacon the other acked (ACAP: none) */
bit relies[WN];               /* it counts the witness for re (W2 entry or W4 claim) */
byte wr[WN];                  /* send age of its newest refresh that found its own record (VCAP: none) */
bit needd[WN];                /* W5: its claim replaced a relied-on record: the witness counts D after */
byte dage[WN];                /* age since its claim returned */
byte rf[WN];                  /* a refresh: 0 none, 1 sent, 2 in effect (result in rok) */
bit rok[WN];
byte rfa[WN];                 /* its send age */
bit cl[WN];                   /* a claim in effect, not yet returned */
byte cla[WN];                 /* its send age */
byte clf[WN];                 /* the epoch it claims */
byte cle[WN];                 /* the holder's epoch it judged silent */
/* adherence (rule 1) */
byte an[WN];
byte ae[WN];
byte hz[WN];
bit am[WN];
/* lease memory */
byte mh[WN];
byte me[WN];
byte lage[WN];
bit miss[WN];

bit sw[WN];                   /* rule 1, self: its own vote waits */
byte swa[WN];                 /* ... age since it last heard the leader it waits out */
bit cneed[WN];                /* its claim's replaced record said `relies` (from effect to return) */
byte wopen, wi, wf;
bit clneed;                   /* scratch */
bit wbad;

/* rule 1, self: a claimant that heard its old leader again after its claim counts its own vote
   only S after it last heard it (core.serving_book: `self_from`) */
#define selfok(x) (!sw[x] || swa[x] >= S_LO)
/* the witness's vote: a window earned while relying on it (wr is set only then) is the relay's
   deadline once published, and is not taken back when the leader stops relying (W2b) */
#define witv(x) (wr[x] <= V_HI && !cl[x] && (!needd[x] || dage[x] >= D_LO))
#define ackok(x) (ackage[x] <= W_HI)
/* a majority of the three votes {itself, the other member's ack, the witness} */
#define votes(x) ((selfok(x) && (ackok(x) || witv(x))) || (ackok(x) && witv(x)))
#define wgate(x) (up[x] && re[x] > 0 && ren[x] <= RD_HI && (rmode[x] == LEASE || votes(x)))
#ifdef NO_STEPDOWN_V
#define wownopen(x) (re[x] > 0 && rmode[x] == ACKED && ackok(x))
#else
#define wownopen(x) (re[x] > 0 && rmode[x] == ACKED && (ackok(x) || (relies[x] && wr[x] <= V_HI)))
#endif
#define wlokok(x) (!rlok[x] || tk[x] >= LOK_LO)
#define wsat(x, c) if :: x < (c) -> x++ :: else -> skip fi

inline wnormalize(x) {
  if
  :: lead[x] == 0 && re[x] > 0 && !wgate(x) && !wownopen(x) && rf[x] == 0 ->
     re[x] = 0; rmode[x] = LEASE; rlok[x] = 0; tk[x] = 0; ren[x] = 0; ackage[x] = ACAP;
     relies[x] = 0; wr[x] = VCAP; needd[x] = 0; dage[x] = 0
  :: else -> skip
  fi;
  if
  :: an[x] == WNONE -> ae[x] = 0; hz[x] = 0; am[x] = 0
  :: else -> skip
  fi;
  if
  :: rlok[x] && tk[x] >= LOK_LO -> rlok[x] = 0; tk[x] = 0
  :: !rlok[x] -> tk[x] = 0
  :: else -> skip
  fi;
  if
  :: rf[x] == 0 -> rfa[x] = 0; rok[x] = 0
  :: else -> skip
  fi;
  if
  :: !cl[x] -> cla[x] = 0; clf[x] = 0; cle[x] = 0; cneed[x] = 0
  :: else -> skip
  fi;
  if
  :: !needd[x] || dage[x] >= D_LO -> dage[x] = 0; needd[x] = 0
  :: else -> skip
  fi;
  if
  :: sw[x] && swa[x] >= S_LO -> sw[x] = 0; swa[x] = 0
  :: else -> skip
  fi
}

inline wcheck() {
  wopen = wgate(0) + wgate(1);
  assert(wopen <= 1);                                                        /* P1 */
  wbad = (wgate(0) && owner[re[0]] != 0) || (wgate(1) && owner[re[1]] != 1);
  assert(!wbad);                                                             /* P3 */
  wopen = 0; wbad = 0; wf = 0;
  wnormalize(0); wnormalize(1)
}

inline wlearn(x, e) {
  if
  :: e > known[x] -> known[x] = e
  :: else -> skip
  fi
}

/* x takes epoch wf = known + 1 on the lease (caller checked the CAS), in mode m */
inline wtake(x, m) {
  assert(owner[wf] == WNONE && wf > top);                                     /* P2 */
  owner[wf] = x; top = wf; known[x] = wf;
  Lk = VALID; Le = wf; Lh = x; miss[wo(x)] = 1; miss[x] = 0;
  mh[x] = x; me[x] = wf; lage[x] = 0;
  lead[x] = wf; re[x] = wf; rmode[x] = m; ren[x] = 0; ackage[x] = ACAP; tk[x] = 0;
  relies[x] = 0; wr[x] = VCAP; needd[x] = 0; dage[x] = 0; rf[x] = 0; sw[x] = 0; swa[x] = 0
}

/* W1: a new epoch (not a claim) names itself, relies false, over anything but a valid record
   of an epoch >= its own */
inline wname(x) {
  if
  :: Wk == VALID && We >= lead[x] -> skip
  :: else -> Wk = VALID; Wn = x; We = lead[x]; Wr = 0
  fi
}

/* a follower's look: the TTL path (and the pool's first election) */
inline wlook(x) {
  if
  :: Lk == VALID && Le >= known[x] ->
     if
     :: Lh != mh[x] || Le != me[x] || miss[x] -> lage[x] = 0
     :: else -> skip
     fi;
     mh[x] = Lh; me[x] = Le; wlearn(x, Le); miss[x] = 0;
     if
     :: lage[x] >= TTL_LO && top == known[x] && known[x] < MAXE ->
        wf = known[x] + 1; wtake(x, LEASE); wname(x)
     :: lage[x] >= TTL_LO && top > known[x] -> wlearn(x, top); lage[x] = 0     /* rule 3e */
     :: else -> skip
     fi
  :: Lk == NOFILE && known[x] == 0 && top == 0 ->
     wf = 1; wtake(x, LEASE); wname(x)
  :: else -> skip
  fi
}

/* W4: the claim's compare-and-set (lock, read, write): rule 3a, 3d, and a valid record of an
   epoch no higher than the holder's */
#define CANCLAIM(x) (up[x] && lead[x] == 0 && !cl[x] && Lk == VALID && Lh == wo(x) && Le >= known[x] \
  && an[x] == Lh && ae[x] == Le && hz[x] >= S_LO && am[x] && Wk == VALID && We <= Le && Le < MAXE)
inline wclaim(x) {
  if
  :: top > Le -> wlearn(x, top)                                              /* rule 3e */
  :: else ->
     Wn = x; We = Le + 1; Wr = 1;
     cl[x] = 1; cla[x] = 0; clf[x] = Le + 1; cle[x] = Le
  fi
}

/* ... it returns (D counts from here), and the lease's compare-and-set follows */
inline wclaimed(x) {
  dage[x] = 0;
  if
  :: Lk == VALID && Lh == wo(x) && Le == cle[x] && top == cle[x] ->
     wf = clf[x]; wtake(x, ACKED);
     relies[x] = 1; wr[x] = cla[x]; rlok[x] = 1;
     if
     :: an[x] == wo(x) && ae[x] == cle[x] -> sw[x] = 1; swa[x] = hz[x]
     :: else -> skip
     fi;
     /* W5's wait belongs to this claim (wtake cleared it): D when the record it replaced
        said `relies` */
#ifdef NO_WAIT
     needd[x] = 0
#else
     needd[x] = clneed
#endif
  :: else -> wlearn(x, Le); needd[x] = 0
  fi;
  cl[x] = 0
}

/* the leader's renewal: read and compare-and-set, one step (B2) */
inline wrenew(x) {
  if
  :: Lk == VALID && Lh == x && Le == lead[x] -> ren[x] = 0; miss[wo(x)] = 1
  :: else -> wlearn(x, Le); lead[x] = 0
  fi
}

/* W2: entry, by compare-and-set over its own record only */
inline wenter(x) {
#ifdef NO_ENTRY_CAS
  Wk = VALID; Wn = x; We = lead[x]; Wr = 1; relies[x] = 1; wr[x] = 0
#else
  if
  :: Wk == VALID && Wn == x && We == lead[x] -> Wr = 1; relies[x] = 1; wr[x] = 0
  :: else -> skip
  fi
#endif
}

/* member x hears member s's beacon */
inline whear(x, s) {
  if
  :: lead[s] > 0 ->
     if
     :: lead[s] < known[x] -> skip
     :: an[x] == s && ae[x] == lead[s] -> hz[x] = 0; am[x] = rmode[s]
     :: an[x] != WNONE && lead[s] < ae[x] -> skip
     :: an[x] != WNONE && hz[x] < S_LO -> skip                           /* sticky (rule 1) */
     :: else -> an[x] = s; ae[x] = lead[s]; hz[x] = 0; am[x] = rmode[s]
     fi
  :: else -> skip
  fi;
  if
  :: lead[x] > 0 && lead[s] == 0 && !wownopen(s) && an[s] == x && ae[s] == lead[x] && hz[s] < ackage[x] ->
     ackage[x] = hz[s]
  :: else -> skip
  fi;
  if
  :: lead[x] > 0 && rmode[x] == LEASE && ackok(x) -> rmode[x] = ACKED
  :: else -> skip
  fi
}

inline wtick() {
  wi = 0;
  do
  :: wi < WN ->
     wsat(tk[wi], LOK_LO); wsat(ren[wi], RD_HI + 1); wsat(ackage[wi], ACAP); wsat(wr[wi], VCAP);
     wsat(hz[wi], S_LO); wsat(swa[wi], S_LO); wsat(lage[wi], TTL_LO); wsat(dage[wi], D_LO);
     if :: rf[wi] > 0 -> wsat(rfa[wi], VCAP) :: else -> skip fi;
     if :: cl[wi] -> wsat(cla[wi], VCAP) :: else -> skip fi;
     wi++
  :: else -> break
  od;
  wi = 0;
  wnormalize(0); wnormalize(1)
}

inline wcrash(x) {
  up[x] = 0; lead[x] = 0; re[x] = 0; rmode[x] = LEASE; rlok[x] = 0; tk[x] = 0; ren[x] = 0;
  ackage[x] = ACAP; relies[x] = 0; wr[x] = VCAP; needd[x] = 0; dage[x] = 0; rf[x] = 0; sw[x] = 0; swa[x] = 0;
  cl[x] = 0; an[x] = WNONE; ae[x] = 0; hz[x] = 0; am[x] = 0; lage[x] = 0
}


#define LEADS(x) (up[x] && lead[x] > 0 && ren[x] <= RD_HI)
#define WSTEPS(x) \
  :: d_step { up[x] && lead[x] == 0 -> printf("@ %d looks\n", x); wlook(x); wcheck() } \
  :: d_step { LEADS(x) -> printf("@ %d renews\n", x); wrenew(x); wcheck() } \
  :: d_step { up[x] && lead[x] > 0 && ren[x] > RD_HI -> printf("@ %d past its renew deadline\n", x); lead[x] = 0; wcheck() } \
  :: d_step { LEADS(x) && rmode[x] == ACKED && !relies[x] -> printf("@ %d enters (relies on the witness)\n", x); wenter(x); wcheck() } \
  :: d_step { LEADS(x) && relies[x] && rf[x] == 0 -> printf("@ %d sends a refresh\n", x); rf[x] = 1; rfa[x] = 0; wcheck() } \
  :: d_step { LEADS(x) && relies[x] && WINDOW_OVER(x) && !needd[x] -> printf("@ %d no longer relies on the witness\n", x); \
              relies[x] = 0; UNRELY(x); wcheck() } \
  :: d_step { up[x] && rf[x] == 1 -> printf("@ %d's refresh reads the record\n", x); REFRESH_READ(x); rf[x] = 2; wcheck() } \
  :: d_step { up[x] && rf[x] == 2 -> printf("@ %d's refresh returns\n", x); if :: rok[x] && relies[x] && lead[x] > 0 && lead[x] == re[x] && rfa[x] < wr[x] -> wr[x] = rfa[x] :: else -> skip fi; rf[x] = 0; wcheck() } \
  :: d_step { CANCLAIM(x) -> printf("@ %d claims the witness\n", x); clneed = Wr; wclaim(x); cneed[x] = clneed; clneed = 0; wcheck() } \
  :: d_step { up[x] && cl[x] -> printf("@ %d's claim returns; it takes the lease\n", x); clneed = cneed[x]; wclaimed(x); clneed = 0; cneed[x] = 0; wcheck() } \
  :: d_step { LEADS(x) && Lk == VALID && Lh == x && Le == lead[x] && rmode[x] == ACKED && !ackok(x) && wlokok(x) && top == lead[x] && lead[x] < MAXE -> \
              printf("@ %d requalifies\n", x); wf = lead[x] + 1; wtake(x, LEASE); wname(x); wcheck() } \
  :: d_step { up[x] && faults < MAXF -> printf("@ %d crashes\n", x); faults++; wcrash(x); wcheck() } \
  :: d_step { !up[x] -> printf("@ %d starts\n", x); up[x] = 1; wcheck() }

/* W2b: a leader whose own witness window is over stops counting it, then says so by compare-and-set
   over its own relied record (a claim in between: nothing written) */
#define UNRELY(x) if :: Wk == VALID && Wn == x && We == re[x] && Wr -> Wr = 0 :: else -> skip fi
#ifdef UNRELY_EARLY
#define WINDOW_OVER(x) true
#else
#define WINDOW_OVER(x) (!witv(x) && wr[x] > V_HI)
#endif

#ifdef BLIND_REFRESH
#define REFRESH_READ(x) rok[x] = 1
#else
#define REFRESH_READ(x) rok[x] = (Wk == VALID && Wn == x && We == re[x] && Wr)
#endif

init {
  atomic {
    Lk = NOFILE; Lh = WNONE; Wk = NOFILE; Wn = WNONE;
    wi = 0;
    do
    :: wi <= MAXE -> owner[wi] = WNONE; wi++
    :: else -> break
    od;
    wi = 0;
    do
    :: wi < WN -> up[wi] = 1; an[wi] = WNONE; mh[wi] = WNONE; ackage[wi] = ACAP; wr[wi] = VCAP; wi++
    :: else -> break
    od;
    wi = 0
  }
  do
  :: d_step { printf("@ tick\n"); wtick() }
  WSTEPS(0)
  WSTEPS(1)
  :: d_step { up[0] && up[1] -> printf("@ 0 hears 1\n"); whear(0, 1); wcheck() }
  :: d_step { up[0] && up[1] -> printf("@ 1 hears 0\n"); whear(1, 0); wcheck() }
  /* the writer without the key (B3): junk over the record, or the record deleted */
  :: d_step { faults < MAXF && Wk == VALID -> printf("@ junk over the witness\n"); faults++; Wk = JUNK }
  :: d_step { faults < MAXF && Wk == VALID -> printf("@ the witness deleted\n"); faults++; Wk = MISSING }
  od
}
