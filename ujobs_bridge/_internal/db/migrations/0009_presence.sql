-- 0009_presence: worker nodes and the remote-control mailbox.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- One row per running worker process (Celery's "node"): registered at start, renewed by the
-- worker's heartbeat, deleted on a clean exit. A row past expires_at belongs to a worker that
-- died without saying so: every read skips it and any worker's sweep deletes it. Two processes
-- may carry the same name (as with Celery's -n, that is an operator mistake, and both answer);
-- worker_id (host:pid:random) tells them apart. `info` holds what inspect reads and changes
-- while the worker runs (registered names, counts, prefetch, software); the columns are what a
-- dashboard filters on.
create table x_worker_nodes (
    worker_id    text primary key,
    name         text not null,
    hostname     text not null,
    pid          integer not null,
    queues       text[] not null,
    concurrency  integer not null,
    pool         text not null,
    info         jsonb not null default '{}'::jsonb,
    started_at   timestamptz not null default now(),
    heartbeat_at timestamptz not null default now(),
    expires_at   timestamptz not null
);
create index x_worker_nodes_name_idx on x_worker_nodes (name);
create index x_worker_nodes_expires_idx on x_worker_nodes (expires_at);

-- Remote-control requests (Celery's broadcast): a command with its JSON arguments, addressed to
-- node names (destination) or to every node (null). `seq` orders them: a worker handles the
-- requests sent after it registered, once each. Inserted with a NOTIFY on x_control (payload: the
-- seq) at commit; workers that missed it find the request by polling. Deleted once expired.
create table x_control_requests (
    id          uuid primary key,
    seq         bigint generated always as identity unique,
    command     text not null,
    arguments   text not null,
    destination text[],
    reply       boolean not null,
    created_at  timestamptz not null default now(),
    expires_at  timestamptz not null
);
create index x_control_requests_expires_idx on x_control_requests (expires_at);

-- One reply per (request, worker process): the JSON text the command returned, under the node
-- name. NOTIFY x_control_reply (payload: the request id) at commit wakes the waiting caller.
create table x_control_replies (
    request_id uuid not null,
    worker_id  text not null,
    node       text not null,
    reply      text not null,
    created_at timestamptz not null default now(),
    expires_at timestamptz not null,
    primary key (request_id, worker_id)
);
create index x_control_replies_expires_idx on x_control_replies (expires_at);
