//! Partitioned runs: a project's partitions (`partitions:` in `lh_project.yml`), the
//! partitions a run asks for (`lh run --partition 2026-11-03`, `--partitions A..B`), and
//! how an instance reads and writes its partition (the plan that runs each partitioned
//! model once per partition is `instances.rs`'s).
//!
//! A model runs per partition when the project declares partitions and the model
//! overwrites partitions (`materialize="overwrite_partitions"` with `partitioned_by`):
//! each instance (`analytics.orders_daily[2026-11-03]`) receives its partition as the
//! parameters `partition`, `partition_start` and `partition_end`, reads its inputs
//! filtered to the partition where they share its key (a table partitioned by a time
//! transform of a time column, or by identity for a list of values), and replaces the
//! table's partitions its rows fall in. Instances are nodes of the run like any other:
//! they run in parallel up to the server's limit, each memoized on its own key, and the
//! run publishes them in one merge. A node that reads a partitioned model without being
//! one runs after every instance.

use std::collections::BTreeMap;

use chrono::{Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime};
use iceberg::spec::{PrimitiveType, Transform, Type};
use serde::{Deserialize, Serialize};

use crate::duck::{quote_ident, quote_literal};
use crate::error::{Code, Error, Result};
use crate::query::sql::{Constant, Filter, Op};
use crate::tables::LoadedTable;

/// At most this many partitions in one run (a year of days, a month of hours).
pub const MAX_PARTITIONS_PER_RUN: usize = 1000;

/// The parameters a partitioned model receives.
pub const PARAMS: [&str; 3] = ["partition", "partition_start", "partition_end"];

/// `partitions:` of `lh_project.yml`: days or hours from a start (to an end, if given),
/// or a list of values.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(try_from = "PartitionsFile", into = "PartitionsFile")]
pub enum PartitionsDecl {
    Daily(Range),
    Hourly(Range),
    Values(Vec<String>),
}

/// `partitions:` as written: one key of three.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartitionsFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    daily: Option<Range>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hourly: Option<Range>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    values: Option<Vec<String>>,
}

impl TryFrom<PartitionsFile> for PartitionsDecl {
    type Error = String;

    fn try_from(f: PartitionsFile) -> std::result::Result<PartitionsDecl, String> {
        match (f.daily, f.hourly, f.values) {
            (Some(r), None, None) => Ok(PartitionsDecl::Daily(r)),
            (None, Some(r), None) => Ok(PartitionsDecl::Hourly(r)),
            (None, None, Some(v)) => Ok(PartitionsDecl::Values(v)),
            _ => {
                Err("give one of daily: {start: ...}, hourly: {start: ...} or values: [...]".into())
            }
        }
    }
}

impl From<PartitionsDecl> for PartitionsFile {
    fn from(d: PartitionsDecl) -> PartitionsFile {
        match d {
            PartitionsDecl::Daily(r) => PartitionsFile {
                daily: Some(r),
                ..Default::default()
            },
            PartitionsDecl::Hourly(r) => PartitionsFile {
                hourly: Some(r),
                ..Default::default()
            },
            PartitionsDecl::Values(v) => PartitionsFile {
                values: Some(v),
                ..Default::default()
            },
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Range {
    pub start: String,
    #[serde(default)]
    pub end: Option<String>,
}

/// One partition of a run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Partition {
    /// As the user writes it: `2026-11-03`, `2026-11-03T05`, `eu`.
    pub label: String,
    /// The time range it covers, for days and hours: `[start, end)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<NaiveDateTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<NaiveDateTime>,
}

impl Partition {
    /// The parameters its model instances receive.
    pub fn params(&self) -> BTreeMap<String, serde_json::Value> {
        let time = |t: &Option<NaiveDateTime>| match t {
            Some(t) => serde_json::Value::String(t.format("%Y-%m-%d %H:%M:%S").to_string()),
            None => serde_json::Value::Null,
        };
        BTreeMap::from([
            ("partition".to_string(), self.label.clone().into()),
            ("partition_start".to_string(), time(&self.start)),
            ("partition_end".to_string(), time(&self.end)),
        ])
    }
}

pub(crate) fn bad(message: impl Into<String>) -> Error {
    Error::bad_request(Code::InvalidParameter, message)
}

impl PartitionsDecl {
    /// Problems with the declaration itself (an unreadable start, an empty list).
    pub fn check(&self) -> std::result::Result<(), String> {
        match self {
            PartitionsDecl::Daily(r) | PartitionsDecl::Hourly(r) => {
                let start = self.parse(&r.start).map_err(|e| format!("start: {e}"))?;
                if let Some(end) = &r.end {
                    let end = self.parse(end).map_err(|e| format!("end: {e}"))?;
                    if end.start < start.start {
                        return Err(format!("end {} is before start {}", end.label, start.label));
                    }
                }
                Ok(())
            }
            PartitionsDecl::Values(v) if v.is_empty() => {
                Err("values: the list is empty".to_string())
            }
            PartitionsDecl::Values(v) => {
                for x in v {
                    if !is_value(x) {
                        return Err(format!(
                            "value '{x}': use letters, digits, '_', '-' and '.' (at most 64)"
                        ));
                    }
                }
                Ok(())
            }
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            PartitionsDecl::Daily(_) => "daily",
            PartitionsDecl::Hourly(_) => "hourly",
            PartitionsDecl::Values(_) => "values",
        }
    }

    /// One partition by its label, in this declaration's form.
    pub(crate) fn parse(&self, text: &str) -> std::result::Result<Partition, String> {
        let text = text.trim();
        match self {
            PartitionsDecl::Daily(_) => {
                let d = NaiveDate::parse_from_str(text, "%Y-%m-%d")
                    .ok()
                    .filter(|d| (1..=9999).contains(&d.year()) && text.len() == 10)
                    .ok_or_else(|| format!("'{text}' is not a day (YYYY-MM-DD)"))?;
                let start = d.and_time(NaiveTime::MIN);
                Ok(Partition {
                    label: d.format("%Y-%m-%d").to_string(),
                    start: Some(start),
                    end: Some(start + Duration::days(1)),
                })
            }
            PartitionsDecl::Hourly(_) => {
                let t = ["%Y-%m-%dT%H", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"]
                    .iter()
                    .find_map(|f| {
                        let full = if f.ends_with("%H") {
                            format!("{text}:00")
                        } else {
                            text.to_string()
                        };
                        let f = if f.ends_with("%H") {
                            format!("{f}:%M")
                        } else {
                            f.to_string()
                        };
                        NaiveDateTime::parse_from_str(&full, &f).ok()
                    })
                    .filter(|t| (1..=9999).contains(&t.year()) && text.len() <= 16)
                    .ok_or_else(|| format!("'{text}' is not an hour (YYYY-MM-DDTHH)"))?;
                if t.format("%M").to_string() != "00" {
                    return Err(format!("'{text}' is not the start of an hour"));
                }
                Ok(Partition {
                    label: t.format("%Y-%m-%dT%H").to_string(),
                    start: Some(t),
                    end: Some(t + Duration::hours(1)),
                })
            }
            PartitionsDecl::Values(values) => {
                if values.iter().any(|v| v == text) {
                    Ok(Partition {
                        label: text.to_string(),
                        start: None,
                        end: None,
                    })
                } else {
                    Err(format!(
                        "'{text}' is not one of the project's partitions ({})",
                        values.join(", ")
                    ))
                }
            }
        }
    }

    /// The partitions `text` selects: one (`2026-11-03`), a range of days or hours
    /// (`2026-11-01..2026-11-30`, both included), or a list (`eu,us`); each within the
    /// declared range.
    pub fn select(&self, text: &str) -> Result<Vec<Partition>> {
        let text = text.trim();
        if text.is_empty() {
            return Err(bad("no partition given"));
        }
        if text.len() > 64 * 1024 {
            return Err(bad("the partitions given are longer than 64 KiB"));
        }
        let mut out: Vec<Partition> = Vec::new();
        if let Some((a, b)) = text.split_once("..") {
            if matches!(self, PartitionsDecl::Values(_)) {
                return Err(bad(
                    "the project's partitions are a list of values: give them as a,b,c",
                ));
            }
            let a = self.parse(a).map_err(bad)?;
            let b = self.parse(b).map_err(bad)?;
            if b.start < a.start {
                return Err(bad(format!(
                    "the range {}..{} ends before it starts",
                    a.label, b.label
                )));
            }
            let mut at = a;
            loop {
                let next = self.parse_after(&at);
                let last = at.start == b.start;
                out.push(at);
                if last {
                    break;
                }
                if out.len() > MAX_PARTITIONS_PER_RUN {
                    break;
                }
                at = next;
            }
        } else {
            let mut seen = std::collections::HashSet::new();
            for part in text.split(',') {
                let p = self.parse(part).map_err(bad)?;
                if seen.insert(p.label.clone()) {
                    out.push(p);
                }
                if out.len() > MAX_PARTITIONS_PER_RUN {
                    break;
                }
            }
        }
        if out.len() > MAX_PARTITIONS_PER_RUN {
            return Err(bad(format!(
                "one run takes at most {MAX_PARTITIONS_PER_RUN} partitions; split the backfill"
            )));
        }
        // Within the declared range.
        if let PartitionsDecl::Daily(r) | PartitionsDecl::Hourly(r) = self {
            let start = self.parse(&r.start).map_err(bad)?;
            let end = r
                .end
                .as_deref()
                .map(|e| self.parse(e))
                .transpose()
                .map_err(bad)?;
            for p in &out {
                if p.start < start.start || end.as_ref().is_some_and(|e| p.start > e.start) {
                    return Err(bad(format!(
                        "partition {} is outside the project's {} partitions ({}..{})",
                        p.label,
                        self.kind(),
                        start.label,
                        end.as_ref().map(|e| e.label.as_str()).unwrap_or("")
                    )));
                }
            }
        }
        Ok(out)
    }

    fn parse_after(&self, p: &Partition) -> Partition {
        let start = p.end.expect("a time partition has an end");
        let step = p.end.unwrap_or(start) - p.start.unwrap_or(start);
        Partition {
            label: match self {
                PartitionsDecl::Hourly(_) => start.format("%Y-%m-%dT%H").to_string(),
                _ => start.format("%Y-%m-%d").to_string(),
            },
            start: Some(start),
            end: Some(start + step),
        }
    }
}

fn is_value(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The name a partitioned model's instance has in a run: `table[partition]`.
pub fn instance_name(table: &str, p: &Partition) -> String {
    format!("{table}[{}]", p.label)
}

/// The partition of an instance's name (`analytics.t[2026-11-03]`), if it is one.
pub fn partition_of(name: &str) -> Option<&str> {
    name.strip_suffix(']')?.rsplit_once('[').map(|(_, p)| p)
}

/// The table of a node's name (an instance's without its partition).
pub fn table_of(name: &str) -> &str {
    match partition_of(name) {
        Some(p) => &name[..name.len() - p.len() - 2],
        None => name,
    }
}

/// The column of a model's partition spec (`partitioned_by`) that holds partition
/// `p`'s rows whole: one partitioned by a transform no coarser than the run's
/// partitions (`day`, `hour` or identity for days; `hour` or identity for hours;
/// identity for values).
pub fn key_column(p: &Partition, spec: &str) -> Option<String> {
    let fields = crate::tables::partition::parse_fields(spec).ok()?;
    let step = match (p.start, p.end) {
        (Some(s), Some(e)) => Some(e - s),
        _ => None,
    };
    fields.into_iter().find_map(|(t, column)| {
        let fine = match (step, t) {
            (_, Transform::Identity) => true,
            (Some(s), Transform::Hour) => s >= Duration::hours(1),
            (Some(s), Transform::Day) => s >= Duration::days(1),
            _ => false,
        };
        fine.then_some(column)
    })
}

/// What every output row of partition `p` satisfies, on its key column.
pub fn output_predicate(column: &str, p: &Partition) -> String {
    let col = quote_ident(column);
    match (p.start, p.end) {
        (Some(s), Some(e)) => {
            let t = |t: NaiveDateTime| quote_literal(&t.format("%Y-%m-%d %H:%M:%S").to_string());
            format!(
                "CAST({col} AS TIMESTAMP) >= TIMESTAMP {} AND CAST({col} AS TIMESTAMP) < TIMESTAMP {}",
                t(s),
                t(e)
            )
        }
        _ => format!("CAST({col} AS VARCHAR) = {}", quote_literal(&p.label)),
    }
}

/// How an input table shares a partition's key: the column it is partitioned by (a
/// time column by a time transform, or by identity, for days and hours; a text column
/// by identity for values).
pub fn shared_key(table: &LoadedTable, p: &Partition) -> Option<(String, PrimitiveType)> {
    let schema = table.metadata.current_schema();
    let spec = table.metadata.default_partition_spec();
    spec.fields().iter().find_map(|f| {
        let field = schema.field_by_id(f.source_id)?;
        let Type::Primitive(ty) = field.field_type.as_ref() else {
            return None;
        };
        let time_transform = matches!(
            f.transform,
            Transform::Identity
                | Transform::Year
                | Transform::Month
                | Transform::Day
                | Transform::Hour
        );
        let fits = match (p.start, ty) {
            (Some(s), PrimitiveType::Date) => {
                time_transform
                    && s.time() == NaiveTime::MIN
                    && p.end.is_some_and(|e| e.time() == NaiveTime::MIN)
            }
            (
                Some(_),
                PrimitiveType::Timestamp
                | PrimitiveType::Timestamptz
                | PrimitiveType::TimestampNs
                | PrimitiveType::TimestamptzNs,
            ) => time_transform,
            (None, PrimitiveType::String) => f.transform == Transform::Identity,
            _ => false,
        };
        fits.then(|| (field.name.clone(), ty.clone()))
    })
}

/// The filter of an input to partition `p` on `column` (of type `ty`): its SQL, and the
/// same as the filters pruning reads.
pub fn input_filter(column: &str, ty: &PrimitiveType, p: &Partition) -> (String, Vec<Filter>) {
    let col = quote_ident(column);
    match (p.start, p.end) {
        (Some(s), Some(e)) => {
            let text = |t: NaiveDateTime| match ty {
                PrimitiveType::Date => t.format("%Y-%m-%d").to_string(),
                _ => t.format("%Y-%m-%d %H:%M:%S").to_string(),
            };
            let (s, e) = (text(s), text(e));
            (
                format!(
                    "{col} >= {} AND {col} < {}",
                    quote_literal(&s),
                    quote_literal(&e)
                ),
                vec![
                    Filter {
                        column: column.to_string(),
                        op: Op::Ge,
                        values: vec![Constant::Text(s)],
                    },
                    Filter {
                        column: column.to_string(),
                        op: Op::Lt,
                        values: vec![Constant::Text(e)],
                    },
                ],
            )
        }
        _ => (
            format!("{col} = {}", quote_literal(&p.label)),
            vec![Filter {
                column: column.to_string(),
                op: Op::Eq,
                values: vec![Constant::Text(p.label.clone())],
            }],
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn daily(start: &str) -> PartitionsDecl {
        PartitionsDecl::Daily(Range {
            start: start.into(),
            end: None,
        })
    }

    #[test]
    fn declarations_read_from_the_project_file() {
        let d: PartitionsDecl = serde_yaml_ng::from_str("daily: {start: 2026-01-01}").unwrap();
        assert_eq!(d, daily("2026-01-01"));
        let h: PartitionsDecl =
            serde_yaml_ng::from_str("hourly: {start: 2026-01-01T00, end: 2026-02-01T00}").unwrap();
        assert!(matches!(h, PartitionsDecl::Hourly(_)));
        h.check().unwrap();
        let v: PartitionsDecl = serde_yaml_ng::from_str("values: [eu, us]").unwrap();
        v.check().unwrap();
        assert!(serde_yaml_ng::from_str::<PartitionsDecl>("weekly: {start: 2026-01-01}").is_err());
        assert!(
            serde_yaml_ng::from_str::<PartitionsDecl>("{daily: {start: 2026-01-01}, values: [a]}")
                .is_err()
        );
        // As the stored plan keeps it.
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<PartitionsDecl>(&json).unwrap(), d);
        assert!(daily("2026-13-01").check().is_err());
        assert!(PartitionsDecl::Values(vec!["a b".into()]).check().is_err());
    }

    #[test]
    fn ranges_lists_and_bounds() {
        let d = daily("2026-01-01");
        let month = d.select("2026-11-01..2026-11-30").unwrap();
        assert_eq!(month.len(), 30);
        assert_eq!(month[0].label, "2026-11-01");
        assert_eq!(month[29].label, "2026-11-30");
        assert_eq!(
            month[2].params()["partition_start"],
            serde_json::json!("2026-11-03 00:00:00")
        );
        assert_eq!(
            month[2].params()["partition_end"],
            serde_json::json!("2026-11-04 00:00:00")
        );
        // Across a month and a leap day.
        assert_eq!(
            daily("2020-01-01")
                .select("2024-02-28..2024-03-01")
                .unwrap()
                .len(),
            3
        );
        assert_eq!(
            d.select("2026-11-03,2026-11-05,2026-11-03").unwrap().len(),
            2
        );
        for wrong in [
            "2025-12-31",
            "2026-11-30..2026-11-01",
            "2026-11-3x",
            "",
            "2026-01-01..2030-01-01",
            "+262143-12-31",
            "9999-12-31T23",
        ] {
            assert!(d.select(wrong).is_err(), "{wrong}");
        }
        let h = PartitionsDecl::Hourly(Range {
            start: "2026-11-01T00".into(),
            end: Some("2026-11-02T23".into()),
        });
        let hours = h.select("2026-11-01T22..2026-11-02T01").unwrap();
        let labels: Vec<&str> = hours.iter().map(|p| p.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "2026-11-01T22",
                "2026-11-01T23",
                "2026-11-02T00",
                "2026-11-02T01"
            ]
        );
        assert!(h.select("2026-11-03T00").is_err());
        assert!(h.select("2026-11-01T05:30").is_err());
        assert!(
            PartitionsDecl::Hourly(Range {
                start: "0001-01-01T00".into(),
                end: None
            })
            .select("+262143-12-31T23")
            .is_err()
        );
        // A list past the limit stops early.
        let many: Vec<String> = (0..5000)
            .map(|i| {
                (NaiveDate::from_ymd_opt(2026, 1, 1).unwrap() + Duration::days(i))
                    .format("%Y-%m-%d")
                    .to_string()
            })
            .collect();
        assert!(d.select(&many.join(",")).is_err());
        let v = PartitionsDecl::Values(vec!["eu".into(), "us".into()]);
        assert_eq!(v.select("eu,us").unwrap().len(), 2);
        assert!(v.select("asia").is_err());
        assert!(v.select("eu..us").is_err());
    }

    #[test]
    fn instance_names_carry_their_partition() {
        let p = daily("2026-01-01").select("2026-11-03").unwrap().remove(0);
        let name = instance_name("analytics.orders", &p);
        assert_eq!(name, "analytics.orders[2026-11-03]");
        assert_eq!(partition_of(&name), Some("2026-11-03"));
        assert_eq!(partition_of("analytics.orders"), None);
        assert_eq!(table_of(&name), "analytics.orders");
        assert_eq!(table_of("analytics.orders"), "analytics.orders");
        let (sql, filters) = input_filter("ordered_at", &PrimitiveType::Timestamp, &p);
        assert_eq!(
            sql,
            "\"ordered_at\" >= '2026-11-03 00:00:00' AND \"ordered_at\" < '2026-11-04 00:00:00'"
        );
        assert_eq!(filters.len(), 2);
        let (sql, _) = input_filter("day", &PrimitiveType::Date, &p);
        assert_eq!(sql, "\"day\" >= '2026-11-03' AND \"day\" < '2026-11-04'");
    }
}
