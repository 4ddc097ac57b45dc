-- 0002_duties: an operator resolves a quarantine entry (the dashboard's discard) without row
-- privileges on the quarantine, through a function that runs as the schema owner.
-- Forward-only. Part `migrate` of the schema, applied after the engine's 0023_duties, which says
-- how `ujobs-bridge db grant` reads the duties a function serves from its comment.

create function x_migrate_quarantine_resolve(p_id bigint, p_resolution text, p_job_id uuid)
returns setof bigint language sql volatile security definer as $fn$
    update x_migrate_quarantine
       set resolution = p_resolution, resolved_at = now(), job_id = p_job_id
     where id = p_id and resolution is null
    returning id
$fn$;

comment on function x_migrate_quarantine_resolve(bigint, text, uuid)
    is 'duties: operator worker. Resolve an open quarantine entry (retried or discarded).';

-- A fixed search_path, no EXECUTE for PUBLIC; a role an older `db grant` gave row privileges on
-- the quarantine keeps resolving entries after this upgrade.
do $do$
declare
    v_role regrole;
begin
    execute format('alter function x_migrate_quarantine_resolve(bigint, text, uuid) '
                   'set search_path = %I, pg_temp', current_schema());
    revoke execute on function x_migrate_quarantine_resolve(bigint, text, uuid) from public;
    for v_role in
        select distinct a.grantee::regrole
          from pg_class as c cross join lateral aclexplode(c.relacl) as a
         where c.oid = 'x_migrate_quarantine'::regclass and a.privilege_type = 'UPDATE'
           and a.grantee <> 0 and a.grantee <> c.relowner
    loop
        execute format('grant execute on function x_migrate_quarantine_resolve(bigint, text, uuid) '
                       'to %s', v_role);
    end loop;
end
$do$;
