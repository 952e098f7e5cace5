select status, sum(amount) as revenue from mart.orders group by status
