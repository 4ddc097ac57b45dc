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
