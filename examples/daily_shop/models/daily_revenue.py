"""The day's revenue by order status, in Python (pyarrow): one row per status."""

import datetime

import lh
import pyarrow as pa


@lh.model(materialize="overwrite_partitions", partitioned_by=["day"])
def daily_revenue(totals=lh.Model("order_totals"), day=lh.Parameter("partition")):
    by_status = totals.group_by("status").aggregate([("amount", "sum"), ("order_id", "count")])
    n = by_status.num_rows
    return pa.table({
        "day": pa.array([datetime.date.fromisoformat(day)] * n, pa.date32()),
        "status": by_status["status"],
        "orders": by_status["order_id_count"],
        "revenue": by_status["amount_sum"],
    })
