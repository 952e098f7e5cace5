-- Why a node's output was or was not reused (`lh runs show`), and the parts of a
-- memoized output's key, so that a later miss can say which part changed.
ALTER TABLE lh_run_nodes ADD COLUMN cache_reason TEXT;
ALTER TABLE lh_memo ADD COLUMN parts TEXT;
