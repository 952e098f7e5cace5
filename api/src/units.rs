//! Sizes and durations as people write them (`512m`, `2g`, `30s`, `7d`), parsed
//! strictly: the server's flags and project limits, and the CLI's options.

use std::time::Duration;

/// Splits `12.5gb` into its number (digits, at most one point, no sign or exponent) and
/// its unit, lowercased.
/// The longest duration any client may give the server (a grace period, a lifetime, a
/// retention): 100 years. Beyond it, times computed from it would overflow.
pub const MAX_CLIENT_SECS: u64 = 100 * 365 * 86400;

pub fn split(s: &str) -> Option<(&str, String)> {
    let t = s.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    let mut parts = num.split('.');
    let whole = parts.next()?;
    let frac = parts.next();
    let valid = !whole.is_empty()
        && whole.len() <= 12
        && parts.next().is_none()
        && frac.is_none_or(|f| !f.is_empty() && f.len() <= 6);
    valid.then(|| (num, unit.trim().to_ascii_lowercase()))
}

/// `512m`, `2g`, `1.5GB`, `64MiB`, `1048576` (bytes): a size in bytes, at least one.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let bad = || format!("'{s}' is not a size such as 512m or 2g");
    let (num, unit) = split(s).ok_or_else(bad)?;
    let mult: u64 = match unit.as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(bad()),
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    let bytes = v * mult as f64;
    if bytes < 1.0 {
        return Err(format!("'{s}' is less than one byte"));
    }
    if bytes >= u64::MAX as f64 {
        return Err(format!("'{s}' is too large"));
    }
    Ok(bytes as u64)
}

/// `30s`, `10m`, `1.5h`, `2d`, `45` (seconds): at least one second.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("'{s}' is not a duration such as 30s, 10m or 1h");
    let (num, unit) = split(s).ok_or_else(bad)?;
    let mult: f64 = match unit.as_str() {
        "" | "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return Err(bad()),
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    let secs = v * mult;
    if secs < 1.0 {
        return Err(format!("'{s}' is shorter than a second"));
    }
    if secs > 366.0 * 86400.0 {
        return Err(format!("'{s}' is longer than a year"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A duration as `parse_duration` reads it: `90d`, `12h`, `30m`, `45s`.
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => "0s".into(),
        _ if s.is_multiple_of(86400) => format!("{}d", s / 86400),
        _ if s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}
