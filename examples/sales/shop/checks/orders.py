import lh
import pyarrow.compute as pc


@lh.expectation()
def amounts_are_positive(orders=lh.Model("sales.orders", columns=["amount"])):
    return pc.min(orders["amount"]).as_py() > 0
