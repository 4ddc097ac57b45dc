-- 0027_hand_off: a job sent to an idle worker is claimed for it by the insert itself.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- Why: since 0025 an insert into a queue with an idle worker notifies that worker, which then
-- claims: a second round trip, on a connection that has been idle, between the send's commit and
-- the body's start, on every job that arrives at an idle fleet (and through PgBouncer, a second
-- hop too). Now a worker that waits with a free slot arms its mark for a hand-off: the insert of
-- one job that is due now takes one armed mark (disarming it), writes the job as that worker's
-- running claim (the same columns a claim writes, its lease row and its pick-up count), and
-- notifies the worker's hand-off channel with the job itself. The worker starts the body without
-- a claim, then arms its mark again. A mark is armed only while its worker's listen session is
-- alive: that session holds a session-level advisory lock on the mark's lock key, and a sender
-- hands off only where it cannot take that lock, so a worker killed with its mark armed is never
-- handed a job (its lock went with its session); such an insert wakes, and other workers claim.
--
-- names         the task names the worker runs (a job of another name is never handed to it)
-- lease_s       its lease length (a claim's lease_expires_at and the lease row's lease_s)
-- lock_key      the advisory lock key (class ujobs_hand_off, see x_jobs_arrive) its listen
--               session holds while it listens
-- hand_channel  the channel the hand-off is sent on (the job as its payload); null for a mark
--               written by a worker of an older version, which is only ever woken
-- armed         the worker has a free slot for a hand-off now
alter table x_queue_waiters
    add column names text[],
    add column lease_s float8,
    add column lock_key integer,
    add column hand_channel text,
    add column armed boolean not null default false;

-- What a hand-off gives the insert that makes it: the lease it writes into the job's row (token,
-- worker, lease_s) and the channel it notifies.
create type x_hand_off as (token uuid, worker text, lease_s float8, hand_channel text);

-- One job arrives in p_queue: hand it to a live, armed worker of that queue that runs p_name
-- (p_handable: the caller's job is due now, has no idempotency key and fits in a notification),
-- sending the job (the row's values the caller passes) on the worker's hand-off channel, or
-- else wake one waiting worker (as x_jobs_wake(p_queue, 1) does) when p_wake. Answers the
-- hand-off, or null (woken, or nobody waits). Called before the caller's insert in the same
-- statement, so the lease row is written for a job id the caller then inserts (p_id: new, never
-- a conflict: a keyed job is never handable). Run as the owner: senders read and change no
-- mark themselves. A scalar, not a set: the one-row statements that call it stay cheap to run
-- and to plan. A queue nobody waits for (a busy fleet) costs one index probe.
create function x_jobs_arrive(p_queue text, p_name text, p_id uuid, p_handable boolean,
                              p_wake boolean, p_max_attempts integer, p_traceparent text,
                              p_run_at timestamptz, p_expired boolean, p_input text)
returns x_hand_off
language plpgsql volatile security definer as $fn$
declare
    v_worker  text;
    v_lease_s float8;
    v_channel text;
    v_token   uuid;
begin
    if not exists (select from x_queue_waiters as w where w.queue = p_queue) then
        return null;
    end if;
    if p_handable then
        -- The advisory lock class 1970958178 ('ujob') is the hand-off's: a live listen session
        -- holds its worker's key exclusively, so a shared try fails for it alone (a dead
        -- worker's key is taken here, shared, until this transaction ends: harmless).
        select w.worker_id, w.lease_s, w.hand_channel into v_worker, v_lease_s, v_channel
          from x_queue_waiters as w
         where w.queue = p_queue and w.armed and w.hand_channel is not null
           and p_name = any(w.names)
           and not pg_try_advisory_xact_lock_shared(1970958178, w.lock_key)
         order by random()
         limit 1
         for update skip locked;
        if v_worker is not null then
            update x_queue_waiters as w set armed = false
             where w.queue = p_queue and w.worker_id = v_worker;
            v_token := gen_random_uuid();
            insert into x_job_leases (job_id, token, worker, claimed_at, attempt, started_at,
                                      lease_s)
            values (p_id, v_token, v_worker, now(), 1, null, v_lease_s);
            insert into x_job_counts as c (minute, queue, backend, picked, wait_sum_s, wait_max_s)
            values (date_trunc('minute', now()), p_queue, pg_backend_pid(), 1, 0, 0)
            on conflict (minute, queue, backend)
            do update set picked = c.picked + 1;
            -- The job itself, as the worker's listener reads it (leases.handed_job): a JSON
            -- header, a newline, the input as the sender wrote it. Sent at commit, with the
            -- caller's insert; never if that transaction rolls back.
            perform pg_notify(v_channel,
                              json_build_object('id', p_id, 'token', v_token, 'name', p_name,
                                                'queue', p_queue, 'max_attempts', p_max_attempts,
                                                'traceparent', p_traceparent, 'run_at', p_run_at,
                                                'expired', p_expired)::text
                              || chr(10) || p_input);
            return row(v_token, v_worker, v_lease_s, v_channel)::x_hand_off;
        end if;
    end if;
    if p_wake then  -- x_jobs_wake(p_queue, 1), inlined: one call per send, not two
        select w.channel into v_channel
          from x_queue_waiters as w
         where w.queue = p_queue and w.channel is not null
         order by random()
         limit 1;
        if v_channel is not null then
            perform pg_notify(v_channel, p_queue);
        end if;
        if exists (select from x_queue_waiters as w
                    where w.queue = p_queue and w.channel is null) then
            perform pg_notify('x_jobs_ready', p_queue);
        end if;
    end if;
    return null;
end
$fn$;

comment on function x_jobs_arrive(text, text, uuid, boolean, boolean, integer, text,
                                  timestamptz, boolean, text)
    is 'duties: producer worker. Hand one arriving job to an idle worker, or wake one.';

-- As 0025 made x_jobs_wake: a fixed search_path, no EXECUTE for PUBLIC, and EXECUTE for every
-- role that may run x_jobs_wake.
do $do$
declare
    v_role regrole;
begin
    execute format('alter function x_jobs_arrive(text, text, uuid, boolean, boolean, integer,'
                   ' text, timestamptz, boolean, text) set search_path = %I, pg_temp',
                   current_schema());
    revoke execute on function x_jobs_arrive(text, text, uuid, boolean, boolean, integer, text,
                                             timestamptz, boolean, text) from public;
    for v_role in
        select distinct a.grantee::regrole
          from pg_proc as p cross join lateral aclexplode(p.proacl) as a
         where p.oid = 'x_jobs_wake(text, integer)'::regprocedure
           and a.privilege_type = 'EXECUTE' and a.grantee <> 0 and a.grantee <> p.proowner
    loop
        execute format('grant execute on function x_jobs_arrive(text, text, uuid, boolean,'
                       ' boolean, integer, text, timestamptz, boolean, text) to %s', v_role);
    end loop;
end
$do$;
