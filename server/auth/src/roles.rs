//! Roles: named sets of grants. A grant gives actions on the refs whose names match a
//! pattern, and, for what touches tables, on the namespaces that match another:
//!
//! ```text
//! read on *                      every ref, every namespace
//! write,run on team-a.*          branches named team-a.<anything>
//! read on main in finance        main's tables of `finance` (and `finance.eu`, ...)
//! merge on main in sales.*       merges into main that change only tables under sales.*
//! ```
//!
//! A pattern is a name in which `*` stands for any run of characters (`/` and `.`
//! included). A namespace pattern covers the namespaces inside the ones it matches.
//! `admin` is granted only on every ref (`admin on *`): it is not scoped. A run's branch
//! (`run/<id>`) holds its target's tables: its writes are the run's (checked against its
//! target), and a grant to read `run/*` reads what every run read.
//!
//! The four built-in roles are grants on every ref and namespace; admins define others
//! (`lh role set`), stored in `lh_roles` and read at each request, so a change takes
//! effect at once on every control plane. An identity's [`Access`] is the union of its
//! roles' grants (a token has one role; an OIDC identity one per mapped group).

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::Utc;
use sqlx::{AnyPool, Row};

use super::{Action, Role};
use crate::error::{Code, Error, Kind, Result};

/// A ref or namespace pattern: literal text, with `*` for any run of characters; or a
/// namespace's own name, matched as it is (a namespace may be called `"*"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    literal: bool,
}

impl Pattern {
    pub const ANY: &'static str = "*";

    fn any() -> Pattern {
        Pattern {
            text: Self::ANY.into(),
            literal: false,
        }
    }

    /// A ref pattern (`team-a.*`), or a pattern of `what` names spelled as refs are.
    pub fn parse(text: &str, what: &str) -> Result<Pattern> {
        let ok = !text.is_empty()
            && text.len() <= 256
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | '*'));
        if !ok {
            return Err(Error::bad_request(
                Code::InvalidArgument,
                format!(
                    "invalid {what} pattern '{}': use letters, digits, '.', '_', '-', '/' and '*' for any run of characters",
                    text.escape_debug()
                ),
            ));
        }
        Ok(Pattern {
            text: text.to_string(),
            literal: false,
        })
    }

    /// A namespace pattern: a namespace spelled as lh spells names (levels joined by
    /// dots, a level other than a lowercase identifier double-quoted: `"Sales 2026".eu`),
    /// with `*` for any run of characters (`sales.*`, `"Sales *"`). A spelling lh never
    /// writes matches nothing, so it is refused (`"fin"` is written fin).
    pub fn namespace(text: &str) -> Result<Pattern> {
        let bad = |why: String| {
            Error::bad_request(
                Code::InvalidArgument,
                format!("invalid namespace pattern '{}': {why}", text.escape_debug()),
            )
            .with_hint(
                "a namespace pattern is a namespace as lh spells it, '*' for any run of \
                 characters: sales, sales.*, \"Sales 2026\", \"my-db\".*",
            )
        };
        if text.is_empty() || text.len() > 256 {
            return Err(bad("it is empty or longer than 256 bytes".into()));
        }
        if text == Self::ANY {
            return Ok(Self::any());
        }
        // As a name, each `*` standing for a letter of a plain level.
        let as_name = text.replace('*', "x");
        let levels = lh_catalog::names::levels(&as_name).map_err(|e| {
            bad(e
                .to_string()
                .trim_start_matches(&format!("invalid name '{as_name}': "))
                .to_string())
        })?;
        let spelled = lh_catalog::names::join_levels(&levels);
        if spelled != as_name {
            let mut why = "lh quotes a level only when it is no lowercase identifier".to_string();
            if let Ok(l) = lh_catalog::names::levels(text) {
                let written = lh_catalog::names::join_levels(&l);
                if written != text && !written.contains('*') {
                    why.push_str(&format!(": write {written}"));
                }
            }
            return Err(bad(why));
        }
        Ok(Pattern {
            text: text.to_string(),
            literal: false,
        })
    }

    /// Namespace `name` itself, `*` and all.
    pub fn literal(name: &str) -> Pattern {
        Pattern {
            text: name.to_string(),
            literal: true,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn is_any(&self) -> bool {
        !self.literal && self.text == Self::ANY
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        match self.literal {
            true => self.text == name,
            false => glob(self.text.as_bytes(), name.as_bytes()),
        }
    }

    /// Whether namespace `ns` or a namespace it is inside matches. A namespace's own
    /// name covers that namespace only: history's ceilings let a namespace new since a
    /// fork be read, never one inside it that the limited ref held (the forty-first
    /// review: a table added to `hist` on a branch lifted the limit on main's
    /// `hist.inner`).
    pub fn covers_namespace(&self, ns: &str) -> bool {
        if self.matches(ns) {
            return true;
        }
        if self.literal {
            return false;
        }
        let levels = lh_catalog::names::levels(ns).unwrap_or_default();
        (1..levels.len()).any(|n| self.matches(&lh_catalog::names::join_levels(&levels[..n])))
    }
}

/// `*` matches any run of bytes; everything else itself. Iterative, with one
/// backtracking point: linear in practice, never exponential.
pub fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

/// Actions on the refs matching one pattern and the namespaces matching another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub actions: BTreeSet<Action>,
    pub refs: Pattern,
    pub namespaces: Pattern,
}

impl Grant {
    /// Parses `ACTIONS on REFS [in NAMESPACES]`, e.g. `write,run on team-a.* in sales`.
    pub fn parse(text: &str) -> Result<Grant> {
        let bad = |why: String| {
            Error::bad_request(
                Code::InvalidArgument,
                format!("invalid grant '{}': {why}", text.escape_debug()),
            )
            .with_hint(
                "a grant reads 'ACTIONS on REFS [in NAMESPACES]', e.g. 'read on *' or \
                 'write,run on team-a.* in sales'; the actions are read, write, run, merge, admin",
            )
        };
        // The namespace pattern is the rest of the text: a quoted level may hold spaces.
        let (words, rest) = first_words(text, 4);
        let (actions, refs, namespaces) = match (words.as_slice(), rest) {
            ([a, "on", r], "") => (*a, *r, Pattern::ANY),
            ([a, "on", r, "in"], n) if !n.is_empty() => (*a, *r, n),
            _ => return Err(bad("expected 'ACTIONS on REFS [in NAMESPACES]'".into())),
        };
        let mut set = BTreeSet::new();
        for a in actions.split(',') {
            set.insert(match a {
                "read" => Action::Read,
                "write" => Action::Write,
                "run" => Action::Run,
                "merge" => Action::Merge,
                "admin" => Action::Admin,
                other => return Err(bad(format!("unknown action '{}'", other.escape_debug()))),
            });
        }
        let grant = Grant {
            actions: set,
            refs: Pattern::parse(refs, "ref")?,
            namespaces: Pattern::namespace(namespaces)?,
        };
        if grant.actions.contains(&Action::Admin)
            && !(grant.refs.is_any() && grant.namespaces.is_any())
        {
            return Err(bad(
                "'admin' is granted on every ref only: 'admin on *'".into()
            ));
        }
        Ok(grant)
    }

    fn every(actions: &[Action]) -> Grant {
        Grant {
            actions: actions.iter().copied().collect(),
            refs: Pattern::any(),
            namespaces: Pattern::any(),
        }
    }

    pub fn text(&self) -> String {
        let actions: Vec<&str> = self.actions.iter().map(|a| a.as_str()).collect();
        let mut t = format!("{} on {}", actions.join(","), self.refs.as_str());
        if !self.namespaces.is_any() {
            t.push_str(&format!(" in {}", self.namespaces.as_str()));
        }
        t
    }
}

/// The first `n` words of `text` (fewer if it has fewer) and the rest, trimmed.
fn first_words(text: &str, n: usize) -> (Vec<&str>, &str) {
    let mut rest = text.trim();
    let mut words = Vec::new();
    while words.len() < n && !rest.is_empty() {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        words.push(&rest[..end]);
        rest = rest[end..].trim_start();
    }
    (words, rest)
}

/// What an identity may do: the union of its roles' grants.
#[derive(Debug, Clone)]
pub struct Access {
    /// The roles, as shown (`writer`, `team-a+auditors`).
    pub name: String,
    /// The roles' names, to read them again (a run publishes with its starter's
    /// grants as they are then).
    pub roles: Vec<String>,
    pub grants: Vec<Grant>,
    /// Limits on reading that history puts on this access for one request
    /// (`auth::history::scoped`): a namespace is readable only when, besides a grant,
    /// each of these lists has a pattern covering it. Empty: none.
    pub ceilings: Vec<Vec<Pattern>>,
    /// The commit (full hex hash) those limits were found for: the request reads that
    /// commit, never its ref expression again (`Identity::reads`), so a ref moved in
    /// between cannot hand it a commit its limits were not found for.
    pub ceilings_at: Option<String>,
}

impl Access {
    pub fn builtin(role: Role) -> Access {
        use Action::*;
        let actions: &[Action] = match role {
            Role::Reader => &[Read],
            Role::Writer => &[Read, Write, Run],
            Role::Maintainer => &[Read, Write, Run, Merge],
            Role::Admin => &[Read, Write, Run, Merge, Admin],
        };
        Access {
            name: role.as_str().to_string(),
            roles: vec![role.as_str().to_string()],
            grants: vec![Grant::every(actions)],
            ceilings: Vec::new(),
            ceilings_at: None,
        }
    }

    /// Whether some grant gives `action` somewhere (what the guard checks a route for).
    pub fn anywhere(&self, action: Action) -> bool {
        self.grants.iter().any(|g| g.actions.contains(&action))
    }

    /// Whether `action` is granted on ref `name` (in some namespace).
    pub fn on_ref(&self, action: Action, name: &str) -> bool {
        self.grants
            .iter()
            .any(|g| g.actions.contains(&action) && g.refs.matches(name))
    }

    /// Whether `action` is granted on ref `name` in every namespace (what deleting a
    /// branch, which takes all its tables away, needs).
    pub fn on_ref_every_namespace(&self, action: Action, name: &str) -> bool {
        self.under_ceilings(action, None)
            && self.grants.iter().any(|g| {
                g.actions.contains(&action) && g.refs.matches(name) && g.namespaces.is_any()
            })
    }

    /// Whether the ceilings history put on this access let `action` reach namespace
    /// `ns` (`None`: every namespace). They bound reading only.
    fn under_ceilings(&self, action: Action, ns: Option<&str>) -> bool {
        action != Action::Read
            || self.ceilings.iter().all(|c| match ns {
                Some(ns) => c.iter().any(|p| p.covers_namespace(ns)),
                None => c.iter().any(Pattern::is_any),
            })
    }

    /// The namespace patterns of the grants giving `action` on ref `name`.
    pub fn namespaces_on(&self, action: Action, name: Option<&str>) -> Vec<Pattern> {
        self.grants
            .iter()
            .filter(|g| {
                g.actions.contains(&action)
                    && match name {
                        Some(n) => g.refs.matches(n),
                        None => g.refs.is_any(),
                    }
            })
            .map(|g| g.namespaces.clone())
            .collect()
    }

    /// Whether `action` is granted on every ref (what reading a bare commit needs).
    pub fn on_every_ref(&self, action: Action) -> bool {
        self.grants
            .iter()
            .any(|g| g.actions.contains(&action) && g.refs.is_any())
    }

    /// Whether `action` is granted on namespace `ns` of ref `name`.
    pub fn on_namespace(&self, action: Action, name: &str, ns: &str) -> bool {
        self.under_ceilings(action, Some(ns))
            && self.grants.iter().any(|g| {
                g.actions.contains(&action)
                    && g.refs.matches(name)
                    && g.namespaces.covers_namespace(ns)
            })
    }

    /// Whether `action` is granted on namespace `ns` of every ref.
    pub fn on_every_ref_namespace(&self, action: Action, ns: &str) -> bool {
        self.under_ceilings(action, Some(ns))
            && self.grants.iter().any(|g| {
                g.actions.contains(&action) && g.refs.is_any() && g.namespaces.covers_namespace(ns)
            })
    }

    /// Whether `action` is granted on table `table` (`ns.name`) of ref `name`.
    pub fn on_table(&self, action: Action, name: &str, table: &str) -> bool {
        self.on_namespace(action, name, namespace_of(table))
    }

    /// Whether this access has everything `role` has, everywhere.
    pub fn covers(&self, role: Role) -> bool {
        Access::builtin(role).grants[0].actions.iter().all(|a| {
            self.under_ceilings(*a, None)
                && self
                    .grants
                    .iter()
                    .any(|g| g.actions.contains(a) && g.refs.is_any() && g.namespaces.is_any())
        })
    }
}

/// The namespace of a table name (`sales.eu.orders` is in `sales.eu`).
pub fn namespace_of(table: &str) -> &str {
    lh_catalog::names::split_table(table).map_or("", |(ns, _)| ns)
}

/// The refusal of an action, saying which permission is missing. It names only what
/// the caller asked for, so it tells nothing about whether that exists.
pub fn refused(user: &str, access: &Access, action: Action, what: &str, on: &str) -> Error {
    Error::new(
        Kind::Forbidden,
        Code::PermissionDenied,
        format!(
            "{what} needs the '{}' permission{on}, which user '{user}' (role {}) does not have",
            action.as_str(),
            access.name
        ),
    )
    .with_hint("ask an admin for a role that grants it")
    .with_remedy(lh_api::remedy::Remedy::ListRoles)
}

/// The roles admins define, next to the catalog.
pub struct Roles {
    pool: AnyPool,
}

fn db(e: sqlx::Error) -> Error {
    crate::db::failed("role storage", e)
}

fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_'))
        && name.starts_with(|c: char| c.is_ascii_lowercase());
    if !ok {
        return Err(Error::bad_request(
            Code::InvalidArgument,
            format!(
                "invalid role name '{}': a lowercase letter, then lowercase letters, digits, '-' and '_' (at most 64)",
                name.escape_debug()
            ),
        ));
    }
    Ok(())
}

/// A role as `lh role ls` shows it: built in or defined, and its grants in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleDef {
    pub name: String,
    /// One of the built-in roles (not changeable).
    pub builtin: bool,
    pub grants: Vec<String>,
    /// Who defined it last, and when (none for a built-in role).
    pub updated: Option<crate::Updated>,
}

impl Roles {
    pub fn new(pool: AnyPool) -> Roles {
        Roles { pool }
    }

    /// The access of the named roles together; an unknown name is refused.
    pub async fn access(&self, names: &[String]) -> Result<Arc<Access>> {
        if let [one] = names
            && let Ok(role) = Role::parse(one)
        {
            return Ok(Arc::new(Access::builtin(role)));
        }
        let mut access = Access {
            name: names.join("+"),
            roles: names.to_vec(),
            grants: Vec::new(),
            ceilings: Vec::new(),
            ceilings_at: None,
        };
        for name in names {
            match self.get(name).await? {
                Some(role) => access.grants.extend(role.grants),
                None => {
                    return Err(Error::new(
                        Kind::Forbidden,
                        Code::PermissionDenied,
                        format!("role '{name}' does not exist (any more)"),
                    )
                    .with_remedy(lh_api::remedy::Remedy::DefineRole));
                }
            }
        }
        Ok(Arc::new(access))
    }

    /// A role, built in or defined.
    pub async fn get(&self, name: &str) -> Result<Option<Access>> {
        if let Ok(role) = Role::parse(name) {
            return Ok(Some(Access::builtin(role)));
        }
        let row = sqlx::query("SELECT grants FROM lh_roles WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(db)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let texts: Vec<String> =
            serde_json::from_str(&row.try_get::<String, _>("grants").map_err(db)?)
                .map_err(|e| Error::internal(format!("role '{name}' has corrupt grants: {e}")))?;
        Ok(Some(Access {
            name: name.to_string(),
            roles: vec![name.to_string()],
            grants: texts
                .iter()
                .map(|t| Grant::parse(t))
                .collect::<Result<_>>()?,
            ceilings: Vec::new(),
            ceilings_at: None,
        }))
    }

    /// Defines a role, or replaces its grants.
    pub async fn set(&self, name: &str, grants: &[String], by: &str) -> Result<RoleDef> {
        check_name(name)?;
        if Role::parse(name).is_ok() {
            return Err(Error::bad_request(
                Code::InvalidArgument,
                format!("'{name}' is a built-in role: it cannot be redefined"),
            ));
        }
        if grants.is_empty() {
            return Err(Error::bad_request(
                Code::InvalidArgument,
                "a role needs at least one grant (--grant 'ACTIONS on REFS [in NAMESPACES]')",
            ));
        }
        let parsed: Vec<Grant> = grants
            .iter()
            .map(|t| Grant::parse(t))
            .collect::<Result<_>>()?;
        let texts: Vec<String> = parsed.iter().map(Grant::text).collect();
        let now = Utc::now().timestamp_millis();
        sqlx::query(
            "INSERT INTO lh_roles (name, grants, updated_by, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (name) DO UPDATE SET grants = excluded.grants, \
             updated_by = excluded.updated_by, updated_at = excluded.updated_at",
        )
        .bind(name)
        .bind(serde_json::to_string(&texts).map_err(|e| Error::internal(e.to_string()))?)
        .bind(by)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(RoleDef {
            name: name.to_string(),
            builtin: false,
            grants: texts,
            updated: Some(crate::Updated::new(by.to_string(), now)),
        })
    }

    /// Removes a role no live token has.
    pub async fn remove(&self, name: &str) -> Result<()> {
        if Role::parse(name).is_ok() {
            return Err(Error::bad_request(
                Code::InvalidArgument,
                format!("'{name}' is a built-in role: it cannot be removed"),
            ));
        }
        let now = Utc::now().timestamp_millis();
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM lh_tokens WHERE role = $1 AND revoked_at IS NULL \
             AND (expires_at IS NULL OR expires_at > $2)",
        )
        .bind(name)
        .bind(now)
        .fetch_one(&self.pool)
        .await
        .map_err(db)?;
        let n: i64 = row.try_get("n").map_err(db)?;
        if n > 0 {
            return Err(Error::new(
                Kind::Conflict,
                Code::NotAllowed,
                format!("role '{name}' is the role of {n} live token(s): revoke them first"),
            )
            .with_remedy(lh_api::remedy::Remedy::ListTokens));
        }
        crate::db::delete_named(&self.pool, "lh_roles", name, || {
            Error::not_found(Code::RoleNotFound, format!("no role '{name}'"))
        })
        .await
    }

    /// The built-in roles, then the defined ones by name.
    pub async fn list(&self) -> Result<Vec<RoleDef>> {
        let mut out: Vec<RoleDef> = Role::ALL
            .into_iter()
            .map(|r| RoleDef {
                name: r.as_str().to_string(),
                builtin: true,
                grants: Access::builtin(r).grants.iter().map(Grant::text).collect(),
                updated: None,
            })
            .collect();
        let rows =
            sqlx::query("SELECT name, grants, updated_by, updated_at FROM lh_roles ORDER BY name")
                .fetch_all(&self.pool)
                .await
                .map_err(db)?;
        for r in rows {
            let grants: String = r.try_get("grants").map_err(db)?;
            let at: i64 = r.try_get("updated_at").map_err(db)?;
            out.push(RoleDef {
                name: r.try_get("name").map_err(db)?,
                builtin: false,
                grants: serde_json::from_str(&grants)
                    .map_err(|e| Error::internal(format!("corrupt role grants: {e}")))?,
                updated: Some(crate::Updated::new(
                    r.try_get("updated_by").map_err(db)?,
                    at,
                )),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_names() {
        let p = |s: &str| Pattern::parse(s, "ref").unwrap();
        assert!(p("*").matches("main"));
        assert!(p("*").matches(""));
        assert!(p("main").matches("main"));
        assert!(!p("main").matches("main2"));
        assert!(p("team-a.*").matches("team-a.fix"));
        assert!(!p("team-a.*").matches("team-b.fix"));
        assert!(!p("team-a.*").matches("team-a"));
        assert!(p("run/*").matches("run/0123"));
        assert!(p("*-dev").matches("alice-dev"));
        assert!(p("a*b*c").matches("axxbyyc"));
        assert!(!p("a*b*c").matches("axxbyy"));
        // No exponential backtracking.
        let long = "a".repeat(200);
        assert!(!p("*a*a*a*a*a*a*a*a*b").matches(&long));
        assert!(Pattern::parse("ma in", "ref").is_err());
        assert!(Pattern::parse("", "ref").is_err());
    }

    #[test]
    fn a_namespace_named_like_a_pattern_is_matched_as_it_is() {
        let p = Pattern::literal("\"*\"");
        assert!(p.matches("\"*\""));
        assert!(!p.matches("\"Sales 2026\""));
        assert!(!p.covers_namespace("\"*\".eu"));
        assert!(!Pattern::literal("hist").covers_namespace("hist.inner"));
        assert!(!p.is_any());
        assert!(!Pattern::literal("*").is_any());
    }

    #[test]
    fn a_namespace_pattern_covers_the_namespaces_inside() {
        let g = Grant::parse("write on * in sales").unwrap();
        let a = Access {
            name: "t".into(),
            roles: vec![],
            grants: vec![g],
            ceilings: Vec::new(),
            ceilings_at: None,
        };
        assert!(a.on_table(Action::Write, "main", "sales.orders"));
        assert!(a.on_table(Action::Write, "main", "sales.eu.orders"));
        assert!(!a.on_table(Action::Write, "main", "salesforce.orders"));
        assert!(!a.on_table(Action::Write, "main", "finance.ledger"));
        assert!(!a.on_table(Action::Read, "main", "sales.orders"));
    }

    #[test]
    fn grants_parse_and_print_back() {
        for text in [
            "read on *",
            "read,write,run on team-a.*",
            "merge on main in sales.*",
            "admin on *",
            "read on main in \"Sales 2026\"",
            "read on main in \"my-db\".*",
            "read on * in \"Sales *\".eu",
        ] {
            assert_eq!(Grant::parse(text).unwrap().text(), text);
        }
        // A spelling lh never writes would match nothing: refused, with the one it writes.
        let err = Grant::parse("read on * in \"fin\"").unwrap_err();
        assert!(err.to_string().contains("write fin"), "{err}");
        let g = Grant::parse("read on * in \"Sales 2026\"").unwrap();
        assert!(g.namespaces.covers_namespace("\"Sales 2026\".eu"));
        assert!(!g.namespaces.covers_namespace("\"Sales 2026.eu\""));
        for bad in [
            "read",
            "read main",
            "fly on *",
            "read on * in",
            "admin on main",
            "admin on * in sales",
            "read on ma'in",
            "read on \"main\"",
            "read on * in \"fin\"",
            "read on * in FIN",
            "read on * in sales eu",
            "read on * in sales.\"eu\"",
            "read on * in \"a\u{1}\"",
            "read on * in \"open",
        ] {
            assert!(Grant::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn scoped_access_answers_per_ref_and_namespace() {
        let a = Access {
            name: "team-a".into(),
            roles: vec![],
            grants: [
                "read on *",
                "write,run on team-a.*",
                "merge on main in sales",
            ]
            .iter()
            .map(|t| Grant::parse(t).unwrap())
            .collect(),
            ceilings: Vec::new(),
            ceilings_at: None,
        };
        assert!(a.anywhere(Action::Merge));
        assert!(!a.anywhere(Action::Admin));
        assert!(a.on_ref(Action::Write, "team-a.x"));
        assert!(!a.on_ref(Action::Write, "main"));
        assert!(a.on_table(Action::Merge, "main", "sales.orders"));
        assert!(!a.on_table(Action::Merge, "main", "finance.ledger"));
        assert!(a.on_every_ref(Action::Read));
        assert!(!a.on_every_ref(Action::Write));
        assert!(a.covers(Role::Reader));
        assert!(!a.covers(Role::Writer));
        assert!(Access::builtin(Role::Admin).covers(Role::Maintainer));
    }
}
