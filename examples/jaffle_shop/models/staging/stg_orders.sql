-- Orders, renamed; orders placed before the run's `since` date are left out.
select
    id as order_id,
    user_id as customer_id,
    order_date,
    status
from raw.orders
where order_date >= cast($since as date)
