-- The head a ref left out of its history (deleted, or assigned where that head is not
-- an ancestor): what the ref once held, which a read grant on it still limits.
ALTER TABLE ref_log ADD COLUMN left_head BYTEA;
