-- celery_compat: `inspect scheduled` from the job rows that wait for a future time.

-- celery_scheduled_without_jit --
-- For the transaction of celery_scheduled: its estimate (a recursive scan the planner cannot
-- size: ~100 levels of a few hundred rows) passes jit_above_cost, and compiling it costs ~25 ms
-- against ~5 ms of work.
select set_config('jit', 'off', true)

-- celery_scheduled --
-- The messages waiting for a future run_at (an eta/countdown, a retry's countdown, a snooze)
-- on the queues %(queues)s of the worker %(worker_id)s, that this worker reports: each queue is
-- reported by ONE node, the live node consuming it with the smallest worker_id, so the replies of
-- all workers together list each message once (a worker whose node has expired reports nothing
-- until its heartbeat registers it again; a node that registers or expires between two workers'
-- reads can make one reply miss or repeat a queue, once). In (run_at, id) order after the
-- keyset (%(after_run_at)s, %(after_id)s) (NULLs: from the start), at most %(limit)s rows.
-- Indexed without a sort of the queue: the claimable jobs are x_job_claimable's rows (migration
-- 0019), whose claim index is (queue, priority desc, run_at, id), so a recursive loose scan walks
-- the queue's distinct priorities (one index probe each) and each (queue, priority) is read in
-- run_at order from run_at > now, each row's job by primary key, at most %(limit)s of them;
-- rows waiting for an event (state waiting) are not messages due at a time.
with recursive mine as (
    select q.queue
      from unnest(%(queues)s::text[]) as q(queue)
     where %(worker_id)s::text = (
           select min(n.worker_id)
             from x_worker_nodes as n
            where n.expires_at > coalesce(%(now)s, now())
              and q.queue = any(n.queues))
),
levels as (
    select m.queue,
           (select c.priority
              from x_job_claimable as c
             where c.queue = m.queue
             order by c.priority desc
             limit 1) as priority
      from mine as m
    union all
    select l.queue,
           (select c.priority
              from x_job_claimable as c
             where c.queue = l.queue and c.priority < l.priority
             order by c.priority desc
             limit 1)
      from levels as l
     where l.priority is not null
)
select s.id, s.name, s.queue, s.priority, s.run_at, s.deliveries, s.input
  from levels as l
 cross join lateral (
       select j.id, j.name, j.queue, j.priority, j.run_at, j.deliveries, j.input
         from x_job_claimable as c
         join x_jobs as j on j.id = c.id
        where c.queue = l.queue
          and c.priority = l.priority
          and c.run_at > coalesce(%(now)s, now())
          and (%(after_run_at)s::timestamptz is null
               or (c.run_at, c.id) > (%(after_run_at)s::timestamptz, %(after_id)s::uuid))
          and j.state in ('ready', 'sleeping')
        order by c.run_at, c.id
        limit %(limit)s) as s
 where l.priority is not null
 order by s.run_at, s.id
 limit %(limit)s
