-- 0007_deliveries: how many times each job row was claimed.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- `attempt` counts claims that may have failed: a snooze, a suspension and a drain's hand-back
-- give theirs back, so it cannot tell a body whether this claim is the row's first. `deliveries`
-- is incremented by the claim statement itself and never given back: a claim with
-- deliveries > 1 is a redelivery (after a snooze or Reject(requeue=True), a rescue after a lost
-- lease, a drain's hand-back), as a broker's `redelivered` flag says. No index: nothing looks
-- rows up by it, and the claim stays one statement with no extra index write. The constant
-- default does not rewrite the table.
alter table x_jobs add column deliveries integer not null default 0;
