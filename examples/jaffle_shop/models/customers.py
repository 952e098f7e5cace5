"""The customers mart: each customer with their first and latest order, how many
orders they placed and what they paid in all."""

import lh
import pyarrow as pa
import pyarrow.compute as pc


@lh.model()
def customers(
    customers=lh.Model("stg_customers"),
    orders=lh.Model("stg_orders", columns=["order_id", "customer_id", "order_date"]),
    payments=lh.Model("stg_payments", columns=["order_id", "amount"]),
):
    customer_orders = orders.group_by("customer_id").aggregate(
        [("order_date", "min"), ("order_date", "max"), ("order_id", "count")]
    ).rename_columns(["customer_id", "first_order", "most_recent_order", "number_of_orders"])
    paid = (
        payments.join(orders.select(["order_id", "customer_id"]), "order_id", join_type="left outer")
        .group_by("customer_id")
        .aggregate([("amount", "sum")])
        .rename_columns(["customer_id", "customer_lifetime_value"])
    )
    out = customers.join(customer_orders, "customer_id", join_type="left outer").join(
        paid, "customer_id", join_type="left outer"
    )
    return out.sort_by("customer_id").select(
        ["customer_id", "first_name", "last_name", "first_order", "most_recent_order",
         "number_of_orders", "customer_lifetime_value"]
    )
