//! Random histories of branch, commit, merge, assign and delete, run against the
//! catalog and against a plain in-memory model of the semantics (a commit graph of
//! `BTreeMap`s). After every step, every ref must show exactly the model's tables.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use lh_catalog::{Catalog, CommitId, ErrorKind, MergeKind, MergeOptions, RefKind, TableOp};
use proptest::prelude::*;

use crate::common::{Backend, TestDb, meta, ptr};

type Tables = BTreeMap<String, u64>;

#[derive(Debug, Clone)]
enum Op {
    Commit {
        branch: usize,
        edits: Vec<(u8, Option<u8>)>,
        stale: bool,
    },
    Branch {
        from: usize,
    },
    Tag {
        from: usize,
    },
    Merge {
        from: usize,
        into: usize,
        no_ff: bool,
    },
    Assign {
        branch: usize,
        to: usize,
    },
    Delete {
        branch: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (any::<usize>(), prop::collection::vec((0u8..6, prop::option::weighted(0.8, 0u8..4)), 1..4), prop::bool::weighted(0.15))
            .prop_map(|(branch, edits, stale)| Op::Commit { branch, edits, stale }),
        2 => any::<usize>().prop_map(|from| Op::Branch { from }),
        1 => any::<usize>().prop_map(|from| Op::Tag { from }),
        3 => (any::<usize>(), any::<usize>(), prop::bool::weighted(0.2)).prop_map(|(from, into, no_ff)| Op::Merge { from, into, no_ff }),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(branch, to)| Op::Assign { branch, to }),
        1 => any::<usize>().prop_map(|branch| Op::Delete { branch }),
    ]
}

/// The model: commits (tables and parents) and refs naming them.
struct Model {
    commits: Vec<(Tables, Vec<usize>)>,
    refs: BTreeMap<String, (RefKind, usize)>,
    ids: Vec<CommitId>,
    by_id: HashMap<CommitId, usize>,
    next_value: u64,
    next_name: usize,
}

impl Model {
    fn ancestors(&self, c: usize) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        let mut stack = vec![c];
        while let Some(x) = stack.pop() {
            if out.insert(x) {
                stack.extend(self.commits[x].1.iter().copied());
            }
        }
        out
    }

    /// The common ancestors that no other common ancestor descends from.
    fn best_bases(&self, a: usize, b: usize) -> Vec<usize> {
        let common: BTreeSet<usize> = self
            .ancestors(a)
            .intersection(&self.ancestors(b))
            .copied()
            .collect();
        common
            .iter()
            .copied()
            .filter(|&c| {
                !common
                    .iter()
                    .any(|&d| d != c && self.ancestors(d).contains(&c))
            })
            .collect()
    }

    fn register(&mut self, id: CommitId, tables: Tables, parents: Vec<usize>) -> usize {
        if let Some(&i) = self.by_id.get(&id) {
            return i;
        }
        self.commits.push((tables, parents));
        self.ids.push(id);
        self.by_id.insert(id, self.commits.len() - 1);
        self.commits.len() - 1
    }

    fn branches(&self) -> Vec<String> {
        self.refs
            .iter()
            .filter(|(_, (k, _))| *k == RefKind::Branch)
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn names(&self) -> Vec<String> {
        self.refs.keys().cloned().collect()
    }
}

fn table(t: u8) -> String {
    format!("ns{}.t{t}", t % 2)
}

/// The model's answer to merging `src` into `tgt` with base `base`: the new tables, or
/// the set of conflicting tables.
fn model_merge(m: &Model, base: usize, src: usize, tgt: usize) -> Result<Tables, BTreeSet<String>> {
    let (b, s, t) = (&m.commits[base].0, &m.commits[src].0, &m.commits[tgt].0);
    let mut out = t.clone();
    let mut conflicts = BTreeSet::new();
    let keys: BTreeSet<&String> = b.keys().chain(s.keys()).collect();
    for k in keys {
        let (bv, sv, tv) = (b.get(k), s.get(k), t.get(k));
        if bv == sv {
            continue;
        }
        if tv == bv {
            match sv {
                Some(v) => out.insert(k.clone(), *v),
                None => out.remove(k),
            };
        } else if tv != sv {
            conflicts.insert(k.clone());
        }
    }
    if conflicts.is_empty() {
        Ok(out)
    } else {
        Err(conflicts)
    }
}

async fn run(db: &TestDb, ops: Vec<Op>) {
    let cat: Catalog = db.open().await;
    let root = cat.resolve("main").await.unwrap().commit.id;
    let mut m = Model {
        commits: vec![],
        refs: BTreeMap::new(),
        ids: vec![],
        by_id: HashMap::new(),
        next_value: 1,
        next_name: 0,
    };
    let r = m.register(root, Tables::new(), vec![]);
    m.refs.insert("main".into(), (RefKind::Branch, r));

    for (step, op) in ops.into_iter().enumerate() {
        let names = m.names();
        let branches = m.branches();
        match op {
            Op::Commit {
                branch,
                edits,
                stale,
            } => {
                let name = &branches[branch % branches.len()];
                let head = m.refs[name].1;
                let mut tables = m.commits[head].0.clone();
                let mut ops = vec![];
                let mut seen = BTreeSet::new();
                for (t, v) in edits {
                    let tn = table(t);
                    if !seen.insert(tn.clone()) {
                        continue;
                    }
                    let current = tables.get(&tn).copied();
                    let expected = if stale {
                        Some(current.unwrap_or(0) + 10_000)
                    } else {
                        current
                    };
                    match (v, current) {
                        (Some(_), _) | (None, None) => {
                            let new = m.next_value;
                            m.next_value += 1;
                            ops.push(TableOp::Put {
                                table: tn.clone(),
                                expected: expected.map(ptr),
                                pointer: ptr(new),
                            });
                            tables.insert(tn, new);
                        }
                        (None, Some(_)) => {
                            ops.push(TableOp::Delete {
                                table: tn.clone(),
                                expected: ptr(expected.expect("some")),
                            });
                            tables.remove(&tn);
                        }
                    }
                }
                let result = cat.commit(name, ops, meta(&format!("step {step}"))).await;
                if stale {
                    let e = result.expect_err("a stale expectation conflicts");
                    assert_eq!(e.kind(), ErrorKind::Conflict);
                } else {
                    let c = result.unwrap();
                    let i = m.register(c.id, tables, vec![head]);
                    m.refs.insert(name.clone(), (RefKind::Branch, i));
                }
            }
            Op::Branch { from } | Op::Tag { from } => {
                let kind = if matches!(op, Op::Branch { .. }) {
                    RefKind::Branch
                } else {
                    RefKind::Tag
                };
                let src = &names[from % names.len()];
                let name = format!("r{}", m.next_name);
                m.next_name += 1;
                let created = match kind {
                    RefKind::Branch => cat.create_branch(&name, src).await.unwrap(),
                    RefKind::Tag => cat.create_tag(&name, src).await.unwrap(),
                };
                assert_eq!(created.head, m.ids[m.refs[src].1]);
                let c = m.refs[src].1;
                m.refs.insert(name, (kind, c));
            }
            Op::Merge { from, into, no_ff } => {
                let src_name = &names[from % names.len()];
                let tgt_name = &branches[into % branches.len()];
                let (src, tgt) = (m.refs[src_name].1, m.refs[tgt_name].1);
                let opts = MergeOptions {
                    no_fast_forward: no_ff,
                    ..Default::default()
                };
                let result = cat.merge(src_name, tgt_name, opts).await;
                let bases = m.best_bases(src, tgt);
                if bases.contains(&src) {
                    assert_eq!(result.unwrap().kind, MergeKind::UpToDate);
                    continue;
                }
                if bases.contains(&tgt) && !no_ff {
                    let out = result.unwrap();
                    assert_eq!(out.kind, MergeKind::FastForward);
                    m.refs.insert(tgt_name.clone(), (RefKind::Branch, src));
                    continue;
                }
                // With several best bases (criss-cross), the catalog picks one of them.
                let outcomes: Vec<_> = bases
                    .iter()
                    .map(|&b| model_merge(&m, b, src, tgt))
                    .collect();
                match result {
                    Ok(out) => {
                        assert_eq!(out.kind, MergeKind::MergeCommit);
                        let real: Tables = cat
                            .list_tables(tgt_name, None)
                            .await
                            .unwrap()
                            .into_iter()
                            .map(|e| (e.name, e.pointer.snapshot_id.unwrap() as u64))
                            .collect();
                        assert!(
                            outcomes.iter().any(|o| o.as_ref() == Ok(&real)),
                            "step {step}: merge gave {real:?}, model {outcomes:?}"
                        );
                        let i = m.register(out.head, real, vec![tgt, src]);
                        m.refs.insert(tgt_name.clone(), (RefKind::Branch, i));
                    }
                    Err(e) => {
                        assert_eq!(e.kind(), ErrorKind::Conflict, "step {step}: {e}");
                        let got: BTreeSet<String> =
                            e.conflicts().iter().map(|c| c.table.clone()).collect();
                        assert!(
                            outcomes.iter().any(|o| o.as_ref().err() == Some(&got)),
                            "step {step}: conflicts {got:?}, model {outcomes:?}"
                        );
                    }
                }
            }
            Op::Assign { branch, to } => {
                let name = &branches[branch % branches.len()];
                let target = &names[to % names.len()];
                let expected = m.ids[m.refs[name].1];
                cat.assign_branch(name, expected, target).await.unwrap();
                let c = m.refs[target].1;
                m.refs.insert(name.clone(), (RefKind::Branch, c));
            }
            Op::Delete { branch } => {
                let name = branches[branch % branches.len()].clone();
                let result = cat.delete_branch(&name, None).await;
                if name == "main" {
                    assert_eq!(result.unwrap_err().kind(), ErrorKind::NotAllowed);
                } else {
                    result.unwrap();
                    m.refs.remove(&name);
                }
            }
        }
        // Every ref matches the model.
        let real_refs = cat.list_refs().await.unwrap();
        assert_eq!(real_refs.len(), m.refs.len(), "step {step}");
        for r in real_refs {
            let (kind, c) = m.refs[&r.name];
            assert_eq!(r.kind, kind);
            assert_eq!(r.head, m.ids[c], "step {step}: ref {}", r.name);
            let real: Tables = cat
                .list_tables(&r.name, None)
                .await
                .unwrap()
                .into_iter()
                .map(|e| (e.name, e.pointer.snapshot_id.unwrap() as u64))
                .collect();
            assert_eq!(real, m.commits[c].0, "step {step}: tables of {}", r.name);
        }
    }
    cat.check_integrity().await.unwrap();
}

fn check(backend: Backend, cases: u32) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in prop::collection::vec(op(), 1..40))| {
        rt.block_on(async {
            let db = TestDb::new(backend).await;
            run(&db, ops).await;
        });
    });
}

#[test]
fn random_histories_match_the_model_sqlite() {
    check(Backend::Sqlite, 64);
}

#[test]
fn random_histories_match_the_model_postgres() {
    check(Backend::Postgres, 32);
}
