//! The tables' writes, tested through the query engine that reads what they wrote
//! (partitioned imports, concurrent appends, compaction).

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use std::sync::Arc;

    use lh_api::ImportMode;

    use super::super::tests::setup;
    use crate::tables::write::tests_support::*;
    use crate::tables::write::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_partitioned_import_writes_one_file_per_partition_with_its_values() {
        let dir = tempfile::tempdir().unwrap();
        let (tables, engine, ctx) = setup(dir.path()).await;
        let mut j = job(&ctx, "raw.events", ImportMode::Create, "a.csv", DAYS);
        j.partition_by = Some("day(ts), bucket(2, id)".into());
        let r = write_table(&tables, &ctx, j).await.unwrap();
        assert_eq!((r.rows, r.partitions), (6, r.files));
        let parts = partitions(&tables, "raw.events").await;
        let days: BTreeSet<&str> = parts
            .iter()
            .map(|(p, _)| p.split('/').next().unwrap())
            .collect();
        assert_eq!(
            days,
            BTreeSet::from([
                "ts_day=2026-11-01",
                "ts_day=2026-11-02",
                "ts_day=2026-11-03",
                "ts_day=null"
            ])
        );
        assert_eq!(parts.iter().map(|(_, n)| n).sum::<u64>(), 6);
        // Every row is in the file of its own partition: DuckDB agrees, row by row.
        let out = engine
            .run("SELECT count(*) FROM raw.events", "main", None, None)
            .await
            .unwrap();
        let n = out.batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap()
            .value(0);
        assert_eq!(n, 6);
        let t = current(&tables, "raw.events").await;
        assert_eq!(
            crate::tables::partition::describe(
                t.metadata.default_partition_spec(),
                t.metadata.current_schema()
            ),
            "day(ts), bucket(2, id)"
        );

        // An append adds files in its partitions; the others are untouched.
        let r = write_table(
            &tables,
            &ctx,
            job(
                &ctx,
                "raw.events",
                ImportMode::Append,
                "b.csv",
                "id,ts,name\n7,2026-11-04 01:00:00,g\n",
            ),
        )
        .await
        .unwrap();
        assert_eq!((r.rows, r.partitions, r.rebased), (1, 1, 0));
        assert_eq!(
            partitions(&tables, "raw.events").await.len(),
            parts.len() + 1
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn overwrite_partitions_replaces_only_the_partitions_written() {
        let dir = tempfile::tempdir().unwrap();
        let (tables, engine, ctx) = setup(dir.path()).await;
        let mut j = job(&ctx, "raw.events", ImportMode::Create, "a.csv", DAYS);
        j.partition_by = Some("day(ts)".into());
        write_table(&tables, &ctx, j).await.unwrap();
        let r = write_table(
            &tables,
            &ctx,
            job(
                &ctx,
                "raw.events",
                ImportMode::OverwritePartitions,
                "b.csv",
                "id,ts,name\n30,2026-11-02 08:00:00,x\n31,2026-11-02 09:00:00,y\n",
            ),
        )
        .await
        .unwrap();
        assert_eq!((r.rows, r.partitions), (2, 1));
        let out = engine
            .run(
                "SELECT string_agg(CAST(id AS VARCHAR), ',' ORDER BY id) FROM raw.events",
                "main",
                None,
                None,
            )
            .await
            .unwrap();
        let ids = out.batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::StringArray>()
            .unwrap()
            .value(0)
            .to_string();
        assert_eq!(
            ids, "1,2,4,5,6,30,31",
            "day 2's row 3 replaced, the others kept"
        );
        let t = current(&tables, "raw.events").await;
        let s = t.metadata.current_snapshot().unwrap();
        assert_eq!(s.summary().operation, iceberg::spec::Operation::Overwrite);
        assert_eq!(s.summary().additional_properties["total-records"], "7");
        assert_eq!(s.summary().additional_properties["deleted-data-files"], "1");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn eight_concurrent_appends_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let (tables, engine, ctx) = setup(dir.path()).await;
        let ctx = ImportContext {
            writers: Arc::new(tokio::sync::Semaphore::new(8)),
            ..ctx
        };
        let mut j = job(&ctx, "raw.events", ImportMode::Create, "a.csv", DAYS);
        j.partition_by = Some("day(ts)".into());
        write_table(&tables, &ctx, j).await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..8 {
            let (tables, ctx) = (tables.clone(), ctx.clone());
            let body = format!(
                "id,ts,name\n{},2026-11-0{} 01:00:00,n\n{},2026-11-01 02:00:00,m\n",
                100 + i,
                1 + i % 3,
                200 + i
            );
            let j = job(
                &ctx,
                "raw.events",
                ImportMode::Append,
                &format!("c{i}.csv"),
                &body,
            );
            tasks.push(tokio::spawn(
                async move { write_table(&tables, &ctx, j).await },
            ));
        }
        let mut rebased = 0;
        for t in tasks {
            rebased += t.await.unwrap().unwrap().rebased;
        }
        assert!(
            rebased > 0,
            "eight appends at once: some found the table moved"
        );
        let out = engine
            .run("SELECT count(*) FROM raw.events", "main", None, None)
            .await
            .unwrap();
        let n = out.batches[0]
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap()
            .value(0);
        assert_eq!(n, 6 + 16);
        let t = current(&tables, "raw.events").await;
        assert_eq!(
            t.metadata
                .current_snapshot()
                .unwrap()
                .summary()
                .additional_properties["total-records"],
            "22"
        );
    }
}

#[cfg(test)]
mod compaction {
    use lh_api::ImportMode;

    use crate::auth::Identity;
    use crate::error::Code;
    use crate::tables::write::tests_support::*;
    use crate::tables::write::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn compaction_rewrites_small_files_and_changes_no_row() {
        let dir = tempfile::tempdir().unwrap();
        let (tables, engine, ctx) = super::super::tests::setup(dir.path()).await;
        let mut j = job(&ctx, "raw.events", ImportMode::Create, "a.csv", DAYS);
        j.partition_by = Some("day(ts)".into());
        write_table(&tables, &ctx, j).await.unwrap();
        let mut commits = vec![tables.catalog.resolve("main").await.unwrap().commit.id];
        for i in 0..12 {
            let body = format!(
                "id,ts,name\n{},2026-11-0{} 0{}:00:00,x{i}\n",
                100 + i,
                1 + i % 3,
                i % 10
            );
            write_table(
                &tables,
                &ctx,
                job(&ctx, "raw.events", ImportMode::Append, "b.csv", &body),
            )
            .await
            .unwrap();
            commits.push(tables.catalog.resolve("main").await.unwrap().commit.id);
        }
        let all = "SELECT id, CAST(ts AS VARCHAR) AS ts, name FROM raw.events ORDER BY id";
        let rows = |at: String| {
            let engine = &engine;
            async move {
                let out = engine.run(all, &at, None, None).await.unwrap();
                arrow::util::pretty::pretty_format_batches(&out.batches)
                    .unwrap()
                    .to_string()
            }
        };
        let before = rows("main".into()).await;
        let files_before = tables
            .live_files(&current(&tables, "raw.events").await)
            .await
            .unwrap()
            .data
            .len();
        assert_eq!(files_before, 4 + 12);
        let r = crate::maintenance::compact(
            &tables,
            &ctx,
            "main",
            "raw.events",
            256 << 20,
            &Identity::admin("t"),
        )
        .await
        .unwrap();
        assert!(r.compacted);
        // Days 1 to 3 had several files each; the null day's one file stays.
        assert_eq!((r.files_before, r.files_after), (16, 4), "{r:?}");
        assert_eq!(rows("main".into()).await, before);
        let t = current(&tables, "raw.events").await;
        let s = t.metadata.current_snapshot().unwrap();
        assert_eq!(s.summary().operation, iceberg::spec::Operation::Replace);
        assert_eq!(s.summary().additional_properties["total-records"], "18");
        assert_eq!(tables.live_files(&t).await.unwrap().data.len(), 4);
        // Every earlier commit reads as it did.
        for (i, c) in commits.iter().enumerate() {
            let at = format!("@{}", c.to_hex());
            let text = rows(at).await;
            assert_eq!(text.lines().count(), 4 + 6 + i, "commit {i}");
        }
        // Nothing left to do: no commit.
        let again = crate::maintenance::compact(
            &tables,
            &ctx,
            "main",
            "raw.events",
            256 << 20,
            &Identity::admin("t"),
        )
        .await
        .unwrap();
        assert!(!again.compacted);
        assert_eq!(
            again.commit,
            tables
                .catalog
                .resolve("main")
                .await
                .unwrap()
                .commit
                .id
                .to_hex()
        );
    }

    /// A compaction whose files another write replaced meanwhile writes nothing: their
    /// rows would come back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_compaction_of_files_gone_meanwhile_conflicts() {
        let dir = tempfile::tempdir().unwrap();
        let (tables, _engine, ctx) = super::super::tests::setup(dir.path()).await;
        write_table(
            &tables,
            &ctx,
            job(&ctx, "raw.t", ImportMode::Create, "a.csv", "id\n1\n"),
        )
        .await
        .unwrap();
        write_table(
            &tables,
            &ctx,
            job(&ctx, "raw.t", ImportMode::Append, "b.csv", "id\n2\n"),
        )
        .await
        .unwrap();
        let read = current(&tables, "raw.t").await;
        let live = tables.live_files(&read).await.unwrap();
        let files: std::collections::BTreeSet<String> =
            live.data.iter().map(|f| f.url.clone()).collect();
        write_table(
            &tables,
            &ctx,
            job(&ctx, "raw.t", ImportMode::Replace, "c.csv", "id\n3\n"),
        )
        .await
        .unwrap();
        let mut j = job(&ctx, "raw.t", ImportMode::Append, "d.csv", "id\n1\n2\n");
        j.replaces = Some(Replaces {
            files,
            deletes: false,
            delete_files: Default::default(),
        });
        let e = write_table(&tables, &ctx, j).await.unwrap_err();
        assert_eq!(e.code, Code::Conflict, "{e:?}");
        assert!(
            e.message.contains("replaced or removed meanwhile"),
            "{}",
            e.message
        );
        let now = current(&tables, "raw.t").await;
        assert_eq!(
            now.metadata
                .current_snapshot()
                .unwrap()
                .summary()
                .additional_properties["total-records"],
            "1"
        );
    }
}
