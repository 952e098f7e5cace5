//! The files lh writes are a valid Iceberg table: pyiceberg 0.12 loads the metadata
//! file lh wrote and reads the same rows as `lh query`.

use lh_e2e::{Server, python};

const READ: &str = r#"
import json, os, sys
from pyiceberg.table import StaticTable
# An S3 warehouse: the endpoint and key from the environment the test passes.
props = {}
if os.environ.get("AWS_ENDPOINT_URL"):
    props = {"s3.endpoint": os.environ["AWS_ENDPOINT_URL"], "s3.region": os.environ["AWS_REGION"],
             "s3.access-key-id": os.environ["AWS_ACCESS_KEY_ID"],
             "s3.secret-access-key": os.environ["AWS_SECRET_ACCESS_KEY"], "s3.force-virtual-addressing": "false"}
t = StaticTable.from_metadata(sys.argv[1], properties=props)
rows = t.scan().to_arrow().sort_by("id").to_pylist()
def plain(v):
    return v.isoformat() if hasattr(v, "isoformat") else (str(v) if v.__class__.__name__ == "Decimal" else v)
print(json.dumps({"format_version": t.metadata.format_version, "snapshots": len(t.metadata.snapshots),
                  "columns": [f.name for f in t.schema().fields],
                  "rows": [{k: plain(v) for k, v in r.items()} for r in rows]}))
"#;

#[test]
fn pyiceberg_reads_what_lh_wrote() {
    let server = Server::start();
    let lh = server.lh();
    let csv = lh.file("orders.csv", "id,customer,amount,day,price\n1,alice,10.5,2026-01-01,1.25\n2,bob,20,2026-01-02,3.50\n3,carol,,2026-01-03,\n");
    lh.run(&["table", "import", "raw.orders", csv.to_str().unwrap()])
        .ok();
    let more = lh.file(
        "more.csv",
        "id,customer,amount,day,price\n4,dave,1,2026-02-01,9.99\n",
    );
    lh.run(&[
        "table",
        "import",
        "raw.orders",
        more.to_str().unwrap(),
        "--mode",
        "append",
    ])
    .ok();
    let ls: serde_json::Value =
        serde_json::from_str(lh.run(&["table", "ls", "-o", "json"]).ok()).unwrap();
    let location = ls["tables"][0]["pointer"]["metadata_location"]
        .as_str()
        .unwrap()
        .to_string();
    let out = std::process::Command::new(python())
        .args(["-c", READ, &location])
        .envs(match &server.warehouse {
            lh_e2e::TestWarehouse::S3(s3) => s3.env(),
            lh_e2e::TestWarehouse::Local => vec![],
        })
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "pyiceberg failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let py: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(py["format_version"], 2);
    assert_eq!(py["snapshots"], 2);
    assert_eq!(
        py["columns"],
        serde_json::json!(["id", "customer", "amount", "day", "price"])
    );
    let ours = lh.rows("select id, customer, amount, strftime(day, '%Y-%m-%d') AS day, price from raw.orders order by id", "main");
    assert_eq!(py["rows"].as_array().unwrap().len(), 4);
    for (p, o) in py["rows"].as_array().unwrap().iter().zip(&ours) {
        assert_eq!(p["id"], o["id"]);
        assert_eq!(p["customer"], o["customer"]);
        assert_eq!(p["amount"], o["amount"]);
        assert_eq!(p["day"], o["day"]);
        assert_eq!(p["price"], o["price"]);
    }
}
