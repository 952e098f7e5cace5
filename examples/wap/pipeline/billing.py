import lh


@lh.model()
def payments_clean(
    payments=lh.Model("billing_raw.payments", columns=["id", "bill_id", "amount", "paid_at"], filter="amount > 0"),
):
    return payments


@lh.expectation()
def every_payment_has_a_bill(data=lh.Model("payments_clean", columns=["bill_id"])):
    missing = data.column("bill_id").null_count
    return missing == 0, f"{missing} payments have no bill id"
