-- Worker nodes and the remote-control mailbox (migration 0009).
-- Named blocks: `-- name --` on its own line. Explicit column lists (no star projections), values
-- only as parameters, `%(now)s` (NULL = the database's now()) wherever logic compares time.

-- node_register --
-- Register (or re-register, after a reconnect or an expiry) a worker process's node. Returns the
-- highest request seq sent so far: the worker handles only requests sent after it.
with node as (
    insert into x_worker_nodes
        (worker_id, name, hostname, pid, queues, concurrency, pool, info, started_at,
         heartbeat_at, expires_at)
    values
        (%(worker_id)s, %(name)s, %(hostname)s, %(pid)s, %(queues)s, %(concurrency)s, %(pool)s,
         %(info)s::jsonb, coalesce(%(started_at)s, now()), coalesce(%(now)s, now()),
         coalesce(%(now)s, now()) + make_interval(secs => %(ttl_s)s))
    on conflict (worker_id) do update
       set name = excluded.name, hostname = excluded.hostname, pid = excluded.pid,
           queues = excluded.queues, concurrency = excluded.concurrency, pool = excluded.pool,
           info = excluded.info, heartbeat_at = excluded.heartbeat_at,
           expires_at = excluded.expires_at
    returning worker_id
)
select coalesce((select max(seq) from x_control_requests), 0) from node

-- node_heartbeat --
-- Renew a node and refresh what it reports; no row back: the node is gone (reaped after an
-- outage longer than its ttl), and the worker registers it again.
update x_worker_nodes
   set heartbeat_at = coalesce(%(now)s, now()),
       expires_at = coalesce(%(now)s, now()) + make_interval(secs => %(ttl_s)s),
       queues = %(queues)s, concurrency = %(concurrency)s, info = %(info)s::jsonb
 where worker_id = %(worker_id)s
returning worker_id

-- node_delete --
delete from x_worker_nodes where worker_id = %(worker_id)s returning worker_id

-- node_reap --
-- Nodes whose worker stopped renewing them (killed, partitioned): deleted, names returned.
delete from x_worker_nodes where expires_at <= coalesce(%(now)s, now()) returning name

-- nodes_live --
select worker_id, name, hostname, pid, queues, concurrency, pool, info, started_at,
       heartbeat_at, expires_at
  from x_worker_nodes
 where expires_at > coalesce(%(now)s, now())
 order by name, worker_id

-- nodes_fleet --
-- How many worker processes are live: each spreads its fleet-wide chores (the rescue sweep, the
-- node reap) over this many, so a fleet runs them about as often as one worker would.
select count(*)::int from x_worker_nodes where expires_at > coalesce(%(now)s, now())

-- nodes_per_queue --
-- Live worker processes per consumed queue.
select q.queue, count(*)::int
  from x_worker_nodes as n
 cross join lateral unnest(n.queues) as q(queue)
 where n.expires_at > coalesce(%(now)s, now())
 group by q.queue
 order by q.queue

-- queue_waiting_mark --
-- A worker about to wait for work marks its queues (0021: an insert notifies only a marked
-- queue; 0025: on the worker's own channel; 0027: armed for a hand-off of a job of one of its
-- %(names)s on %(hand_channel)s, while its listen session holds %(lock_key)s). Marks only for a
-- registered node (the mark belongs to it and leaves with it); a mark already there is kept as
-- it is (queue_waiting_arm arms it again). Returns whether the node is registered, i.e. whether
-- the worker's queues are marked now, and how many marks were added.
with node as (
    select worker_id from x_worker_nodes where worker_id = %(worker_id)s
),
marked as (
    insert into x_queue_waiters
        (queue, worker_id, since, channel, names, lease_s, lock_key, hand_channel, armed)
    select q.queue, node.worker_id, coalesce(%(now)s, now()), %(channel)s, %(names)s::text[],
           %(lease_s)s::float8, %(lock_key)s::int, %(hand_channel)s::text,
           %(hand_channel)s::text is not null
      from node cross join unnest(%(queues)s::text[]) as q(queue)
    on conflict (queue, worker_id) do nothing
    returning queue
)
select exists (select from node), (select count(*) from marked)

-- queue_waiting_arm --
-- A worker that took a hand-off (which disarmed its mark: 0027) and still has a free slot arms
-- its marks again. Answers how many were armed.
with armed as (
    update x_queue_waiters as w set armed = true
     where w.worker_id = %(worker_id)s and w.hand_channel is not null and not w.armed
    returning w.queue
)
select count(*) from armed

-- queue_waiting_unmark --
-- The worker's claims fill its free slots again (or it stops): no insert needs to wake it.
delete from x_queue_waiters where worker_id = %(worker_id)s

-- queue_waiters --
-- Which workers wait for which queue (tests and operators).
select queue, worker_id, since from x_queue_waiters order by queue, worker_id

-- queue_waiter_channels --
-- The channel each mark is woken on (tests and operators).
select queue, worker_id, channel from x_queue_waiters order by queue, worker_id

-- control_send --
-- A request and its NOTIFY in one statement (so at one commit). Returns the seq.
with saved as (
    insert into x_control_requests
        (id, command, arguments, destination, reply, created_at, expires_at)
    values
        (%(id)s, %(command)s, %(arguments)s, %(destination)s, %(reply)s,
         coalesce(%(now)s, now()), coalesce(%(now)s, now()) + make_interval(secs => %(ttl_s)s))
    returning seq
)
select seq, pg_notify('x_control', seq::text) from saved

-- control_pending --
-- Requests sent after `after_seq`, not expired, addressed to this node (or to every node).
select id, seq, command, arguments, reply
  from x_control_requests
 where seq > %(after_seq)s
   and expires_at > coalesce(%(now)s, now())
   and (destination is null or %(name)s = any(destination))
 order by seq

-- control_reply --
-- A node's reply and its NOTIFY in one statement. A second reply of the same worker process to
-- the same request is absorbed.
with saved as (
    insert into x_control_replies (request_id, worker_id, node, reply, created_at, expires_at)
    values (%(request_id)s, %(worker_id)s, %(node)s, %(reply)s, coalesce(%(now)s, now()),
            coalesce(%(now)s, now()) + make_interval(secs => %(ttl_s)s))
    on conflict (request_id, worker_id) do nothing
    returning request_id
)
select pg_notify('x_control_reply', request_id::text) from saved

-- control_replies --
-- The replies to one request so far, in arrival order.
select worker_id, node, reply
  from x_control_replies
 where request_id = %(request_id)s
 order by created_at, worker_id

-- control_expire --
-- Requests and replies past their expiry; returns how many of each went.
with requests as (
    delete from x_control_requests where expires_at <= coalesce(%(now)s, now()) returning 1
), replies as (
    delete from x_control_replies where expires_at <= coalesce(%(now)s, now()) returning 1
)
select (select count(*) from requests)::int, (select count(*) from replies)::int

-- listen_control --
listen x_control

-- listen_control_reply --
listen x_control_reply

-- unlisten_control_reply --
unlisten x_control_reply
