-- lh.materialize: overwrite_partitions
-- lh.partitioned_by: day(paid_at)
-- The day's payments, in dollars (the source keeps cents).
select
    id as payment_id,
    order_id,
    paid_at,
    method,
    amount / 100 as amount
from daily_raw.payments
