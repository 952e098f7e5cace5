select order_id, customer, amount from sales.orders
