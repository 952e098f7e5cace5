import lh
import pyarrow.compute as pc


@lh.model()
def payments_clean(
    payments=lh.Model("billing_raw.payments", columns=["id", "bill_id", "amount", "paid_at"], filter="amount > 0"),
):
    # The fix: payments that lost their bill id upstream are held back (see
    # unbilled_payments) instead of reaching the revenue tables.
    return payments.filter(pc.is_valid(payments.column("bill_id")))


@lh.model()
def unbilled_payments(
    payments=lh.Model("billing_raw.payments", columns=["id", "amount", "paid_at"], filter="bill_id is null"),
):
    return payments


@lh.expectation()
def every_payment_has_a_bill(data=lh.Model("payments_clean", columns=["bill_id"])):
    missing = data.column("bill_id").null_count
    return missing == 0, f"{missing} payments have no bill id"
