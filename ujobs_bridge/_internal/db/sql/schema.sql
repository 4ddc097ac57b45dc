-- Schema bookkeeping: the migration lock and the applied-versions table.
-- Named blocks: `-- name --` on its own line. Explicit column lists (no star projections), values
-- only as parameters, `%(now)s` (NULL = the database's now()) wherever job logic compares time.

-- schema_lock --
select pg_advisory_xact_lock(7283190441)

-- schema_version_table --
create table if not exists x_schema_version (
    version    integer primary key,
    name       text not null,
    applied_at timestamptz not null default now()
)

-- schema_versions --
select version, name, applied_at from x_schema_version order by version

-- schema_version_record --
insert into x_schema_version (version, name) values (%(version)s, %(name)s)

-- schema_table_exists --
select to_regclass('x_schema_version') is not null as present

-- schema_role_exists --
select exists (select 1 from pg_roles where rolname = %(role)s) as present

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
-- Exactly the row privileges the runtime uses: no TRUNCATE, REFERENCES, TRIGGER or DDL.
grant select, insert, update, delete on table {relation} to {role}

-- schema_grant_sequence --
grant usage, select on sequence {relation} to {role}
