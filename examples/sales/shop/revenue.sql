select customer, sum(amount) as revenue from orders group by customer
