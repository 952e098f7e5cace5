"""Checked once per run, after every day: nothing publishes unless they pass."""

import lh
import pyarrow.compute as pc


@lh.expectation()
def revenue_is_never_negative(t=lh.Model("daily_revenue", columns=["revenue"])):
    return pc.all(pc.greater_equal(t["revenue"], 0)).as_py() is not False


@lh.expectation()
def every_order_is_counted_once(t=lh.Model("order_totals", columns=["order_id"])):
    return pc.count_distinct(t["order_id"]).as_py() == t.num_rows
