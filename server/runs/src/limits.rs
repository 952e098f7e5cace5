//! The limits of a function: sizes and durations parsed strictly (`512m`, `2g`, `30s`,
//! `10m`; anything else is an error at plan time, never a panic or a silent zero), and
//! the server's ceilings, which no project can exceed (`lh server
//! --max-function-memory`, `--max-function-cpus`, `--max-function-timeout`).

use std::time::Duration;

/// The least memory a function runs in (an interpreter with pyarrow needs about this).
pub const MIN_MEMORY: u64 = 64 << 20;
/// A function's memory when neither it nor its project sets one (capped by the ceiling).
pub const DEFAULT_MEMORY: u64 = 4 << 30;

/// What no function of any project may exceed, set by whoever runs the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceilings {
    pub memory_bytes: u64,
    pub cpus_milli: u32,
    pub timeout: Duration,
    /// The most a call may write into its worker's folder (its inputs count).
    pub disk_bytes: u64,
}

impl Ceilings {
    /// Half of this machine's memory, all of its cores, six hours, 10 GiB written.
    pub fn for_this_machine() -> Ceilings {
        let memory = total_memory().map_or(DEFAULT_MEMORY, |m| (m / 2).max(MIN_MEMORY));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        Ceilings {
            memory_bytes: memory,
            cpus_milli: cores.saturating_mul(1000),
            timeout: Duration::from_secs(6 * 3600),
            disk_bytes: 10 << 30,
        }
    }

    /// A function's memory: what it asked for (checked), else the default, never more
    /// than the ceiling.
    pub fn memory(&self, asked: Option<&str>) -> Result<u64, String> {
        let Some(s) = asked else {
            return Ok(DEFAULT_MEMORY.min(self.memory_bytes));
        };
        let bytes = parse_size(s).map_err(|e| format!("memory {e}"))?;
        if bytes < MIN_MEMORY {
            return Err(format!(
                "memory '{s}' is less than a function needs to start ({})",
                format_size(MIN_MEMORY)
            ));
        }
        if bytes > self.memory_bytes {
            return Err(format!(
                "memory '{s}' is more than this server allows a function ({}, the server's \
                 --max-function-memory)",
                format_size(self.memory_bytes)
            ));
        }
        Ok(bytes)
    }

    /// A function's timeout: what it asked for (checked), else `default`, never more than
    /// the ceiling.
    pub fn timeout(&self, asked: Option<&str>, default: Duration) -> Result<Duration, String> {
        let Some(s) = asked else {
            return Ok(default.min(self.timeout));
        };
        let d = parse_duration(s).map_err(|e| format!("timeout {e}"))?;
        if d > self.timeout {
            return Err(format!(
                "timeout '{s}' is longer than this server allows a function ({} s, the server's \
                 --max-function-timeout)",
                self.timeout.as_secs()
            ));
        }
        Ok(d)
    }

    /// A function's CPU share in thousandths of a core, when it asks for one.
    pub fn cpus(&self, asked: Option<f64>) -> Result<Option<u32>, String> {
        let Some(c) = asked else { return Ok(None) };
        if !c.is_finite() || c < 0.01 {
            return Err(format!(
                "cpus {c} is not a number of cores such as 0.5 or 2"
            ));
        }
        let milli = (c * 1000.0).round();
        if milli > f64::from(self.cpus_milli) {
            return Err(format!(
                "cpus {c} is more than this server allows a function ({}, the server's \
                 --max-function-cpus)",
                f64::from(self.cpus_milli) / 1000.0
            ));
        }
        Ok(Some(milli as u32))
    }
}

use lh_api::units::split;
pub use lh_api::units::{parse_duration, parse_size};

/// `0.5`, `2`: a number of cores, in thousandths of a core.
pub fn parse_cpus(s: &str) -> Result<u32, String> {
    let bad = || format!("'{s}' is not a number of cores such as 0.5 or 2");
    let (num, unit) = split(s).ok_or_else(bad)?;
    if !unit.is_empty() {
        return Err(bad());
    }
    let milli = (num.parse::<f64>().map_err(|_| bad())? * 1000.0).round();
    if milli < 10.0 {
        return Err(bad());
    }
    Ok(milli.min(f64::from(u32::MAX)) as u32)
}

/// `512 MiB`, `2 GiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, size) in UNITS {
        if bytes >= size {
            let v = bytes as f64 / size as f64;
            return if v.fract() == 0.0 {
                format!("{v:.0} {name}")
            } else {
                format!("{v:.1} {name}")
            };
        }
    }
    format!("{bytes} B")
}

/// This machine's memory (`MemTotal` of /proc/meminfo).
fn total_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1.5GB"), Ok(3 << 29));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        for bad in [
            "lots",
            "",
            "nan",
            "inf",
            "-1",
            "1e30",
            "1e3g",
            "0",
            "0.5",
            "1..2g",
            ".5g",
            "5.g",
            "2 gallons",
            "9999999999999t",
            "0x10",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        for bad in [
            "-1",
            "nan",
            "inf",
            "1e30h",
            "0.5s",
            "0",
            "10 minutes",
            "400d",
            "1h30m",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ceilings_bound_what_a_function_asks() {
        let c = Ceilings {
            memory_bytes: 2 << 30,
            cpus_milli: 2000,
            timeout: Duration::from_secs(3600),
            disk_bytes: 1 << 30,
        };
        assert_eq!(c.memory(None), Ok(2 << 30), "the default is capped");
        assert_eq!(c.memory(Some("512m")), Ok(512 << 20));
        assert!(c.memory(Some("0.5")).unwrap_err().contains("less than"));
        assert!(
            c.memory(Some("3g"))
                .unwrap_err()
                .contains("--max-function-memory")
        );
        assert_eq!(
            c.timeout(None, Duration::from_secs(600)),
            Ok(Duration::from_secs(600))
        );
        assert!(
            c.timeout(Some("2h"), Duration::from_secs(600))
                .unwrap_err()
                .contains("--max-function-timeout")
        );
        assert_eq!(c.cpus(Some(1.5)), Ok(Some(1500)));
        assert!(c.cpus(Some(f64::NAN)).is_err());
        assert!(c.cpus(Some(f64::INFINITY)).is_err());
        assert!(c.cpus(Some(0.0)).is_err());
        assert!(
            c.cpus(Some(4.0))
                .unwrap_err()
                .contains("--max-function-cpus")
        );
        assert_eq!(parse_cpus("1.5"), Ok(1500));
        for bad in ["nan", "inf", "0", "-2", "2 cores"] {
            assert!(parse_cpus(bad).is_err(), "{bad}");
        }
    }
}
