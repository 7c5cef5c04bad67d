"""The admin panel's pages and what they show, gathered once per request.

Vocabulary:

  SiteState   a pool as shown: members, lease, relay, alarms (`site`), gathered by `state`
  MemberRow   one member's row: role, eligibility, ages on this agent's clock (`site`)
  fleet       the sites page: every pool this agent sees, sorted and filtered (`fleet`)
  timeline    the site page's chart of who led when (`timeline`, drawn by `web.svg`)
  preview     what an operator command would do, said before it is given (`operate`)
  live        a section that refreshes itself without a reload (`live`)
"""
