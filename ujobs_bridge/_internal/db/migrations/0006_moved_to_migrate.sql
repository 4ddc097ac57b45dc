-- 0006_moved_to_migrate: nothing:
-- migrate's quarantine (x_migrate_quarantine) moved to the package that owns them.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- Until the split into one migration set per package this was 0006_migrate. Its statements are now
-- migrate/db/migrations/0001_quarantine.sql, part `migrate` of the schema, applied after the
-- engine's. This number stays (an empty step) so that the engine's versions stay consecutive and a
-- database upgraded before the split keeps its record: where `0006_migrate` is recorded, part
-- `migrate` adopts its 0001_quarantine (records it without running it), since those objects exist.
