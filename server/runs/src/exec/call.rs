//! One call of a node's Python function: its environment built or found, its inputs
//! written, the runtime invoked, its declared secrets given for this call alone.

#[allow(unused_imports)]
use super::*;

/// One call of a node's Python function: on its inputs at `head`, with `params`.
pub(super) struct Call<'a> {
    pub(super) node: &'a PlanNode,
    pub(super) head: &'a Commit,
    pub(super) kind: InvocationKind,
    pub(super) params: &'a BTreeMap<String, serde_json::Value>,
    pub(super) inputs: &'a [Input],
}

pub(super) async fn invoke(
    shared: &Shared,
    call: Call<'_>,
    rec: &mut NodeRecord,
) -> Result<Outcome> {
    let work = shared.svc.config.work_root.join(format!(
        "{}-{}",
        shared.id,
        uuid::Uuid::new_v4().simple()
    ));
    let out = invoke_in(shared, call, rec, &work, None).await;
    let _ = std::fs::remove_dir_all(&work);
    out
}

/// Builds (or finds) the node's environment, unless the caller has it already (`env`),
/// writes its inputs, and calls the function in the runtime. The invocation's folder is
/// `work`.
pub(super) async fn invoke_in(
    shared: &Shared,
    call: Call<'_>,
    rec: &mut NodeRecord,
    work: &std::path::Path,
    env: Option<lh_runner::Env>,
) -> Result<Outcome> {
    let Call {
        node,
        head,
        kind,
        params,
        inputs,
    } = call;
    let svc = &shared.svc;
    let Lang::Python {
        function,
        env: spec,
        secrets,
        ..
    } = &node.lang
    else {
        return Err(Error::internal("not a Python node"));
    };
    // Its declared secrets, and only those, for this call alone.
    let secrets = if secrets.is_empty() {
        Vec::new()
    } else {
        svc.secrets.values(secrets, &shared.target).await?
    };
    let secrets = std::sync::Arc::new(secrets);
    let env = match env {
        Some(env) => env,
        None => built_env(shared, spec, rec).await?.0,
    };
    if let Ok(mut e) = shared.envs.lock() {
        e.insert(env.key.clone(), env.lock.clone());
    }
    std::fs::create_dir_all(work)?;
    let mut files = BTreeMap::new();
    for (inp, read) in node.inputs.iter().zip(inputs) {
        let Some(arg) = &inp.arg else { continue };
        let path = work.join(format!("in-{arg}.arrow"));
        let filter = match (inp.filter.as_deref(), &read.part) {
            (Some(f), Some(p)) => Some(format!("({f}) AND {}", p.sql)),
            (None, Some(p)) => Some(p.sql.clone()),
            (f, None) => f.map(String::from),
        };
        svc.queries
            .export_arrow(
                head,
                &inp.table,
                inp.columns.as_deref(),
                filter.as_deref(),
                &path,
                node.lang.limits().timeout,
                &shared.by.user,
            )
            .await?;
        files.insert(arg.clone(), path);
    }
    // The function's own limits, and the server's bound on what it may write.
    let mut limits = node.lang.limits();
    limits.disk_bytes = Some(svc.config.ceilings.disk_bytes);
    // The call's prints reach the node's record as they happen (the record of a node
    // that is running, which `lh runs logs --follow`, the client and the console read),
    // secrets redacted as in the final log.
    let (live, mut grown) = tokio::sync::watch::channel(String::new());
    let forward = {
        let svc = shared.svc.clone();
        let (run, claim, name) = (shared.id.clone(), shared.claim.clone(), rec.name.clone());
        let before = rec.log.clone();
        let secrets = secrets.clone();
        tokio::spawn(async move {
            while grown.changed().await.is_ok() {
                let so_far = grown.borrow_and_update().clone();
                let text = format!("{before}{}", redact(&so_far, &secrets));
                let _ = svc.store.update_node_log(&run, &claim, &name, &text).await;
            }
        })
    };
    let inv = Invocation {
        id: uuid::Uuid::new_v4().simple().to_string(),
        kind,
        file: shared.code_root.join(&node.file),
        function: function.clone(),
        root: shared.code_root.clone(),
        inputs: files,
        params: params.clone(),
        output: work.join("out.parquet"),
        env: lh_runner::SecretEnv(
            secrets
                .iter()
                .map(|v| (v.name.clone(), v.value.clone()))
                .collect(),
        ),
        live: Some(std::sync::Arc::new(live)),
        // The run's user and what its roles grant (a role narrowed since is another
        // tenant): its worker serves no one who may read less.
        tenant: format!(
            "{}\u{1f}{}\u{1f}{}",
            shared.by.user,
            shared.by.access.name,
            &blake3::hash(format!("{:?}", shared.by.access.grants).as_bytes()).to_hex()[..16]
        ),
    };
    let result = svc.runtime.invoke(&env, &limits, work, inv).await;
    forward.abort();
    let result = result.map_err(|e| {
        Error::bad_request(Code::RuntimeFailed, format!("cannot run the function: {e}"))
    })?;
    // No secret value leaves in the run's record.
    rec.log
        .push_str(&shared.keep_log(redact(&result.log, &secrets)));
    Ok(match result.outcome {
        Outcome::Failed { error, traceback } => Outcome::Failed {
            error: redact(&error, &secrets),
            traceback: redact(&traceback, &secrets),
        },
        Outcome::Expectation { passed, detail } => Outcome::Expectation {
            passed,
            detail: redact(&detail, &secrets),
        },
        o => o,
    })
}

/// The environment of `spec`, built if needed (said in the node's log).
pub(super) async fn built_env(
    shared: &Shared,
    spec: &lh_runner::EnvSpec,
    rec: &mut NodeRecord,
) -> Result<(lh_runner::Env, bool)> {
    let started = std::time::Instant::now();
    let (env, built) = shared.svc.envs.get(spec).await.map_err(|e| {
        Error::bad_request(
            Code::EnvironmentFailed,
            format!("cannot build the Python environment: {e}"),
        )
    })?;
    if built {
        rec.log.push_str(&format!(
            "[lh] built Python environment {} in {:.1} s\n",
            env.key,
            started.elapsed().as_secs_f64()
        ));
    }
    Ok((env, built))
}
