//! The shape of history, and the questions asked of it. Every commit carries a depth
//! (its first-parent distance from the root), a generation number (one above its
//! highest parent) and a skip pointer to a first-parent ancestor chosen as Bitcoin's
//! `GetSkipHeight` does. With them, `main@<hash>` is checked in O(log n) commit reads
//! ([`is_ancestor`]) and merge bases are found walking down by generation
//! ([`merge_base`]), never through all of history.

use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, SubsecRound, Utc};

use crate::codec;
use crate::error::{Error, Result};
use crate::model::{Commit, CommitMeta, Hash};
use crate::objects::Objects;

/// A new, unsealed commit of `tree` on `parents` (first parent first): its depth and
/// generation follow from the parents, and its time never goes below the first
/// parent's. [`seal`] then sets its skip pointer and id.
pub(crate) fn make_commit(
    parents: &[&Commit],
    tree: Option<Hash>,
    meta: CommitMeta,
    now: DateTime<Utc>,
) -> Commit {
    // Keep the first-parent chain's times non-decreasing, at the precision stored.
    let mut timestamp = now.trunc_subsecs(6);
    if let Some(p) = parents.first()
        && p.timestamp > timestamp
    {
        timestamp = p.timestamp;
    }
    let depth = parents.first().map_or(0, |p| p.depth + 1);
    let generation = parents.iter().map(|p| p.generation + 1).max().unwrap_or(0);
    Commit {
        id: Hash([0; 32]),
        parents: parents.iter().map(|p| p.id).collect(),
        author: meta.author,
        message: meta.message,
        timestamp,
        properties: meta.properties,
        tree,
        depth,
        generation,
        skip: None, // set by `seal`, which can walk the history
    }
}

/// Sets the commit's skip pointer and id; returns its encoding. `parent` is its first
/// parent; `unstored` holds commits of the same batch that the store does not have yet.
pub(crate) async fn seal(
    objects: &Objects,
    commit: &mut Commit,
    parent: &Arc<Commit>,
    unstored: &HashMap<Hash, Arc<Commit>>,
) -> Result<Vec<u8>> {
    commit.skip = if commit.depth == 0 {
        None
    } else {
        let target = skip_depth(commit.depth);
        let mut walk = parent.clone();
        // Walk the batch's own commits first, then stored history.
        while walk.depth > target && unstored.contains_key(&walk.id) {
            let next = walk.parents[0];
            walk = match unstored.get(&next) {
                Some(c) => c.clone(),
                None => objects.commit_by_id(next).await?,
            };
        }
        Some(ancestor_at_depth(objects, walk, target).await?.id)
    };
    let bytes = codec::encode_commit(commit);
    commit.id = Hash::of(&bytes);
    Ok(bytes)
}

/// The first-parent ancestor of `c` at `depth`, in O(log n) steps over skip pointers
/// (the walk of Bitcoin's `CBlockIndex::GetAncestor`).
pub(crate) async fn ancestor_at_depth(
    objects: &Objects,
    c: Arc<Commit>,
    depth: u64,
) -> Result<Arc<Commit>> {
    let mut walk = c;
    while walk.depth > depth {
        let here = walk.depth;
        let hs = skip_depth(here) as i128;
        let hsp = skip_depth(here - 1) as i128;
        let target = depth as i128;
        let take_skip = walk.skip.is_some()
            && (hs == target || (hs > target && !(hsp < hs - 2 && hsp >= target)));
        let next = if take_skip {
            walk.skip.expect("checked")
        } else {
            *walk.parents.first().ok_or_else(|| {
                Error::corrupt(format!("commit {} has depth {here} but no parent", walk.id))
            })?
        };
        walk = objects.commit_by_id(next).await?;
    }
    Ok(walk)
}

/// Whether `a` is `b` or one of its ancestors.
pub(crate) async fn is_ancestor(
    objects: &Objects,
    a: &Arc<Commit>,
    b: &Arc<Commit>,
) -> Result<bool> {
    if a.id == b.id {
        return Ok(true);
    }
    if a.generation >= b.generation {
        return Ok(false);
    }
    // Most lookups are on the first-parent chain: O(log n).
    if a.depth < b.depth && ancestor_at_depth(objects, b.clone(), a.depth).await?.id == a.id {
        return Ok(true);
    }
    // Otherwise walk every parent, never below a's generation.
    let mut stack = vec![b.clone()];
    let mut seen = HashSet::new();
    while let Some(c) = stack.pop() {
        for p in &c.parents {
            if *p == a.id {
                return Ok(true);
            }
            if seen.insert(*p) {
                let pc = objects.commit_by_id(*p).await?;
                if pc.generation > a.generation {
                    stack.push(pc);
                }
            }
        }
    }
    Ok(false)
}

/// The common ancestor of `a` and `b` with the largest generation. Walks down from
/// both in order of generation, so a commit is examined only after every commit
/// above it: the first one reached from both sides is the answer.
pub(crate) async fn merge_base(
    objects: &Objects,
    a: &Arc<Commit>,
    b: &Arc<Commit>,
) -> Result<Option<Arc<Commit>>> {
    if a.id == b.id {
        return Ok(Some(a.clone()));
    }
    let mut flags: HashMap<Hash, u8> = HashMap::new();
    let mut heap = BinaryHeap::new();
    flags.insert(a.id, 1);
    *flags.entry(b.id).or_default() |= 2;
    heap.push((a.generation, a.id));
    heap.push((b.generation, b.id));
    let mut popped = HashSet::new();
    while let Some((_, id)) = heap.pop() {
        if !popped.insert(id) {
            continue;
        }
        let f = flags[&id];
        if f == 3 {
            return Ok(Some(objects.commit_by_id(id).await?));
        }
        let c = objects.commit_by_id(id).await?;
        for p in &c.parents {
            let entry = flags.entry(*p).or_default();
            if *entry == 0 {
                let pc = objects.commit_by_id(*p).await?;
                heap.push((pc.generation, pc.id));
            }
            *entry |= f;
        }
    }
    Ok(None)
}

/// Where a commit at depth `d` points its skip pointer: a first-parent ancestor at a
/// depth that makes any ancestor reachable in O(log d) steps (Bitcoin's
/// `GetSkipHeight`).
fn skip_depth(d: u64) -> u64 {
    fn invert_lowest_one(n: u64) -> u64 {
        n & n.wrapping_sub(1)
    }
    if d < 2 {
        0
    } else if d & 1 == 1 {
        invert_lowest_one(invert_lowest_one(d - 1)) + 1
    } else {
        invert_lowest_one(d)
    }
}

#[cfg(test)]
mod tests {
    use super::skip_depth;

    #[test]
    fn skip_depth_points_below() {
        for d in 1..10_000u64 {
            assert!(skip_depth(d) < d, "{d}");
        }
        assert_eq!(skip_depth(8), 0);
        assert_eq!(skip_depth(12), 8);
    }
}
