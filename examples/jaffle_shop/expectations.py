"""What must hold before the jaffle shop's tables are published."""

import lh
import pyarrow as pa
import pyarrow.compute as pc


def unique_and_present(column):
    return column.null_count == 0 and len(pc.unique(column)) == len(column)


@lh.expectation()
def customer_ids_are_unique(data=lh.Model("customers", columns=["customer_id"])):
    return unique_and_present(data.column("customer_id"))


@lh.expectation()
def order_ids_are_unique(data=lh.Model("orders", columns=["order_id"])):
    return unique_and_present(data.column("order_id"))


@lh.expectation()
def orders_belong_to_customers(
    orders=lh.Model("orders", columns=["customer_id"]),
    customers=lh.Model("customers", columns=["customer_id"]),
):
    missing = pc.invert(pc.is_in(orders.column("customer_id"), value_set=customers.column("customer_id")))
    n = pc.sum(missing).as_py() or 0
    return n == 0, f"{n} orders have no customer"


@lh.expectation()
def order_statuses_are_known(data=lh.Model("orders", columns=["status"])):
    known = pa.array(["placed", "shipped", "completed", "return_pending", "returned"])
    unknown = pc.unique(pc.filter(data.column("status"), pc.invert(pc.is_in(data.column("status"), value_set=known))))
    return len(unknown) == 0, f"unknown statuses: {unknown.to_pylist()}"


@lh.expectation()
def order_totals_match_payments(
    orders=lh.Model("orders", columns=["amount"]),
    payments=lh.Model("stg_payments", columns=["order_id", "amount"]),
    order_ids=lh.Model("orders", columns=["order_id"]),
):
    # Every payment of a published order is in that order's total.
    paid = pc.filter(payments.column("amount"), pc.is_in(payments.column("order_id"), value_set=order_ids.column("order_id")))
    a = pc.sum(orders.column("amount")).as_py() or 0
    b = pc.sum(paid).as_py() or 0
    return abs(a - b) < 1e-6 * max(1, abs(b)), f"orders total {a}, payments total {b}"
