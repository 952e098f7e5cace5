-- lh.materialize: overwrite_partitions
-- lh.partitioned_by: day(ordered_at)
-- Each order of the day with what was paid for it, by method.
select
    o.order_id,
    o.customer_id,
    o.ordered_at,
    o.status,
    coalesce(sum(p.amount) filter (where p.method = 'credit_card'), 0) as credit_card_amount,
    coalesce(sum(p.amount) filter (where p.method = 'coupon'), 0) as coupon_amount,
    coalesce(sum(p.amount) filter (where p.method = 'bank_transfer'), 0) as bank_transfer_amount,
    coalesce(sum(p.amount) filter (where p.method = 'gift_card'), 0) as gift_card_amount,
    coalesce(sum(p.amount), 0) as amount
from daily.stg_orders as o
left join daily.stg_payments as p on p.order_id = o.order_id
group by all
