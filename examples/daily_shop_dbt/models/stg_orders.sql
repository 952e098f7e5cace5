select id as order_id, customer_id, ordered_at, status
from {{ source('daily_raw', 'orders') }}
