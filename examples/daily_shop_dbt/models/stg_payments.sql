select id as payment_id, order_id, paid_at, method, amount / 100 as amount
from {{ source('daily_raw', 'payments') }}
