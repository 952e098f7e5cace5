select order_id, customer, amount, status from sales.orders
