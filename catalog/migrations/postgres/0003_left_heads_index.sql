-- The ref log's rows that left a head (deletions, rewinds): read for every request of a
-- reader whose grants history limits.
CREATE INDEX ref_log_left ON ref_log (name) WHERE left_head IS NOT NULL;
