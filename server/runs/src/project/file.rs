//! The project file (`lh_project.yml`): read within bounds, its parameters resolved
//! against a run's, its SQL settings, and the files of a project.

#[allow(unused_imports)]
use super::*;

pub const PROJECT_FILE: &str = "lh_project.yml";

/// `lh_project.yml`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectFile {
    pub name: String,
    /// Where outputs go unless a model says otherwise.
    pub namespace: String,
    #[serde(default = "default_python")]
    pub python: String,
    /// Packages of every Python function (name to version).
    #[serde(default)]
    pub packages: BTreeMap<String, String>,
    /// Build packages without a wheel from source (in the sandbox); wheels only otherwise.
    #[serde(default)]
    pub source_builds: bool,
    #[serde(default)]
    pub parameters: BTreeMap<String, ParamDecl>,
    /// Default limits of Python functions.
    #[serde(default)]
    pub resources: Option<ResourcesDecl>,
    /// The partitions its partitioned models run for (`daily: {start: 2026-01-01}`),
    /// see `partitions.rs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions: Option<PartitionsDecl>,
}

/// A partition spec as a model gives it: a list of fields or one string; checked for
/// its syntax (the columns are checked against the output when it is written).
pub(super) fn partition_text(v: &serde_json::Value) -> std::result::Result<String, String> {
    let text = match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(items) => {
            let mut parts = Vec::new();
            for i in items {
                match i.as_str() {
                    Some(s) => parts.push(s.to_string()),
                    None => return Err(format!("{i} is not a partition field (a string)")),
                }
            }
            parts.join(", ")
        }
        other => return Err(format!("{other} is not a list of partition fields")),
    };
    crate::tables::partition::parse_fields(&text).map_err(|e| e.message)?;
    Ok(text)
}

/// A SQL model's settings, from `-- lh.materialize: ...`, `-- lh.partitioned_by: ...`
/// and `-- lh.whole: TABLE, ...` comment lines before its query.
pub(super) struct SqlSettings {
    pub(super) materialize: Materialize,
    pub(super) partitioned_by: Option<String>,
    /// Inputs a partitioned instance reads whole (as written: bare or qualified).
    pub(super) whole: Vec<String>,
}

pub(super) fn sql_settings(
    file: &str,
    text: &str,
) -> std::result::Result<SqlSettings, Vec<String>> {
    let mut materialize = Materialize::Replace;
    let mut partitioned_by = None;
    let mut whole = Vec::new();
    let mut problems = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some(comment) = line.strip_prefix("--") else {
            break;
        };
        let Some(setting) = comment.trim().strip_prefix("lh.") else {
            continue;
        };
        let n = i as u32 + 1;
        let Some((key, value)) = setting.split_once(':') else {
            problems.push(loc(
                file,
                n,
                format!("'-- lh.{setting}': write `-- lh.KEY: VALUE`"),
            ));
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "materialize" => match Materialize::parse(value) {
                Some(m) => materialize = m,
                None => problems.push(loc(
                    file,
                    n,
                    format!("lh.materialize '{value}': use {MATERIALIZE_CHOICES}"),
                )),
            },
            "partitioned_by" => {
                match partition_text(&serde_json::Value::String(value.to_string())) {
                    Ok(t) => partitioned_by = Some(t),
                    Err(e) => problems.push(loc(file, n, format!("lh.partitioned_by: {e}"))),
                }
            }
            "whole" => whole.extend(
                value
                    .split(',')
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty()),
            ),
            other => problems.push(loc(
                file,
                n,
                format!(
                    "unknown setting 'lh.{other}' (lh.materialize, lh.partitioned_by, lh.whole)"
                ),
            )),
        }
    }
    if problems.is_empty() {
        Ok(SqlSettings {
            materialize,
            partitioned_by,
            whole,
        })
    } else {
        Err(problems)
    }
}

pub(super) fn default_python() -> String {
    "3.11".into()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamDecl {
    #[serde(rename = "type")]
    pub ty: ParamType,
    #[serde(default)]
    pub default: Option<serde_json::Value>,
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamType {
    Str,
    Int,
    Float,
    Bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourcesDecl {
    pub memory: Option<String>,
    pub cpus: Option<f64>,
    pub timeout: Option<String>,
}

/// The largest `lh_project.yml` read: a project file names a project, its parameters,
/// packages and limits, in a few hundred bytes.
pub const MAX_PROJECT_FILE_BYTES: u64 = 64 << 10;

/// The deepest nesting of `[` and `{` read in `lh_project.yml`. Once (the third
/// review): 100,000 nested `[` cost libyaml 43 s of CPU, and two such plans froze the
/// API. Counted on the raw text before parsing, quotes and comments included, so no
/// quoting can hide brackets from the count.
pub(super) const MAX_PROJECT_FILE_NESTING: usize = 32;

/// Reads `lh_project.yml` of the project at `root`. Blocking: call it off the async
/// threads.
pub fn read_project_file(root: &Path) -> Result<ProjectFile> {
    let path = root.join(PROJECT_FILE);
    let not_a_project = || {
        Error::bad_request(
            Code::InvalidProject,
            format!("not an lh project: there is no {PROJECT_FILE}"),
        )
        .with_hint("a project folder holds lh_project.yml, Python files and SQL files")
    };
    let size = std::fs::metadata(&path).map_err(|_| not_a_project())?.len();
    if size > MAX_PROJECT_FILE_BYTES {
        return Err(invalid(vec![loc(
            PROJECT_FILE,
            0,
            format!(
                "the file is {size} bytes, more than the {MAX_PROJECT_FILE_BYTES} a project file may be"
            ),
        )]));
    }
    let text = std::fs::read_to_string(&path).map_err(|_| not_a_project())?;
    let (mut depth, mut deepest) = (0usize, 0usize);
    for b in text.bytes() {
        match b {
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if deepest > MAX_PROJECT_FILE_NESTING {
        return Err(invalid(vec![loc(
            PROJECT_FILE,
            0,
            format!(
                "brackets nest {deepest} deep, more than the {MAX_PROJECT_FILE_NESTING} a project file may"
            ),
        )]));
    }
    let p: ProjectFile = serde_yaml_ng::from_str(&text).map_err(|e| {
        let line = e.location().map_or(0, |l| l.line() as u32);
        invalid(vec![loc(
            PROJECT_FILE,
            line,
            e.to_string().split(" at line").next().unwrap_or_default(),
        )])
    })?;
    let mut problems = Vec::new();
    if !is_identifier(&p.name) {
        problems.push(loc(
            PROJECT_FILE,
            0,
            format!("name '{}' must be a lowercase identifier", p.name),
        ));
    }
    if let Err(e) = lh_catalog::names::validate_namespace(&p.namespace) {
        problems.push(loc(PROJECT_FILE, 0, e));
    }
    for (name, decl) in &p.parameters {
        if !is_identifier(name) {
            problems.push(loc(
                PROJECT_FILE,
                0,
                format!("parameter name '{name}' must be a lowercase identifier"),
            ));
        }
        if let Some(d) = &decl.default
            && let Err(e) = check_value(name, decl.ty, d)
        {
            problems.push(loc(PROJECT_FILE, 0, e));
        }
        if partitions::PARAMS.contains(&name.as_str()) {
            problems.push(loc(
                PROJECT_FILE,
                0,
                format!("parameter '{name}' is lh's: a partitioned model receives it"),
            ));
        }
    }
    if let Some(Err(e)) = p.partitions.as_ref().map(PartitionsDecl::check) {
        problems.push(loc(PROJECT_FILE, 0, format!("partitions: {e}")));
    }
    if !problems.is_empty() {
        return Err(invalid(problems));
    }
    Ok(p)
}

/// Whether an input's filter is one SQL expression: its parentheses balanced outside
/// quotes, no comment and no statement separator. (It is put between parentheses, and
/// a partition's filter after it: it may not close them.)
pub(super) fn one_expression(f: &str) -> std::result::Result<(), String> {
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    let mut prev = ' ';
    for c in f.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' => quote = Some(c),
                '(' => depth += 1,
                ')' if depth == 0 => return Err("it closes a parenthesis it did not open".into()),
                ')' => depth -= 1,
                ';' => return Err("it holds ';'".into()),
                '-' if prev == '-' => return Err("it holds a comment".into()),
                '*' if prev == '/' => return Err("it holds a comment".into()),
                _ => {}
            },
        }
        prev = c;
    }
    match (quote, depth) {
        (Some(_), _) => Err("a quote is not closed".into()),
        (None, 0) => Ok(()),
        _ => Err("a parenthesis is not closed".into()),
    }
}

pub(super) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

pub(super) fn check_value(
    name: &str,
    ty: ParamType,
    v: &serde_json::Value,
) -> std::result::Result<(), String> {
    let ok = match ty {
        ParamType::Str => v.is_string(),
        ParamType::Int => v.is_i64(),
        ParamType::Float => v.is_number(),
        ParamType::Bool => v.is_boolean(),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("parameter '{name}': {v} is not a {ty:?}").to_lowercase())
    }
}

/// Parameter values: declared defaults, overridden by `--param k=v` strings.
/// The longest value of one parameter, and of a run's parameters together.
pub const MAX_PARAM_BYTES: usize = 16 << 10;
pub const MAX_PARAMS_BYTES: usize = 64 << 10;

pub fn resolve_params(
    project: &ProjectFile,
    given: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, serde_json::Value>> {
    // Values are stored with the run and answered with every listing of it.
    if let Some((name, raw)) = given.iter().find(|(_, v)| v.len() > MAX_PARAM_BYTES) {
        return Err(Error::bad_request(
            Code::InvalidArgument,
            format!(
                "parameter '{name}' is {} bytes long: a parameter's value holds at most {} KiB",
                raw.len(),
                MAX_PARAM_BYTES >> 10
            ),
        ));
    }
    if given.values().map(String::len).sum::<usize>() > MAX_PARAMS_BYTES {
        return Err(Error::bad_request(
            Code::InvalidArgument,
            format!(
                "a run's parameters hold at most {} KiB together",
                MAX_PARAMS_BYTES >> 10
            ),
        ));
    }
    let mut out = BTreeMap::new();
    let mut problems = Vec::new();
    for name in given.keys() {
        if !project.parameters.contains_key(name) {
            let known: Vec<&String> = project.parameters.keys().collect();
            problems.push(format!(
                "unknown parameter '{name}' (the project declares: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known
                        .iter()
                        .map(|k| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ));
        }
    }
    for (name, decl) in &project.parameters {
        let value = match given.get(name) {
            Some(raw) => match decl.ty {
                ParamType::Str => Some(serde_json::Value::String(raw.clone())),
                ParamType::Int => raw.trim().parse::<i64>().ok().map(serde_json::Value::from),
                ParamType::Float => raw.trim().parse::<f64>().ok().map(serde_json::Value::from),
                ParamType::Bool => match raw.trim() {
                    "true" | "1" | "yes" => Some(true.into()),
                    "false" | "0" | "no" => Some(false.into()),
                    _ => None,
                },
            }
            .or_else(|| {
                problems.push(
                    format!("parameter '{name}': '{raw}' is not a {:?}", decl.ty).to_lowercase(),
                );
                None
            }),
            None => decl.default.clone(),
        };
        match value {
            Some(v) => {
                out.insert(name.clone(), v);
            }
            None if given.contains_key(name) => {}
            None => problems.push(format!(
                "parameter '{name}' has no default: give it with --param {name}=VALUE"
            )),
        }
    }
    if !problems.is_empty() {
        return Err(Error::bad_request(
            Code::InvalidParameter,
            problems.join("; "),
        ));
    }
    Ok(out)
}

/// The project's Python and SQL files, relative to `root`, sorted.
pub fn project_files(root: &Path) -> Result<(Vec<String>, Vec<String>)> {
    let mut py = Vec::new();
    let mut sql = Vec::new();
    fn walk(
        root: &Path,
        dir: &Path,
        py: &mut Vec<String>,
        sql: &mut Vec<String>,
    ) -> std::io::Result<()> {
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.')
                || matches!(
                    name.as_str(),
                    "__pycache__" | "venv" | "node_modules" | "target"
                )
            {
                continue;
            }
            let p = e.path();
            if e.file_type()?.is_dir() {
                walk(root, &p, py, sql)?;
            } else if let Ok(rel) = p.strip_prefix(root) {
                let rel = rel.display().to_string();
                if name.ends_with(".py") {
                    py.push(rel);
                } else if name.ends_with(".sql") {
                    sql.push(rel);
                }
            }
        }
        Ok(())
    }
    walk(root, root, &mut py, &mut sql)?;
    py.sort();
    sql.sort();
    Ok((py, sql))
}
