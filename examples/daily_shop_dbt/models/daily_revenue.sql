select
    cast(ordered_at as date) as day,
    status,
    count(order_id) as orders,
    sum(amount) as revenue
from {{ ref('order_totals') }}
group by all
