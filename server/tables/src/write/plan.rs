//! The blocking part of a write, in its own DuckDB: read the source (files, a SQL
//! model's query, a Python function's output), check or infer and evolve its schema
//! against the table's, write the Parquet data files with their Iceberg field ids
//! (partitioned by the table's spec), and describe the files for the snapshot.

#[allow(unused_imports)]
use super::*;

/// The blocking part of an import: read, check, write Parquet, describe the files.
pub(super) struct WritePlan {
    pub(super) job: WriteJob,
    pub(super) ctx: ImportContext,
    pub(super) base: Option<TableMetadata>,
    pub(super) location: String,
    pub(super) table_uuid: Uuid,
    pub(super) data_dir: PathBuf,
    pub(super) data_url: String,
    /// Where DuckDB reads tables (a SQL model's inputs): the warehouse, or its read cache.
    pub(super) readable: Vec<PathBuf>,
}

impl WritePlan {
    pub(super) fn run(self, stop: &Stop) -> Result<Written> {
        if let Source::DataFiles {
            files,
            from,
            spec_id,
            ..
        } = &self.job.source
        {
            return self.graft(files, *spec_id, from);
        }
        if let Some(parent) = self.data_dir.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let spill = SpillDir(
            self.ctx
                .spill
                .join(format!("write-{}", Uuid::new_v4().simple())),
        );
        let mut allowed = vec![
            self.ctx.uploads.as_path(),
            self.ctx.outputs.as_path(),
            self.data_dir.as_path(),
        ];
        allowed.extend(self.readable.iter().map(|p| p.as_path()));
        let conn = duck::sandboxed(&allowed, &spill.0, &self.ctx.limits)?;
        // Declared after the connection: dropped (closed) before it.
        let _attached = stop.attach(&conn)?;
        let src = match &self.job.source {
            Source::Files {
                format,
                files,
                names,
            } => {
                if *format == FileFormat::Json {
                    check_json_nesting(files, names)?;
                }
                source_sql(*format, files, None)
            }
            Source::Query {
                setup, sql, params, ..
            } => {
                for stmt in setup {
                    stop.check()?;
                    conn.execute_batch(stmt).map_err(|e| {
                        Error::internal(format!("cannot expose a table to DuckDB: {e}"))
                    })?;
                }
                // The query's rows, with its parameters bound, become a temporary table.
                let mut stmt = conn
                    .prepare(&format!("CREATE TEMP TABLE lh_source AS {sql}"))
                    .map_err(|e| self.read_error(e))?;
                bind_params(&mut stmt, params)?;
                stop.check()?;
                stmt.raw_execute().map_err(|e| self.read_error(e))?;
                "lh_source".to_string()
            }
            Source::DataFiles { .. } => unreachable!("grafted above"),
        };
        let arrow_schema = conn
            .prepare(&format!("SELECT * FROM {src} LIMIT 0"))
            .and_then(|mut s| Ok(s.query_arrow([])?.get_schema()))
            .map_err(|e| self.read_error(e))?;
        let source = crate::types::iceberg_schema_from_arrow(&arrow_schema)?;

        let (base, src) = match (&self.base, self.job.mode) {
            (None, _) => {
                let spec = match &self.job.partition_by {
                    Some(text) => crate::partition::parse_spec(text, &source)?,
                    None => UnboundPartitionSpec::builder().build(),
                };
                let built = crate::commit::first_metadata(
                    source,
                    spec,
                    SortOrder::unsorted_order(),
                    self.location.clone(),
                    FormatVersion::V2,
                    HashMap::from([("write.format.default".to_string(), "parquet".to_string())]),
                    self.table_uuid,
                )?
                .build()?;
                (built.metadata, src)
            }
            (Some(base), ImportMode::Append | ImportMode::OverwritePartitions) => {
                let target = base.current_schema();
                self.check_append(&source, target)?;
                // A CSV's inferred types are guesses: read it with the table's types.
                let src = match &self.job.source {
                    Source::Files {
                        format: FileFormat::Csv,
                        files,
                        ..
                    } => source_sql(FileFormat::Csv, files, Some((&source, target.as_ref()))),
                    _ => src,
                };
                (base.clone(), src)
            }
            (Some(base), _) => {
                let mut next = base.clone();
                if let Some(schema) = evolve(base, &source)? {
                    next = TableMetadataBuilder::new_from_metadata(next, None)
                        .add_current_schema(schema)?
                        .build()?
                        .metadata;
                }
                if let Some(text) = &self.job.partition_by
                    && !crate::partition::same_spec(
                        text,
                        next.default_partition_spec(),
                        next.current_schema(),
                    )?
                {
                    let spec = crate::partition::parse_spec(text, next.current_schema())?;
                    next = TableMetadataBuilder::new_from_metadata(next, None)
                        .add_default_partition_spec(spec)?
                        .build()?
                        .metadata;
                }
                (next, src)
            }
        };
        if let Some(w) = &self.job.within {
            let outside: i64 = conn
                .query_row(
                    &format!(
                        "SELECT count(*) FROM {src} WHERE ({}) IS NOT TRUE",
                        w.predicate
                    ),
                    [],
                    |r| r.get(0),
                )
                .map_err(|e| self.read_error(e))?;
            if outside > 0 {
                return Err(Error::bad_request(
                    Code::BadInput,
                    format!(
                        "{} row{} of {} fall outside partition {} ({}); nothing was written",
                        outside,
                        if outside == 1 { "" } else { "s" },
                        self.job.source.describe(),
                        w.label,
                        w.predicate
                    ),
                )
                .with_hint("a partitioned model's output holds its partition's rows only"));
            }
        }
        let schema = base.current_schema().clone();
        let spec = base.default_partition_spec().clone();
        let partitioner = crate::partition::Partitioner::new(&spec, &schema)?;
        let casts: Vec<String> = schema
            .as_struct()
            .fields()
            .iter()
            .map(|f| {
                format!(
                    "CAST({} AS {}) AS {}",
                    quote_ident(&f.name),
                    duckdb_type(&f.field_type),
                    quote_ident(&f.name)
                )
            })
            .collect();
        let options = format!(
            "FORMAT parquet, FIELD_IDS {}, FILENAME_PATTERN 'part-{{i}}', COMPRESSION snappy",
            duckdb_field_ids(&schema),
        );
        let target = quote_literal(&self.data_dir.display().to_string());
        // Each file written, with its partition.
        let mut parts: Vec<iceberg::spec::Struct> = Vec::new();
        let rows = match &partitioner {
            None => {
                // DuckDB rolls files at a size only when it does not partition.
                let copy = format!(
                    "COPY (SELECT {} FROM {src}) TO {target} ({options}, FILE_SIZE_BYTES '{DATA_FILE_BYTES}')",
                    casts.join(", ")
                );
                stop.check()?;
                let rows = conn.execute(&copy, []).map_err(|e| self.read_error(e))? as u64;
                parts.push(iceberg::spec::Struct::from_iter(
                    spec.fields().iter().map(|_| None),
                ));
                rows
            }
            Some(p) => {
                p.prepare(&conn)?;
                let pcols: Vec<String> = (0..p.width()).map(|i| p.column(i)).collect();
                let part = p.part_column();
                // The rows with their partition values, once; then the distinct tuples,
                // numbered; then one folder of files per number.
                stop.check()?;
                conn.execute_batch(&format!(
                    "CREATE TEMP TABLE lh_rows AS SELECT *, {} FROM (SELECT {} FROM {src})",
                    p.columns().join(", "),
                    casts.join(", ")
                ))
                .map_err(|e| self.read_error(e))?;
                stop.check()?;
                conn.execute_batch(&format!(
                    "CREATE TEMP TABLE lh_parts AS SELECT CAST(row_number() OVER () - 1 AS BIGINT) AS {part}, * \
                     FROM (SELECT DISTINCT {cols} FROM lh_rows)",
                    cols = pcols.join(", ")
                ))
                .map_err(|e| self.read_error(e))?;
                let count: i64 = conn
                    .query_row("SELECT count(*) FROM lh_parts", [], |r| r.get(0))
                    .map_err(|e| self.read_error(e))?;
                if count as u64 > crate::partition::MAX_PARTITIONS_PER_WRITE {
                    return Err(Error::bad_request(
                        Code::BadPartitionSpec,
                        format!(
                            "the rows fall into {count} partitions of '{}'; one write takes at most {}",
                            crate::partition::describe(&spec, &schema),
                            crate::partition::MAX_PARTITIONS_PER_WRITE
                        ),
                    )
                    .with_hint("write the rows in several imports, or partition more coarsely"));
                }
                let mut stmt = conn
                    .prepare(&format!(
                        "SELECT {} FROM lh_parts ORDER BY {part}",
                        pcols.join(", ")
                    ))
                    .map_err(|e| self.read_error(e))?;
                for batch in stmt.query_arrow([]).map_err(|e| self.read_error(e))? {
                    parts.extend(p.values(&batch)?);
                }
                drop(stmt);
                let on: Vec<String> = pcols
                    .iter()
                    .map(|c| format!("r.{c} IS NOT DISTINCT FROM p.{c}"))
                    .collect();
                let names: Vec<String> = schema
                    .as_struct()
                    .fields()
                    .iter()
                    .map(|f| format!("r.{}", quote_ident(&f.name)))
                    .collect();
                let copy = format!(
                    "COPY (SELECT {}, p.{part} FROM lh_rows AS r JOIN lh_parts AS p ON {}) \
                     TO {target} ({options}, PARTITION_BY ({part}))",
                    names.join(", "),
                    on.join(" AND "),
                );
                stop.check()?;
                conn.execute(&copy, []).map_err(|e| self.read_error(e))? as u64
            }
        };
        drop(conn);

        // The files, and the partition of each: an unpartitioned write's are in the
        // folder; a partitioned one's in `<part column>=N/`, moved up as `pN-part-K.parquet`
        // (no `key=value` folder, which readers could take for Hive partitioning).
        let mut found: Vec<(PathBuf, usize)> = Vec::new();
        let list = |dir: &std::path::Path| -> Vec<PathBuf> {
            let mut v: Vec<PathBuf> = match std::fs::read_dir(dir) {
                Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
                Err(_) => Vec::new(),
            };
            v.sort();
            v
        };
        for p in list(&self.data_dir) {
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            if partitioner.is_none() {
                if name.ends_with(".parquet") {
                    found.push((p, 0));
                }
                continue;
            }
            let Some(n) = name
                .strip_prefix(&format!(
                    "{}=",
                    partitioner
                        .as_ref()
                        .map(|p| p.part_column())
                        .unwrap_or_default()
                ))
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n < parts.len())
            else {
                continue;
            };
            for f in list(&p) {
                let fname = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                if !fname.ends_with(".parquet") {
                    continue;
                }
                let flat = self.data_dir.join(format!("p{n}-{fname}"));
                std::fs::rename(&f, &flat)?;
                found.push((flat, n));
            }
            let _ = std::fs::remove_dir(&p);
        }
        let mut files = Vec::with_capacity(found.len());
        let mut staged = Vec::with_capacity(found.len());
        let mut bytes = 0;
        for (p, part) in &found {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let url = format!("{}/{name}", self.data_url);
            let df = stats::data_file(p, &url, &schema, &spec, parts[*part].clone())?;
            bytes += df.file_size_in_bytes();
            files.push(df);
            staged.push(Staged {
                path: p.clone(),
                location: url,
            });
        }
        Ok(Written {
            base,
            files,
            staged,
            rows,
            bytes,
            partitions: if rows == 0 { Vec::new() } else { parts },
        })
    }

    /// Data files of another version of the table (`from`), added as they are: into the
    /// table when it has `from`'s schema and partitioning, or into a new table with
    /// them.
    fn graft(
        &self,
        files: &[iceberg::spec::DataFile],
        spec_id: i32,
        from: &TableMetadata,
    ) -> Result<Written> {
        let refuse = |why: &str| {
            Error::new(
                Kind::Conflict,
                Code::Conflict,
                format!("{} cannot be put back: {why}", self.job.source.describe()),
            )
        };
        let base = match &self.base {
            Some(b) => b.clone(),
            None => {
                crate::commit::first_metadata(
                    from.current_schema().as_ref().clone(),
                    from.default_partition_spec()
                        .as_ref()
                        .clone()
                        .into_unbound(),
                    SortOrder::unsorted_order(),
                    self.location.clone(),
                    FormatVersion::V2,
                    HashMap::from([("write.format.default".to_string(), "parquet".to_string())]),
                    self.table_uuid,
                )?
                .build()?
                .metadata
            }
        };
        if base.current_schema().as_struct() != from.current_schema().as_struct() {
            return Err(refuse("the table's schema is another"));
        }
        let spec = base.default_partition_spec();
        if spec.fields() != from.default_partition_spec().fields() || spec_id != spec.spec_id() {
            return Err(refuse("the table's partitioning is another"));
        }
        let mut partitions: Vec<iceberg::spec::Struct> = Vec::new();
        for f in files {
            if !partitions.contains(f.partition()) {
                partitions.push(f.partition().clone());
            }
        }
        Ok(Written {
            rows: files.iter().map(|f| f.record_count()).sum(),
            bytes: files.iter().map(|f| f.file_size_in_bytes()).sum(),
            files: files.to_vec(),
            staged: Vec::new(),
            partitions,
            base,
        })
    }

    fn read_error(&self, e: duckdb::Error) -> Error {
        let text = e.to_string();
        let (files, names, format) = match &self.job.source {
            Source::Files {
                files,
                names,
                format,
            } => (files.as_slice(), names.as_slice(), Some(*format)),
            Source::Query { .. } | Source::DataFiles { .. } => (&[][..], &[][..], None),
        };
        // Show the user's file names, not the server's staging paths.
        let mut msg = text.clone();
        for (path, name) in files.iter().zip(names) {
            msg = msg.replace(&path.display().to_string(), name);
        }
        msg = msg.replace(&self.ctx.uploads.display().to_string(), "");
        // DuckDB's own advice (its options, its search space) does not apply to lh users.
        let first: Vec<&str> = msg
            .lines()
            .filter(|l| !l.trim().is_empty())
            .take_while(|l| {
                !l.starts_with("The search space used was") && !l.starts_with("Possible fixes")
            })
            .take(8)
            .collect();
        // The server's memory for DuckDB ran out (`--native-memory`), or this write's
        // database's: not the file's fault, and worth trying again.
        if text.contains("Out of Memory Error") || text.contains("bad_alloc") {
            return Error::new(
                Kind::Unavailable,
                Code::OutOfMemory,
                format!(
                    "{} ran out of memory: {}",
                    self.job.source.describe(),
                    first.join("\n")
                ),
            )
            .with_hint(
                "the server's DuckDB work all together is held to --native-memory, and each \
                 write's to --duckdb-memory: try again once other queries and writes are done",
            );
        }
        let Some(format) = format else {
            return Error::bad_request(
                Code::SqlError,
                format!(
                    "{} failed: {}",
                    self.job.source.describe(),
                    first.join("\n")
                ),
            );
        };
        let what = match format {
            FileFormat::Csv => "CSV",
            FileFormat::Parquet => "Parquet",
            FileFormat::Json => "JSON",
        };
        let err = Error::bad_request(
            Code::BadInputFile,
            format!(
                "cannot import {} as {what}: {}",
                names.join(", "),
                first.join("\n")
            ),
        );
        match format {
            FileFormat::Csv => err.with_hint(
                "lh reads CSV with a header row, ',' between fields (a tab in .tsv) and '\"' quotes; check that every row has the same number of fields",
            ),
            _ => err,
        }
    }

    fn is_csv(&self) -> bool {
        matches!(
            self.job.source,
            Source::Files {
                format: FileFormat::Csv,
                ..
            }
        )
    }

    fn check_append(&self, source: &Schema, target: &Schema) -> Result<()> {
        let mut problems = Vec::new();
        for f in source.as_struct().fields() {
            match target.as_struct().field_by_name(&f.name) {
                None => problems.push(format!("column '{}' is not in the table", f.name)),
                Some(t) if !assignable(&f.field_type, &t.field_type) && !self.is_csv() => problems
                    .push(format!(
                        "column '{}' is {} in the file but {} in the table",
                        f.name,
                        display_type(&f.field_type),
                        display_type(&t.field_type)
                    )),
                Some(_) => {}
            }
        }
        for t in target.as_struct().fields() {
            if source.as_struct().field_by_name(&t.name).is_none() {
                problems.push(format!("column '{}' is missing from the file", t.name));
            }
        }
        if problems.is_empty() {
            return Ok(());
        }
        Err(Error::bad_request(
            Code::SchemaMismatch,
            format!(
                "cannot append to '{}': the files do not match its schema: {}; the table is unchanged",
                self.job.table,
                problems.join("; ")
            ),
        )
        .with_remedy(Remedy::ShowSchema).with_remedy(Remedy::ReplaceTable))
    }
}

/// The deepest a JSON file may nest arrays and objects. DuckDB's reader works out a
/// file's structure recursively, once per level: a file of 150 KB nested 75,000 deep
/// overflowed the stack of the thread importing it, and the server died (the thirtieth
/// review). Data nests a few levels.
pub const MAX_JSON_DEPTH: usize = 1000;

/// Refuses a staged JSON file (plain, gzip or zstd) that nests deeper than
/// [`MAX_JSON_DEPTH`], before DuckDB reads it: one pass over its bytes, counting brackets
/// outside strings. A file that cannot be decompressed is left to DuckDB's error.
fn check_json_nesting(files: &[PathBuf], names: &[String]) -> Result<()> {
    use std::io::Read;
    for (i, path) in files.iter().enumerate() {
        let file = std::fs::File::open(path)?;
        let lower = path.display().to_string().to_ascii_lowercase();
        let mut read: Box<dyn Read> = if lower.ends_with(".gz") {
            Box::new(flate2::read::MultiGzDecoder::new(file))
        } else if lower.ends_with(".zst") {
            match zstd::Decoder::new(file) {
                Ok(d) => Box::new(d),
                Err(_) => continue,
            }
        } else {
            Box::new(file)
        };
        let mut depth = lh_core::json::Depth::default();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = match read.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if depth.feed(&buf[..n]) > MAX_JSON_DEPTH {
                let name = names.get(i).map_or("the file", String::as_str);
                return Err(Error::bad_request(
                    Code::BadInputFile,
                    format!(
                        "cannot import {name} as JSON: it nests arrays and objects \
                         more than {MAX_JSON_DEPTH} levels deep"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The table function reading the staged files. With `typed`, a CSV is read with the
/// target's types, by the file's column order.
///
/// CSV is read as RFC 4180 with a header row: the delimiter (`,`, or a tab for `.tsv`),
/// quote and escape are fixed and rows are never skipped, so that a malformed file is
/// an error rather than a different guess at its dialect.
fn source_sql(format: FileFormat, files: &[PathBuf], typed: Option<(&Schema, &Schema)>) -> String {
    let list: Vec<String> = files
        .iter()
        .map(|p| quote_literal(&p.display().to_string()))
        .collect();
    let list = format!("[{}]", list.join(", "));
    match format {
        FileFormat::Csv => {
            let tsv = files.iter().all(|p| {
                let name = p.display().to_string().to_ascii_lowercase();
                name.ends_with(".tsv") || name.ends_with(".tsv.gz") || name.ends_with(".tsv.zst")
            });
            let delim = if tsv { "'\\t'" } else { "','" };
            let dialect = format!(
                "header = true, delim = {delim}, quote = '\"', escape = '\"', skip = 0, strict_mode = true"
            );
            match typed {
                None => format!("read_csv({list}, {dialect}, union_by_name = true)"),
                Some((source, target)) => {
                    let cols: Vec<String> = source
                        .as_struct()
                        .fields()
                        .iter()
                        .map(|f| {
                            let ty = target
                                .as_struct()
                                .field_by_name(&f.name)
                                .map(|t| duckdb_type(&t.field_type))
                                .unwrap_or_else(|| duckdb_type(&f.field_type));
                            format!("{}: {}", quote_literal(&f.name), quote_literal(&ty))
                        })
                        .collect();
                    format!(
                        "read_csv({list}, {dialect}, columns = {{{}}})",
                        cols.join(", ")
                    )
                }
            }
        }
        FileFormat::Parquet => format!("read_parquet({list}, union_by_name = true)"),
        FileFormat::Json => format!("read_json({list}, format = 'auto', union_by_name = true)"),
    }
}

/// The table schema after a replace with files of schema `source`, or `None` when it
/// does not change. Columns keep their field id when the name and a compatible type
/// stay; others get fresh ids.
fn evolve(base: &TableMetadata, source: &Schema) -> Result<Option<Schema>> {
    let current = base.current_schema();
    let mut next_id = base.last_column_id() + 1;
    let mut fields = Vec::new();
    let mut same = source.as_struct().fields().len() == current.as_struct().fields().len();
    for f in source.as_struct().fields() {
        match current.as_struct().field_by_name(&f.name) {
            Some(old) if assignable(&f.field_type, &old.field_type) => {
                fields.push(old.clone());
            }
            _ => {
                same = false;
                let ty = reassign(&f.field_type, &mut next_id);
                let id = next_id;
                next_id += 1;
                fields.push(std::sync::Arc::new(NestedField::optional(id, &f.name, ty)));
            }
        }
    }
    if same {
        return Ok(None);
    }
    let schema = Schema::builder()
        .with_schema_id(current.schema_id() + 1)
        .with_fields(fields)
        .build()?;
    Ok(Some(schema))
}

/// A nested type with fresh ids from `next`.
fn reassign(ty: &iceberg::spec::Type, next: &mut i32) -> iceberg::spec::Type {
    use iceberg::spec::{ListType, MapType, StructType, Type};
    use std::sync::Arc;
    let mut fresh = || {
        let id = *next;
        *next += 1;
        id
    };
    match ty {
        Type::Primitive(_) => ty.clone(),
        Type::List(l) => {
            let id = fresh();
            let el = reassign(&l.element_field.field_type, next);
            Type::List(ListType::new(Arc::new(NestedField::list_element(
                id, el, false,
            ))))
        }
        Type::Map(m) => {
            let (k, v) = (fresh(), fresh());
            let kt = reassign(&m.key_field.field_type, next);
            let vt = reassign(&m.value_field.field_type, next);
            Type::Map(MapType::new(
                Arc::new(NestedField::map_key_element(k, kt)),
                Arc::new(NestedField::map_value_element(v, vt, false)),
            ))
        }
        Type::Struct(s) => {
            let ids: Vec<i32> = s.fields().iter().map(|_| fresh()).collect();
            let fields = s
                .fields()
                .iter()
                .zip(ids)
                .map(|(f, id)| {
                    Arc::new(NestedField::optional(
                        id,
                        &f.name,
                        reassign(&f.field_type, next),
                    ))
                })
                .collect();
            Type::Struct(StructType::new(fields))
        }
    }
}

/// Binds `$name` parameters by name; every parameter of the statement must have a value.
fn bind_params(
    stmt: &mut duckdb::Statement<'_>,
    params: &BTreeMap<String, serde_json::Value>,
) -> Result<()> {
    for idx in 1..=stmt.parameter_count() {
        let name = stmt.parameter_name(idx)?;
        let value = params.get(name.trim_start_matches('$')).ok_or_else(|| {
            Error::bad_request(
                Code::UnknownParameter,
                format!("the query uses ${name}, which has no value"),
            )
        })?;
        match value {
            serde_json::Value::String(v) => stmt.raw_bind_parameter(idx, v)?,
            serde_json::Value::Bool(v) => stmt.raw_bind_parameter(idx, v)?,
            serde_json::Value::Number(n) if n.is_i64() => {
                stmt.raw_bind_parameter(idx, n.as_i64())?
            }
            serde_json::Value::Number(n) => stmt.raw_bind_parameter(idx, n.as_f64())?,
            serde_json::Value::Null => stmt.raw_bind_parameter(idx, Option::<i64>::None)?,
            other => {
                return Err(Error::bad_request(
                    Code::BadParameter,
                    format!("parameter {name} has an unsupported value {other}"),
                ));
            }
        }
    }
    Ok(())
}
