-- ujobs_django: a django.tasks result, read from the engine's job row.

-- django_task_get --
-- One job (%(id)s) as a django.tasks TaskResult needs it: the row, then its attempts oldest
-- first as JSON objects (worker, started_at, outcome, error): the settled ones from
-- x_job_attempts (their claim time and worker, their outcome and error) and, while the job is
-- running, its live lease from x_job_leases (outcome null). Primary-key reads only.
select j.id, j.name, j.queue, j.input, j.output, j.state, j.last_error, j.created_at,
       j.finished_at,
       coalesce(
           (select jsonb_agg(t.attempt order by t.at nulls last, t.n)
              from (select jsonb_build_object('worker', a.worker, 'started_at', a.claimed_at,
                                              'outcome', a.outcome, 'error', a.error) as attempt,
                           a.claimed_at as at, a.attempt as n
                      from x_job_attempts as a
                     where a.job_id = j.id
                    union all
                    select jsonb_build_object('worker', l.worker,
                                              'started_at', coalesce(l.started_at, l.claimed_at),
                                              'outcome', null, 'error', null),
                           coalesce(l.started_at, l.claimed_at), l.attempt
                      from x_job_leases as l
                     where l.job_id = j.id) as t),
           '[]'::jsonb) as attempts
  from x_jobs as j
 where j.id = %(id)s
