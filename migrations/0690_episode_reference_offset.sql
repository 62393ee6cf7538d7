-- The speaker's UTC offset at the reference time (valid_at, a timestamptz, keeps only the
-- instant): the date rules count "yesterday", "last Friday", "today" from the speaker's local
-- date, and a queued episode is extracted later from the stored row. '-05:00' for a reference
-- given as 2023-05-08T23:30-05:00; NULL (the rows stored before, a SQL writer that gives none)
-- is UTC, as before. A plain offset of under a day: what AT TIME ZONE accepts.
ALTER TABLE pgmemory.episodes ADD COLUMN IF NOT EXISTS reference_offset interval
    CONSTRAINT episodes_reference_offset_check CHECK (
        reference_offset > interval '-24 hours' AND reference_offset < interval '24 hours'
        AND extract(day FROM reference_offset) = 0 AND extract(month FROM reference_offset) = 0
        AND extract(year FROM reference_offset) = 0);
