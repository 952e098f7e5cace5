-- Revenue per bill and day, for the executive dashboards.
select bill_id, cast(paid_at as date) as day, sum(amount) as revenue, count(*) as payments
from payments_clean
group by all
