//! The plan of a partitioned run: each model that runs per partition (see
//! `partitions.rs`) replaced by one instance per partition the run asks for.

use super::partitions::{Partition, PartitionsDecl, bad, key_column};
use super::project::{Plan, PlanNode, topological};
use crate::error::{Code, Error, Result};

/// The plan with every per-partition model replaced by one instance per partition. An
/// instance reads another partitioned model's instance of the same partition; any
/// other node reading a partitioned model waits for all of its instances.
pub fn expand(plan: Plan, partitions: &[Partition]) -> Result<Plan> {
    let decl = plan.project.partitions.clone();
    let per: Vec<bool> = plan
        .nodes
        .iter()
        .map(|n| n.per_partition(decl.as_ref()))
        .collect();
    // Old index to new indexes (one, or one per partition).
    let mut map: Vec<Vec<usize>> = Vec::new();
    let mut nodes: Vec<PlanNode> = Vec::new();
    for (i, n) in plan.nodes.iter().enumerate() {
        if per[i] {
            let mut at = Vec::new();
            for p in partitions {
                let mut x = n.clone();
                x.partition = Some(p.clone());
                at.push(nodes.len());
                nodes.push(x);
            }
            map.push(at);
        } else {
            map.push(vec![nodes.len()]);
            nodes.push(n.clone());
        }
    }
    for (i, n) in plan.nodes.iter().enumerate() {
        for (k, &new) in map[i].iter().enumerate() {
            let mut after = Vec::new();
            for (j, input) in n.inputs.iter().enumerate() {
                let Some(p) = input.producer else { continue };
                let producer = if per[i] && per[p] {
                    map[p][k]
                } else {
                    after.extend(map[p].iter().skip(1).copied());
                    map[p][0]
                };
                nodes[new].inputs[j].producer = Some(producer);
            }
            nodes[new].after = after;
        }
    }
    let order = topological(&nodes)?;
    Ok(Plan {
        nodes,
        order,
        ..plan
    })
}

/// The plan for the partitions a run asks for (`text`, as `--partition`/`--partitions`
/// give it): a project whose models run per partition needs them; any other takes none.
pub fn apply(plan: Plan, text: Option<&str>) -> Result<Plan> {
    let decl = plan.project.partitions.clone();
    let per: Vec<&PlanNode> = plan
        .nodes
        .iter()
        .filter(|n| n.per_partition(decl.as_ref()))
        .collect();
    let (Some(decl), false) = (decl.as_ref(), per.is_empty()) else {
        return match text {
            None => Ok(plan),
            Some(_) if decl.is_none() => Err(bad(
                "the project declares no partitions (partitions: in lh_project.yml)",
            )),
            Some(_) => Err(bad(
                "no model of the project runs per partition (materialize 'overwrite_partitions')",
            )),
        };
    };
    let mut problems = Vec::new();
    // A partition of the declaration, to check the models' specs against.
    let sample = match decl {
        PartitionsDecl::Daily(r) | PartitionsDecl::Hourly(r) => decl.parse(&r.start).ok(),
        PartitionsDecl::Values(v) => v.first().and_then(|x| decl.parse(x).ok()),
    };
    for n in &per {
        let fine = match (&n.partitioned_by, &sample) {
            (Some(spec), Some(p)) => key_column(p, spec).is_some(),
            _ => false,
        };
        if !fine {
            problems.push(format!(
                "{}: {} runs per {} partition: its partitioned_by needs a field no coarser than that ({})",
                n.location(),
                n.name,
                decl.kind(),
                match decl {
                    PartitionsDecl::Daily(_) => "day(col), hour(col) or a date column",
                    PartitionsDecl::Hourly(_) => "hour(col) or a column by identity",
                    PartitionsDecl::Values(_) => "a column by identity",
                }
            ));
        }
    }
    if !problems.is_empty() {
        return Err(Error::bad_request(
            Code::InvalidProject,
            problems.join("; "),
        ));
    }
    let Some(text) = text else {
        let names: Vec<&str> = per.iter().map(|n| n.name.as_str()).collect();
        return Err(bad(format!(
            "{} run{} per {} partition: say which with --partition P or --partitions A..B",
            names.join(", "),
            if names.len() == 1 { "s" } else { "" },
            decl.kind()
        )));
    };
    let partitions = decl.select(text)?;
    expand(plan, &partitions)
}
