//! Every catalog operation, its results and its errors, on both backends.

use lh_catalog::{
    Catalog, CommitMeta, DiffKind, ErrorKind, LogQuery, MergeKind, MergeOptions, RefKind, TableOp,
};

use crate::both_backends;
use crate::common::{TestDb, del, meta, ptr, put};

both_backends!(
    a_new_catalog_has_main_with_an_empty_root,
    commits_create_update_and_delete_tables,
    branches_are_isolated_and_merge_back,
    merge_conflicts_list_every_table_and_change_nothing,
    a_prepared_merge_moves_no_ref_until_assigned,
    ref_expressions_resolve_hashes_and_times,
    ambiguous_hash_prefixes_are_refused,
    tags_do_not_move,
    assign_resets_a_branch_only_from_the_expected_head,
    deleting_branches,
    log_pages_and_property_filters,
    invalid_names_are_refused_and_change_nothing,
    commit_conflicts_name_the_tables,
    every_metadata_location_ever_stored_is_listed,
);

async fn a_new_catalog_has_main_with_an_empty_root(db: &TestDb) {
    let cat = db.open().await;
    let refs = cat.list_refs().await.unwrap();
    assert_eq!(refs.len(), 1);
    assert_eq!(
        (refs[0].name.as_str(), refs[0].kind),
        ("main", RefKind::Branch)
    );
    let root = cat.resolve("main").await.unwrap().commit;
    assert!(root.parents.is_empty());
    assert!(cat.list_tables("main", None).await.unwrap().is_empty());
    // Opening again (a second server, a restart) keeps the same root.
    let again = db.open().await;
    assert_eq!(again.resolve("main").await.unwrap().commit.id, root.id);
    assert_eq!(cat.check_integrity().await.unwrap().commits, 1);
}

async fn commits_create_update_and_delete_tables(db: &TestDb) {
    let cat = db.open().await;
    let c1 = cat
        .commit(
            "main",
            vec![
                put("raw.orders", None, 1),
                put("raw.customers", None, 2),
                put("analytics.daily.sales", None, 3),
            ],
            meta("load raw"),
        )
        .await
        .unwrap();
    assert_eq!(c1.parents.len(), 1);
    assert_eq!(cat.get_table("main", "raw.orders").await.unwrap(), ptr(1));
    let names = |v: Vec<lh_catalog::TableEntry>| v.into_iter().map(|e| e.name).collect::<Vec<_>>();
    assert_eq!(
        names(cat.list_tables("main", None).await.unwrap()),
        ["analytics.daily.sales", "raw.customers", "raw.orders"]
    );
    assert_eq!(
        names(cat.list_tables("main", Some("raw")).await.unwrap()),
        ["raw.customers", "raw.orders"]
    );
    assert_eq!(
        names(cat.list_tables("main", Some("analytics")).await.unwrap()),
        ["analytics.daily.sales"]
    );
    assert!(
        cat.list_tables("main", Some("ra"))
            .await
            .unwrap()
            .is_empty()
    );

    let c2 = cat
        .commit(
            "main",
            vec![put("raw.orders", Some(1), 4), del("raw.customers", 2)],
            meta("change"),
        )
        .await
        .unwrap();
    assert_eq!(c2.parents, vec![c1.id]);
    assert_eq!(cat.get_table("main", "raw.orders").await.unwrap(), ptr(4));
    let err = cat.get_table("main", "raw.customers").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TableNotFound);
    assert_eq!(err.to_string(), "table 'raw.customers' not found at 'main'");
    // The old commit still holds the old state.
    let at_c1 = format!("@{}", c1.id);
    assert_eq!(
        cat.get_table(&at_c1, "raw.customers").await.unwrap(),
        ptr(2)
    );

    let diff = cat.diff(&at_c1, "main").await.unwrap();
    let summary: Vec<_> = diff
        .iter()
        .map(|d| (d.table.as_str(), d.change()))
        .collect();
    assert_eq!(
        summary,
        [
            ("raw.customers", DiffKind::Removed),
            ("raw.orders", DiffKind::Changed)
        ]
    );
    assert_eq!(diff[1].from, Some(ptr(1)));
    assert_eq!(diff[1].to, Some(ptr(4)));

    // Bad commits: empty, or a table twice.
    let e = cat
        .commit("main", vec![], meta("nothing"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let e = cat
        .commit(
            "main",
            vec![put("a.b", None, 1), put("a.b", None, 2)],
            meta("twice"),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(cat.resolve("main").await.unwrap().commit.id, c2.id);
}

async fn branches_are_isolated_and_merge_back(db: &TestDb) {
    let cat = db.open().await;
    let base = cat
        .commit(
            "main",
            vec![put("raw.a", None, 1), put("raw.b", None, 2)],
            meta("base"),
        )
        .await
        .unwrap();
    let dev = cat.create_branch("alice.dev", "main").await.unwrap();
    assert_eq!(dev.head, base.id, "a branch starts at its source, no copy");
    cat.commit(
        "alice.dev",
        vec![put("raw.a", Some(1), 10), put("raw.new", None, 11)],
        meta("on dev"),
    )
    .await
    .unwrap();
    // Invisible on main.
    assert_eq!(cat.get_table("main", "raw.a").await.unwrap(), ptr(1));
    assert_eq!(
        cat.get_table("main", "raw.new").await.unwrap_err().kind(),
        ErrorKind::TableNotFound
    );
    let diff = cat.diff("main", "alice.dev").await.unwrap();
    assert_eq!(diff.len(), 2);

    // main has not moved: a fast-forward.
    let out = cat
        .merge("alice.dev", "main", MergeOptions::default())
        .await
        .unwrap();
    assert_eq!(out.kind, MergeKind::FastForward);
    assert_eq!(out.head, cat.resolve("alice.dev").await.unwrap().commit.id);
    assert_eq!(out.tables.len(), 2);
    assert_eq!(cat.get_table("main", "raw.a").await.unwrap(), ptr(10));
    // Merging again: nothing to do.
    let again = cat
        .merge("alice.dev", "main", MergeOptions::default())
        .await
        .unwrap();
    assert_eq!(again.kind, MergeKind::UpToDate);

    // Both sides move, on different tables: a merge commit with both parents.
    cat.commit("alice.dev", vec![put("raw.b", Some(2), 20)], meta("dev b"))
        .await
        .unwrap();
    let main_head = cat
        .commit("main", vec![put("raw.c", None, 30)], meta("main c"))
        .await
        .unwrap();
    let dev_head = cat.resolve("alice.dev").await.unwrap().commit.id;
    let opts = MergeOptions {
        meta: CommitMeta::new("bob", "publish dev").with_property("run_id", "r-1"),
        ..Default::default()
    };
    let out = cat.merge("alice.dev", "main", opts).await.unwrap();
    assert_eq!(out.kind, MergeKind::MergeCommit);
    let merged = cat.get_commit(out.head).await.unwrap();
    assert_eq!(merged.parents, vec![main_head.id, dev_head]);
    assert_eq!(merged.author, "bob");
    assert_eq!(
        merged.properties.get("run_id").map(String::as_str),
        Some("r-1")
    );
    let tables: Vec<_> = cat
        .list_tables("main", None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.pointer))
        .collect();
    assert_eq!(
        tables,
        [
            ("raw.a".to_string(), ptr(10)),
            ("raw.b".to_string(), ptr(20)),
            ("raw.c".to_string(), ptr(30)),
            ("raw.new".to_string(), ptr(11)),
        ]
    );
    assert_eq!(out.tables.len(), 1, "only raw.b came in");
    // The dev branch itself did not change.
    assert_eq!(cat.resolve("alice.dev").await.unwrap().commit.id, dev_head);

    // no_fast_forward makes a merge commit even when a fast-forward is possible.
    cat.create_branch("ff", "main").await.unwrap();
    cat.commit("ff", vec![put("raw.c", Some(30), 31)], meta("ff"))
        .await
        .unwrap();
    let opts = MergeOptions {
        no_fast_forward: true,
        ..Default::default()
    };
    let out = cat.merge("ff", "main", opts).await.unwrap();
    assert_eq!(out.kind, MergeKind::MergeCommit);
    assert_eq!(cat.get_commit(out.head).await.unwrap().parents.len(), 2);
    assert!(cat.check_integrity().await.unwrap().commits >= 7);
}

/// A prepared merge writes its commit and moves nothing: the target is then assigned to
/// it, expecting the head it was made on (a target moved meanwhile is a conflict).
async fn a_prepared_merge_moves_no_ref_until_assigned(db: &TestDb) {
    let cat = db.open().await;
    let base = cat
        .commit("main", vec![put("raw.a", None, 1)], meta("a"))
        .await
        .unwrap();
    cat.create_branch("dev", "main").await.unwrap();
    cat.commit("dev", vec![put("raw.b", None, 2)], meta("dev b"))
        .await
        .unwrap();
    let prepare = MergeOptions {
        prepare: true,
        ..Default::default()
    };
    // A fast-forward: the would-be head is dev's; main stays.
    let ff = cat.merge("dev", "main", prepare.clone()).await.unwrap();
    assert_eq!(ff.kind, MergeKind::FastForward);
    assert_eq!(ff.head, cat.resolve("dev").await.unwrap().commit.id);
    assert_eq!(ff.base_head, base.id);
    assert_eq!(cat.resolve("main").await.unwrap().commit.id, base.id);
    // A merge commit: written, readable by hash, on no ref.
    cat.commit("main", vec![put("raw.c", None, 3)], meta("main c"))
        .await
        .unwrap();
    let main_head = cat.resolve("main").await.unwrap().commit.id;
    let mc = cat.merge("dev", "main", prepare.clone()).await.unwrap();
    assert_eq!(mc.kind, MergeKind::MergeCommit);
    assert_eq!(mc.base_head, main_head);
    assert_eq!(cat.resolve("main").await.unwrap().commit.id, main_head);
    let prepared = cat.get_commit(mc.head).await.unwrap();
    assert_eq!(prepared.parents.len(), 2);
    assert_eq!(mc.tables.len(), 1, "raw.b comes in");
    // Assigned from the head it was made on: main is the merge.
    let to = format!("@{}", mc.head.to_hex());
    cat.assign_branch("main", mc.base_head, &to).await.unwrap();
    assert_eq!(cat.resolve("main").await.unwrap().commit.id, mc.head);
    assert_eq!(cat.list_tables("main", None).await.unwrap().len(), 3);
    // A prepared merge whose target moved since is not assigned.
    cat.commit("dev", vec![put("raw.d", None, 4)], meta("dev d"))
        .await
        .unwrap();
    let late = cat.merge("dev", "main", prepare).await.unwrap();
    cat.commit("main", vec![put("raw.e", None, 5)], meta("main e"))
        .await
        .unwrap();
    let err = cat
        .assign_branch("main", late.base_head, &format!("@{}", late.head.to_hex()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RefConflict);
    assert!(cat.check_integrity().await.unwrap().refs >= 2);
}

async fn merge_conflicts_list_every_table_and_change_nothing(db: &TestDb) {
    let cat = db.open().await;
    cat.commit(
        "main",
        vec![
            put("s.x", None, 1),
            put("s.y", None, 2),
            put("s.z", None, 3),
            put("s.same", None, 4),
        ],
        meta("base"),
    )
    .await
    .unwrap();
    cat.create_branch("feature", "main").await.unwrap();
    cat.commit(
        "feature",
        vec![
            put("s.x", Some(1), 10),
            del("s.y", 2),
            put("s.same", Some(4), 40),
            put("s.only_feature", None, 50),
        ],
        meta("feature"),
    )
    .await
    .unwrap();
    let main_head = cat
        .commit(
            "main",
            vec![
                put("s.x", Some(1), 100),
                put("s.y", Some(2), 200),
                put("s.same", Some(4), 40),
            ],
            meta("main"),
        )
        .await
        .unwrap();
    let err = cat
        .merge("feature", "main", MergeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let tables: Vec<_> = err.conflicts().iter().map(|c| c.table.as_str()).collect();
    assert_eq!(
        tables,
        ["s.x", "s.y"],
        "both changed differently; s.same changed identically"
    );
    assert_eq!(err.conflicts()[0].expected, Some(ptr(1)));
    assert_eq!(err.conflicts()[0].actual, Some(ptr(100)));
    assert_eq!(err.conflicts()[0].incoming, Some(Some(ptr(10))));
    assert_eq!(err.conflicts()[1].incoming, Some(None));
    assert_eq!(
        err.to_string(),
        "cannot merge 'feature' into 'main': tables were changed on both sides (s.x, s.y); nothing was merged"
    );
    assert_eq!(cat.resolve("main").await.unwrap().commit.id, main_head.id);
    assert_eq!(
        cat.get_table("main", "s.only_feature")
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::TableNotFound
    );

    // The expected head guards a merge too.
    let opts = MergeOptions {
        expected_head: Some(cat.resolve("feature").await.unwrap().commit.id),
        ..Default::default()
    };
    let err = cat.merge("feature", "main", opts).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RefConflict);
}

async fn ref_expressions_resolve_hashes_and_times(db: &TestDb) {
    let cat = db.open().await;
    let c1 = cat
        .commit("main", vec![put("t.a", None, 1)], meta("one"))
        .await
        .unwrap();
    let c2 = cat
        .commit("main", vec![put("t.a", Some(1), 2)], meta("two"))
        .await
        .unwrap();
    cat.create_branch("side", "main").await.unwrap();
    let s1 = cat
        .commit("side", vec![put("t.b", None, 3)], meta("side"))
        .await
        .unwrap();

    // main@<hash> must be on main's history.
    let short = &c1.id.to_hex()[..8];
    let r = cat.resolve(&format!("main@{short}")).await.unwrap();
    assert_eq!(r.commit.id, c1.id);
    assert!(!r.is_branch_head);
    assert!(cat.resolve("main").await.unwrap().is_branch_head);
    let err = cat
        .resolve(&format!("main@{}", &s1.id.to_hex()[..12]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RefNotFound);
    assert_eq!(
        err.to_string(),
        format!(
            "no commit '{}' on the history of 'main'",
            &s1.id.to_hex()[..12]
        )
    );
    // A prefix no commit has says the same: whether one is elsewhere is not told.
    let none = cat.resolve("main@0000000000").await.unwrap_err();
    assert_eq!(
        none.to_string(),
        "no commit '0000000000' on the history of 'main'"
    );
    // ... but any commit by @<hash>, upper case too.
    assert_eq!(
        cat.resolve(&format!("@{}", s1.id.to_hex()[..10].to_uppercase()))
            .await
            .unwrap()
            .commit
            .id,
        s1.id
    );
    assert_eq!(
        cat.resolve(&format!("side@{short}"))
            .await
            .unwrap()
            .commit
            .id,
        c1.id
    );
    let err = cat.resolve("@0000000000").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RefNotFound);

    // main@<time>: the commit main pointed at, at that time.
    let at = |t: chrono::DateTime<chrono::Utc>| {
        format!(
            "main@{}",
            t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        )
    };
    assert_eq!(
        cat.resolve(&at(c1.timestamp)).await.unwrap().commit.id,
        c1.id
    );
    assert_eq!(
        cat.resolve(&at(c2.timestamp)).await.unwrap().commit.id,
        c2.id
    );
    assert_eq!(
        cat.get_table(&at(c1.timestamp), "t.a").await.unwrap(),
        ptr(1)
    );
    let err = cat.resolve("main@2001-01-01T00:00:00Z").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RefNotFound);
    assert_eq!(
        err.to_string(),
        "'main' did not exist at 2001-01-01T00:00:00+00:00"
    );
    // A fast-forward moves main to side's commit: at c2's time main was still at c2.
    cat.merge("side", "main", MergeOptions::default())
        .await
        .unwrap();
    assert_eq!(
        cat.resolve(&at(c2.timestamp)).await.unwrap().commit.id,
        c2.id
    );
    assert_eq!(
        cat.resolve(&at(chrono::Utc::now()))
            .await
            .unwrap()
            .commit
            .id,
        s1.id
    );
    // Merged with a merge commit, a branch's own commit is on main's history but main
    // was never at it: main@ names only main's states (its first-parent line).
    cat.create_branch("side2", "main").await.unwrap();
    let own = cat
        .commit("side2", vec![put("t.d", None, 5)], meta("side2"))
        .await
        .unwrap();
    cat.commit("main", vec![put("t.c", None, 4)], meta("main moves"))
        .await
        .unwrap();
    let merged = cat
        .merge(
            "side2",
            "main",
            MergeOptions {
                no_fast_forward: true,
                ..MergeOptions::default()
            },
        )
        .await
        .unwrap();
    assert!(cat.is_ancestor(own.id, merged.head).await.unwrap());
    let err = cat
        .resolve(&format!("main@{}", &own.id.to_hex()[..12]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RefNotFound, "{err}");
    let at_merge = cat
        .resolve(&format!("main@{}", &merged.head.to_hex()[..12]))
        .await
        .unwrap();
    assert_eq!(at_merge.commit.id, merged.head);
    // A deleted branch has no past: what it held is no ref's to read by time (the
    // third review: `gone@TIME` read a deleted branch, and a name re-created by
    // someone else read what the old branch of that name held).
    let before_delete = chrono::Utc::now();
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    cat.delete_branch("side", None).await.unwrap();
    let side_at = |t: chrono::DateTime<chrono::Utc>| {
        format!(
            "side@{}",
            t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        )
    };
    for t in [before_delete, chrono::Utc::now()] {
        assert_eq!(
            cat.resolve(&side_at(t)).await.unwrap_err().kind(),
            ErrorKind::RefNotFound
        );
    }
    // Made again: its own past only.
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    cat.create_branch("side", &format!("@{}", c1.id.to_hex()))
        .await
        .unwrap();
    let err = cat.resolve(&side_at(before_delete)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RefNotFound, "{err}");
    assert_eq!(
        cat.resolve(&side_at(chrono::Utc::now()))
            .await
            .unwrap()
            .commit
            .id,
        c1.id
    );

    // A long first-parent history still resolves old hashes (skip pointers).
    let mut ids = vec![];
    for i in 0..300u64 {
        let c = cat
            .commit(
                "main",
                vec![put(
                    "t.long",
                    if i == 0 { None } else { Some(1000 + i - 1) },
                    1000 + i,
                )],
                meta("n"),
            )
            .await
            .unwrap();
        ids.push(c.id);
    }
    for id in [ids[0], ids[1], ids[77], ids[255], ids[299], c1.id] {
        assert_eq!(
            cat.resolve(&format!("main@{id}")).await.unwrap().commit.id,
            id
        );
    }
}

async fn ambiguous_hash_prefixes_are_refused(db: &TestDb) {
    let cat = db.open().await;
    let c = cat
        .commit("main", vec![put("t.a", None, 1)], meta("one"))
        .await
        .unwrap();
    // Plant a second commit id sharing the first 60 hex characters (a copy of the
    // first's record: its bytes do not hash to its id). The prefix lookup must report
    // both before reading either.
    let mut twin = *c.id.as_bytes();
    twin[31] ^= 0xff;
    let is_pg = db.url.starts_with("postgres");
    if is_pg {
        let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
        sqlx::query("INSERT INTO commits (id, data) SELECT $1, data FROM commits WHERE id = $2")
            .bind(twin.to_vec())
            .bind(c.id.as_bytes().to_vec())
            .execute(&pool)
            .await
            .unwrap();
    } else {
        let pool = sqlx::SqlitePool::connect(&db.url).await.unwrap();
        sqlx::query("INSERT INTO commits (id, data) SELECT ?1, data FROM commits WHERE id = ?2")
            .bind(twin.to_vec())
            .bind(c.id.as_bytes().to_vec())
            .execute(&pool)
            .await
            .unwrap();
    }
    let prefix = &c.id.to_hex()[..8];
    let err = cat.resolve(&format!("@{prefix}")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AmbiguousRef);
    assert_eq!(err.candidates().len(), 2);
    assert!(err.to_string().contains("matches more than one commit"));
    // main@ reads each to see whether main was at it: the planted one is no commit,
    // and that is told (stored bytes that do not match their id), not passed over.
    let err = cat.resolve(&format!("main@{prefix}")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    // The full hash still resolves.
    assert_eq!(
        cat.resolve(&format!("@{}", c.id)).await.unwrap().commit.id,
        c.id
    );
}

async fn tags_do_not_move(db: &TestDb) {
    let cat = db.open().await;
    let c1 = cat
        .commit("main", vec![put("t.a", None, 1)], meta("one"))
        .await
        .unwrap();
    let tag = cat.create_tag("v1.0", "main").await.unwrap();
    assert_eq!((tag.kind, tag.head), (RefKind::Tag, c1.id));
    cat.commit("main", vec![put("t.a", Some(1), 2)], meta("two"))
        .await
        .unwrap();
    assert_eq!(cat.get_table("v1.0", "t.a").await.unwrap(), ptr(1));
    assert!(!cat.resolve("v1.0").await.unwrap().is_branch_head);

    let err = cat
        .commit("v1.0", vec![put("t.a", Some(1), 3)], meta("x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotAllowed);
    assert_eq!(err.to_string(), "'v1.0' is a tag, not a branch");
    let err = cat.assign_branch("v1.0", c1.id, "main").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotAllowed);
    let err = cat
        .merge("main", "v1.0", MergeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotAllowed);
    let err = cat.create_tag("v1.0", "main").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    assert_eq!(err.to_string(), "a tag named 'v1.0' already exists");
    let err = cat.create_branch("v1.0", "main").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    let err = cat.delete_branch("v1.0", None).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotAllowed);
    assert_eq!(cat.get_ref("v1.0").await.unwrap().head, c1.id);

    cat.delete_tag("v1.0").await.unwrap();
    assert_eq!(
        cat.get_ref("v1.0").await.unwrap_err().kind(),
        ErrorKind::RefNotFound
    );
    let err = cat.delete_tag("v1.0").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RefNotFound);
    assert_eq!(err.to_string(), "tag 'v1.0' not found");
}

async fn assign_resets_a_branch_only_from_the_expected_head(db: &TestDb) {
    let cat = db.open().await;
    let c1 = cat
        .commit("main", vec![put("t.a", None, 1)], meta("one"))
        .await
        .unwrap();
    let c2 = cat
        .commit("main", vec![put("t.a", Some(1), 2)], meta("two"))
        .await
        .unwrap();
    let err = cat
        .assign_branch("main", c1.id, &format!("@{}", c1.id))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RefConflict);
    assert_eq!(cat.resolve("main").await.unwrap().commit.id, c2.id);
    let r = cat
        .assign_branch("main", c2.id, &format!("main@{}", c1.id))
        .await
        .unwrap();
    assert_eq!(r.head, c1.id);
    assert_eq!(cat.get_table("main", "t.a").await.unwrap(), ptr(1));
    // A reset is itself history for time travel: now main is at c1.
    assert_eq!(cat.resolve("main").await.unwrap().commit.id, c1.id);
    let err = cat.assign_branch("nope", c1.id, "main").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RefNotFound);
}

async fn deleting_branches(db: &TestDb) {
    let cat = db.open().await;
    let err = cat.delete_branch("main", None).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotAllowed);
    cat.create_branch("b", "main").await.unwrap();
    let head = cat
        .commit("b", vec![put("t.a", None, 1)], meta("b"))
        .await
        .unwrap();
    let root = cat.resolve("main").await.unwrap().commit.id;
    let err = cat.delete_branch("b", Some(root)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RefConflict);
    assert!(cat.get_ref("b").await.is_ok());
    cat.delete_branch("b", Some(head.id)).await.unwrap();
    // Merging into, committing to and branching from a deleted branch fail cleanly.
    cat.create_branch("c", "main").await.unwrap();
    let err = cat
        .merge("c", "b", MergeOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RefNotFound);
    let err = cat
        .commit("b", vec![put("t.a", Some(1), 2)], meta("x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RefNotFound);
    let err = cat.create_branch("d", "b").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RefNotFound);
    // Its commits are still reachable by hash (time travel, replay).
    assert_eq!(
        cat.get_table(&format!("@{}", head.id), "t.a")
            .await
            .unwrap(),
        ptr(1)
    );
    let names: Vec<_> = cat
        .list_refs()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["c", "main"]);
}

async fn log_pages_and_property_filters(db: &TestDb) {
    let cat = db.open().await;
    let mut ids = vec![];
    for i in 0..25u64 {
        let m = CommitMeta::new("t", format!("c{i}"))
            .with_property("run", if i % 5 == 0 { "r5" } else { "other" });
        let c = cat
            .commit(
                "main",
                vec![put("t.a", if i == 0 { None } else { Some(i - 1) }, i)],
                m,
            )
            .await
            .unwrap();
        ids.push(c.id);
    }
    let mut seen = vec![];
    let mut token = None;
    loop {
        let page = cat
            .log(
                "main",
                &LogQuery {
                    page_token: token.clone(),
                    limit: 10,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        seen.extend(page.commits.iter().map(|c| c.id));
        token = page.next_page_token;
        if token.is_none() {
            break;
        }
    }
    assert_eq!(seen.len(), 26, "25 commits and the root");
    let newest_first: Vec<_> = ids.iter().rev().copied().collect();
    assert_eq!(&seen[..25], &newest_first[..]);

    let mut q = LogQuery {
        limit: 3,
        ..Default::default()
    };
    q.properties.insert("run".into(), "r5".into());
    let page = cat.log("main", &q).await.unwrap();
    let msgs: Vec<_> = page.commits.iter().map(|c| c.message.as_str()).collect();
    assert_eq!(msgs, ["c20", "c15", "c10"]);
    let page = cat
        .log(
            "main",
            &LogQuery {
                page_token: page.next_page_token,
                ..q.clone()
            },
        )
        .await
        .unwrap();
    let msgs: Vec<_> = page.commits.iter().map(|c| c.message.as_str()).collect();
    assert_eq!(msgs, ["c5", "c0"]);
    assert_eq!(page.next_page_token, None);

    // A table's own history: commits to other tables are left out, `until` stops
    // before a commit, which must be in the history.
    for i in 0..3u64 {
        let parent = if i == 0 { None } else { Some(100 + i - 1) };
        cat.commit(
            "main",
            vec![put("t.b", parent, 100 + i)],
            CommitMeta::new("t", format!("b{i}")),
        )
        .await
        .unwrap();
    }
    let of = |table: &str, until: Option<lh_catalog::CommitId>| LogQuery {
        limit: 100,
        table: Some(table.into()),
        until,
        ..Default::default()
    };
    let page = cat.log("main", &of("t.a", None)).await.unwrap();
    assert_eq!(page.commits.len(), 25, "every commit to t.a, none to t.b");
    assert!(page.commits.iter().all(|c| c.message.starts_with('c')));
    let page = cat.log("main", &of("t.b", None)).await.unwrap();
    let msgs: Vec<_> = page.commits.iter().map(|c| c.message.as_str()).collect();
    assert_eq!(msgs, ["b2", "b1", "b0"]);
    let page = cat.log("main", &of("t.a", Some(ids[20]))).await.unwrap();
    let msgs: Vec<_> = page.commits.iter().map(|c| c.message.as_str()).collect();
    assert_eq!(msgs, ["c24", "c23", "c22", "c21"]);
    assert_eq!(page.next_page_token, None);
    let page = cat.log("main", &of("t.nope", None)).await.unwrap();
    assert!(page.commits.is_empty());
    cat.create_branch("side", "main").await.unwrap();
    let side = cat
        .commit(
            "side",
            vec![put("t.c", None, 200)],
            CommitMeta::new("t", "side"),
        )
        .await
        .unwrap();
    let e = cat
        .log("main", &of("t.a", Some(side.id)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(
        e.to_string().contains("not in the first-parent history"),
        "{e}"
    );
    let e = cat.log("main", &of("t..bad", None)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName);

    for bad in [0, 1001] {
        let e = cat
            .log(
                "main",
                &LogQuery {
                    limit: bad,
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
    let e = cat
        .log(
            "main",
            &LogQuery {
                page_token: Some("zz".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

async fn invalid_names_are_refused_and_change_nothing(db: &TestDb) {
    let cat: Catalog = db.open().await;
    let before = cat.list_refs().await.unwrap();
    for bad in [
        "",
        "-x",
        "a..b",
        "a b",
        "a@b",
        "x.lock",
        "a/",
        &"n".repeat(251),
    ] {
        let e = cat.create_branch(bad, "main").await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad:?}");
        let e = cat.create_tag(bad, "main").await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad:?}");
    }
    for bad in ["nope", "main@xyz", "@1234", "main@2026-13-45T00:00:00Z"] {
        let e = cat.create_branch("ok", bad).await.unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::InvalidName | ErrorKind::RefNotFound),
            "{bad}: {e}"
        );
    }
    for bad in [
        "orders",
        "Raw.orders",
        "raw..orders",
        "raw.or-ders",
        "raw.orders.",
    ] {
        let e = cat
            .commit("main", vec![put(bad, None, 1)], meta("x"))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad}");
        let e = cat.get_table("main", bad).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad}");
    }
    let e = cat.list_tables("main", Some("Bad")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName);
    assert_eq!(cat.list_refs().await.unwrap(), before);
    assert!(cat.list_tables("main", None).await.unwrap().is_empty());
}

async fn commit_conflicts_name_the_tables(db: &TestDb) {
    let cat = db.open().await;
    cat.commit(
        "main",
        vec![put("t.a", None, 1), put("t.b", None, 2)],
        meta("base"),
    )
    .await
    .unwrap();
    let head = cat.resolve("main").await.unwrap().commit.id;
    // A stale expectation on t.a, a correct one on t.b, and a "new" table that exists.
    let ops = [
        put("t.a", Some(99), 3),
        put("t.b", Some(2), 4),
        TableOp::Put {
            table: "t.b2".into(),
            expected: None,
            pointer: ptr(5),
        },
        TableOp::Put {
            table: "t.b".into(),
            expected: None,
            pointer: ptr(6),
        },
    ];
    let e = cat
        .commit("main", ops[..3].to_vec(), meta("x"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict);
    let names: Vec<_> = e.conflicts().iter().map(|c| c.table.as_str()).collect();
    assert_eq!(names, ["t.a"]);
    assert_eq!(e.conflicts()[0].actual, Some(ptr(1)));
    let e = cat
        .commit("main", vec![ops[3].clone(), del("t.a", 7)], meta("x"))
        .await
        .unwrap_err();
    let names: Vec<_> = e.conflicts().iter().map(|c| c.table.as_str()).collect();
    assert_eq!(names, ["t.b", "t.a"]);
    assert_eq!(cat.resolve("main").await.unwrap().commit.id, head);
}

async fn every_metadata_location_ever_stored_is_listed(db: &TestDb) {
    let cat = db.open().await;
    assert!(cat.all_metadata_locations().await.unwrap().is_empty());
    // Enough tables for a tree of more nodes than one page of the scan (1000).
    let ops: Vec<TableOp> = (0..20_000u64)
        .map(|i| put(&format!("ns.t{i:05}"), None, i))
        .collect();
    cat.commit("main", ops, meta("many")).await.unwrap();
    cat.create_branch("b", "main").await.unwrap();
    let on_b = cat
        .commit("b", vec![put("ns.t00001", Some(1), 50001)], meta("b"))
        .await
        .unwrap();
    cat.commit("main", vec![put("ns.t00002", Some(2), 50002)], meta("m"))
        .await
        .unwrap();
    cat.commit("main", vec![del("ns.t00003", 3)], meta("del"))
        .await
        .unwrap();
    // A deleted branch's commits, a replaced pointer and a deleted table all stay: any
    // commit can still be read by its hash.
    cat.delete_branch("b", Some(on_b.id)).await.unwrap();
    let all = cat.all_metadata_locations().await.unwrap();
    let want: std::collections::BTreeSet<String> = (0..20_000u64)
        .chain([50001, 50002])
        .map(|n| ptr(n).metadata_location)
        .collect();
    assert_eq!(all, want);
}
