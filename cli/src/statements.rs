//! Splitting SQL text into statements at the semicolons outside quotes and comments, as
//! the shell and `lh query < file.sql` need: DuckDB's strings (`'it''s'`, `E'\''`),
//! quoted names (`"a;b"`), dollar-quoted text (`$$...$$`, `$tag$...$tag$`), line
//! comments (`-- ...`) and block comments (`/* ... */`). The server parses each
//! statement itself; this only decides where one ends.

/// The statements of `text` that end with a semicolon (without it, trimmed, those
/// holding only comments and blanks left out), and the text after the last one.
#[derive(Debug, PartialEq)]
pub struct Split {
    pub statements: Vec<String>,
    pub rest: String,
}

#[derive(Clone, Copy, PartialEq)]
enum State {
    Code,
    /// In a string; `escapes` for `E'...'`, where a backslash escapes the next character.
    Str {
        escapes: bool,
    },
    Ident,
    LineComment,
    /// In `/* ... */`, which nest (as DuckDB's scanner has them): the depth.
    BlockComment(u32),
    /// In `$tag$...$tag$`; the tag's byte range in the text.
    Dollar {
        tag_start: usize,
        tag_end: usize,
    },
}

/// Splits `text` (see [`Split`]).
pub fn split(text: &str) -> Split {
    let b = text.as_bytes();
    let mut statements = Vec::new();
    let mut state = State::Code;
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match state {
            State::Code => match c {
                b';' => {
                    push(&mut statements, &text[start..i]);
                    start = i + 1;
                }
                b'\'' => {
                    let escapes =
                        i > 0 && matches!(b[i - 1], b'e' | b'E') && (i < 2 || !is_word(b[i - 2]));
                    state = State::Str { escapes };
                }
                b'"' => state = State::Ident,
                b'-' if b.get(i + 1) == Some(&b'-') => {
                    state = State::LineComment;
                    i += 1;
                }
                b'/' if b.get(i + 1) == Some(&b'*') => {
                    state = State::BlockComment(1);
                    i += 1;
                }
                // `$tag$` opens dollar-quoted text; `$1` and `$name` are parameters.
                b'$' if i == 0 || !is_word(b[i - 1]) => {
                    // A tag is a name: not starting with a digit.
                    let mut j = i + 1;
                    if j < b.len() && is_word(b[j]) && !b[j].is_ascii_digit() {
                        while j < b.len() && is_word(b[j]) {
                            j += 1;
                        }
                    }
                    if b.get(j) == Some(&b'$') {
                        state = State::Dollar {
                            tag_start: i + 1,
                            tag_end: j,
                        };
                        i = j;
                    }
                }
                _ => {}
            },
            State::Str { escapes } => match c {
                b'\\' if escapes => i += 1,
                b'\'' if b.get(i + 1) == Some(&b'\'') => i += 1,
                b'\'' => state = State::Code,
                _ => {}
            },
            State::Ident => match c {
                b'"' if b.get(i + 1) == Some(&b'"') => i += 1,
                b'"' => state = State::Code,
                _ => {}
            },
            State::LineComment => {
                if c == b'\n' {
                    state = State::Code;
                }
            }
            State::BlockComment(depth) => {
                if c == b'*' && b.get(i + 1) == Some(&b'/') {
                    state = if depth == 1 {
                        State::Code
                    } else {
                        State::BlockComment(depth - 1)
                    };
                    i += 1;
                } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
                    state = State::BlockComment(depth + 1);
                    i += 1;
                }
            }
            State::Dollar { tag_start, tag_end } => {
                let tag = &b[tag_start..tag_end];
                if c == b'$'
                    && b[i + 1..].starts_with(tag)
                    && b.get(i + 1 + tag.len()) == Some(&b'$')
                {
                    i += tag.len() + 1;
                    state = State::Code;
                }
            }
        }
        i += 1;
    }
    Split {
        statements,
        rest: text[start..].to_string(),
    }
}

/// Every statement of `text`, the last one with or without its semicolon.
pub fn all(text: &str) -> Vec<String> {
    let mut s = split(text);
    push(&mut s.statements, &s.rest);
    s.statements
}

/// Whether `text` holds nothing but blanks and comments.
pub fn is_blank(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
        } else if b[i..].starts_with(b"--") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else {
            return false;
        }
    }
    true
}

fn push(statements: &mut Vec<String>, text: &str) {
    if !is_blank(text) {
        statements.push(text.trim().to_string());
    }
}

/// A byte of a name: ASCII letters, digits, `_`, and any byte of a non-ASCII character
/// (as DuckDB's scanner reads names).
fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_semicolons_outside_quotes_and_comments() {
        let s = split(
            "SELECT 'a;b', \"c;d\" FROM t; -- x; y\nSELECT $$e;f$$, $q$g;$$h$q$ /* i; */; SELECT",
        );
        assert_eq!(
            s.statements,
            vec![
                "SELECT 'a;b', \"c;d\" FROM t",
                "-- x; y\nSELECT $$e;f$$, $q$g;$$h$q$ /* i; */"
            ]
        );
        assert_eq!(s.rest, " SELECT");
    }

    #[test]
    fn doubled_quotes_and_escapes_stay_inside() {
        let s = split("SELECT 'it''s;', E'\\';', 'x\\'; SELECT \"a\"\";\"");
        assert_eq!(s.statements, vec!["SELECT 'it''s;', E'\\';', 'x\\'"]);
        assert_eq!(s.rest, " SELECT \"a\"\";\"");
    }

    #[test]
    fn open_quotes_and_comments_leave_the_statement_unfinished() {
        for open in [
            "SELECT 'a;",
            "SELECT \"a;",
            "SELECT 1 /* ;",
            "SELECT $$;",
            "SELECT 1 -- ;",
        ] {
            let s = split(open);
            assert!(s.statements.is_empty(), "{open}");
            assert_eq!(s.rest, open);
        }
    }

    #[test]
    fn parameters_are_not_dollar_quotes() {
        let s = split("SELECT $1, $partition; SELECT a$b$c;");
        assert_eq!(s.statements, vec!["SELECT $1, $partition", "SELECT a$b$c"]);
    }

    #[test]
    fn tags_take_digits_and_comments_nest() {
        let s = split("SELECT $q1$a;b$q1$; SELECT $é$c;$é$; /* a /* b */ ; */ SELECT 1;");
        assert_eq!(
            s.statements,
            vec![
                "SELECT $q1$a;b$q1$",
                "SELECT $é$c;$é$",
                "/* a /* b */ ; */ SELECT 1"
            ]
        );
        // Names with non-ASCII letters are names, not E-strings or dollar quotes.
        let s = split("SELECT éE'\\'; SELECT é$x$;");
        assert_eq!(s.statements, vec!["SELECT éE'\\'", "SELECT é$x$"]);
        assert!(is_blank("/* a /* b */ c */ -- d"));
        assert!(!is_blank("/* a /* b */ c */ x"));
    }

    #[test]
    fn multibyte_text_never_panics() {
        for text in ["é;ö", "'é;", "$é", "\"ü\";", "/*ß", "--ü\n;", "ꙮ$$;$$"] {
            let _ = split(text);
            let _ = all(text);
            let _ = is_blank(text);
        }
    }

    #[test]
    fn blanks_and_comments_are_no_statement() {
        assert_eq!(all(" ; -- only\n ; /* c */ ;"), Vec::<String>::new());
        assert_eq!(all("SELECT 1; SELECT 2"), vec!["SELECT 1", "SELECT 2"]);
        assert!(is_blank("  -- a\n /* b */ "));
        assert!(!is_blank("-- a\nSELECT 1"));
    }
}
