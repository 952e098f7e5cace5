//! The table tree: a Merkle search tree (Auvolat and Taïani, 2019) from table name to
//! table pointer, stored as content-addressed nodes.
//!
//! Each key gets a level from its hash (the number of leading zero nibbles of
//! BLAKE3(key), so about one key in 16 climbs a level). A node at level `L` holds the
//! keys of level `L` in its range, sorted, and between each pair a child at level `L-1`
//! holding the keys that fall between them (`None` when there are none). The shape is
//! therefore a function of the key set alone: the same tables give the same root hash
//! whatever the order of edits, which is what makes diffs skip equal subtrees and keeps
//! merges cheap. An edit rewrites one path (about log16(n) nodes); a lookup reads one.
//!
//! The algorithms here are synchronous and run over nodes already in memory (a
//! [`NodeSource`]); when they reach a node that is not loaded they stop with [`Missing`],
//! and the async caller loads it and runs them again. The `missing_*` walks find, level
//! by level, every node an operation will need, so that a caller loads them in batches.

use std::collections::HashMap;
use std::sync::Arc;

use crate::codec;
use crate::model::{Hash, Node, TablePointer};

/// A node the algorithm needs and the caller has not loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Missing(pub Hash);

/// Where the synchronous algorithms find nodes.
pub(crate) trait NodeSource {
    fn node(&self, id: &Hash) -> Option<Arc<Node>>;
}

impl NodeSource for HashMap<Hash, Arc<Node>> {
    fn node(&self, id: &Hash) -> Option<Arc<Node>> {
        self.get(id).cloned()
    }
}

/// The level of a key: the number of leading zero nibbles of its BLAKE3 hash.
pub(crate) fn key_level(key: &str) -> u8 {
    let h = blake3::hash(key.as_bytes());
    let mut level = 0u8;
    for b in h.as_bytes() {
        if *b == 0 {
            level += 2;
            continue;
        }
        if b >> 4 == 0 {
            level += 1;
        }
        break;
    }
    level
}

fn get<S: NodeSource + ?Sized>(src: &S, id: &Hash) -> Result<Arc<Node>, Missing> {
    src.node(id).ok_or(Missing(*id))
}

/// Finds the pointer stored under `key`.
pub(crate) fn lookup<S: NodeSource + ?Sized>(
    src: &S,
    root: Option<Hash>,
    key: &str,
) -> Result<Option<TablePointer>, Missing> {
    let mut cur = root;
    while let Some(id) = cur {
        let node = get(src, &id)?;
        let i = node.entries.partition_point(|(k, _)| k.as_str() < key);
        if let Some((k, v)) = node.entries.get(i)
            && k == key
        {
            return Ok(Some(v.clone()));
        }
        cur = node.children[i];
    }
    Ok(None)
}

/// The nodes not yet in `src` that lookups or edits of `keys` will read next. Call
/// repeatedly, loading what it returns, until it returns nothing.
pub(crate) fn missing_for_keys<S: NodeSource + ?Sized>(
    src: &S,
    root: Option<Hash>,
    keys: &[&str],
) -> Vec<Hash> {
    let mut missing = Vec::new();
    let mut frontier: Vec<(Hash, Vec<&str>)> = match root {
        Some(r) => vec![(r, keys.to_vec())],
        None => vec![],
    };
    while let Some((id, keys)) = frontier.pop() {
        let Some(node) = src.node(&id) else {
            missing.push(id);
            continue;
        };
        let mut per_child: HashMap<usize, Vec<&str>> = HashMap::new();
        for key in keys {
            let i = node.entries.partition_point(|(k, _)| k.as_str() < key);
            per_child.entry(i).or_default().push(key);
            // An edit that removes an entry joins the two children around it.
            if node.entries.get(i).is_some_and(|(k, _)| k == key) {
                per_child.entry(i + 1).or_default().push(key);
            }
        }
        for (i, keys) in per_child {
            if let Some(child) = node.children[i] {
                frontier.push((child, keys));
            }
        }
    }
    missing.sort();
    missing.dedup();
    missing
}

/// The nodes not yet in `src` that a scan of keys starting with `prefix` will read.
pub(crate) fn missing_for_prefix<S: NodeSource + ?Sized>(
    src: &S,
    root: Option<Hash>,
    prefix: &str,
) -> Vec<Hash> {
    let mut missing = Vec::new();
    let mut frontier: Vec<Hash> = root.into_iter().collect();
    while let Some(id) = frontier.pop() {
        let Some(node) = src.node(&id) else {
            missing.push(id);
            continue;
        };
        for i in child_range_for_prefix(&node, prefix) {
            if let Some(child) = node.children[i] {
                frontier.push(child);
            }
        }
    }
    missing
}

/// The children of `node` whose key range can hold keys starting with `prefix`.
fn child_range_for_prefix(node: &Node, prefix: &str) -> std::ops::RangeInclusive<usize> {
    let lo = node.entries.partition_point(|(k, _)| k.as_str() < prefix);
    let hi = node
        .entries
        .partition_point(|(k, _)| k.as_str() < prefix || k.starts_with(prefix));
    lo..=hi
}

/// Every entry whose key starts with `prefix`, in key order.
pub(crate) fn scan_prefix<S: NodeSource + ?Sized>(
    src: &S,
    root: Option<Hash>,
    prefix: &str,
) -> Result<Vec<(String, TablePointer)>, Missing> {
    fn walk<S: NodeSource + ?Sized>(
        src: &S,
        id: Hash,
        prefix: &str,
        out: &mut Vec<(String, TablePointer)>,
    ) -> Result<(), Missing> {
        let node = get(src, &id)?;
        let range = child_range_for_prefix(&node, prefix);
        for i in range {
            if let Some(child) = node.children[i] {
                walk(src, child, prefix, out)?;
            }
            if let Some((k, v)) = node.entries.get(i)
                && k.starts_with(prefix)
            {
                out.push((k.clone(), v.clone()));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    if let Some(r) = root {
        walk(src, r, prefix, &mut out)?;
    }
    Ok(out)
}

/// A node being edited: children are either untouched stored subtrees or new nodes.
#[derive(Clone)]
enum Link {
    Stored(Hash),
    Mem(Arc<MemNode>),
}

#[derive(Clone)]
struct MemNode {
    level: u8,
    entries: Vec<(String, TablePointer)>,
    children: Vec<Option<Link>>,
}

/// A new node to store: its id, its encoding and its decoded form (for the cache).
pub(crate) struct NewNode {
    pub id: Hash,
    pub bytes: Vec<u8>,
    pub node: Arc<Node>,
}

/// Applies puts (`Some`) and deletes (`None`) to the tree at `root`, returning the new
/// root and the nodes to store. Deleting an absent key and putting an equal value are
/// no-ops. Reads only the paths of the edited keys.
pub(crate) fn apply<S: NodeSource + ?Sized>(
    src: &S,
    root: Option<Hash>,
    edits: &[(String, Option<TablePointer>)],
) -> Result<(Option<Hash>, Vec<NewNode>), Missing> {
    let ed = Editor { src };
    let mut level = match root {
        Some(id) => get(src, &id)?.level,
        None => 0,
    };
    let mut tree: Option<Link> = root.map(Link::Stored);
    for (key, value) in edits {
        match value {
            Some(v) => {
                let lk = key_level(key);
                while lk > level {
                    // Lift the root: a wrapper with no entry and the old tree as its child.
                    level += 1;
                    if tree.is_some() {
                        tree = Some(Link::Mem(Arc::new(MemNode {
                            level,
                            entries: Vec::new(),
                            children: vec![tree.take()],
                        })));
                    }
                }
                tree = ed.insert(tree, level, key, v)?;
            }
            None => tree = ed.delete(tree, key)?,
        }
        // Trim wrappers at the top: a root holds at least one entry.
        while let Some(link) = &tree {
            let node = ed.open(link)?;
            if !node.entries.is_empty() {
                level = node.level;
                break;
            }
            tree = node.children[0].clone();
        }
    }
    let mut out = Vec::new();
    let new_root = match tree {
        None => None,
        Some(link) => Some(ed.store(&link, &mut out)?),
    };
    Ok((new_root, out))
}

struct Editor<'a, S: ?Sized> {
    src: &'a S,
}

impl<S: NodeSource + ?Sized> Editor<'_, S> {
    fn open(&self, link: &Link) -> Result<Arc<MemNode>, Missing> {
        match link {
            Link::Mem(n) => Ok(n.clone()),
            Link::Stored(id) => {
                let n = get(self.src, id)?;
                Ok(Arc::new(MemNode {
                    level: n.level,
                    entries: n.entries.clone(),
                    children: n.children.iter().map(|c| c.map(Link::Stored)).collect(),
                }))
            }
        }
    }

    /// A node, or `None` when it holds nothing (no entry and an empty single child).
    fn normalize(node: MemNode) -> Option<Link> {
        if node.entries.is_empty() && node.children[0].is_none() {
            None
        } else {
            Some(Link::Mem(Arc::new(node)))
        }
    }

    /// Inserts into a subtree at `level` (which is at least the key's level).
    fn insert(
        &self,
        sub: Option<Link>,
        level: u8,
        key: &str,
        value: &TablePointer,
    ) -> Result<Option<Link>, Missing> {
        let lk = key_level(key);
        let Some(link) = sub else {
            let node = if lk == level {
                MemNode {
                    level,
                    entries: vec![(key.to_string(), value.clone())],
                    children: vec![None, None],
                }
            } else {
                MemNode {
                    level,
                    entries: Vec::new(),
                    children: vec![self.insert(None, level - 1, key, value)?],
                }
            };
            return Ok(Some(Link::Mem(Arc::new(node))));
        };
        let node = self.open(&link)?;
        let i = node.entries.partition_point(|(k, _)| k.as_str() < key);
        if lk == level {
            if let Some((k, v)) = node.entries.get(i)
                && k == key
            {
                if v == value {
                    return Ok(Some(link));
                }
                let mut n = (*node).clone();
                n.entries[i].1 = value.clone();
                return Ok(Some(Link::Mem(Arc::new(n))));
            }
            let (left, right) = self.split(node.children[i].clone(), key)?;
            let mut n = (*node).clone();
            n.entries.insert(i, (key.to_string(), value.clone()));
            n.children[i] = left;
            n.children.insert(i + 1, right);
            Ok(Some(Link::Mem(Arc::new(n))))
        } else {
            let child = self.insert(node.children[i].clone(), level - 1, key, value)?;
            if same_link(&child, &node.children[i]) {
                return Ok(Some(link));
            }
            let mut n = (*node).clone();
            n.children[i] = child;
            Ok(Some(Link::Mem(Arc::new(n))))
        }
    }

    /// Splits a subtree into the keys below `key` and the keys above it (`key` absent).
    fn split(&self, sub: Option<Link>, key: &str) -> Result<(Option<Link>, Option<Link>), Missing> {
        let Some(link) = sub else {
            return Ok((None, None));
        };
        let node = self.open(&link)?;
        let i = node.entries.partition_point(|(k, _)| k.as_str() < key);
        let (l, r) = self.split(node.children[i].clone(), key)?;
        let mut left_children: Vec<Option<Link>> = node.children[..i].to_vec();
        left_children.push(l);
        let mut right_children = vec![r];
        right_children.extend_from_slice(&node.children[i + 1..]);
        let left = MemNode {
            level: node.level,
            entries: node.entries[..i].to_vec(),
            children: left_children,
        };
        let right = MemNode {
            level: node.level,
            entries: node.entries[i..].to_vec(),
            children: right_children,
        };
        Ok((Self::normalize(left), Self::normalize(right)))
    }

    /// Joins two subtrees of one level where every key of `a` is below every key of `b`.
    fn join(&self, a: Option<Link>, b: Option<Link>) -> Result<Option<Link>, Missing> {
        let (a, b) = match (a, b) {
            (None, x) | (x, None) => return Ok(x),
            (Some(a), Some(b)) => (self.open(&a)?, self.open(&b)?),
        };
        debug_assert_eq!(a.level, b.level);
        let mid = self.join(
            a.children.last().cloned().flatten(),
            b.children.first().cloned().flatten(),
        )?;
        let mut entries = a.entries.clone();
        entries.extend_from_slice(&b.entries);
        let mut children: Vec<Option<Link>> = a.children[..a.children.len() - 1].to_vec();
        children.push(mid);
        children.extend_from_slice(&b.children[1..]);
        Ok(Self::normalize(MemNode {
            level: a.level,
            entries,
            children,
        }))
    }

    fn delete(&self, sub: Option<Link>, key: &str) -> Result<Option<Link>, Missing> {
        let Some(link) = sub else {
            return Ok(None);
        };
        let node = self.open(&link)?;
        let i = node.entries.partition_point(|(k, _)| k.as_str() < key);
        let mut n = (*node).clone();
        if node.entries.get(i).is_some_and(|(k, _)| k == key) {
            n.entries.remove(i);
            let right = n.children.remove(i + 1);
            n.children[i] = self.join(n.children[i].take(), right)?;
        } else {
            let child = self.delete(node.children[i].clone(), key)?;
            if same_link(&child, &node.children[i]) {
                return Ok(Some(link));
            }
            n.children[i] = child;
        }
        Ok(Self::normalize(n))
    }

    /// Encodes new nodes bottom-up, collecting them, and returns the subtree's id.
    fn store(&self, link: &Link, out: &mut Vec<NewNode>) -> Result<Hash, Missing> {
        match link {
            Link::Stored(id) => Ok(*id),
            Link::Mem(n) => {
                let mut children = Vec::with_capacity(n.children.len());
                for c in &n.children {
                    children.push(match c {
                        None => None,
                        Some(l) => Some(self.store(l, out)?),
                    });
                }
                let node = Node {
                    level: n.level,
                    entries: n.entries.clone(),
                    children,
                };
                let bytes = codec::encode_node(&node);
                let id = Hash::of(&bytes);
                out.push(NewNode {
                    id,
                    bytes,
                    node: Arc::new(node),
                });
                Ok(id)
            }
        }
    }
}

fn same_link(a: &Option<Link>, b: &Option<Link>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(Link::Stored(x)), Some(Link::Stored(y))) => x == y,
        (Some(Link::Mem(x)), Some(Link::Mem(y))) => Arc::ptr_eq(x, y),
        _ => false,
    }
}

/// An in-order walk over a tree that can step over whole subtrees, for diffs.
struct Cursor {
    /// Each frame: a node and the position in it. Position `2i` is child `i`, `2i+1`
    /// entry `i`.
    stack: Vec<(Arc<Node>, usize)>,
    /// A root not yet opened.
    pending_root: Option<Hash>,
}

/// What a cursor stands on.
enum Item<'a> {
    /// A subtree and its level (`u8::MAX` for an unopened root: open roots first).
    Subtree(Hash, u8),
    Entry(&'a str, &'a TablePointer),
    End,
}

impl Cursor {
    fn new(root: Option<Hash>) -> Self {
        Cursor {
            stack: Vec::new(),
            pending_root: root,
        }
    }

    fn current(&self) -> Item<'_> {
        if let Some(root) = self.pending_root {
            return Item::Subtree(root, u8::MAX);
        }
        match self.stack.last() {
            None => Item::End,
            Some((node, pos)) => {
                if pos % 2 == 0 {
                    match node.children[pos / 2] {
                        Some(child) => Item::Subtree(child, node.level.saturating_sub(1)),
                        None => Item::End, // unreachable once normalized
                    }
                } else {
                    let (k, v) = &node.entries[pos / 2];
                    Item::Entry(k, v)
                }
            }
        }
    }

    /// Steps past the current item (a whole subtree, or one entry).
    fn advance(&mut self) {
        if self.pending_root.take().is_some() {
            return;
        }
        if let Some(top) = self.stack.last_mut() {
            top.1 += 1;
        }
        self.normalize();
    }

    /// Replaces the current subtree by its items.
    fn descend(&mut self, node: Arc<Node>) {
        if self.pending_root.take().is_none()
            && let Some(top) = self.stack.last_mut()
        {
            top.1 += 1;
        }
        self.stack.push((node, 0));
        self.normalize();
    }

    /// Moves past empty children and finished nodes.
    fn normalize(&mut self) {
        while let Some((node, pos)) = self.stack.last_mut() {
            if *pos > node.entries.len() * 2 {
                self.stack.pop();
                continue;
            }
            if *pos % 2 == 0 && node.children[*pos / 2].is_none() {
                *pos += 1;
                continue;
            }
            break;
        }
    }
}

/// One table whose pointer differs: (name, before, after).
pub(crate) type Change = (String, Option<TablePointer>, Option<TablePointer>);

/// Which tree of a diff needs a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    A,
    B,
}

/// A diff of two trees in key order that steps over equal subtrees, so its cost grows
/// with the number of differences, not with the size of the trees. It runs until it
/// needs a node: the caller loads it, hands it over with [`Differ::provide`], and runs
/// it again.
pub(crate) struct Differ {
    a: Cursor,
    b: Cursor,
}

impl Differ {
    pub fn new(a: Option<Hash>, b: Option<Hash>) -> Self {
        Differ {
            a: Cursor::new(a),
            b: Cursor::new(b),
        }
    }

    /// Pushes differences into `out` until a node is needed (returned) or the end.
    pub fn run(&mut self, out: &mut Vec<Change>) -> Option<(Side, Hash)> {
        use std::cmp::Ordering;
        loop {
            match (self.a.current(), self.b.current()) {
                (Item::End, Item::End) => return None,
                (Item::Subtree(x, _), Item::Subtree(y, _)) if x == y => {
                    self.a.advance();
                    self.b.advance();
                }
                // Open the higher subtree first: its children may equal the other side.
                (Item::Subtree(x, lx), Item::Subtree(y, ly)) => {
                    return Some(if lx >= ly { (Side::A, x) } else { (Side::B, y) });
                }
                (Item::Subtree(x, _), _) => return Some((Side::A, x)),
                (_, Item::Subtree(y, _)) => return Some((Side::B, y)),
                (Item::Entry(k, v), Item::End) => {
                    out.push((k.to_string(), Some(v.clone()), None));
                    self.a.advance();
                }
                (Item::End, Item::Entry(k, v)) => {
                    out.push((k.to_string(), None, Some(v.clone())));
                    self.b.advance();
                }
                (Item::Entry(ka, va), Item::Entry(kb, vb)) => match ka.cmp(kb) {
                    Ordering::Less => {
                        out.push((ka.to_string(), Some(va.clone()), None));
                        self.a.advance();
                    }
                    Ordering::Greater => {
                        out.push((kb.to_string(), None, Some(vb.clone())));
                        self.b.advance();
                    }
                    Ordering::Equal => {
                        if va != vb {
                            out.push((ka.to_string(), Some(va.clone()), Some(vb.clone())));
                        }
                        self.a.advance();
                        self.b.advance();
                    }
                },
            }
        }
    }

    /// Hands over the node the last [`Differ::run`] asked for.
    pub fn provide(&mut self, side: Side, node: Arc<Node>) {
        match side {
            Side::A => self.a.descend(node),
            Side::B => self.b.descend(node),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn ptr(i: u64) -> TablePointer {
        TablePointer {
            metadata_location: format!("file:///w/t/metadata/{i}.json"),
            table_uuid: format!("uuid-{i}"),
            snapshot_id: Some(i as i64),
        }
    }

    /// Applies edits, storing new nodes into the map (no store round trips in unit tests).
    fn edit(
        nodes: &mut HashMap<Hash, Arc<Node>>,
        root: Option<Hash>,
        edits: &[(String, Option<TablePointer>)],
    ) -> Option<Hash> {
        let (root, new) = apply(nodes, root, edits).expect("all nodes in memory");
        for n in new {
            nodes.insert(n.id, n.node);
        }
        root
    }

    fn check_invariants(nodes: &HashMap<Hash, Arc<Node>>, root: Option<Hash>) -> usize {
        fn walk(
            nodes: &HashMap<Hash, Arc<Node>>,
            id: Hash,
            level: u8,
            lo: Option<&str>,
            hi: Option<&str>,
        ) -> usize {
            let n = &nodes[&id];
            assert_eq!(n.level, level);
            assert_eq!(n.children.len(), n.entries.len() + 1);
            assert!(
                !(n.entries.is_empty() && n.children[0].is_none()),
                "empty node"
            );
            let mut count = n.entries.len();
            for (i, (k, _)) in n.entries.iter().enumerate() {
                assert_eq!(key_level(k), level, "{k} at the wrong level");
                assert!(lo.is_none_or(|lo| k.as_str() > lo));
                assert!(hi.is_none_or(|hi| k.as_str() < hi));
                if i > 0 {
                    assert!(n.entries[i - 1].0 < *k);
                }
            }
            for (i, c) in n.children.iter().enumerate() {
                if let Some(c) = c {
                    assert!(level > 0, "child below level 0");
                    let clo = if i == 0 {
                        lo
                    } else {
                        Some(n.entries[i - 1].0.as_str())
                    };
                    let chi = n.entries.get(i).map(|e| e.0.as_str()).or(hi);
                    count += walk(nodes, *c, level - 1, clo, chi);
                }
            }
            count
        }
        match root {
            None => 0,
            Some(r) => {
                let level = nodes[&r].level;
                assert!(!nodes[&r].entries.is_empty(), "root without entries");
                walk(nodes, r, level, None, None)
            }
        }
    }

    #[test]
    fn canonical_shape_whatever_the_order_of_edits() {
        let keys: Vec<String> = (0..3000).map(|i| format!("ns{}.t{i}", i % 7)).collect();
        let mut nodes = HashMap::new();
        // Forward inserts, one at a time.
        let mut a = None;
        for (i, k) in keys.iter().enumerate() {
            a = edit(&mut nodes, a, &[(k.clone(), Some(ptr(i as u64)))]);
        }
        // Reverse inserts in batches of 100.
        let mut b = None;
        let rev: Vec<_> = keys.iter().enumerate().rev().collect();
        for chunk in rev.chunks(100) {
            let edits: Vec<_> = chunk
                .iter()
                .map(|(i, k)| ((*k).clone(), Some(ptr(*i as u64))))
                .collect();
            b = edit(&mut nodes, b, &edits);
        }
        assert_eq!(a, b);
        assert_eq!(check_invariants(&nodes, a), keys.len());
        // Insert extra keys and delete them again: back to the same root.
        let extra: Vec<_> = (0..500)
            .map(|i| (format!("zz.x{i}"), Some(ptr(i))))
            .collect();
        let c = edit(&mut nodes, a, &extra);
        assert_ne!(c, a);
        check_invariants(&nodes, c);
        let del: Vec<_> = extra.iter().map(|(k, _)| (k.clone(), None)).collect();
        let d = edit(&mut nodes, c, &del);
        assert_eq!(d, a);
        // Deleting everything empties the tree.
        let all: Vec<_> = keys.iter().map(|k| (k.clone(), None)).collect();
        assert_eq!(edit(&mut nodes, a, &all), None);
    }

    #[test]
    fn lookups_scans_and_diffs_agree_with_a_btreemap() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut nodes = HashMap::new();
        let mut model: BTreeMap<String, TablePointer> = BTreeMap::new();
        let mut root = None;
        for round in 0..60 {
            let before_root = root;
            let before = model.clone();
            let mut edits = BTreeMap::new();
            for _ in 0..rng.random_range(1..40) {
                let k = format!("n{}.t{}", rng.random_range(0..4), rng.random_range(0..400));
                let v = if rng.random_bool(0.3) {
                    None
                } else {
                    Some(ptr(rng.random_range(0..1000)))
                };
                edits.insert(k, v);
            }
            let edits: Vec<_> = edits.into_iter().collect();
            for (k, v) in &edits {
                match v {
                    Some(v) => model.insert(k.clone(), v.clone()),
                    None => model.remove(k),
                };
            }
            root = edit(&mut nodes, root, &edits);
            assert_eq!(check_invariants(&nodes, root), model.len(), "round {round}");
            for k in ["n0.t1", "n1.t200", "n3.t399", "x.y"] {
                assert_eq!(lookup(&nodes, root, k).unwrap(), model.get(k).cloned());
            }
            let all = scan_prefix(&nodes, root, "").unwrap();
            assert_eq!(
                all,
                model
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<Vec<_>>()
            );
            let n2 = scan_prefix(&nodes, root, "n2.").unwrap();
            assert_eq!(
                n2.len(),
                model.keys().filter(|k| k.starts_with("n2.")).count()
            );
            assert!(missing_for_prefix(&nodes, root, "n1.").is_empty());
            // Diff against the previous round.
            let got = diff_sync(&nodes, before_root, root);
            let mut want = Vec::new();
            let keys: std::collections::BTreeSet<_> = before.keys().chain(model.keys()).collect();
            for k in keys {
                let (a, b) = (before.get(k), model.get(k));
                if a != b {
                    want.push((k.clone(), a.cloned(), b.cloned()));
                }
            }
            assert_eq!(got, want, "round {round}");
        }
    }

    fn diff_sync(
        nodes: &HashMap<Hash, Arc<Node>>,
        a: Option<Hash>,
        b: Option<Hash>,
    ) -> Vec<Change> {
        let mut d = Differ::new(a, b);
        let mut out = Vec::new();
        while let Some((side, id)) = d.run(&mut out) {
            d.provide(side, nodes[&id].clone());
        }
        out
    }
}
