//! The canonical binary encoding of tree nodes and commits. An object's id is the hash
//! of these bytes, so the encoding must never change for a given version tag: a new
//! layout gets a new tag, and decoders keep reading the old ones.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::model::{Commit, Hash, Node, TablePointer};

const NODE_TAG: &[u8; 2] = b"N1";
const COMMIT_TAG: &[u8; 2] = b"C1";

pub(crate) fn encode_node(node: &Node) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(64 + node.entries.len() * 128));
    w.0.extend_from_slice(NODE_TAG);
    w.0.push(node.level);
    w.varint(node.entries.len() as u64);
    w.opt_hash(node.children[0].as_ref());
    for (entry, child) in node.entries.iter().zip(&node.children[1..]) {
        w.str(&entry.0);
        w.pointer(&entry.1);
        w.opt_hash(child.as_ref());
    }
    w.0
}

pub(crate) fn decode_node(bytes: &[u8]) -> Result<Node> {
    let mut r = Reader {
        b: bytes,
        what: "tree node",
    };
    r.tag(NODE_TAG)?;
    let level = r.u8()?;
    let n = r.len()?;
    let mut entries = Vec::with_capacity(n);
    let mut children = Vec::with_capacity(n + 1);
    children.push(r.opt_hash()?);
    for _ in 0..n {
        let key = r.string()?;
        let pointer = r.pointer()?;
        entries.push((key, pointer));
        children.push(r.opt_hash()?);
    }
    r.end()?;
    Ok(Node {
        level,
        entries,
        children,
    })
}

/// Encodes everything of a commit but its id (which is the hash of these bytes).
pub(crate) fn encode_commit(c: &Commit) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(256));
    w.0.extend_from_slice(COMMIT_TAG);
    w.varint(c.parents.len() as u64);
    for p in &c.parents {
        w.hash(p);
    }
    w.opt_hash(c.tree.as_ref());
    w.str(&c.author);
    w.str(&c.message);
    w.0.extend_from_slice(&c.timestamp.timestamp_micros().to_le_bytes());
    w.varint(c.properties.len() as u64);
    for (k, v) in &c.properties {
        w.str(k);
        w.str(v);
    }
    w.varint(c.depth);
    w.varint(c.generation);
    w.opt_hash(c.skip.as_ref());
    w.0
}

pub(crate) fn decode_commit(id: Hash, bytes: &[u8]) -> Result<Commit> {
    let mut r = Reader {
        b: bytes,
        what: "commit",
    };
    r.tag(COMMIT_TAG)?;
    let n = r.len()?;
    let mut parents = Vec::with_capacity(n);
    for _ in 0..n {
        parents.push(r.hash()?);
    }
    let tree = r.opt_hash()?;
    let author = r.string()?;
    let message = r.string()?;
    let micros = i64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes"));
    let timestamp = DateTime::<Utc>::from_timestamp_micros(micros)
        .ok_or_else(|| Error::corrupt(format!("commit {id}: timestamp out of range")))?;
    let np = r.len()?;
    let mut properties = BTreeMap::new();
    for _ in 0..np {
        let k = r.string()?;
        let v = r.string()?;
        properties.insert(k, v);
    }
    let depth = r.varint()?;
    let generation = r.varint()?;
    let skip = r.opt_hash()?;
    r.end()?;
    Ok(Commit {
        id,
        parents,
        author,
        message,
        timestamp,
        properties,
        tree,
        depth,
        generation,
        skip,
    })
}

struct Writer(Vec<u8>);

impl Writer {
    fn varint(&mut self, mut v: u64) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(byte);
                return;
            }
            self.0.push(byte | 0x80);
        }
    }

    fn str(&mut self, s: &str) {
        self.varint(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }

    fn hash(&mut self, h: &Hash) {
        self.0.extend_from_slice(&h.0);
    }

    fn opt_hash(&mut self, h: Option<&Hash>) {
        match h {
            None => self.0.push(0),
            Some(h) => {
                self.0.push(1);
                self.hash(h);
            }
        }
    }

    fn pointer(&mut self, p: &TablePointer) {
        self.str(&p.metadata_location);
        self.str(&p.table_uuid);
        match p.snapshot_id {
            None => self.0.push(0),
            Some(id) => {
                self.0.push(1);
                self.0.extend_from_slice(&id.to_le_bytes());
            }
        }
    }
}

struct Reader<'a> {
    b: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn bad(&self, why: &str) -> Error {
        Error::corrupt(format!("cannot decode {}: {why}", self.what))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.b.len() < n {
            return Err(self.bad("truncated"));
        }
        let (head, tail) = self.b.split_at(n);
        self.b = tail;
        Ok(head)
    }

    fn tag(&mut self, tag: &[u8; 2]) -> Result<()> {
        if self.take(2)? != tag {
            return Err(self.bad("unknown format tag"));
        }
        Ok(())
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.u8()?;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.bad("varint too long"))
    }

    /// A count, bounded by the bytes left so that garbage cannot ask for a huge allocation.
    fn len(&mut self) -> Result<usize> {
        let v = self.varint()?;
        if v > self.b.len() as u64 {
            return Err(self.bad("length past the end"));
        }
        Ok(v as usize)
    }

    fn string(&mut self) -> Result<String> {
        let n = self.len()?;
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.bad("string is not UTF-8"))
    }

    fn hash(&mut self) -> Result<Hash> {
        Ok(Hash(self.take(32)?.try_into().expect("32 bytes")))
    }

    fn opt_hash(&mut self) -> Result<Option<Hash>> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.hash()?)),
            _ => Err(self.bad("bad option flag")),
        }
    }

    fn pointer(&mut self) -> Result<TablePointer> {
        let metadata_location = self.string()?;
        let table_uuid = self.string()?;
        let snapshot_id = match self.u8()? {
            0 => None,
            1 => Some(i64::from_le_bytes(
                self.take(8)?.try_into().expect("8 bytes"),
            )),
            _ => return Err(self.bad("bad option flag")),
        };
        Ok(TablePointer {
            metadata_location,
            table_uuid,
            snapshot_id,
        })
    }

    fn end(&self) -> Result<()> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(self.bad("trailing bytes"))
        }
    }
}
