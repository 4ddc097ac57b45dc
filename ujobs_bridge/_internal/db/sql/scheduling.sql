-- The scheduler: its leader lease, watermarks and the (task, occurrence) fire ledger.
-- Named blocks: `-- name --` on its own line. Explicit column lists (no star projections), values
-- only as parameters, `%(now)s` (NULL = the database's now()) wherever job logic compares time.

-- leader_elect --
-- Take the lease if nobody holds it or the holder's lease has run out (database clock only).
insert into x_scheduler_leader (name, holder, term, elected_at, expires_at)
values (%(name)s, %(holder)s, 1, now(), now() + make_interval(secs => %(ttl_s)s))
on conflict (name) do update
   set holder = excluded.holder, term = x_scheduler_leader.term + 1,
       elected_at = now(), expires_at = excluded.expires_at
 where x_scheduler_leader.expires_at < now()
returning holder, term

-- leader_renew --
-- Renew only OUR term: matched by holder AND term, and only while it has not expired.
update x_scheduler_leader
   set expires_at = now() + make_interval(secs => %(ttl_s)s)
 where name = %(name)s and holder = %(holder)s and term = %(term)s and expires_at >= now()
returning term

-- leader_resign --
update x_scheduler_leader
   set expires_at = now() - interval '1 microsecond'
 where name = %(name)s and holder = %(holder)s and term = %(term)s

-- leader_get --
select holder, term, elected_at, expires_at, expires_at >= now() as live
  from x_scheduler_leader
 where name = %(name)s

-- scheduler_watermarks --
select task, watermark from x_scheduler_state

-- scheduler_watermark_set --
insert into x_scheduler_state (task, watermark, updated_at)
values (%(task)s, %(watermark)s, now())
on conflict (task) do update
   set watermark = greatest(x_scheduler_state.watermark, excluded.watermark), updated_at = now()

-- scheduler_fire --
-- Claim one (task, occurrence); nothing comes back if it was fired already (by anyone).
insert into x_scheduler_fires (task, occurrence_at, catch_up, job_ids)
values (%(task)s, %(occurrence_at)s, %(catch_up)s, %(job_ids)s::uuid[])
on conflict (task, occurrence_at) do nothing
returning task

-- scheduler_last_fires --
select distinct on (task) task, occurrence_at, catch_up, fired_at
  from x_scheduler_fires
 order by task, occurrence_at desc
