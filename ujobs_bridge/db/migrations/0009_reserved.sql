-- 0009_reserved: a placeholder for the migration number given to another branch.
-- Forward-only. Applied in one transaction under an advisory lock by schema.py.

-- The i11-sends branch was given 0011 while 0009 was being written elsewhere; migrations must be
-- consecutive, so this file holds the number. When the branches are merged, the real 0009
-- replaces this file (it changes nothing).
select 1;
