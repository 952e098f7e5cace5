-- Customers, renamed to the marts' vocabulary.
select
    id as customer_id,
    first_name,
    last_name
from raw.customers
