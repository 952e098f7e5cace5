-- lh.materialize: overwrite_partitions
-- lh.partitioned_by: day(ordered_at)
-- The day's orders (daily_raw.orders is read filtered to the run's partition).
select
    id as order_id,
    customer_id,
    ordered_at,
    status
from daily_raw.orders
