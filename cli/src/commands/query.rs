//! `lh query`.

use lh_api::QueryRequest;

use crate::args::QueryArgs;
use crate::client::Client;
use crate::error::{CliError, CliResult};
use crate::output;
use crate::settings::Settings;

pub async fn run(client: &Client, settings: &Settings, args: QueryArgs) -> CliResult<()> {
    let sql = match (&args.sql, &args.file) {
        (Some(s), _) => s.clone(),
        (None, Some(f)) => std::fs::read_to_string(f)
            .map_err(|e| CliError::invalid(format!("cannot read {}: {e}", f.display()), None))?,
        (None, None) => return Err(CliError::invalid("give the SQL, or --file FILE.sql", None)),
    };
    if sql.trim().is_empty() {
        return Err(CliError::invalid("the query is empty", None));
    }
    let req = QueryRequest {
        sql,
        reference: settings.reference(&args.reference),
        timeout_ms: args.timeout.map(|s| s * 1000),
        max_rows: args.max_rows,
    };
    let result = client.query(&req).await?;
    if result.truncated {
        eprintln!(
            "note: the result was cut to {} rows (--max-rows)",
            args.max_rows.unwrap_or(0)
        );
    }
    if let Some(path) = &args.out {
        let rows = output::parquet_file(path, &result.schema, &result.batches)?;
        eprintln!(
            "wrote {rows} rows to {} (commit {})",
            path.display(),
            output::short(&result.commit)
        );
        return Ok(());
    }
    output::batches(settings.output, &result.schema, &result.batches)
}
