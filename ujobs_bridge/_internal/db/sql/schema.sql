-- Schema bookkeeping: the migration lock and the applied-versions table.
-- Named blocks: `-- name --` on its own line. Explicit column lists (no star projections), values
-- only as parameters, `%(now)s` (NULL = the database's now()) wherever job logic compares time.

-- schema_lock --
select pg_advisory_xact_lock(7283190441)

-- schema_version_table --
-- The record's first shape, as every release made it; schema_version_parts then gives it parts.
create table if not exists x_schema_version (
    version    integer primary key,
    name       text not null,
    applied_at timestamptz not null default now()
)

-- schema_version_parts --
-- One record per (part, version): the engine's migrations are part 'ujobs_bridge', each package
-- above it (celery_compat, migrate) records its own set under its name. A table made before the
-- parts existed gains the column (its rows are the engine's: the default) and its key becomes
-- (part, version); a fresh table is made the same way, so both end with one shape. The default
-- also keeps an older ujobs-bridge's insert (version, name) an engine record. Checked in the
-- catalog first, so an upgrade with nothing to change takes no lock on the table.
do $$
begin
    if not exists (select from pg_attribute
                    where attrelid = 'x_schema_version'::regclass
                      and attname = 'part' and not attisdropped) then
        alter table x_schema_version add column part text not null default 'ujobs_bridge';
    end if;
    if (select cardinality(conkey) from pg_constraint
         where conrelid = 'x_schema_version'::regclass and contype = 'p') = 1 then
        alter table x_schema_version drop constraint x_schema_version_pkey;
        alter table x_schema_version
            add constraint x_schema_version_pkey primary key (part, version);
    end if;
end
$$

-- schema_version_has_parts --
-- Whether the record has its `part` column yet (a read-only check may meet a table an older
-- ujobs-bridge made; its rows are all the engine's).
select exists (select from pg_attribute
                where attrelid = to_regclass('x_schema_version')
                  and attname = 'part' and not attisdropped) as present

-- schema_versions --
select part, version, name, applied_at from x_schema_version order by part, version

-- schema_versions_unparted --
select 'ujobs_bridge' as part, version, name, applied_at from x_schema_version order by version

-- schema_version_record --
insert into x_schema_version (part, version, name) values (%(part)s, %(version)s, %(name)s)

-- schema_table_exists --
select to_regclass('x_schema_version') is not null as present

-- schema_role_exists --
select exists (select 1 from pg_roles where rolname = %(role)s) as present

-- schema_role_owns --
-- Whether the role owns the schema's record (the schema owner: `db grant` leaves it alone).
select exists (
    select 1 from pg_class as c join pg_roles as r on r.oid = c.relowner
     where c.relnamespace = current_schema()::regnamespace and c.relname = 'x_schema_version'
       and r.rolname = %(role)s) as owns

-- schema_grantable_relations --
-- The project's relations in the current schema (tables and the identity sequences behind them),
-- discovered from the catalog so that a table a later migration adds is granted too.
select c.relname, c.relkind = 'S' as is_sequence
from pg_class c
where c.relnamespace = current_schema()::regnamespace
  and c.relname like 'x\_%'
  and c.relkind in ('r', 'p', 'S')
order by c.relname

-- schema_current_names --
select current_database(), current_schema()

-- schema_grant_connect --
-- ``{database}``, ``{schema}``, ``{role}``, ``{relation}`` are filled by psycopg.sql.Identifier,
-- never by text.
grant connect on database {database} to {role}

-- schema_grant_usage --
grant usage on schema {schema} to {role}

-- schema_grant_table --
-- A worker's row privileges: no TRUNCATE, REFERENCES, TRIGGER or DDL.
grant select, insert, update, delete on table {relation} to {role}

-- schema_grant_table_read --
-- A reader's and an operator's: the dashboard, the metrics and the CLI's reads.
grant select on table {relation} to {role}

-- schema_grant_sequence --
grant usage, select on sequence {relation} to {role}

-- schema_revoke_relation --
-- Before a grant, whatever the role held on the relation goes: a grant sets exactly its duties
-- (a role granted by an older release held delete on x_schema_version).
revoke all on {relation} from {role}

-- schema_duty_functions --
-- The functions a duty may call: SECURITY DEFINER ones of this schema whose comment names the
-- duties they serve ("duties: producer worker. ..." , migration 0023 of the engine).
select p.proname,
       string_to_array(substring(obj_description(p.oid, 'pg_proc') from '^duties:([a-z ]*)'), ' ')
  from pg_proc as p
 where p.pronamespace = current_schema()::regnamespace
   and p.prosecdef
   and p.proname like 'x\_%'
 order by p.proname

-- schema_grant_function --
grant execute on function {function} to {role}

-- schema_revoke_function --
revoke execute on function {function} from {role}

-- schema_revoke_function_public --
-- A function a later migration made SECURITY DEFINER without revoking PUBLIC's EXECUTE is
-- closed here, at every grant.
revoke execute on function {function} from public
