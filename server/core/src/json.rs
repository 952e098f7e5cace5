//! How deeply JSON text nests its arrays and objects, read as it comes: one pass over
//! its bytes, brackets inside strings not counted. The statement check bounds DuckDB's
//! parse trees with it, and imports the files DuckDB would read recursively.

/// The nesting of JSON text fed in pieces.
#[derive(Debug, Default)]
pub struct Depth {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// The deepest level seen so far.
    pub max: usize,
}

impl Depth {
    /// Reads the next piece of the text; the deepest level seen so far.
    pub fn feed(&mut self, text: &[u8]) -> usize {
        for &b in text {
            if self.in_string {
                match b {
                    _ if self.escaped => self.escaped = false,
                    b'\\' => self.escaped = true,
                    b'"' => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'[' | b'{' => {
                    self.depth += 1;
                    self.max = self.max.max(self.depth);
                }
                b']' | b'}' => self.depth = self.depth.saturating_sub(1),
                _ => {}
            }
        }
        self.max
    }
}

/// The deepest nesting of arrays and objects in `text`.
pub fn depth(text: &[u8]) -> usize {
    Depth::default().feed(text)
}
