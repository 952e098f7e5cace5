-- lh.materialize: overwrite_partitions
-- lh.partitioned_by: day(ordered_at)
-- The day's orders (raw.orders is read filtered to the run's partition).
select
    id as order_id,
    customer_id,
    ordered_at,
    status
from raw.orders
